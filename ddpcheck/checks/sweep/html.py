"""allreduce / collectives: bus bandwidth against message size, one line per op.

Reads the table `bandwidth` (rows: `op`, absent for allreduce's all_reduce; `size_bytes`,
`busbw_gbps`, `wrong`) and, when a run was compared with `--baseline`, the busbw figures of the
table `baseline` (rows with `size_bytes`, `then`, `now` and perhaps `op` and `metric`), drawn
dashed beside.
"""

from __future__ import annotations

import math
from typing import Any

from ddpcheck.report.html import svg
from ddpcheck.report.html.chart import Chart, number
from ddpcheck.report.model import Report, Table


def _op(row: dict[str, Any]) -> str:
    return str(row.get("op") or "all_reduce")


def _baseline_rows(report: Report) -> dict[tuple[str, float], float]:
    """(op, size in bytes) -> the baseline's busbw, from the rows of `baseline` that are busbw figures."""
    found: dict[tuple[str, float], float] = {}
    for row in report.rows("baseline"):
        metric = str(row.get("metric") or "busbw")
        size = number(row.get("size_bytes"))
        if "busbw" not in metric or math.isnan(size) or math.isnan(number(row.get("then"))):
            continue
        found[(_op(row), size)] = number(row["then"])
    return found


def charts(report: Report) -> list[Chart]:
    rows = [r for r in report.rows("bandwidth") if not math.isnan(number(r.get("size_bytes")))]
    if not rows:
        return []
    ops: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        ops.setdefault(_op(row), []).append(row)
    baseline = _baseline_rows(report)
    titles: dict[str, str] = {}
    with svg.figure() as fig:
        ax = fig.add_subplot()
        for i, (op, op_rows) in enumerate(ops.items()):
            colour = svg.PALETTE[i % len(svg.PALETTE)]
            op_rows = sorted(op_rows, key=lambda r: number(r["size_bytes"]))
            xs = [number(r["size_bytes"]) for r in op_rows]
            ys = [number(r.get("busbw_gbps")) for r in op_rows]
            ax.plot(xs, ys, marker="o", markersize=3, color=colour, label=op)
            wrong = [(x, y) for x, y, r in zip(xs, ys, op_rows, strict=True) if number(r.get("wrong")) > 0]
            if wrong:
                marks = ax.scatter(
                    *zip(*wrong, strict=True), marker="x", s=40, color=svg.FAIL_COLOUR, zorder=3
                )
                at = ", ".join(svg.size_label(x) for x, _ in wrong)
                svg.hover(marks, f"wrong-{i}", f"{op}: wrong elements at {at}", titles)
            then = [(x, baseline[(op, x)]) for x in xs if (op, x) in baseline]
            if then:
                ax.plot(
                    *zip(*then, strict=True),
                    linestyle="--",
                    color=colour,
                    alpha=0.7,
                    label=f"{op} (baseline)",
                )
        ax.set_xscale("log", base=2)
        ax.xaxis.set_major_formatter(lambda x, _pos: svg.size_label(x))
        ax.set_xlabel("message size (bytes, log scale)")
        ax.set_ylabel("bus bandwidth (GB/s)")
        ax.set_ylim(bottom=0)
        ax.legend(loc="upper left", fontsize=8, ncols=2 if len(ops) > 3 else 1)
        chart_svg = svg.to_svg(fig, titles)
    columns = {"op": "op", "size": "size", "size_bytes": "bytes", "busbw_gbps": "busbw (GB/s)"}
    if baseline:
        columns["baseline_gbps"] = "baseline busbw (GB/s)"
    columns["wrong"] = "#wrong"
    data = [
        {
            "op": _op(r),
            "size": r.get("size") or svg.size_label(number(r["size_bytes"])),
            "size_bytes": r["size_bytes"],
            "busbw_gbps": r.get("busbw_gbps"),
            "baseline_gbps": baseline.get((_op(r), number(r["size_bytes"]))),
            "wrong": r.get("wrong"),
        }
        for r in rows
    ]
    notes = [t for t in titles.values()]
    title = "Bus bandwidth by message size" + (" against the baseline" if baseline else "")
    return [Chart(title, chart_svg, Table("chart_bandwidth", "busbw per op and size", columns, data), notes)]
