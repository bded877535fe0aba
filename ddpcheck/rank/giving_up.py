"""An inline rank gives up: under torchrun, srun or mpirun no launcher watches, so it names who stopped.

One flow, entered three ways (`Reason`): the rank's own collective or store failed (run_rank),
its join outlived its own timeout (`guard_join`'s thread), or its launcher stopped it (`on_sigterm`,
on interrupt.act_from_a_thread's thread, while the main thread may be blocked in a collective). Whichever
comes first speaks for the rank, once (`claim`). It reads what its peers published (observe),
judges who stopped beating (explain.judge_inline), ends a stopped peer its launcher cannot reach
(inline.reap), says one line (this is the user's terminal, not a log file), and on rank 0 writes
the report: to the run directory, where the main thread returns it, or, from a thread that ends
the process, as the report's files at once.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum
from typing import TYPE_CHECKING, NoReturn

from ddpcheck.errors import EXIT_COULD_NOT_COMPLETE, say
from ddpcheck.failure import error_texts, explain
from ddpcheck.failure.liveness import Stall
from ddpcheck.failure.rank_env import Launcher
from ddpcheck.rank import arrival, here, inline, interrupt, remover, rundir

if TYPE_CHECKING:
    from pathlib import Path

    from ddpcheck.failure.statuses import SeenStatus
    from ddpcheck.rank.rundir import RunSpec
    from ddpcheck.rank.status_channel import StatusWriter
    from ddpcheck.report.model import Check, Report

# Past its own timeout, this much longer before a join that did not return is given up (guard_join).
JOIN_GRACE_S = 5.0
# A pause of its own this long names the rank itself (a beat delayed by a busy machine is shorter).
PAUSED_ITSELF_S = 2.0
# A rank stopped by SIGTERM while it was already giving up: how long its report may still take.
SIGTERM_GRACE_S = 5.0
# How long a rank stopped by SIGTERM looks for the peer that stopped beating before it must speak:
# mpirun's SIGKILL follows its SIGTERM by about a second, srun's only after Slurm's KillWait.
SIGTERM_LOOK_S = 0.6
SRUN_SIGTERM_LOOK_S = 3.0
# How long a rank other than 0, done, waits for rank 0 to leave first (under srun and mpirun).
RANK0_LEAVES_S = 15.0

# Who speaks for this rank when it fails: the first caller of claim(), once; done when `gave_up` is set.
gave_up = threading.Event()
_claimed = threading.Lock()
# This rank's status writer, once it has one: the SIGTERM thread asks it whether the rank itself paused.
status_of_this_rank: StatusWriter | None = None


class Reason(Enum):
    FAILED = "failed"  # its own collective or store raised (run_rank)
    JOIN_TIMED_OUT = "join timed out"  # init_process_group outlived its timeout (guard_join)
    SIGTERM = "SIGTERM"  # its launcher stopped it, once another rank failed (on_sigterm)


@dataclass
class InlineRank:
    """What a rank that gives up knows of its run."""

    spec: RunSpec
    run_dir: str
    world_size: int
    session: inline.Session | None
    status: StatusWriter | None
    write_report: Callable[[Report], list[str]] | None = None  # the report's files, and where they went

    @property
    def rank(self) -> int:
        return int(os.environ["RANK"])


@dataclass
class Account:
    """What the rank says (`line`), the report rank 0 writes, and whether it read its peers."""

    line: str
    report: Report | None = None
    looked: bool = False
    stall: Stall | None = None  # what it judged, when it judged its peers


def claim() -> bool:
    """True for the first caller only: one account of a failure per rank."""
    return _claimed.acquire(blocking=False)


def after_failure(run: InlineRank, message: str) -> None:
    """run_rank's own collective or store raised `message` (already in its status)."""
    if not claim():
        time.sleep(SIGTERM_GRACE_S)  # SIGTERM came first: its thread says the one line and ends the process
        return
    give_up(run, Reason.FAILED, message)


def guard_join(run: InlineRank) -> threading.Event:
    """A join that outlives its own timeout is given up from a thread: gloo's full-mesh connect to a
    peer stopped mid-handshake never returns, and no launcher watches. Set the event once it returned."""
    joined = threading.Event()
    spec, status = run.spec, run.status
    bound_s = spec.collective_timeout + JOIN_GRACE_S

    def guard() -> None:
        if joined.wait(bound_s) or not claim():
            return  # joined; or the main thread (its own timeout), or SIGTERM's thread, is giving up
        message = (
            f"init_process_group timed out: it had not returned {bound_s:g} s after it began "
            f"(its own timeout is {spec.collective_timeout:g} s)"
        )
        if status:
            status.error(message)
        give_up(run, Reason.JOIN_TIMED_OUT, message)
        _leave()

    threading.Thread(target=quietly, args=(guard,), name="ddpcheck-join-guard", daemon=True).start()
    return joined


