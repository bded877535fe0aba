"""Pure: what was seen of every rank of a live job -> a hang's verdict, as a Report. No process is touched.

The ranks whose state or stack differs from the majority are named (a stopped rank, a rank outside
any collective while its peers wait in one, or the few ranks in another collective than the rest);
the ranks waiting in a collective are listed as waiting. Shared by `watch` (a job it runs) and
`attach` (a job it finds); `watch`'s crash judge (checks/watch/judge.py) builds on the same views.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from dataclasses import dataclass, field

from ddpcheck.failure.error_texts import peer_gone_words
from ddpcheck.failure.exits import Exit, first_sentence
from ddpcheck.failure.stacks import Frame, Stack, collective_frame, user_frame
from ddpcheck.report.model import Check, Report, Status, Table
from ddpcheck.report.naming import span

RANKS_COLUMNS = {
    "rank": "rank",
    "host": "host",
    "pid": "pid",
    "state": "state",
    "in": "waiting in",
    "where": "where",
}


@dataclass
class RankView:
    rank: int
    host: str
    pid: int
    state: str = "S"  # /proc's letter (T: stopped), or 'gone'
    stack: Stack | None = None  # the latest sample, innermost first
    exit: Exit | None = None
    samples: list[Stack] = field(default_factory=list)  # earlier samples, oldest first


def frame_where(stack: Stack | None) -> str:
    """'train_step (train.py:59)': the job's own innermost frame, or '' when the stack holds none."""
    frame = user_frame(stack or ())
    return frame.where if frame else ""


def place_of(stack: Stack | None) -> str:
    return frame_where(stack) or "(no Python stack)"


def _waiting_in(stack: Stack | None) -> str:
    frame = collective_frame(stack or ())
    return frame.function if frame else ""


def call_at(stack: Stack | None) -> str:
    """'all_reduce at train_step (train.py:59)', or 'load_batch (train.py:42)' outside any collective."""
    call = _waiting_in(stack)
    return f"{call} at {place_of(stack)}" if call else place_of(stack)


def identity(view: RankView) -> str:
    return f"rank {view.rank} (host {view.host}, pid {view.pid})"


def _signature(stack: Stack | None) -> tuple[str, Frame | None]:
    """Where a rank is, coarsely enough that ranks in the same place compare equal."""
    return _waiting_in(stack), user_frame(stack or ())


def judge_hang(
    views: list[RankView], silent_s: float, hang_after: float, *, command: str, reason: str | None = None
) -> Report:
    """Every rank made no progress for `silent_s` >= hang_after: name the ones that differ, in `command`'s
    Report.

    `reason`: what the finding ends with, in parentheses (watch's --hang-after by default)."""
    stopped = [v for v in views if v.state in ("T", "t")]
    sampled = [v for v in views if v.stack is not None]
    outside = [v for v in sampled if not _waiting_in(v.stack)]
    if stopped:
        blamed = stopped
    elif outside and len(outside) < len(sampled):  # the others wait in a collective
        blamed = outside
    elif len(views) == 1:
        blamed = sampled  # one rank: no peers to judge against
    else:
        # Away from the one place most ranks are in (nobody, where no one place leads).
        ranked = Counter(_signature(v.stack) for v in sampled).most_common(2)
        led = len(ranked) == 2 and ranked[0][1] > ranked[1][1]
        blamed = [v for v in sampled if _signature(v.stack) != ranked[0][0]] if led else []
    waiters = [v for v in views if v not in blamed and _waiting_in(v.stack)]
    if blamed:
        is_stopped = "is stopped (state T: SIGSTOP, or a debugger)"
        parts = [f"{identity(v)} {is_stopped if stopped else 'is in ' + call_at(v.stack)}" for v in blamed]
        detail = f"no rank made progress for {silent_s:.0f} s: " + "; ".join(parts)
    else:
        places = sorted({place_of(v.stack) for v in views})
        detail = (
            f"no rank made progress for {silent_s:.0f} s, and no rank differs from the others: "
            f"every rank is in {', '.join(places)} (a rank outside the job, or a deadlock every rank shares)"
        )
    if waiters:
        detail += f"; {span([v.rank for v in waiters])} {'was' if len(waiters) == 1 else 'were'} waiting"
        calls = sorted({call_at(v.stack) for v in waiters})
        detail += f" in {', '.join(calls)}"
    # Every rank in a collective, the named ones in another than the rest: they disagree on the call.
    mismatch = bool(blamed) and not stopped and not outside
    if mismatch:
        detail = "a collective mismatch (the ranks wait in different collectives): " + detail
    check = Check(
        "collective mismatch" if mismatch else "hang",
        Status.ERROR,
        detail + f" ({reason or f'--hang-after {hang_after:g} s'})",
        ranks=[v.rank for v in blamed],
        hosts=list(dict.fromkeys(v.host for v in blamed)),
    )
    return ranks_report(command, views, [check], blamed)


