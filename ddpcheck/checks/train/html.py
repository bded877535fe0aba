"""train: the loss at every step on every rank, and the loss of one process on the global batch.

Reads the table `loss` (rows: `step`, `loss_rank{R}` for every rank, `reference_loss`); NaN and
infinities arrive as strings from a saved report and leave a gap in the line.
"""

from __future__ import annotations

import math
import re

from ddpcheck.report.html import svg
from ddpcheck.report.html.chart import Chart, number, of_ranks, worst_ranks
from ddpcheck.report.model import Report, Table

RANK_KEY = re.compile(r"loss_rank(\d+)$")


def charts(report: Report) -> list[Chart]:
    rows = report.rows("loss")
    ranks = sorted({int(m.group(1)) for row in rows for k in row if (m := RANK_KEY.match(k))})
    if not rows or not ranks:
        return []
    total = len(ranks)
    ranks = _drawn(report, rows, ranks)
    steps = [number(r.get("step")) for r in rows]
    titles: dict[str, str] = {}
    with svg.figure() as fig:
        ax = fig.add_subplot()
        for i, rank in enumerate(ranks):
            losses = [number(r.get(f"loss_rank{rank}")) for r in rows]
            (line,) = ax.plot(
                steps,
                losses,
                marker="o",
                markersize=3,
                color=svg.PALETTE[i % len(svg.PALETTE)],
                label=f"rank {rank}" if len(ranks) <= 8 else None,
                alpha=0.9 if len(ranks) <= 8 else 0.5,
            )
            svg.hover(line, f"loss-{rank}", f"rank {rank}: " + ", ".join(f"{v:.4g}" for v in losses), titles)
        reference = [number(r.get("reference_loss")) for r in rows]
        ax.plot(
            steps, reference, linestyle="--", color="black", linewidth=1.5, label="1 process (global batch)"
        )
        ax.set_xlabel("step")
        ax.set_ylabel("loss (MSE, local batch)")
        ax.xaxis.get_major_locator().set_params(integer=True)
        ax.legend(fontsize=8)
        chart_svg = svg.to_svg(fig, titles)
    columns = {"step": "step", **{f"loss_rank{r}": f"rank {r}" for r in ranks}, "reference_loss": "1 process"}
    data = [{k: row.get(k) for k in columns} for row in rows]
    title = "Loss per step on every rank, and in one process" + of_ranks(
        len(ranks), total, "furthest or named"
    )
    return [Chart(title, chart_svg, Table("chart_loss", "Loss per step", columns, data))]


def _drawn(report: Report, rows: list[dict], ranks: list[int]) -> list[int]:
    """Every rank up to CHART_RANKS; beyond, the ranks a failing check names and those whose last
    loss is furthest from the median rank's: lines of thousands of ranks would draw one smudge."""
    named = {r for c in report.failing() for r in c.ranks}
    last = {rank: number(rows[-1].get(f"loss_rank{rank}")) for rank in ranks}
    finite = sorted(v for v in last.values() if not math.isnan(v))
    middle = finite[len(finite) // 2] if finite else 0.0
    chosen = worst_ranks(
        [{"rank": rank} for rank in ranks],
        lambda r: r["rank"] in named or math.isnan(last[r["rank"]]),
        lambda r: abs(last[r["rank"]] - middle),
    )
    return [r["rank"] for r in chosen]
