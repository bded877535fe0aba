"""`ddpcheck show`: a report saved with --json (copied off a cluster, say) read back for rendering.

Nothing is launched and nothing is measured: the checks, tables and verdict are the saved ones,
so the terminal shows what the run showed and the exit code is the run's verdict.
"""

from __future__ import annotations

from ddpcheck.errors import UsageError
from ddpcheck.report.model import NotAReport, Report, read_report


def load(path: str) -> Report:
    """The saved report at `path`; a file that is not one is a usage error (one line, exit 2)."""
    try:
        return read_report(path)
    except NotAReport as exc:
        raise UsageError(f"{path}: {exc}") from None
