"""`ddpcheck show`: a report saved with --json (copied off a cluster, say) read back for rendering.

Nothing is launched and nothing is measured: the checks, tables and verdict are the saved ones,
so the terminal shows what the run showed and the exit code is the run's verdict.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from ddpcheck.command import Command, option
from ddpcheck.errors import UsageError

if TYPE_CHECKING:
    from ddpcheck.report.model import Report


@dataclass(kw_only=True)
class ShowOptions:
    report_path: str = option(argument=True, metavar="REPORT.json", help="A report saved with --json.")

    def validate(self) -> None:
        pass


def run(options: ShowOptions) -> Report:
    """The saved report; a file that is not one is a usage error (one line, exit 2)."""
    from ddpcheck.report.model import NotAReport, read_report  # not on --help's path

    try:
        return read_report(options.report_path)
    except NotAReport as exc:
        raise UsageError(f"{options.report_path}: {exc}") from None


COMMAND = Command(
    name="show",
    help="""Show a saved report again: the same tables, checks and verdict line, or as HTML.

    Nothing is launched. The exit code is the saved report's verdict (0, 1 or 3);
    a file that is not a ddpcheck report is exit 2.
    """,
    epilog=(
        "Examples: ddpcheck show report.json | ddpcheck show report.json --html report.html "
        "| ddpcheck show report.json --quiet"
    ),
    options=ShowOptions,
    implementation="ddpcheck.report.show",
    ranked=False,
)
