"""Pure: what the watcher saw of every rank -> the verdict, as a Report. No process is touched here.

- Hang: the ranks whose state or stack differs from the majority are named (a stopped rank,
  a rank outside any collective while its peers wait in one, or the few ranks in another
  collective than the rest); the ranks waiting in a collective are listed as waiting.
- Crash: the first rank to fail by time is named, with its exception, traceback or signal;
  the ranks that failed only because a peer was gone (a closed connection), or that the
  launcher ended (SIGTERM), are not blamed. A collective whose sizes disagree is a mismatch.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field

from ddpcheck.checks.postmortem.judge import judge as judge_dumps
from ddpcheck.failure.collectives import with_last_collectives
from ddpcheck.failure.exits import Exit, first_sentence
from ddpcheck.failure.flight import RankTrace
from ddpcheck.failure.peers import first_failure, peer_gone_words
from ddpcheck.failure.stacks import Frame, Stack, collective_frame, user_frame
from ddpcheck.report.model import Check, Report, Status, Table
from ddpcheck.report.naming import span

MISMATCH = re.compile(r"doesn't match expected size|size mismatch|Mismatch between collectives", re.I)


@dataclass
class RankView:
    rank: int
    host: str
    pid: int
    state: str = "S"  # /proc's letter (T: stopped), or 'gone'
    stack: Stack | None = None  # the latest sample, innermost first
    unchanged_s: float | None = None  # how long the stack has stayed the same
    exit: Exit | None = None
    samples: list[Stack] = field(default_factory=list)  # earlier samples, oldest first


def _where(stack: Stack | None) -> str:
    frame = user_frame(stack or ())
    return frame.where if frame else "(no Python stack)"


def _waiting_in(stack: Stack | None) -> str:
    frame = collective_frame(stack or ())
    return frame.function if frame else ""


def _call_at(stack: Stack | None) -> str:
    """'all_reduce at train_step (train.py:59)', or 'load_batch (train.py:42)' outside any collective."""
    call = _waiting_in(stack)
    return f"{call} at {_where(stack)}" if call else _where(stack)


def _identity(view: RankView) -> str:
    return f"rank {view.rank} (host {view.host}, pid {view.pid})"


def _signature(stack: Stack | None) -> tuple[str, Frame | None]:
    """Where a rank is, coarsely enough that ranks in the same place compare equal."""
    stack = stack or ()
    return _waiting_in(stack), user_frame(stack)


def judge_hang(views: list[RankView], silent_s: float, hang_after: float) -> Report:
    """Every rank made no progress for `silent_s` >= hang_after: name the ones that differ."""
    stopped = [v for v in views if v.state in ("T", "t")]
    blamed: list[RankView]
    if stopped:
        blamed = stopped
        why = {v.rank: "is stopped (state T: SIGSTOP, or a debugger)" for v in stopped}
    else:
        outside = [v for v in views if v.stack is not None and not _waiting_in(v.stack)]
        waiting = [v for v in views if v.stack is not None and _waiting_in(v.stack)]
        if outside and waiting:
            blamed = outside
        elif len(views) == 1:
            blamed = [v for v in views if v.stack is not None]  # one rank: no peers to judge against
        else:
            counts = Counter(_signature(v.stack) for v in views if v.stack is not None)
            top = counts.most_common(1)[0][1] if counts else 0
            leaders = [s for s, n in counts.items() if n == top]
            blamed = [] if len(leaders) > 1 or len(counts) < 2 else [
                v for v in views if v.stack is not None and _signature(v.stack) != leaders[0]
            ]  # fmt: skip
        why = {v.rank: f"is in {_call_at(v.stack)}" for v in blamed}
    others = [v for v in views if v not in blamed]
    waiters = [v for v in others if _waiting_in(v.stack)]
    if blamed:
        parts = [f"{_identity(v)} {why[v.rank]}" for v in blamed]
        detail = f"no rank made progress for {silent_s:.0f} s: " + "; ".join(parts)
    else:
        places = sorted({_where(v.stack) for v in views})
        detail = (
            f"no rank made progress for {silent_s:.0f} s, and no rank differs from the others: "
            f"every rank is in {', '.join(places)} (a rank outside the job, or a deadlock every rank shares)"
        )
    if waiters:
        detail += f"; {span([v.rank for v in waiters])} {'was' if len(waiters) == 1 else 'were'} waiting"
        calls = sorted({f"{_waiting_in(v.stack)} at {_where(v.stack)}" for v in waiters})
        detail += f" in {', '.join(calls)}"
    # Every rank in a collective, the named ones in another than the rest: they disagree on the call.
    mismatch = (
        bool(blamed) and not stopped and all(_waiting_in(v.stack) for v in views if v.stack is not None)
    )
    if mismatch:
        detail = "a collective mismatch (the ranks wait in different collectives): " + detail
    check = Check(
        "collective mismatch" if mismatch else "hang",
        Status.ERROR,
        detail + f" (--hang-after {hang_after:g} s)",
        ranks=[v.rank for v in blamed],
        hosts=list(dict.fromkeys(v.host for v in blamed)),
    )
    return _report(views, [check], blamed)


def first_failed(views: list[RankView]) -> tuple[RankView | None, list[RankView]]:
    """The rank that failed first of its own accord, and the ranks that only followed it."""
    ended = [v for v in views if v.exit is not None]
    return first_failure(ended, when=lambda v: v.exit.time, collateral=lambda v: v.exit.secondary)  # type: ignore[union-attr]


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
        return _report(views, [check], [])
    failure = first.exit
    assert failure is not None
    where = frame_where(failure.stack) or _where(first.stack)
    mismatch = MISMATCH.search(failure.exception + "\n" + failure.fatal) or (
        failure.kind == "fatal" and MISMATCH.search(output)
    )
    name = "collective mismatch" if mismatch else "crash"
    if mismatch:
        places = sorted({f"{rank_place(v)}" for v in views if rank_place(v)})
        detail = (
            f"a collective mismatch: the ranks called a collective with different sizes; "
            f"{_identity(first)} aborted receiving it ({first_sentence(failure.describe())}, in {where}); "
            f"where every rank was: {'; '.join(places)}"
        )
    elif failure.kind == "ended" and not failure.stack and (said := _could_not_start(output)):
        detail = f"the job's program could not start: {said}; {_identity(first)} {failure.describe()}"
    else:
        # A long message (torch's out-of-memory one) said by its first sentence: the whole is in the JSON.
        detail = f"{_identity(first)} failed first: {first_sentence(failure.describe())}, in {where}"
        if followers:
            detail += f"; {span([v.rank for v in followers])} ended after it"
            torn = [v for v in followers if v.exit is not None and v.exit.kind == "terminated"]
            if torn:
                detail += f" ({span([v.rank for v in torn])} ended by the launcher's SIGTERM)"
    check = Check(name, Status.ERROR, detail, ranks=[first.rank], hosts=[first.host])
    report = _report(views, [check], [first])
    if failure.traceback or failure.stack:
        report.tables.append(_traceback_table(first, failure))
    return report


# What an interpreter or a shell says when the job's program never ran (its stderr, as the job wrote it).
NOT_STARTED = re.compile(
    r"^.*(?:can't open file|No module named|command not found|\[Errno 2\] No such file).*$", re.M
)


def _could_not_start(output: str) -> str:
    """The job's last line saying its program could not start ('python: can't open file ...'), or ''."""
    found = NOT_STARTED.findall(output)
    return found[-1].strip() if found else ""


def frame_where(stack: Stack) -> str:
    frame = user_frame(stack)
    return frame.where if frame else ""


def rank_place(view: RankView) -> str:
    """'rank 1: all_reduce at train_step (train.py:59)': where a rank was last seen."""
    stack = view.exit.stack if view.exit is not None and view.exit.stack else view.stack
    if not stack and view.samples:
        stack = view.samples[-1]
    if not stack:
        return ""
    call = _waiting_in(stack)
    return f"rank {view.rank}: {call + ' at ' if call else ''}{_where(stack)}"


def judge_success(views: list[RankView], elapsed_s: float) -> Report:
    ranks = len(views) or 1  # a job that ended before any rank was seen ran one process at least
    check = Check(
        "job",
        Status.PASS,
        f"the job ran to completion: {ranks} rank{'s' if ranks != 1 else ''}, exit 0, {elapsed_s:.1f} s",
    )
    return _report(views, [check], [])


def _report(views: list[RankView], checks: list[Check], blamed: list[RankView]) -> Report:
    named = {v.rank for v in blamed}
    rows = []
    for v in sorted(views, key=lambda v: v.rank):
        stack = v.exit.stack if v.exit is not None and v.exit.stack else v.stack
        rows.append({
            "rank": v.rank,
            "host": v.host,
            "pid": v.pid,
            "state": _state_words(v),
            "in": _waiting_in(stack) or "",
            "where": _where(stack) if stack else "",
            "frames": [f.to_dict() for f in (stack or ())[:8]],
            "named": v.rank in named,
            **_whole_exit(v.exit),
        })  # fmt: skip
    table = Table(
        "ranks",
        "Every rank of the job",
        {
            "rank": "rank",
            "host": "host",
            "pid": "pid",
            "state": "state",
            "in": "waiting in",
            "where": "where",
        },
        rows,
    )
    hosts = list(dict.fromkeys(v.host for v in views))
    report = Report(
        command="watch",
        checks=checks,
        tables=[table] if views else [],
        world={"size": len(views), "nodes": len(hosts)},
        ranks=[{"rank": v.rank, "local_rank": None, "host": v.host, "pid": v.pid} for v in views],
    )
    return report


def _whole_exit(exit: Exit | None) -> dict[str, str]:
    """A rank's end whole, for the JSON (not shown), where its words were cut to the first sentence."""
    if exit is None or first_sentence(exit.describe()) == exit.describe().strip():
        return {}
    return {"exception": exit.describe(), "traceback": exit.traceback}