def _end_stack(view: RankView) -> Stack | None:
    """Where the rank ended (its exit's stack), else where it was last sampled."""
    return view.exit.stack if view.exit is not None and view.exit.stack else view.stack


def rank_place(view: RankView) -> str:
    """'rank 1: all_reduce at train_step (train.py:59)': where a rank was last seen."""
    stack = _end_stack(view) or (view.samples[-1] if view.samples else None)
    return f"rank {view.rank}: {call_at(stack)}" if stack else ""


def ranks_report(command: str, views: list[RankView], checks: list[Check], blamed: list[RankView]) -> Report:
    """`command`'s Report of the `checks`, with the table of every rank (the `blamed` ones marked)."""
    named = {v.rank for v in blamed}
    rows = []
    for v in sorted(views, key=lambda v: v.rank):
        stack = _end_stack(v)
        rows.append({
            "rank": v.rank,
            "host": v.host,
            "pid": v.pid,
            "state": _state_words(v),
            "in": _waiting_in(stack) or "",
            "where": place_of(stack) if stack else "",
            "frames": [f.to_dict() for f in (stack or ())[:8]],
            "named": v.rank in named,
            **_whole_exit(v.exit),
        })  # fmt: skip
    table = Table("ranks", "Every rank of the job", dict(RANKS_COLUMNS), rows)
    return Report(
        command=command,
        checks=checks,
        tables=[table] if views else [],
        world={"size": len(views), "nodes": len({v.host for v in views})},
        ranks=[{"rank": v.rank, "local_rank": None, "host": v.host, "pid": v.pid} for v in views],
    )


def _whole_exit(exit: Exit | None) -> dict[str, str]:
    """A rank's end whole, for the JSON (not shown), where its words were cut to the first sentence."""
    if exit is None or first_sentence(exit.describe()) == exit.describe().strip():
        return {}
    return {"exception": exit.describe(), "traceback": exit.traceback}


def _state_words(view: RankView) -> str:
    if view.exit is not None:
        words = first_sentence(view.exit.describe())
        if view.exit.kind == "exception" and view.exit.secondary:
            words = peer_gone_words(words) or words
        return words if len(words) <= 60 else words[:57] + "..."
    return {"T": "stopped", "t": "stopped", "R": "running", "S": "sleeping", "D": "in the kernel"}.get(
        view.state, view.state
    )


# ---------------------------------------------------------------- what one watcher tells the others
def view_to_dict(view: RankView) -> dict:
    def stack(frames: Stack | None) -> list[dict] | None:
        return None if frames is None else [f.to_dict() for f in frames]

    exit = None if view.exit is None else {**dataclasses.asdict(view.exit), "stack": stack(view.exit.stack)}
    return {"rank": view.rank, "host": view.host, "pid": view.pid, "state": view.state,
            "stack": stack(view.stack), "samples": [stack(s) for s in view.samples],
            "exit": exit}  # fmt: skip


def view_from_dict(data: dict) -> RankView:
    def stack(frames: list[dict] | None) -> Stack | None:
        return None if frames is None else tuple(Frame.from_dict(f) for f in frames)

    exit = Exit(**{**data["exit"], "stack": stack(data["exit"]["stack"]) or ()}) if data.get("exit") else None
    samples = [s for s in (stack(x) for x in data["samples"]) if s]
    return RankView(
        data["rank"], data["host"], data["pid"], data["state"], stack(data["stack"]), exit, samples
    )
