"""The terminal's chart of a profile: where a step's time goes, as bars."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.table import Table as RichTable
from rich.text import Text

from ddpcheck.report.model import Table

BREAKDOWN_STYLE = {"forward": "cyan", "backward_compute": "blue", "exposed_comm": "red", "update": "green"}


def render_breakdown_chart(
    table: Table, rows: list[dict[str, Any]], console: Console, width: int = 40
) -> None:
    """Where a step's time goes (rows: part, label, ms, share_pct) as horizontal bars."""
    longest = max((r["ms"] for r in rows), default=0.0)
    if longest <= 0:
        return
    chart = RichTable(
        title=table.title, box=None, title_justify="left", title_style="bold", show_header=False
    )
    for justify in ("right", "left", "right", "right"):  # label, bar, ms, share
        chart.add_column(justify=justify)
    for r in rows:
        filled = r["ms"] / longest * width
        bar = "█" * int(filled) + ("▌" if filled - int(filled) >= 0.5 else "")
        style = BREAKDOWN_STYLE.get(r["part"], "cyan")
        chart.add_row(r["label"], Text(bar, style=style), f"{r['ms']:.3f} ms", f"{r['share_pct']:.1f}%")
    console.print(chart)
