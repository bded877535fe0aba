"""The figures a baseline compares in `links` reports: each link by rank pair, and by host pair."""

from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Iterator
from typing import Any

from ddpcheck.report.figures import Figure, FigureKind, positive, rows_of
from ddpcheck.report.metrics import GIGA, MICRO, Metric, Row, Tables, number, rank_and_host

LINK = FigureKind(
    "link",
    "per-link bandwidth and latency by rank pair",
    ("layout", "backend", "device", "device_name", "link_bytes"),
)
# Host pairs stand in for rank pairs only when rank pairs cannot be matched (another layout).
HOST_LINK = FigureKind(
    "host link",
    "per-link bandwidth and latency by host pair",
    ("backend", "device", "device_name", "link_bytes"),
    stands_in_for="link",
)
# Each link's two figures: (its row's key, unit, higher is better).
MEASURES = (("gbps", "GB/s", True), ("latency_us", "us", False))


def link_figures(report: dict[str, Any]) -> list[Figure]:
    """Each link's bandwidth and latency by rank pair, and the median per host pair."""
    figures = []
    by_hosts: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
    for row in rows_of(report, "links"):
        src, dst, src_host, dst_host = (row.get(k) for k in ("src", "dst", "src_host", "dst_host"))
        name = f"link {src} -> {dst} ({src_host} -> {dst_host})"
        for metric, unit, better in MEASURES:
            value = positive(row.get(metric))
            if value is not None:
                figures.append(
                    Figure(
                        LINK,
                        ("link", metric, src, dst),  # pragma: no mutate (a key: it only has to match itself)
                        f"{name} {'bandwidth' if better else 'latency'}",
                        unit,
                        value,
                        better,
                        ranks=tuple(r for r in (src, dst) if isinstance(r, int)),
                        hosts=tuple(dict.fromkeys(h for h in (src_host, dst_host) if h)),
                    )
                )
        if src_host and dst_host:
            by_hosts[(src_host, dst_host)].append(row)
    for (src_host, dst_host), rows in by_hosts.items():
        for metric, unit, better in MEASURES:
            values = [v for v in (positive(r.get(metric)) for r in rows) if v is not None]
            if values:
                figures.append(
                    Figure(
                        HOST_LINK,
                        ("host link", metric, src_host, dst_host),  # pragma: no mutate (a key, as above)
                        f"links {src_host} -> {dst_host} {'bandwidth' if better else 'latency'} (median)",
                        unit,
                        statistics.median(values),
                        better,
                        hosts=tuple(dict.fromkeys((src_host, dst_host))),
                    )
                )
    return figures


def link_metrics(tables: Tables) -> Iterator[Metric]:
    """Per rank (median of its links, by kind and direction) and the slowest links themselves, for --prom.

    Not every link: at 1,000 nodes they are millions; the per-rank medians and the slowest
    links are what a dashboard or an alert reads.
    """
    per_rank = tables.get("link_ranks", [])
    yield Metric(
        "ddpcheck_rank_link_bandwidth_bytes_per_second",
        "Median bandwidth of each rank's links, by kind (intra/inter-node) and direction (out/in).",
        ("rank", "host", "kind", "direction"),
        [
            ([*rank_and_host(r), kind, way], number(r.get(f"{kind}_{way}_gbps"), GIGA))
            for r in per_rank
            for kind in ("intra", "inter")
            for way in ("out", "in")
        ],
    )
    yield Metric(
        "ddpcheck_rank_link_latency_seconds",
        "Median one-way latency of each rank's links.",
        ("rank", "host"),
        [(rank_and_host(r), number(r.get("latency_us"), MICRO)) for r in per_rank],
    )
    slowest = tables.get("slowest_links", [])
    ends = ("src_rank", "dst_rank", "src_host", "dst_host", "kind")

    def key(r: Row) -> list[str]:
        return [str(r.get(k)) for k in ("src", "dst", "src_host", "dst_host", "kind")]

    yield Metric(
        "ddpcheck_slowest_link_bandwidth_bytes_per_second",
        "Bandwidth of the slowest links (one direction each), in bytes per second.",
        ends,
        [(key(r), number(r.get("gbps"), GIGA)) for r in slowest],
    )
    yield Metric(
        "ddpcheck_slowest_link_latency_seconds",
        "One-way latency of the slowest links.",
        ends,
        [(key(r), number(r.get("latency_us"), MICRO)) for r in slowest],
    )
