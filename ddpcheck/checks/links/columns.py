"""The judged links as columns: one numpy array per field, one entry per directed link.

A thousand nodes of eight GPUs measure 8.4 million directed links: a dict per link would take
gigabytes and minutes, arrays take a few hundred MB and the judge and the tables run over them
in seconds. Each rank's measure() already sends its links as columns; the old list of a dict
per link (saved data, hand-built tests) is read too.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ddpcheck.checks.links.schedule import INTER, INTRA

STATUSES = ("PASS", "WARN", "FAIL")  # the codes of LinkColumns.status
PASS, WARN, FAIL = range(3)
COLUMN_NAMES = ("peer", "inter", "recv_s", "best_pass_recv_s", "latency_s", "wrong")


def rank_columns(links: Sequence[Mapping[str, Any]]) -> dict[str, np.ndarray]:
    """One rank's measured links (dicts with peer, kind, recv_s, ...) as the columns it sends."""
    recv = np.array([link["recv_s"] for link in links], dtype=np.float64)
    return {
        "peer": np.array([link["peer"] for link in links], dtype=np.int64),
        "inter": np.array([link["kind"] == INTER for link in links], dtype=bool),
        "recv_s": recv,
        "best_pass_recv_s": np.array(
            [link.get("best_pass_recv_s", link["recv_s"]) for link in links], dtype=np.float64
        ),
        "latency_s": np.array([link["latency_s"] for link in links], dtype=np.float64),
        "wrong": np.array([link["wrong"] for link in links], dtype=np.int64),
    }


@dataclass
class LinkColumns:
    """Every directed link, sorted by (src, dst); ratio NaN where none; status codes of STATUSES."""

    src: np.ndarray
    dst: np.ndarray
    inter: np.ndarray
    gbps: np.ndarray
    best_gbps: np.ndarray
    latency_us: np.ndarray
    wrong: np.ndarray
    ratio: np.ndarray = field(default_factory=lambda: np.empty(0))
    status: np.ndarray = field(default_factory=lambda: np.empty(0, dtype=np.int8))

    def __len__(self) -> int:
        return len(self.src)

    @classmethod
    def from_rank_data(cls, data: list[dict[str, Any]]) -> LinkColumns:
        """Every rank's measure() (its links received, as columns or as a dict per link)."""
        parts = []
        for dst, rank_data in enumerate(data):
            links = rank_data["links"]
            columns = links if isinstance(links, Mapping) else rank_columns(links)
            parts.append((dst, rank_data["size_bytes"], {k: np.asarray(columns[k]) for k in COLUMN_NAMES}))
        count = [len(c["peer"]) for _, _, c in parts]

        def joined(name: str, dtype: type) -> np.ndarray:
            return np.concatenate(
                [np.asarray(c[name], dtype=dtype) for _, _, c in parts] or [np.empty(0, dtype)]
            )

        size = np.repeat(np.array([s for _, s, _ in parts], dtype=np.float64), count)
        src, dst = joined("peer", np.int64), np.repeat(np.arange(len(data), dtype=np.int64), count)
        order = stable_order(src, len(data))  # each rank's links come in rank order: (src, dst) order
        recv, best = joined("recv_s", np.float64), joined("best_pass_recv_s", np.float64)
        return cls(
            src=src[order],
            dst=dst[order],
            inter=joined("inter", bool)[order],
            gbps=_gbps(size, recv)[order],
            best_gbps=_gbps(size, best)[order],
            latency_us=joined("latency_s", np.float64)[order] * 1e6,
            wrong=joined("wrong", np.int64)[order],
        )

    @classmethod
    def from_rows(cls, rows: Sequence[Mapping[str, Any]]) -> LinkColumns:
        """Judged links as rows (src, dst, kind, gbps, best_gbps, latency_us, wrong, ratio, status)."""
        ratio = [r.get("ratio") for r in rows]
        return cls(
            src=np.array([r["src"] for r in rows], dtype=np.int64),
            dst=np.array([r["dst"] for r in rows], dtype=np.int64),
            inter=np.array([r["kind"] == INTER for r in rows], dtype=bool),
            gbps=np.array([r["gbps"] for r in rows], dtype=np.float64),
            best_gbps=np.array([r.get("best_gbps", r["gbps"]) for r in rows], dtype=np.float64),
            latency_us=np.array([r["latency_us"] for r in rows], dtype=np.float64),
            wrong=np.array([r.get("wrong", 0) for r in rows], dtype=np.int64),
            ratio=np.array([np.nan if x is None else x for x in ratio], dtype=np.float64),
            status=np.array([STATUSES.index(r.get("status", "PASS")) for r in rows], dtype=np.int8),
        )

    def kind(self, i: int) -> str:
        return INTER if self.inter[i] else INTRA

    def row(self, i: int, identities: list[dict[str, Any]]) -> dict[str, Any]:
        """Link i as the report's row, in the report's key order."""
        src, dst = int(self.src[i]), int(self.dst[i])
        ratio = float(self.ratio[i])
        return {
            "src": src,
            "dst": dst,
            "src_host": identities[src]["host"],
            "dst_host": identities[dst]["host"],
            "kind": self.kind(i),
            "gbps": float(self.gbps[i]),
            "best_gbps": float(self.best_gbps[i]),
            "latency_us": float(self.latency_us[i]),
            "wrong": int(self.wrong[i]),
            "ratio": None if np.isnan(ratio) else ratio,
            "status": STATUSES[int(self.status[i])],
        }

    def index_of(self, pairs: Sequence[tuple[int, int]], world: int) -> np.ndarray:
        """Where each (src, dst) pair is (every pair given is measured)."""
        keys = self.src * world + self.dst
        wanted = np.array([s * world + d for s, d in pairs], dtype=np.int64)
        return np.searchsorted(keys, wanted)


