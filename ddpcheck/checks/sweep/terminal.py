"""The terminal's chart of a bandwidth sweep: busbw by message size (the declarations' `charts`)."""

from __future__ import annotations

from typing import Any

from rich.console import Console

from ddpcheck.report.model import Table
from ddpcheck.report.terminal import bar_chart


def render_bandwidth_chart(
    table: Table, rows: list[dict[str, Any]], console: Console, width: int = 40
) -> None:
    """busbw against message size as horizontal bars (no plotting library); one chart per group."""
    rows = [r for r in rows if isinstance(r.get("busbw_gbps"), (int, float))]  # a saved report may be edited
    peak = max((r["busbw_gbps"] for r in rows), default=0.0)
    if peak <= 0:
        return
    title = (
        f"{rows[0].get(table.group_by)} busbw by message size" if table.group_by else "busbw by message size"
    )
    bars = [
        (
            str(r.get("size", "")),
            r["busbw_gbps"],
            "red" if r.get("wrong") else "cyan",
            f"{r['busbw_gbps']:.3f} GB/s",
        )
        for r in rows
    ]
    console.print(bar_chart(title, bars, peak, width))
