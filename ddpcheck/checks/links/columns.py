"""The judged links as columns: one numpy array per field, one entry per directed link.

Not a dict per link: 1,024 nodes of eight GPUs measure 8.4 million (docs/performance.md). Each
rank's measure() sends its links as columns; a list of a dict per link (hand-built tests) is read too.
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


@dataclass(frozen=True)
class Received:
    """Links in (dst, src) order: each rank's links in, one slice each (rank 0 gets them so)."""

    dst: np.ndarray
    inter: np.ndarray
    gbps: np.ndarray
    latency_us: np.ndarray


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
    # The same links in (dst, src) order, as the ranks sent them; made from the above when needed.
    received: Received | None = field(default=None, repr=False)
    least: tuple[np.ndarray, np.ndarray] | None = field(default=None, repr=False)  # (ratio, least_ratio)

    def __len__(self) -> int:
        return len(self.src)

    def incoming(self) -> Received:
        """Each rank's links in, one slice each: (dst, src) order."""
        if self.received is None:
            order = stable_order(self.dst, int(self.dst.max(initial=-1)) + 1)
            self.received = Received(
                self.dst[order], self.inter[order], self.gbps[order], self.latency_us[order]
            )
        return self.received

    def least_ratio(self, world: int) -> np.ndarray:
        """Each rank's slowest link's ratio, out or in (NaN where none): the per-rank and per-host
        tables both need it, computed once for the ratios they see."""
        if self.least is None or self.least[0] is not self.ratio:
            out = group_minimum(self.src, self.ratio, world)
            self.least = (self.ratio, np.fmin(out, group_minimum(self.dst, self.ratio, world)))
        return self.least[1]

    def round_figures(self) -> None:
        """Bandwidth to 4 decimals and latency to 1, as the report keeps them (the received ones too;
        best_gbps as each row is made: only the report's rows show it). In place: the columns are
        this object's own, and fresh copies of 8 million would cost their allocation again."""
        np.round(self.gbps, 4, out=self.gbps)
        np.round(self.latency_us, 1, out=self.latency_us)
        if self.received is not None:
            np.round(self.received.gbps, 4, out=self.received.gbps)
            np.round(self.received.latency_us, 1, out=self.received.latency_us)

    @classmethod
    def from_rank_data(cls, data: list[dict[str, Any]]) -> LinkColumns:
        """Every rank's measure() (its links received, as columns or as a dict per link)."""
        sent = [r["links"] if isinstance(r["links"], Mapping) else rank_columns(r["links"]) for r in data]
        parts = [{k: np.asarray(columns[k]) for k in COLUMN_NAMES} for columns in sent]
        count = [len(c["peer"]) for c in parts]

        def joined(name: str, dtype: type) -> np.ndarray:
            # casting="unsafe": peers fit the narrower key type stable_order() sorts anyway.
            arrays = [c[name] for c in parts] or [np.empty(0, dtype)]
            return np.concatenate(arrays, dtype=dtype, casting="unsafe")

        sizes = [r["size_bytes"] for r in data]
        # One size (every run): a scalar, not a column of 8 million copies of it.
        size = (
            float(sizes[0]) if len(set(sizes)) == 1 else np.repeat(np.array(sizes, dtype=np.float64), count)
        )
        src = joined("peer", _key_type(len(data)))
        dst = np.repeat(np.arange(len(data), dtype=np.int64), count)
        order = stable_order(src, len(data))  # each rank's links come in rank order: (src, dst) order
        inter = joined("inter", bool)
        gbps = _gbps(size, joined("recv_s", np.float64))
        latency_us = joined("latency_s", np.float64)
        latency_us *= 1e6  # in place: each fresh column of 8 million costs its allocation
        # As the ranks sent them, the links are in (dst, src) order: what each rank's links in need.
        received = Received(dst, inter, gbps, latency_us) if _in_rank_order(dst, src) else None
        best = joined("best_pass_recv_s", np.float64)[order]
        wrong = (
            joined("wrong", np.int64)[order]
            if any(c["wrong"].any() for c in parts)
            else np.zeros(len(src), dtype=np.int64)
        )
        return cls(
            src=_sorted(src, len(data)),
            dst=dst[order],
            inter=inter[order],
            gbps=gbps[order],
            best_gbps=_gbps(size, best),
            latency_us=latency_us[order],
            wrong=wrong,
            received=received,
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
            "best_gbps": float(np.round(self.best_gbps[i], 4)),
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


def _sorted(keys: np.ndarray, size: int) -> np.ndarray:
    """np.sort(keys) for keys from 0: each key as many times as it occurs (a count, not a sort)."""
    counts = np.bincount(keys, minlength=size)
    return np.repeat(np.arange(len(counts), dtype=np.int64), counts)


def _in_rank_order(dst: np.ndarray, src: np.ndarray) -> bool:
    """Whether each rank's links came in increasing peer order (measure() sends them so)."""
    return bool(np.all((src[1:] > src[:-1]) | (dst[1:] != dst[:-1])))


def _gbps(size: np.ndarray | float, seconds: np.ndarray) -> np.ndarray:
    """GB/s of `size` bytes in `seconds` (0 where unmeasured), in place: into `seconds`, the caller's."""
    measured = seconds > 0
    with np.errstate(divide="ignore", invalid="ignore"):
        gbps = np.divide(size, seconds, out=seconds)
        gbps /= 1e9  # in place: 8 million of them
    if not measured.all():
        gbps[~measured] = 0.0
    return gbps


def smallest(keys: np.ndarray, count: int) -> np.ndarray:
    """Indices of the `count` smallest keys (NaN never), smallest first, ties in index order."""
    if count <= 0:
        return np.empty(0, dtype=np.int64)
    measured = ~np.isnan(keys)
    if np.count_nonzero(measured) > count:
        # Only the keys up to the count-th smallest need sorting: a partition finds it (NaN last).
        kth = np.partition(keys, count - 1)[count - 1]
        candidates = np.flatnonzero(keys <= kth)
    else:
        candidates = np.flatnonzero(measured)
    return candidates[np.argsort(keys[candidates], kind="stable")][:count]


def group_medians(groups: np.ndarray, values: np.ndarray, size: int, scratch: bool = False) -> np.ndarray:
    """statistics.median of the values of each group 0..size-1 (NaN where none): the same middle values.

    Values already grouped (groups in increasing order: a rank's links out in (src, dst) order)
    are taken as they are; others are grouped first by a stable radix sort. `scratch`: the
    values are the caller's copy, free to reorder (a copy of millions saved).
    """
    if is_sorted(groups):
        counts = sorted_counts(groups, size)
    else:
        counts = np.bincount(groups, minlength=size)
        values, scratch = values[stable_order(groups, size)], True
    return grouped_medians(values, counts, scratch)


def masked_counts(groups: np.ndarray, mask: np.ndarray, size: int) -> np.ndarray:
    """np.bincount(groups[mask], minlength=size) for groups in increasing order, without that copy."""
    starts = np.searchsorted(groups, np.arange(size + 1))  # each group a slice: no pass to count them
    present = np.flatnonzero(np.diff(starts))
    out = np.zeros(size, dtype=np.int64)
    if len(present):
        out[present] = np.add.reduceat(mask, starts[present], dtype=np.int64)
    return out


def grouped_medians(values: np.ndarray, counts: np.ndarray, scratch: bool = False) -> np.ndarray:
    """The median of each run of values: counts[0] values of group 0, then counts[1] of group 1...

    Groups of one length are rows of a matrix (a reshape when they all are), each row partitioned
    at its middle, not sorted; a row of even length takes the sum of its two middle values halved,
    the lower one the largest before the middle (why: docs/performance.md#a-thousand-nodes).
    """
    out = np.full(len(counts), np.nan)
    starts = np.cumsum(counts) - counts
    present = np.flatnonzero(counts)
    lengths = np.unique(counts[present])
    for length in lengths.tolist():
        members = present[counts[present] == length]
        if len(members) * length == len(values):
            rows = values.reshape(len(members), length)  # every group this long: no copy
            out[members] = _row_medians(rows, scratch)
        else:
            out[members] = _row_medians(values[starts[members][:, None] + np.arange(length)], True)
    return out


def _row_medians(rows: np.ndarray, scratch: bool) -> np.ndarray:
    middle = rows.shape[1] // 2
    if scratch:
        rows.partition(middle, axis=1)
        ordered = rows
    else:
        ordered = np.partition(rows, middle, axis=1)
    high = ordered[:, middle]
    if rows.shape[1] % 2:
        return high
    return (ordered[:, :middle].max(axis=1) + high) / 2


def merge_groups(parts: list[tuple[np.ndarray, np.ndarray]], size: int) -> tuple[np.ndarray, np.ndarray]:
    """Several (groups, values) as one, grouped: (values, counts).

    A rank's links out and its links in, for one median of both: parts already grouped (groups
    increasing) merge in linear time, not by a sort of every (group, value) pair (docs/performance.md).
    """
    parts = [_grouped(groups, values, size) for groups, values in parts]
    counts = [sorted_counts(groups, size) for groups, _ in parts]
    total = np.sum(counts, axis=0)
    if size and all(count.min() == count.max() for count in counts):
        # As many of each part in every group (a fleet's ranks): side by side, row by row.
        rows = [values.reshape(size, -1) for _, values in parts]
        return np.concatenate(rows, axis=1).ravel(), total
    merged = np.empty(int(total.sum()), dtype=np.result_type(*(values for _, values in parts)))
    offset = np.cumsum(total) - total  # where each group's values from the next part go
    for (groups, values), count in zip(parts, counts, strict=True):
        within = np.arange(len(groups)) - (np.cumsum(count) - count)[groups]
        merged[offset[groups] + within] = values
        offset += count
    return merged, total


def _grouped(groups: np.ndarray, values: np.ndarray, size: int) -> tuple[np.ndarray, np.ndarray]:
    if is_sorted(groups):
        return groups, values
    order = stable_order(groups, size)
    return groups[order], values[order]


def sorted_counts(groups: np.ndarray, size: int) -> np.ndarray:
    """np.bincount(groups, minlength=size) for groups in increasing order: found, not counted."""
    return np.diff(np.searchsorted(groups, np.arange(size + 1)))


def is_sorted(keys: np.ndarray) -> bool:
    return bool(np.all(keys[1:] >= keys[:-1]))


def stable_order(keys: np.ndarray, size: int) -> np.ndarray:
    """np.argsort(keys, kind="stable") for keys in 0..size-1: numpy's radix sort when they fit 16 bits."""
    return np.argsort(keys.astype(_key_type(size), copy=False), kind="stable")


def _key_type(size: int) -> type:
    return np.uint16 if size <= 1 << 16 else np.int64


def group_minimum(groups: np.ndarray, values: np.ndarray, size: int) -> np.ndarray:
    """The least value of each group (NaN where none, NaN values ignored)."""
    out = np.full(size, np.inf)
    if is_sorted(groups):  # each group one slice: a reduction per slice, no scattered updates
        counts = sorted_counts(groups, size)
        present = np.flatnonzero(counts)
        if len(present):
            out[present] = np.fmin.reduceat(values, (np.cumsum(counts) - counts)[present])
    elif len(groups):
        runs = np.flatnonzero(np.r_[True, groups[1:] != groups[:-1]])
        if len(runs) * 4 < len(groups):
            # Runs of one group (a rank's links to one block of nodes): each run's least first.
            groups, values = groups[runs], np.fmin.reduceat(values, runs)
        np.minimum.at(out, groups, np.where(np.isnan(values), np.inf, values))
    out[np.isinf(out)] = np.nan
    return out