def _gbps(size: np.ndarray, seconds: np.ndarray) -> np.ndarray:
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(seconds > 0, size / seconds / 1e9, 0.0)


def smallest(keys: np.ndarray, count: int) -> np.ndarray:
    """Indices of the `count` smallest keys (NaN never), smallest first, ties in index order."""
    candidates = np.flatnonzero(~np.isnan(keys))
    if len(candidates) > count > 0:
        kth = np.partition(keys[candidates], count - 1)[count - 1]
        candidates = candidates[keys[candidates] <= kth]
    return candidates[np.argsort(keys[candidates], kind="stable")][:count]


def group_medians(groups: np.ndarray, values: np.ndarray, size: int) -> np.ndarray:
    """statistics.median of the values of each group 0..size-1 (NaN where none): the same middle values.

    Grouped by a stable radix sort, then each group's values put in a row of their own (a
    group's links are a rank's or a node's: rows of similar length, padded with infinity) and
    the rows partitioned at their middle positions, where one sort of 8 million values by
    (group, value) would take several times as long; a global sort when one group is much
    longer than the others.
    """
    out = np.full(size, np.nan)
    if len(values) == 0:
        return out
    counts = np.bincount(groups, minlength=size)
    starts = np.cumsum(counts) - counts
    present = np.flatnonzero(counts)
    count = counts[present]
    low, high = (count - 1) // 2, count // 2
    width = int(counts.max())
    order = stable_order(groups, size)
    if size * width <= 4 * len(values) + 4096:
        grouped = groups[order]
        rows = np.full((size, width), np.inf)
        rows[grouped, np.arange(len(order)) - starts[grouped]] = values[order]
        # Only the middle positions need their sorted values: a partition at those (few: groups
        # of a fleet are mostly of one or two lengths) puts them in place, in linear time.
        middles = np.unique(np.concatenate([low, high]))
        if len(middles) <= 8:
            rows.partition(middles, axis=1)
        else:
            rows.sort(axis=1)
        out[present] = (rows[present, low] + rows[present, high]) / 2
        return out
    by_value = np.argsort(values)
    ordered = by_value[stable_order(groups[by_value], size)]
    out[present] = (values[ordered[starts[present] + low]] + values[ordered[starts[present] + high]]) / 2
    return out


def stable_order(keys: np.ndarray, size: int) -> np.ndarray:
    """np.argsort(keys, kind="stable") for keys in 0..size-1: numpy's radix sort when they fit 16 bits."""
    return np.argsort(keys.astype(np.uint16 if size <= 1 << 16 else np.int64), kind="stable")


def group_minimum(groups: np.ndarray, values: np.ndarray, size: int) -> np.ndarray:
    """The least value of each group (NaN where none, NaN values ignored)."""
    out = np.full(size, np.inf)
    np.minimum.at(out, groups, np.where(np.isnan(values), np.inf, values))
    out[np.isinf(out)] = np.nan
    return out