def _state_words(view: RankView) -> str:
    if view.exit is not None:
        words = first_sentence(view.exit.describe()) if view.exit.describe() else ""
        if view.exit.kind == "exception" and view.exit.secondary:
            words = peer_gone_words(words) or words
        return words if len(words) <= 60 else words[:57] + "..."
    return {"T": "stopped", "t": "stopped", "R": "running", "S": "sleeping", "D": "in the kernel"}.get(
        view.state, view.state
    )


def _traceback_table(view: RankView, failure: Exit) -> Table:
    rows = [{"function": f.function, "file": f.file, "line": f.line} for f in failure.stack]
    return Table(
        "traceback",
        f"Where rank {view.rank} failed (innermost first)",
        {"function": "function", "file": "file", "line": "line"},
        rows,
    )


# ---------------------------------------------------------------- what one watcher tells the others
def view_to_dict(view: RankView) -> dict:
    def stack(frames: Stack | None) -> list[dict] | None:
        return None if frames is None else [f.to_dict() for f in frames]

    out = {"rank": view.rank, "host": view.host, "pid": view.pid, "state": view.state,
           "stack": stack(view.stack), "unchanged_s": view.unchanged_s,
           "samples": [stack(s) for s in view.samples], "exit": None}  # fmt: skip
    if view.exit is not None:
        e = view.exit
        out["exit"] = {"time": e.time, "kind": e.kind, "code": e.code, "exception": e.exception,
                       "traceback": e.traceback, "fatal": e.fatal, "stack": stack(e.stack)}  # fmt: skip
    return out


