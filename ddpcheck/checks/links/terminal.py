"""The terminal's chart of the links: the link matrix as a heat map of ratios to the median."""

from __future__ import annotations

from typing import Any

from rich import box
from rich.console import Console
from rich.table import Table as RichTable
from rich.text import Text

from ddpcheck.report.model import Table
from ddpcheck.report.table_layout import measure
from ddpcheck.report.terminal import print_line

# Heat map shades, slowest first: (upper bound of the ratio to the median, style).
HEAT_SHADES = ((0.25, "bold white on red"), (0.5, "black on dark_orange"), (0.8, "black on yellow"))


def render_link_heatmap(table: Table, rows: list[dict[str, Any]], console: Console) -> None:
    """The link matrix (rows: label, host, ratios) as a grid of ratios to the median, slow ones coloured.

    Plain text stays readable without colour: every cell is its number, '.' where nothing was measured.
    """
    if not rows:
        return
    # The title above, not as the grid's caption: a narrow grid would wrap it into a column.
    console.print(Text(table.title, style="bold"))
    grid = _heat_grid(rows, percent=False)
    if measure(grid) > console.width:
        # Too wide for the terminal as ratios (16 ranks at 80 columns): as percentages, closer.
        grid = _heat_grid(rows, percent=True)
        if measure(grid) > console.width:
            print_line(
                console,
                f"(the grid needs {measure(grid)} columns: the tables below name the slow links)",
                "dim",
            )
            return
        print_line(console, "(percent of the median)", "dim")
    console.print(grid)


def _heat_grid(rows: list[dict[str, Any]], percent: bool) -> RichTable:
    if percent:
        grid = RichTable(box=None, pad_edge=False, padding=(0, 0, 0, 1))
    else:
        grid = RichTable(box=box.SIMPLE, pad_edge=False)
    grid.add_column("", justify="right", style="bold", no_wrap=True)
    for row in rows:
        grid.add_column(row["label"], justify="right", no_wrap=True)
    for row in rows:
        cells = []
        for ratio in row["ratios"]:
            if ratio is None:
                cells.append(Text(".", style="dim"))
                continue
            style = next((s for bound, s in HEAT_SHADES if ratio < bound), "green")
            cells.append(Text(f"{ratio * 100:.0f}" if percent else f"{ratio:.2f}", style=style))
        grid.add_row(row["label"], *cells)
    return grid
