"""A run's end: its files written (or said lost), --drain acted on, the report rendered; its exit code."""

from __future__ import annotations

import contextlib
import errno
import sys
from typing import TYPE_CHECKING

from ddpcheck.errors import say
from ddpcheck.report.outputs import Files

if TYPE_CHECKING:
    from rich.console import Console

    from ddpcheck.report.fleet import FleetOptions
    from ddpcheck.report.model import Report
    from ddpcheck.report.outputs import OutputOptions


def console_for(output: OutputOptions) -> Console:
    from ddpcheck.report import terminal as render

    return render.make_console(stderr=output.to_stdout)


def write_files(report: Report, output: OutputOptions, fleet: FleetOptions | None) -> Files:
    """The report's files, and the fleet's (hostlist, metrics): each written, or said to be lost."""
    files = Files()
    output.write(report, files)
    # A node that is not rank 0's holds a one-line stand-in: the hostlist, metrics and drains are rank 0's.
    if fleet is not None and not report.written_elsewhere:
        fleet.write(report, files)
    return files


def written_lines(report: Report, output: OutputOptions, fleet: FleetOptions | None) -> list[str]:
    """A rank stopped by SIGTERM writes its files itself: the lines saying where each went, or was lost."""
    files = write_files(report, output, fleet)
    return files.wrote + files.lost


def finish(report: Report, console: Console, output: OutputOptions, fleet: FleetOptions | None = None) -> int:
    """Write, act, render; the verdict's exit code."""
    from ddpcheck.report import terminal as render

    # The files first, so that the verdict line, last of all, comes after the lines saying where they went.
    files = write_files(report, output, fleet)
    actions: list[str] = []
    if fleet is not None and fleet.drain and not report.written_elsewhere:
        from ddpcheck.launcher.drain import act_on

        actions = act_on(report)
    try:
        render.render_report(
            report, console, quiet=output.quiet, verbose=output.verbose, wrote=files.wrote, actions=actions
        )
    except OSError as exc:
        if exc.errno not in (errno.EPIPE, errno.EIO):
            raise
        # The terminal report's reader left (`ddpcheck allreduce | head`) or its terminal closed: the
        # verdict stands, and is the exit code (an OSError reaching Typer would exit 1, read as FAIL).
    # A lost file does not change the verdict, nor its exit code (README's exit codes): one line each,
    # on stderr, after the report, where they are the last thing seen.
    if files.lost:
        with contextlib.suppress(Exception):  # the report first, also where stdout and stderr share a pipe
            sys.stdout.flush()
    for line in files.lost:
        say(line)
    return report.verdict.exit_code
