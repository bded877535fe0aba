"""The figures a baseline compares in `allreduce` and `collectives` reports: busbw per op and size."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator
from typing import Any

from ddpcheck.report.figures import Figure, FigureKind, positive, rows_of
from ddpcheck.report.metrics import GIGA, MICRO, Metric, Row, Tables, number
from ddpcheck.report.units import human_bytes

BUSBW = FigureKind(
    "busbw", "per-size busbw", ("world_size", "layout", "backend", "device", "device_name", "dtype")
)

# A size is compared only when the baseline reached at least this fraction of its peak busbw
# there and at every larger size (on CPU ranks, the rerun too: see baseline.select()): smaller
# messages are latency-bound, their time scheduling noise, and a lucky one in the baseline must
# not become the figure a rerun is held to (docs/compare.md). The largest size always counts.
BANDWIDTH_BOUND_FRACTION = 0.5


def bandwidth_figures(report: dict[str, Any]) -> list[Figure]:
    """busbw per op and size, at the sizes where the report is bandwidth-bound."""
    by_op: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for row in rows_of(report, "bandwidth"):
        if (
            not row.get("wrong")
            and positive(row.get("busbw_gbps"))
            and isinstance(row.get("size_bytes"), int)
        ):
            by_op[str(row.get("op") or "all_reduce")].append(row)
    figures = []
    for op, rows in by_op.items():
        peak = max(r["busbw_gbps"] for r in rows)
        rows = sorted(rows, key=lambda r: r["size_bytes"])
        # The first size from which every size reaches the fraction of the peak.
        first = len(rows) - 1
        while first > 0 and rows[first - 1]["busbw_gbps"] >= BANDWIDTH_BOUND_FRACTION * peak:
            first -= 1
        for index, row in enumerate(rows):
            figures.append(
                Figure(
                    kind=BUSBW,
                    key=("busbw", op, row["size_bytes"]),
                    label=f"{op} busbw at {human_bytes(row['size_bytes'], exact=True)}",
                    unit="GB/s",
                    value=float(row["busbw_gbps"]),
                    higher_is_better=True,
                    # Marked, not dropped: whether a size counts is the baseline's call (compare()).
                    bandwidth_bound=index >= first,
                )
            )
    return figures


def bandwidth_metrics(tables: Tables) -> Iterator[Metric]:
    """busbw, algbw and time per op, message size and dtype, for --prom."""
    rows = tables.get("bandwidth")
    if not rows:
        return
    labels = ("op", "size_bytes", "dtype")

    def key(r: Row) -> list[str]:
        return [str(r.get("op", "all_reduce")), str(r.get("size_bytes")), str(r.get("dtype", ""))]

    yield Metric(
        "ddpcheck_busbw_bytes_per_second",
        "Bus bandwidth per collective and message size (nccl-tests' busbw), in bytes per second.",
        labels,
        [(key(r), number(r.get("busbw_gbps"), GIGA)) for r in rows],
    )
    yield Metric(
        "ddpcheck_algbw_bytes_per_second",
        "Algorithm bandwidth (message bytes / time) per collective and size, in bytes per second.",
        labels,
        [(key(r), number(r.get("algbw_gbps"), GIGA)) for r in rows],
    )
    yield Metric(
        "ddpcheck_collective_duration_seconds",
        "Time of one collective per op and message size (median over the iterations).",
        labels,
        [(key(r), number(r.get("time_us"), MICRO)) for r in rows],
    )
