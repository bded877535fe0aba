"""devices: each rank's product rate as a bar, the ones a check names in red, the peers' median marked.

Reads the table `devices` (one row per rank: `rank`, `host`, `gemm_tflops`, `gemm_dtype`,
`status`) that `ddpcheck devices` writes.
"""

from __future__ import annotations

import math
import statistics

from ddpcheck.report.html import svg
from ddpcheck.report.html.chart import Chart, number, of_ranks, worst_ranks
from ddpcheck.report.model import Report, Status, Table


def charts(report: Report) -> list[Chart]:
    rows = [r for r in report.rows("devices") if isinstance(r.get("rank"), int)]
    if all(math.isnan(number(r.get("gemm_tflops"))) for r in rows):
        return []
    dtype = rows[0].get("gemm_dtype") or ""
    median = statistics.median(map(_rate, rows))
    total = len(rows)
    rows = worst_ranks(rows, lambda r: r.get("status") == "FAIL", lambda r: -_rate(r))
    rates = [_rate(r) for r in rows]
    failing = [r.get("status") == "FAIL" for r in rows]
    labels = [f"rank {r['rank']}" for r in rows]
    titles: dict[str, str] = {}
    with svg.figure(7.0, max(2.2, 0.9 + 0.28 * len(rows))) as fig:
        ax = fig.add_subplot()
        colours = [svg.FAIL_COLOUR if bad else svg.PALETTE[0] for bad in failing]
        bars = ax.barh(labels, rates, color=colours)
        for row, bar, rate in zip(rows, bars, rates, strict=True):
            hover = f"rank {row['rank']} (host {row.get('host')}): {rate:.4g} TFLOP/s"
            svg.hover(bar, f"device-{row['rank']}", hover, titles)
        ax.axvline(median, color="#555555", linestyle="--", linewidth=1, label=f"median {median:.3g}")
        for i, bad in enumerate(failing):
            if bad:
                ax.get_yticklabels()[i].set_color(svg.FAIL_COLOUR)
        ax.invert_yaxis()  # rank 0 on top, as in the tables
        ax.set_xlabel(f"{dtype} matrix products (TFLOP/s, best pass)")
        ax.set_ylabel("rank")
        ax.legend(loc="lower right", fontsize=8)
        chart_svg = svg.to_svg(fig, titles)
    data = [
        {"rank": r["rank"], "host": r.get("host"), "tflops": rate, "status": r.get("status")}
        for r, rate in zip(rows, rates, strict=True)
    ]
    notes = [c.detail for c in report.checks if c.name == "compute" and c.status != Status.PASS and c.detail]
    columns = {"rank": "rank", "host": "host", "tflops": "TFLOP/s", "status": "status"}
    return [
        Chart(
            f"{dtype} product rate by rank".strip() + of_ranks(len(rows), total, "slowest or named"),
            chart_svg,
            Table("chart_devices", "Each rank's best pass", columns, data),
            notes,
        )
    ]


def _rate(row: dict) -> float:
    rate = number(row.get("gemm_tflops"))
    return 0.0 if math.isnan(rate) else rate
