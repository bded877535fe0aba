"""A report's table fitted to the terminal: nothing that must be read whole (a number with its unit, a
path, a command) is cut; a table too wide for any fit is written as records."""

from __future__ import annotations

import io
import math
from typing import Any

from rich import box
from rich.console import Console, ConsoleOptions, Group, RenderableType
from rich.measure import Measurement
from rich.table import Table as RichTable
from rich.text import Lines, Text

from ddpcheck.report import fold
from ddpcheck.report.model import Table

CELL_STYLE = {"PASS": "green", "FAIL": "red", "WARN": "yellow", "ERROR": "magenta"}


class Cell(Text):
    """Text that wraps between atoms (report/fold.py), never inside a number with its unit, a path or a
    command; `whole`: a short table cell, kept on one line."""

    def __init__(self, text: str = "", style: str = "", whole: bool = False) -> None:
        super().__init__(text, style=style)
        self.whole = whole

    def wrap(self, console: Console, width: int, **kwargs: Any) -> Lines:
        if kwargs.get("no_wrap") or self.no_wrap:
            return super().wrap(console, width, **kwargs)
        lines = Lines()
        for line in self.split(allow_blank=True):
            pieces = line.divide(fold.break_offsets(line.plain, width, self.whole))
            for piece in pieces:
                piece.rstrip_end(width)
                piece.rstrip()
            pieces.justify(console, width, justify=kwargs.get("justify") or self.justify or "default")
            lines.extend(pieces)
        return lines

    def __rich_measure__(self, console: Console, options: ConsoleOptions) -> Measurement:
        widest = super().__rich_measure__(console, options).maximum
        return Measurement(min(widest, fold.longest_atom(self.plain, self.whole)), widest)


def rich_table(table: Table, title: str, rows: list[dict[str, Any]], width: int) -> RenderableType:
    """The table, or one group of it (`title` and `rows`), fitted to `width` columns.

    Nothing that must be read whole is cut: when the table is wider than `width`, each numeric
    column keeps the width of its widest value (its header wraps instead), each text column the
    width of its longest atom (a path, a number with its unit, a command, a short value such as
    'exited 1': report/fold.py) and only the rest of the text folds. When even that does not fit,
    the table is written as one record per row (`_records`).
    """
    # A column empty in every row ('called at' from dumps without stacks) takes no room.
    keys = [key for key in table.columns if not rows or any(row.get(key) != "" for row in rows)]
    numeric = [any(isinstance(row.get(key), (int, float)) for row in rows) for key in keys]
    cells = [[cell(row.get(key)) for key in keys] for row in rows]
    headers = [table.columns[key] for key in keys]

    def build(fixed: list[int | None]) -> RichTable:
        out = RichTable(title=Text(title), box=box.SIMPLE_HEAVY, title_justify="left", title_style="bold")
        for header, is_number, column_width in zip(headers, numeric, fixed, strict=True):
            out.add_column(
                Cell(header), justify="right" if is_number else "left", overflow="fold", width=column_width
            )
        for row in cells:
            out.add_row(*row)
        return out

    natural = build([None] * len(headers))
    table_width = measure(natural)
    if table_width <= width:
        return natural
    widest = [max((row[i].cell_len for row in cells), default=0) for i in range(len(headers))]
    wants = [max(len(header), w) for header, w in zip(headers, widest, strict=True)]
    # The least each column can take: a number its own width (its header wraps), text its longest
    # atom. Then, while there is room, the cheapest first at each tier: every header's longest word
    # whole; text's longest word whole up to 24 characters; every header on two lines at most; then
    # what each column wants, the one furthest from it first.
    header_word = [max((len(word) for word in h.split()), default=0) for h in headers]
    text_word = [max((len(word) for row in cells for word in row[i].plain.split()), default=0)
                 for i in range(len(headers))]  # fmt: skip
    fixed = [widest[i] if numeric[i] else longest_atom(cells, i) for i in range(len(headers))]
    room = width - (table_width - sum(wants))
    if sum(fixed) > room:
        return _records(title, headers, cells, width)
    tiers = [
        [max(fixed[i], min(header_word[i], wants[i])) for i in range(len(headers))],
        [max(min(header_word[i], wants[i]), min(text_word[i], 24), fixed[i]) for i in range(len(headers))],
        [max(min(_two_lines(headers[i]), wants[i]), fixed[i]) for i in range(len(headers))],
    ]
    for tier in tiers:
        for i in sorted(range(len(fixed)), key=lambda i: tier[i] - fixed[i]):
            step = min(tier[i] - fixed[i], room - sum(fixed))
            if step > 0:
                fixed[i] += step
    while sum(fixed) < room:  # room < sum(wants) (the table is too wide): some column is short of it
        fixed[max(range(len(fixed)), key=lambda i: (wants[i] - fixed[i], -i))] += 1
    return build(list(fixed))


def _two_lines(header: str) -> int:
    """The narrowest width that holds `header` in two lines, broken at a space."""
    words = header.split()
    return min((max(len(" ".join(words[:i])), len(" ".join(words[i:]))) for i in range(1, len(words))),
               default=len(header))  # fmt: skip


def longest_atom(cells: list[list[Cell]], column: int) -> int:
    return max((fold.longest_atom(row[column].plain, row[column].whole) for row in cells), default=0)


def _records(title: str, headers: list[str], cells: list[list[Cell]], width: int) -> Group:
    """A table too wide for the terminal, its atoms whole: each row as 'header value' pairs, the
    pairs filling lines of `width` and never broken but where one alone is wider than the line."""
    lines: list[Text] = [Text(title, style="bold"), Text("")]
    for row in cells:
        line = Text("  ")
        for header, cell in zip(headers, row, strict=True):
            if not cell.plain:
                continue
            pair = Text.assemble((" ".join(header.split()), "dim"), " ", cell)
            if line.cell_len > 4 and line.cell_len + 3 + pair.cell_len > width:
                lines.append(line)
                line = Text("    ")
            if line.cell_len > 4:
                line.append("   ")
            if line.cell_len + pair.cell_len <= width:
                line.append_text(pair)
                continue
            folded = fold.fold(pair.plain, width - 4, cut=False)  # alone wider than a line: words whole
            line.append(folded[0])
            lines += [line, *(Text("    " + more) for more in folded[1:-1])]
            line = Text("    " + folded[-1]) if len(folded) > 1 else Text("    ")
        if line.plain.strip():
            lines.append(line)
    lines.append(Text(""))
    return Group(*lines)


def measure(table: RichTable) -> int:
    """The table's width on a console wide enough for it to take all it wants."""
    console = Console(width=10_000, file=io.StringIO())
    return console.measure(table).maximum


def format_number(value: float) -> str:
    """A float as the terminal shows it: 4 significant figures, no exponent below a million."""
    if not math.isfinite(value):
        return str(value)
    if 1e4 <= abs(value) < 1e6:
        return f"{value:.0f}"
    return f"{value:.4g}"


def cell(value: Any) -> Cell:
    if value is None:
        return Cell("-", style="dim")
    if isinstance(value, float):
        return Cell(format_number(value))
    if isinstance(value, int):
        return Cell(str(value))
    text = str(value)
    return Cell(text, style=CELL_STYLE.get(text, ""), whole=True)
