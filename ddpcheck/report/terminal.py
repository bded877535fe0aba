"""Report -> the terminal: rich tables, the progress display, charts. The one module that imports rich."""

from __future__ import annotations

import errno
import io
import math
import os
import sys
from typing import Any

from rich import box
from rich.console import Console, ConsoleOptions, Group, RenderableType
from rich.measure import Measurement
from rich.panel import Panel
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table as RichTable
from rich.text import Lines, Text

from ddpcheck.command import load
from ddpcheck.commands import COMMANDS
from ddpcheck.report import fold
from ddpcheck.report.model import Report, Status, Table, Verdict
from ddpcheck.report.naming import counted
from ddpcheck.report.rows import SHOWN_ROWS, left_out_line, shown_rows, worst_rows

STATUS_STYLE = {
    Status.PASS: "bold green",
    Status.WARN: "bold yellow",
    Status.FAIL: "bold red",
    Status.ERROR: "bold magenta",
    Status.SKIP: "dim",
}
# The verdict line's counts, always in this order: "2 pass, 1 fail, 1 warn, 1 skip".
COUNT_ORDER = (Status.PASS, Status.FAIL, Status.WARN, Status.ERROR, Status.SKIP)
VERDICT_STYLE = {Verdict.PASS: "bold green", Verdict.FAIL: "bold red", Verdict.ERROR: "bold magenta"}
CELL_STYLE = {"PASS": "green", "FAIL": "red", "WARN": "yellow", "ERROR": "magenta"}


class _Console(Console):
    def on_broken_pipe(self) -> None:
        """The reader left (`ddpcheck allreduce | head`): rich would exit 1, which reads as FAIL.

        Quiet from here on; the caller exits with the verdict (cli.finish).
        """
        self.quiet = True
        raise BrokenPipeError(errno.EPIPE, "the reader of the report left")


def make_console(stderr: bool = False) -> Console:
    """A console that writes plain text (no escape codes) when NO_COLOR is set or output is not a terminal."""
    stream = sys.stderr if stderr else sys.stdout
    # no-color.org: set and not empty. rich's own no_color drops colours but keeps bold and
    # dim; color_system=None drops every style, so the text is plain.
    no_color = bool(os.environ.get("NO_COLOR"))
    return _Console(
        file=stream,
        no_color=no_color,
        color_system=None if no_color else "auto",
        highlight=False,
        soft_wrap=False,
    )


def say(console: Console, message: str, style: str = "") -> None:
    console.print(Text(message, style=style), soft_wrap=True)


def say_folded(console: Console, message: str, style: str = "") -> None:
    """Free text at the terminal's width, never broken inside a number, a path or a command."""
    for line in fold.fold(message, console.width, cut=False):
        console.print(Text(line, style=style), soft_wrap=True)


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


def render_report(
    report: Report,
    console: Console,
    quiet: bool = False,
    verbose: bool = False,
    wrote: list[str] | None = None,
    actions: list[str] | None = None,
) -> None:
    """The whole report; the verdict line always last (`tail -1`), after what was written where.

    `actions`: what the run did to the cluster (--drain), shown quiet or not.
    """
    if report.written_elsewhere:
        # Not the node of rank 0: one line, the whole report is printed there.
        (check,) = report.checks
        say(console, f"{report.verdict.value.upper()}  ddpcheck {report.command}: {check.detail}")
        return
    if not quiet:
        for note in report.notes:
            say_folded(console, note, "dim")  # free text: wraps at the terminal's width
        command = COMMANDS.get(report.command)
        charts = command.charts if command else {}
        details = command.details if command else {}
        hidden = []
        for table in report.tables:
            if table.name == "stderr":
                _render_tails(table, console)
                continue
            if table.name in details and not verbose:
                hidden.append(details[table.name])
                continue
            for title, rows in table.groups():
                if table.columns:  # a table without columns is for the JSON report only
                    shown = shown_rows(rows)
                    console.print(rich_table(table, title, shown, width=console.width))
                    if len(shown) < len(rows):
                        say(console, left_out_line(len(shown), len(rows)), "dim")
                if table.name in charts:
                    load(charts[table.name])(table, rows, console)
        if hidden:
            console.print(Text(f"{' and '.join(hidden)}: with --verbose (-v), and in --json", style="dim"))
        console.print(_checks_table(report, console.width))
    else:
        for check in report.failing():
            say(console, f"{check.status.value} {check.name}: {check.detail}", STATUS_STYLE[check.status])
    if not quiet:
        for line in wrote or ():
            say_folded(console, line, "dim")
    for line in actions or ():
        say(console, line, "bold")
    if report.log_dir:
        from ddpcheck.commands import kept_line

        say_folded(console, kept_line(report.command, report.log_dir), "dim")
    injected = report.injected_line()
    if injected:  # quiet or not: a planted fault must never read as a hardware one
        say(console, injected, "bold yellow")
    console.print(verdict_line(report), soft_wrap=True)