def view_from_dict(data: dict) -> RankView:
    def stack(frames: list[dict] | None) -> Stack | None:
        return None if frames is None else tuple(Frame.from_dict(f) for f in frames)

    exit = None
    if data.get("exit"):
        e = data["exit"]
        exit = Exit(
            e["time"],
            e["kind"],
            e["code"],
            e["exception"],
            e["traceback"],
            e["fatal"],
            stack(e["stack"]) or (),
        )
    samples = [s for s in (stack(x) for x in data["samples"]) if s]
    return RankView(data["rank"], data["host"], data["pid"], data["state"], stack(data["stack"]),
                    data["unchanged_s"], exit, samples)  # fmt: skip


def with_flight_recorders(
    report: Report, traces: dict[int, RankTrace], hosts: dict[int, str], world_size: int
) -> Report:
    """A hang's finding with what the ranks' flight recorders say: each culprit's last collective and,
    where the stacks named nobody (every rank waits in the same call), the ranks whose collective
    sequence is behind the others' (they never called the collective the others wait in)."""
    hang = next((c for c in report.checks if c.status is Status.ERROR), None)
    if hang is None or not traces:
        return report
    if not hang.ranks:
        behind = next(
            (
                c
                for c in judge_dumps(traces, world_size=world_size, hosts=hosts).checks
                if c.status is Status.ERROR and c.ranks and c.name.endswith("every rank arrived")
            ),
            None,
        )
        if behind is not None:
            hang.ranks, hang.hosts = list(behind.ranks), list(behind.hosts)
            hang.detail += f"; the flight recorders: {behind.detail}"
    with_last_collectives(hang, traces)
    return report