def on_sigterm(
    spec: RunSpec, run_dir: Path, write_report: Callable[[Report], list[str]] | None = None
) -> None:
    """The launcher stops this rank (SIGTERM) because another failed: name the one that stopped beating.

    Rank 0 also writes the report's files (`write_report`): under mpirun its SIGTERM can come
    before its own collective fails, and a SIGKILL a second after it.
    """
    world_size = int(os.environ["WORLD_SIZE"])
    run = InlineRank(spec, str(run_dir), world_size, inline.current, status_of_this_rank, write_report)
    # slurmstepd's SIGKILL follows only after KillWait: rank 0's main thread, which writes the report,
    # gives up within its collective's timeout (at once when the peer's connection dropped).
    srun_rank0 = run.rank == 0 and spec.launcher is Launcher.SRUN and run.session is not None
    if srun_rank0 and gave_up.wait(spec.collective_timeout + SIGTERM_GRACE_S):
        time.sleep(SIGTERM_GRACE_S)  # it is rendering the report, then exits by itself
        _leave()
    claimed = claim()
    arrival.stage(arrival.TERMINATED)  # a SIGKILL may follow: the peers must not take this rank for a culprit
    # Nothing in the run directory may outlive that SIGKILL: rank 0's report, if its main thread is
    # writing it now, is kept in this process too (rundir.write_rank0_report).
    remover.remove_now(run_dir)
    if not claimed:
        # This rank is already giving up: let it finish its report and line, within a bound.
        gave_up.wait(SIGTERM_GRACE_S)
        time.sleep(SIGTERM_GRACE_S)
        _leave()
    give_up(run, Reason.SIGTERM, "SIGTERM")
    _leave()


def give_up(run: InlineRank, reason: Reason, message: str) -> None:
    """The one flow: observe, judge, reap, say, and on rank 0 write the report."""
    try:
        if reason is not Reason.SIGTERM and run.rank != 0:
            # Nothing more to write here; a launcher's SIGKILL may come while this rank looks.
            remover.remove_now(run.run_dir)
        account = _account(run, reason, message)
        wrote = _files(run, account) if reason is Reason.SIGTERM else []  # what a SIGKILL would cost: first
        say(account.line)
        for said in wrote:
            say(f"ddpcheck: {said}")
        _after_the_line(run, reason, account)
    finally:
        gave_up.set()


def _account(run: InlineRank, reason: Reason, message: str) -> Account:
    """What this rank says, and rank 0's report; looking at its peers where that can name the culprit."""
    rank, spec, sigterm = run.rank, run.spec, reason is Reason.SIGTERM
    headline = message.splitlines()[-1]
    opening = (
        f"ddpcheck: rank {rank} stopped by SIGTERM (its launcher ends every rank once one failed)"
        if sigterm
        else f"ddpcheck: rank {rank} failed ({headline})"
    )
    own = {**run.status.record.to_dict(), "error": message} if run.status else {}
    paused = _paused_itself(spec, run.status, rank, "" if sigterm else message)
    if paused is not None:
        # Its peers' timeouts are its own doing: it names itself, and blames nobody else.
        crash = explain.inline_crash_report(spec, run.world_size, own, message, paused)
        return Account(f"{opening}: {paused.detail}", crash if rank == 0 else None)
    if not sigterm and (run.session is None or not error_texts.is_collateral_error(message)):
        # No store to read, or this rank failed first-hand: then it is the culprit itself.
        crash = explain.inline_crash_report(spec, run.world_size, own, message)
        return Account(
            f"ddpcheck: rank {rank} failed: {headline}", crash if rank == 0 and run.session else None
        )
    if sigterm:
        return _looked_in_time(run, opening)
    wait_s = inline.SAMPLE_S if rank != 0 or error_texts.connection_dropped(message) else 0.0
    statuses, ended = _observe(run, wait_s)
    if not statuses:
        where = f"{os.environ.get('MASTER_ADDR')}:{os.environ.get('MASTER_PORT')}"
        return Account(
            f"ddpcheck: rank {rank} failed: {headline} (the store at {where}, which holds every "
            "rank's heartbeat, did not answer: its host, rank 0 or the launcher, is gone or frozen)"
        )
    stall = Stall(statuses, waited_s=spec.collective_timeout, world_size=run.world_size)
    if rank != 0:
        return Account(f"{opening}: {explain.judge_inline(stall, message, rank).detail}", looked=True)
    report = explain.inline_report(spec, stall, message)
    if ended:
        report.notes.append(
            f"ddpcheck ended stopped rank(s) {', '.join(map(str, ended))} on this host (SIGKILL): "
            "torchrun's SIGTERM cannot reach a stopped process, and it would wait its shutdown timeout"
        )
    return Account(f"ddpcheck: rank 0 failed: {headline}", report, looked=True)