def verdict_line(report: Report) -> Text:
    verdict = report.verdict
    world = report.world
    where = ""
    if world.get("size"):
        # `watch` knows neither: the job's own backend and device are its business.
        known = [str(world[key]) for key in ("backend", "device") if world.get(key)]
        where = f" ({', '.join([counted(world['size'], 'rank'), *known])})"
    summary = ", ".join(
        f"{n} {status.value.lower()}"
        for status in COUNT_ORDER
        if (n := sum(check.status is status for check in report.checks))
    )
    text = Text()
    text.append(verdict.value.upper(), style=VERDICT_STYLE[verdict])
    text.append(f"  ddpcheck {report.command}{where}: {summary} in {report.elapsed_s:.1f} s")
    failing = report.failing()
    if failing:
        text.append(" - " + "; ".join(_culprit(c) for c in failing[:3]))
    return text


def _culprit(check: Any) -> str:
    if check.ranks:
        ranks = ", ".join(map(str, check.ranks[:8])) + (" ..." if len(check.ranks) > 8 else "")
        return f"{check.name}: rank{'s' if len(check.ranks) > 1 else ''} {ranks}"
    return check.name


def rich_table(
    table: Table, title: str | None = None, rows: list[dict[str, Any]] | None = None, width: int | None = None
) -> RenderableType:
    """The table, or one group of it (`title` and `rows`), fitted to `width` columns when given.

    Nothing that must be read whole is cut: when the table is wider than `width`, each numeric
    column keeps the width of its widest value (its header wraps instead), each text column the
    width of its longest atom (a path, a number with its unit, a command, a short value such as
    'exited 1': report/fold.py) and only the rest of the text folds. When even that does not fit,
    the table is written as one record per row (`_records`).
    """
    rows = table.rows if rows is None else rows
    # A column empty in every row (postmortem's 'called at' from dumps without stacks) takes no room.
    keys = [key for key in table.columns if not rows or any(row.get(key) != "" for row in rows)]
    numeric = [any(isinstance(row.get(key), (int, float)) for row in rows) for key in keys]
    cells = [[_cell(row.get(key)) for key in keys] for row in rows]
    headers = [table.columns[key] for key in keys]
    heading = title or table.title

    def build(fixed: list[int | None]) -> RichTable:
        out = RichTable(title=Text(heading), box=box.SIMPLE_HEAVY, title_justify="left", title_style="bold")
        for header, is_number, column_width in zip(headers, numeric, fixed, strict=True):
            out.add_column(
                Cell(header), justify="right" if is_number else "left", overflow="fold", width=column_width
            )
        for row in cells:
            out.add_row(*row)
        return out

    natural = build([None] * len(headers))
    if width is None:
        return natural
    table_width = _measure(natural)
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
    fixed = [widest[i] if numeric[i] else _longest_atom(cells, i) for i in range(len(headers))]
    room = width - (table_width - sum(wants))
    if sum(fixed) > room:
        return _records(heading, headers, cells, width)
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
    while sum(fixed) < room:
        short = [i for i in range(len(fixed)) if fixed[i] < wants[i]]
        if not short:
            break
        fixed[max(short, key=lambda i: (wants[i] - fixed[i], -i))] += 1
    return build(list(fixed))


def _two_lines(header: str) -> int:
    """The narrowest width that holds `header` in two lines, broken at a space."""
    words = header.split()
    return min((max(len(" ".join(words[:i])), len(" ".join(words[i:]))) for i in range(1, len(words))),
               default=len(header))  # fmt: skip


def _longest_atom(cells: list[list[Cell]], column: int) -> int:
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


def _measure(table: RichTable) -> int:
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


def _cell(value: Any) -> Cell:
    if value is None:
        return Cell("-", style="dim")
    if isinstance(value, float):
        return Cell(format_number(value))
    if isinstance(value, int):
        return Cell(str(value))
    text = str(value)
    return Cell(text, style=CELL_STYLE.get(text, ""), whole=True)


def _checks_table(report: Report, width: int) -> RichTable:
    # Cell, not str: details quote ranks' errors, and "[/path/pair.cc:553]" is not rich markup.
    rows = [
        [Cell(check.name), Cell(check.status.value, style=STATUS_STYLE[check.status]), Cell(check.detail)]
        for check in report.checks
    ]
    out = RichTable(title="Checks", box=box.SIMPLE_HEAVY, title_justify="left", title_style="bold")
    for i, header in enumerate(("check", "status", "detail")):
        # rich narrows a column below its longest word when the table is too wide: never below an atom.
        least = min(_longest_atom(rows, i), max(width - 30, 10))
        out.add_column(header, overflow="fold", min_width=least or None)
    for row in rows:
        out.add_row(*row)
    return out


def _render_tails(table: Table, console: Console) -> None:
    for row in table.rows:
        where = f"rank {row['rank']}" + (f" on {row['host']}" if row.get("host") else "")
        if row.get("stderr_tail"):
            console.print(
                Panel(
                    Text(row["stderr_tail"]),
                    title=Text(f"{where}: last lines of stderr"),
                    title_align="left",
                    border_style="red",
                )
            )
        if row.get("stack"):
            console.print(
                Panel(
                    Text(str(row["stack"])),
                    title=Text(f"{where}: Python stack (py-spy, before the kill)"),
                    title_align="left",
                    border_style="red",
                )
            )


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
    console.print(_bar_chart(title, bars, peak, width))


