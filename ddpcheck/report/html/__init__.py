"""`--html PATH`: a report as one self-contained page to look at, attach or paste into a ticket.

matplotlib draws the charts; it is an optional extra (`pip install 'ddpcheck[html]'`) and is
imported only here, only when --html is given, so `ddpcheck --help` and plain runs pay nothing.

A command names its chart makers (Command.html_charts): modules in its own folder with
`charts(report) -> list[Chart]` (report/html/chart.py), each reading the tables it knows by name;
a table nobody charts is still shown as a table. page.py lays out the page, svg.py draws.
"""

from __future__ import annotations

import importlib

from ddpcheck.commands import COMMANDS
from ddpcheck.errors import UsageError
from ddpcheck.report.model import Report

INSTALL_HINT = "pip install 'ddpcheck[html]'"


def require_charts() -> None:
    """Refuse --html before anything is launched when its chart library cannot be imported."""
    try:
        import matplotlib  # noqa: F401
    except ImportError as exc:
        raise UsageError(
            f"--html needs matplotlib, which cannot be imported ({exc}): {INSTALL_HINT}"
        ) from None


def render_html(report: Report) -> str:
    """The page; its charts are drawn by the makers its command names (Command.html_charts)."""
    from ddpcheck.report import terminal
    from ddpcheck.report.html import page

    command = COMMANDS.get(report.command)
    makers = command.html_charts if command else ()
    charts = [chart for maker in makers for chart in importlib.import_module(maker).charts(report)]
    return page.assemble(report, terminal.verdict_line(report).plain, charts)


def write(report: Report, path: str) -> None:
    """--html PATH: the page, written whole (report/formats/ holds the other formats)."""
    from ddpcheck.report.formats.text import write_text

    write_text(path, render_html(report))
