"""Pure: what the watcher saw of every rank -> the verdict, as a Report. No process is touched here.

- Hang: failure/hangs.py's judge (shared with `attach`), which watcher.py asks for watch's report.
- Crash: the first rank to fail by time (failure/crashes.py, shared with `postmortem`) is named,
  with its exception, traceback or signal; the ranks that failed only because a peer was gone (a
  closed connection), or that the launcher ended (SIGTERM), are not blamed. A collective whose
  sizes disagree is a mismatch.
"""

from __future__ import annotations

from ddpcheck.failure.crashes import judge_ends, torn_down
from ddpcheck.failure.error_texts import COLLECTIVE_MISMATCH, could_not_start
from ddpcheck.failure.exits import Exit, ExitKind, first_sentence
from ddpcheck.failure.hangs import RankView, frame_where, identity, place_of, rank_place, ranks_report
from ddpcheck.report.model import Check, Report, Status, Table
from ddpcheck.report.naming import counted, span

COMMAND = "watch"


def first_failed(views: list[RankView]) -> tuple[RankView | None, list[RankView]]:
    """The rank that failed first of its own accord, and the ranks that only followed it."""
    crash = judge_ends((v for v in views if v.exit is not None), lambda v: v.exit, lambda v: v.exit.time)  # type: ignore[union-attr]
    return crash.first, crash.followers


def judge_crash(views: list[RankView], output: str, job_code: int | None) -> Report:
    """The job ended, some rank badly: name the first rank to fail, and a mismatch as a mismatch."""
    first, followers = first_failed(views)
    if first is None:
        check = Check(
            "crash",
            Status.ERROR,
            f"the job exited with code {job_code} and no rank was seen to fail "
            "(it failed before any rank started, or its launcher did)",
        )
        return ranks_report(COMMAND, views, [check], [])
    failure = first.exit
    assert failure is not None
    where = frame_where(failure.stack) or place_of(first.stack)
    mismatch = COLLECTIVE_MISMATCH.search(failure.exception + "\n" + failure.fatal) or (
        failure.kind is ExitKind.FATAL and COLLECTIVE_MISMATCH.search(output)
    )
    name = "collective mismatch" if mismatch else "crash"
    if mismatch:
        places = sorted({place for place in map(rank_place, views) if place})
        detail = (
            f"a collective mismatch: the ranks called a collective with different sizes; "
            f"{identity(first)} aborted receiving it ({first_sentence(failure.describe())}, in {where}); "
            f"where every rank was: {'; '.join(places)}"
        )
    elif failure.kind is ExitKind.ENDED and not failure.stack and (said := could_not_start(output)):
        detail = f"the job's program could not start: {said}; {identity(first)} {failure.describe()}"
    else:
        # A long message (torch's out-of-memory one) said by its first sentence: the whole is in the JSON.
        detail = f"{identity(first)} failed first: {first_sentence(failure.describe())}, in {where}"
        if followers:
            detail += f"; {span([v.rank for v in followers])} ended after it"
            torn = [v for v in followers if v.exit is not None and torn_down(v.exit)]
            if torn:
                detail += f" ({span([v.rank for v in torn])} ended by the launcher's SIGTERM)"
    check = Check(name, Status.ERROR, detail, ranks=[first.rank], hosts=[first.host])
    report = ranks_report(COMMAND, views, [check], [first])
    if failure.traceback or failure.stack:
        report.tables.append(_traceback_table(first, failure))
    return report


def judge_success(views: list[RankView], elapsed_s: float) -> Report:
    ranks = len(views) or 1  # a job that ended before any rank was seen ran one process at least
    check = Check(
        "job",
        Status.PASS,
        f"the job ran to completion: {counted(ranks, 'rank')}, exit 0, {elapsed_s:.1f} s",
    )
    return ranks_report(COMMAND, views, [check], [])


def _traceback_table(view: RankView, failure: Exit) -> Table:
    return Table(
        "traceback",
        f"Where rank {view.rank} failed (innermost first)",
        {"function": "function", "file": "file", "line": "line"},
        [f.to_dict() for f in failure.stack],
    )
