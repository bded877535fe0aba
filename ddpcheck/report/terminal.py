"""Report -> the terminal: the notes, the tables (report/table_layout.py fits them), the checks and the
verdict line; a command's own charts are drawn by the functions its declaration names (`charts`)."""

from __future__ import annotations

import errno
import os
import sys
from typing import Any

from rich import box
from rich.console import Console
from rich.panel import Panel
from rich.table import Table as RichTable
from rich.text import Text

from ddpcheck.command import load
from ddpcheck.commands import COMMANDS, kept_line
from ddpcheck.report import fold
from ddpcheck.report.model import Report, Status, Table, Verdict
from ddpcheck.report.naming import counted, listed
from ddpcheck.report.rows import TAILS, left_out_line, shown_rows
from ddpcheck.report.table_layout import Cell, longest_atom, rich_table

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


class _Console(Console):
    def on_broken_pipe(self) -> None:
        """The reader left (`ddpcheck ... | head`): rich would exit 1, which reads as FAIL.

        Quiet from here on; the caller exits with the verdict (launcher/finish.py).
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


def print_line(console: Console, message: str, style: str = "") -> None:
    console.print(Text(message, style=style), soft_wrap=True)


def print_folded(console: Console, message: str, style: str = "") -> None:
    """Free text at the terminal's width, never broken inside a number, a path or a command."""
    for line in fold.fold(message, console.width, cut=False):
        console.print(Text(line, style=style), soft_wrap=True)


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
        print_line(console, f"{report.verdict.value.upper()}  ddpcheck {report.command}: {check.detail}")
        return
    if not quiet:
        for note in report.notes:
            print_folded(console, note, "dim")  # free text: wraps at the terminal's width
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
                        print_line(console, left_out_line(len(shown), len(rows)), "dim")
                if table.name in charts:
                    load(charts[table.name])(table, rows, console)
        if hidden:
            console.print(Text(f"{' and '.join(hidden)}: with --verbose (-v), and in --json", style="dim"))
        console.print(_checks_table(report, console.width))
        for line in wrote or ():
            print_folded(console, line, "dim")
    else:
        for check in report.failing():
            print_line(
                console, f"{check.status.value} {check.name}: {check.detail}", STATUS_STYLE[check.status]
            )
    for line in actions or ():
        print_line(console, line, "bold")
    if report.log_dir:
        print_folded(console, kept_line(report.command, report.log_dir), "dim")
    injected = report.injected_line()
    if injected:  # quiet or not: a planted fault must never read as a hardware one
        print_line(console, injected, "bold yellow")
    console.print(verdict_line(report), soft_wrap=True)


def verdict_line(report: Report) -> Text:
    verdict = report.verdict
    world = report.world
    where = ""
    if world.get("size"):
        # A command that watches a job of its own knows neither: they are the job's business.
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
    return f"{check.name}: {listed(check.ranks, 8)}" if check.ranks else check.name


def _checks_table(report: Report, width: int) -> RichTable:
    # Cell, not str: details quote ranks' errors, and "[/path/pair.cc:553]" is not rich markup.
    rows = [
        [Cell(check.name), Cell(check.status.value, style=STATUS_STYLE[check.status]), Cell(check.detail)]
        for check in report.checks
    ]
    out = RichTable(title="Checks", box=box.SIMPLE_HEAVY, title_justify="left", title_style="bold")
    for i, header in enumerate(("check", "status", "detail")):
        # rich narrows a column below its longest word when the table is too wide: never below an atom.
        least = min(longest_atom(rows, i), max(width - 30, 10))
        out.add_column(header, overflow="fold", min_width=least or None)
    for row in rows:
        out.add_row(*row)
    return out


def _render_tails(table: Table, console: Console) -> None:
    for row in table.rows:
        where = f"rank {row['rank']}" + (f" on {row['host']}" if row.get("host") else "")
        for key, what in TAILS:
            if row.get(key):
                title = Text(f"{where}: {what}")
                console.print(Panel(Text(str(row[key])), title=title, title_align="left", border_style="red"))


def bar_chart(title: str, bars: list[tuple[str, float, str, str]], top: float, width: int) -> RichTable:
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
