"""Where a report goes besides the terminal: the output options every command takes, and the files."""

from __future__ import annotations

import contextlib
import functools
import importlib
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ddpcheck.command import option
from ddpcheck.errors import UsageError

if TYPE_CHECKING:
    from ddpcheck.report.model import Report

OUTPUT = "Output"  # the help section


@dataclass(frozen=True, kw_only=True)
class OutputOptions:
    """--json, --junit, --html, --quiet and --verbose."""

    json_path: str | None = option(
        None,
        flags=("--json",),
        help="Write the JSON report here ('-' = stdout).",
        panel=OUTPUT,
        metavar="PATH",
    )
    junit_path: str | None = option(
        None, flags=("--junit",), help="Write a JUnit XML report here.", panel=OUTPUT, metavar="PATH"
    )
    html_path: str | None = option(
        None,
        flags=("--html",),
        help="Write the report as one self-contained HTML page with charts (needs ddpcheck[html]).",
        panel=OUTPUT,
        metavar="PATH",
    )
    quiet: bool = option(
        False, flags=("--quiet", "-q"), help="Print only the verdict and failures.", panel=OUTPUT
    )
    verbose: bool = option(
        False,
        flags=("--verbose", "-v"),
        help="Also print the detail tables the report leaves out (it names them).",
        panel=OUTPUT,
    )

    def check(self) -> None:
        """Every output file can be written, and --html can draw, before anything is launched."""
        for path, flag in (
            (self.json_path, "--json"),
            (self.junit_path, "--junit"),
            (self.html_path, "--html"),
        ):
            check_writable(path, flag)
        if self.html_path:
            if self.html_path == "-":
                raise UsageError(
                    "--html -: the page needs a file path (standard output is the terminal report)"
                )
            from ddpcheck.report.html import require_charts

            require_charts()

    @property
    def to_stdout(self) -> bool:
        """A report on stdout moves the terminal report to stderr."""
        return self.json_path == "-" or self.junit_path == "-"

    def write(self, report: Report, files: Files) -> None:
        """The report's files, each written whole, or a line saying which one was lost and why."""
        for path, what, module in (
            (self.json_path, "JSON report", "ddpcheck.report.formats.json"),
            (self.junit_path, "JUnit report", "ddpcheck.report.formats.junit"),
            (self.html_path, "HTML page", "ddpcheck.report.html"),  # imports matplotlib: only when asked
        ):
            if path:
                writer = importlib.import_module(module).write
                files.write(what, path, functools.partial(writer, report, path))


@dataclass
class Files:
    """What became of the files a report was asked for: one line for each, written or lost.

    A file that cannot be written (a full disk, a directory gone read-only) is one line on
    stderr; the run's verdict, tables and exit code stand (README's exit codes).
    """

    wrote: list[str] = field(default_factory=list)
    lost: list[str] = field(default_factory=list)

    def write(self, what: str, path: str, writer: Callable[[], None], detail: str = "") -> None:
        try:
            writer()
        except OSError as exc:
            where = "standard output" if path == "-" else path
            self.lost.append(f"ddpcheck: could not write the {what} to {where}: {exc.strerror or exc}")
            return
        if path != "-":  # nothing for '-': stdout holds the file, and only it
            self.wrote.append(f"wrote the {what} to {path}{detail}")


def check_writable(path: str | None, flag: str) -> None:
    """Refuse an output path that cannot be written before anything is launched.

    The directory is really tried (a file created there and removed): os.access says yes to
    root everywhere, /sys and read-only mounts included.
    """
    if not path or path == "-":
        return
    if os.path.isdir(path):
        raise UsageError(f"{flag} {path}: is a directory")
    parent = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(parent):
        raise UsageError(f"{flag} {path}: directory {parent} does not exist")
    probe = os.path.join(parent, f".{os.path.basename(path)}.probe{os.getpid()}")
    try:
        os.close(os.open(probe, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600))
    except OSError as exc:
        raise UsageError(f"{flag} {path}: cannot create a file in {parent} ({exc.strerror or exc})") from None
    with contextlib.suppress(OSError):
        os.unlink(probe)
    if os.path.exists(path) and not os.access(path, os.W_OK):
        raise UsageError(f"{flag} {path}: not writable")
