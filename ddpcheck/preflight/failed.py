"""The exception preflight() raises on every rank when the job should not start, and its one line."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ddpcheck.report.naming import listed

if TYPE_CHECKING:
    from ddpcheck.report.model import Report

DETAIL_CHARS = 300  # one finding's words, cut: the whole detail is in the report (err.report)


class PreflightFailed(RuntimeError):
    """preflight() found the job unfit to start (a check FAILED) or could not complete (ERROR).

    `report` is the whole Report (the same on every rank), `ranks` and `hosts` those at fault,
    `exit_code` the verdict's (1: a check failed, 3: could not complete: a rank never arrived).
    """

    def __init__(self, report: Report) -> None:
        self.report = report
        failing = report.failing()
        self.ranks = sorted({r for c in failing for r in c.ranks})
        self.hosts = sorted({h for c in failing for h in c.hosts})
        self.exit_code = report.verdict.exit_code
        super().__init__(one_line(report))


def one_line(report: Report) -> str:
    """'ddpcheck preflight failed: CHECK: ranks R on hosts H: what was wrong; ...' on one line."""
    parts = []
    for check in report.failing():
        who = ""
        if check.ranks:
            who = listed(check.ranks, 8)
            if check.hosts:
                who += f" on host{'s' if len(check.hosts) > 1 else ''} {', '.join(check.hosts[:4])}"
            who += ": "
        detail = " ".join(check.detail.split())
        if len(detail) > DETAIL_CHARS:
            detail = detail[: DETAIL_CHARS - 3] + "..."
        parts.append(f"{check.name}: {who}{detail}")
    word = "could not complete" if report.verdict.value == "error" else "failed"
    return f"ddpcheck preflight {word}: " + "; ".join(parts)