def _looked_in_time(run: InlineRank, opening: str) -> Account:
    """Stopped by SIGTERM: look for the culprit, bounded (mpirun's SIGKILL follows by a second)."""
    look_s = SRUN_SIGTERM_LOOK_S if run.spec.launcher is Launcher.SRUN else SIGTERM_LOOK_S
    found: list[Account] = []

    def look() -> None:
        if run.session is None:
            statuses = here.HostDir().seen()  # before the store: what this host's job directory says
        else:
            statuses, _ = _observe(run, look_s, connect_s=look_s)
            if not statuses:
                found.append(
                    Account(f"{opening}; the store the ranks shared is gone: the others had ended already")
                )
                return
        if statuses:
            stall = Stall(statuses, None, run.world_size)
            found.append(
                Account(f"{opening}: {explain.judge_inline(stall, 'SIGTERM', run.rank).detail}", stall=stall)
            )

    looking = threading.Thread(target=quietly, args=(look,), daemon=True)
    looking.start()
    looking.join(look_s)
    account = found[0] if found else Account(f"{opening}; the others' heartbeats could not be read in time")
    account.looked = True
    if run.rank == 0 and account.stall is not None:
        account.report = explain.inline_report(run.spec, account.stall, "SIGTERM")
    return account


def _observe(run: InlineRank, wait_s: float, **connect: float) -> tuple[dict[int, SeenStatus], list[int]]:
    """Every rank's annotated status (inline.Session.observe), stopped peers here ended where their
    launcher cannot reach them (torchrun's SIGTERM, on rank 0's host); and the ranks so ended."""
    assert run.session is not None
    statuses = run.session.observe(wait_s, **connect)
    end_stopped = run.spec.launcher is Launcher.TORCHRUN and run.rank == 0
    return statuses, inline.reap(statuses, end_stopped=end_stopped, store=run.session.store)


def _after_the_line(run: InlineRank, reason: Reason, account: Account) -> None:
    """Rank 0's report where it goes; and under srun and mpirun, rank 0 leaves last."""
    rank, session, sigterm = run.rank, run.session, reason is Reason.SIGTERM
    rank0_last = run.spec.launcher is not None and run.spec.launcher.rank0_hosts_store
    if account.looked and session is not None and rank != 0:
        session.said()
        if rank0_last and not sigterm:
            # The first task to exit starts the launcher's teardown: rank 0, which reports, leaves first.
            session.wait_for_rank0(RANK0_LEAVES_S)
    if sigterm:
        return
    if account.report is not None:
        rundir.write_rank0_report(run.run_dir, account.report)
    if account.looked and session is not None and rank == 0 and rank0_last:
        # Rank 0's process hosts the store there: the others read it to name the culprit.
        assert account.report is not None
        session.wait_for_waiters(account.report.checks[0].ranks, inline.SAMPLE_S + 1.0)
    if reason is Reason.JOIN_TIMED_OUT:
        for said in _files(run, account):
            say(f"ddpcheck: {said}")


def _files(run: InlineRank, account: Account) -> list[str]:
    """Rank 0's report written as its files, from a thread that ends the process: where they went."""
    if run.rank != 0 or account.report is None or run.write_report is None:
        return []
    with contextlib.suppress(Exception):
        return run.write_report(account.report)
    return []


def _paused_itself(spec: RunSpec, status: StatusWriter | None, rank: int, message: str) -> Check | None:
    """This rank's own beats show it did not run for a long while (SIGSTOP, then SIGCONT from its
    launcher's teardown): then the timeout it met is its own doing. A pause under PAUSED_ITSELF_S, or
    under a quarter of the collective timeout, cannot have made a peer give up."""
    if status is None:
        return None
    pause_s, stage = status.pause()
    if pause_s < max(PAUSED_ITSELF_S, spec.collective_timeout / 4):
        return None
    return explain.paused_itself(rank, status.record.to_dict(), pause_s, stage, message)


def _leave() -> NoReturn:
    """Exit 3, the run directory (registered by run_inline) removed once more: the main thread went
    on while this thread looked, and what it wrote there since would outlive the rank."""
    interrupt.leave(EXIT_COULD_NOT_COMPLETE, say=False)


def quietly(action: Callable[[], object]) -> None:
    """Run `action` on a thread that must never end with a traceback (a store gone, a half-read file)."""
    with contextlib.suppress(Exception):
        action()
