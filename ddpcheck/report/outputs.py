"""Where a report goes besides the terminal: the output options every command takes, and the files."""

from __future__ import annotations

import importlib
import os
from dataclasses import dataclass
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

    def write(self, report: Report) -> list[str]:
        """The report's files, each written whole; one line for each file, saying where."""
        wrote = []
        for path, what, module in (
            (self.json_path, "JSON report", "ddpcheck.report.formats.json"),
            (self.junit_path, "JUnit report", "ddpcheck.report.formats.junit"),
            (self.html_path, "HTML page", "ddpcheck.report.html"),  # imports matplotlib: only when asked
        ):
            if path:
                importlib.import_module(module).write(report, path)
                wrote.append(_wrote(what, path))
        return [line for line in wrote if line]


def _wrote(what: str, path: str) -> str:
    """'wrote the JSON report to r.json'; nothing for '-' (stdout holds it, and only it)."""
    return "" if path == "-" else f"wrote the {what} to {path}"


def check_writable(path: str | None, flag: str) -> None:
    """Refuse an output path that cannot be written before anything is launched."""
    if not path or path == "-":
        return
    if os.path.isdir(path):
        raise UsageError(f"{flag} {path}: is a directory")
    parent = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(parent):
        raise UsageError(f"{flag} {path}: directory {parent} does not exist")
    if not os.access(parent, os.W_OK) or (os.path.exists(path) and not os.access(path, os.W_OK)):
        raise UsageError(f"{flag} {path}: not writable")