def _bar_chart(title: str, bars: list[tuple[str, float, str, str]], top: float, width: int) -> RichTable:
    """Horizontal bars (no plotting library): (label, value, style, value as shown), scaled to `top`."""
    chart = RichTable(title=title, box=None, title_justify="left", title_style="bold", show_header=False)
    chart.add_column(justify="right")
    chart.add_column()
    chart.add_column(justify="right")
    for label, value, style, shown in bars:
        filled = value / top * width
        bar = "█" * int(filled) + ("▌" if filled - int(filled) >= 0.5 else "")
        chart.add_row(label, Text(bar, style=style), shown)
    return chart


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
    if _measure(grid) > console.width:
        # Too wide for the terminal as ratios (16 ranks at 80 columns): as percentages, closer.
        grid = _heat_grid(rows, percent=True)
        if _measure(grid) > console.width:
            say(
                console,
                f"(the grid needs {_measure(grid)} columns: the tables below name the slow links)",
                "dim",
            )
            return
        say(console, "(percent of the median)", "dim")
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
    chart.add_column(justify="right")
    chart.add_column()
    chart.add_column(justify="right")
    chart.add_column(justify="right")
    for r in rows:
        filled = r["ms"] / longest * width
        bar = "█" * int(filled) + ("▌" if filled - int(filled) >= 0.5 else "")
        style = BREAKDOWN_STYLE.get(r["part"], "cyan")
        chart.add_row(r["label"], Text(bar, style=style), f"{r['ms']:.3f} ms", f"{r['share_pct']:.1f}%")
    console.print(chart)


def render_rate_chart(table: Table, rows: list[dict[str, Any]], console: Console, width: int = 40) -> None:
    """Each rank's product rate (rows: rank, gemm_tflops, status) as bars, the failing ones red."""
    rows = [r for r in rows if isinstance(r.get("gemm_tflops"), (int, float))]
    top = max((r["gemm_tflops"] for r in rows), default=0.0)
    if top <= 0:
        return
    dtype = rows[0].get("gemm_dtype") or ""
    total = len(rows)
    rows = worst_rows(rows, SHOWN_ROWS, lambda r: r.get("status") == "FAIL", lambda r: -r["gemm_tflops"])
    bars = [
        (
            f"rank {r['rank']}",
            r["gemm_tflops"],
            "red" if r.get("status") == "FAIL" else "cyan",
            f"{r['gemm_tflops']:.4g} TFLOP/s",
        )
        for r in rows
    ]
    title = f"{dtype} product rate by rank".strip()
    if len(rows) < total:
        title += f" (the {len(rows)} slowest or failing of {total:,} ranks)"
    console.print(_bar_chart(title, bars, top, width))


class LaunchProgress:
    """The launcher's live view of the ranks starting, rank 0's stage and the sweep's progress.

    Drawn on its own console, stderr in the CLI: `ddpcheck allreduce | tee log` keeps it on the
    terminal while the report goes through the pipe.
    """

    def __init__(self, console: Console, enabled: bool, ranks: int | None = None) -> None:
        # A live display redraws with cursor escapes: only on a real terminal that allows
        # styles (not a pipe, even with FORCE_COLOR; not TERM=dumb; not NO_COLOR).
        isatty = getattr(console.file, "isatty", None)
        self.enabled = (
            enabled
            and console.is_interactive
            and console.color_system is not None
            and bool(isatty and isatty())
        )
        self.ranks = ranks  # this node's planned ranks
        self._progress = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            TextColumn("{task.fields[count]}"),
            TimeElapsedColumn(),
            console=console,
            transient=True,
        )
        self._task: Any = None

    def __enter__(self) -> LaunchProgress:
        if self.enabled:
            self._progress.start()
            self._task = self._progress.add_task(
                "starting ranks", total=self.ranks, count=self._ranks_count(0)
            )
        return self

    def __exit__(self, *exc: object) -> None:
        if self.enabled:
            self._progress.stop()

    def _ranks_count(self, started: int) -> str:
        return f"{started}/{self.ranks}" if self.ranks else ""

    def update(self, status: dict[str, Any]) -> None:
        if not self.enabled:
            return
        progress = status.get("progress")
        if progress:
            self._progress.update(
                self._task,
                description=f"rank 0: {progress['label']}",
                completed=progress["done"],
                total=progress["total"],
                count=f"{progress['done']}/{progress['total']}",
            )
        else:
            started = status.get("ranks_started", 0)
            self._progress.update(
                self._task,
                description=f"rank 0: {status.get('stage')}",
                completed=started,
                total=self.ranks,
                count=f"{self._ranks_count(started)} ranks started" if self.ranks else "",
            )
