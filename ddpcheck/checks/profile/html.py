"""profile: per rank, a stacked bar of where a steady-state step goes; the straggler marked.

Reads the table `steps` (one row per rank and step: `rank`, `host`, `warmup`, and each phase in
ms) and takes each rank's median over the steady-state steps, as the `per_rank` table does; the
stragglers are the ranks the `stragglers` check names.
"""

from __future__ import annotations

import math
import statistics
from typing import Any

from ddpcheck.report.html import svg
from ddpcheck.report.html.chart import Chart, number, of_ranks, worst_ranks
from ddpcheck.report.model import Report, Status, Table

# The parts that add up to a wall-clock step (judge.py: CHART_PARTS), in drawing order.
PARTS = {
    "forward": ("forward", "#1f77b4"),
    "backward_compute": ("backward compute", "#9467bd"),
    "exposed_comm": ("exposed communication", "#d62728"),
    "update": ("update", "#2ca02c"),
}


def _medians(rows: list[dict[str, Any]]) -> dict[int, dict[str, Any]]:
    by_rank: dict[int, list[dict[str, Any]]] = {}
    for row in rows:
        by_rank.setdefault(int(row["rank"]), []).append(row)
    result = {}
    for rank, steps in sorted(by_rank.items()):
        steady = [s for s in steps if not s.get("warmup")] or steps
        medians: dict[str, Any] = {"rank": rank, "host": steps[0].get("host")}
        for part in PARTS:
            values = [v for v in (number(s.get(f"{part}_ms")) for s in steady) if not math.isnan(v)]
            # A negative exposed time is timing noise (backward hid it all): nothing to stack.
            medians[f"{part}_ms"] = round(max(0.0, statistics.median(values)), 3) if values else None
        result[rank] = medians
    return result


def charts(report: Report) -> list[Chart]:
    rows = [r for r in report.rows("steps") if isinstance(r.get("rank"), int)]
    if not rows:
        return []
    medians = _medians(rows)
    named = [c for c in report.checks if c.name == "stragglers" and c.status != Status.PASS]
    stragglers = {r for c in named for r in c.ranks}
    size = report.world.get("size")
    total = size if isinstance(size, int) and size > len(medians) else len(medians)
    shown = worst_ranks(
        list(medians.values()),
        lambda m: m["rank"] in stragglers,
        lambda m: sum(number(m[f"{p}_ms"]) for p in PARTS if not math.isnan(number(m[f"{p}_ms"]))),
    )
    medians = {m["rank"]: m for m in shown}
    ranks = list(medians)
    labels = [f"rank {r}" + (" (straggler)" if r in stragglers else "") for r in ranks]
    titles: dict[str, str] = {}
    with svg.figure(7.0, max(2.2, 0.9 + 0.28 * len(ranks))) as fig:
        ax = fig.add_subplot()
        left = [0.0] * len(ranks)
        for part, (label, colour) in PARTS.items():
            widths = [number(medians[r][f"{part}_ms"]) for r in ranks]
            widths = [0.0 if math.isnan(w) else w for w in widths]
            bars = ax.barh(labels, widths, left=left, color=colour, label=label)
            for r, bar, width in zip(ranks, bars, widths, strict=True):
                hover = f"rank {r} (host {medians[r]['host']}): {label} {width:.3f} ms"
                svg.hover(bar, f"bar-{r}-{part}", hover, titles)
            left = [a + b for a, b in zip(left, widths, strict=True)]
        for i, r in enumerate(ranks):
            if r in stragglers:
                ax.get_yticklabels()[i].set_color(svg.FAIL_COLOUR)
                ax.annotate(
                    "straggler",
                    (left[i], i),
                    xytext=(4, 0),
                    textcoords="offset points",
                    va="center",
                    color=svg.FAIL_COLOUR,
                    fontweight="bold",
                )
        ax.invert_yaxis()  # rank 0 on top, as in the tables
        ax.set_xlabel("median time per steady-state step (ms)")
        ax.set_ylabel("rank")
        ax.set_xlim(0, max(left) * 1.18 if max(left) > 0 else 1)
        fig.legend(loc="outside upper center", fontsize=8, ncols=len(PARTS))
        chart_svg = svg.to_svg(fig, titles)
    columns = {
        "rank": "rank",
        "host": "host",
        **{f"{p}_ms": f"{label} (ms)" for p, (label, _) in PARTS.items()},
        "straggler": "straggler",
    }
    data = [{**m, "straggler": m["rank"] in stragglers} for m in medians.values()]
    notes = [c.detail for c in named if c.detail]
    title = "Where each rank's step goes" + of_ranks(len(ranks), total, "slowest or named")
    return [
        Chart(
            title,
            chart_svg,
            Table("chart_profile", "Each rank's median over the steady-state steps", columns, data),
            notes,
        )
    ]
