"""The monitor of ddpcheck's own ranks: progress, stalls, crashes, and the kill that ends them.

A thread reads every rank's status file. It drives the progress display, declares a
stall when no rank moved for the timeout (longer while ranks still start), gives up
CRASH_GRACE_S after a rank reported an error, and kills every worker it leaves behind.
In a multi-node run it shares this node's statuses through the rendezvous store.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import psutil

from ddpcheck.failure import stages
from ddpcheck.failure.explain import judge_stall
from ddpcheck.failure.flight import RankTrace, find_dumps
from ddpcheck.failure.liveness import FROZEN_AFTER_S, BeatTracker, Stall, counters
from ddpcheck.failure.proc import ProcState, state_of
from ddpcheck.failure.processes import end
from ddpcheck.failure.stacks import py_spy_dumps
from ddpcheck.failure.statuses import ExitInfo, RankStatus, SeenStatus, seen
from ddpcheck.rank import interrupt, rundir
from ddpcheck.rank.budget import EXIT_S
from ddpcheck.rank.status_channel import read_statuses

if TYPE_CHECKING:
    from ddpcheck.launcher.plan import LaunchPlan
    from ddpcheck.launcher.presence import Presence

ProgressCallback = Callable[[SeenStatus], None]
POLL_S = 0.1
PUBLISH_EVERY_S = 0.5
STARTUP_ALLOWANCE_S = 120.0
# After a rank reported an error, how long the agent has to notice before the monitor ends the others.
CRASH_GRACE_S = 2.0
# After a stall was declared, how long the ranks of this node have to dump their flight recorders.
FLIGHT_WAIT_S = 2.0
# After a stall was declared and the workers killed, how long the agent may take to return.
ABANDON_AFTER_S = 5.0
# When --budget ran out: the workers are killed; the agent's own return is not worth the budget.
BUDGET_ABANDON_AFTER_S = 0.5


class Monitor(threading.Thread):
    """Reads every rank's status file; reports progress; ends a stalled or crashed run.

    In a multi-node run it also publishes this node's statuses to the rendezvous store
    and, when it gives up, reads every other node's: a rank that hangs on another node
    is named as such, not the local ranks that wait for it.
    """

    def __init__(
        self,
        run_dir: Path,
        plan: LaunchPlan,
        on_progress: ProgressCallback | None,
        presence: Callable[[], Presence | None] = lambda: None,
    ) -> None:
        super().__init__(name="ddpcheck-monitor", daemon=True)
        self.run_dir = run_dir
        self.plan = plan
        self.on_progress = on_progress
        self.presence = presence
        self.stall: Stall | None = None
        self.killed: set[int] = set()  # pids this monitor killed: collateral, not culprits
        self.gave_up_at: float | None = None
        self.snapshot: dict[int, SeenStatus] | None = None  # statuses just before a crash kill
        self.stacks: dict[int, str] = {}  # rank -> its Python stack (py-spy), taken before a stall's kill
        # rank -> its flight-recorder dump, taken before a stall's kill
        self.flight: dict[int, RankTrace] = {}
        self.out_of_budget = False  # --budget ran out before rank 0 reported: this monitor ended the run
        self._stop_event = threading.Event()
        self.source = StatusFiles(run_dir)

    def run(self) -> None:
        interrupt.block_in_this_thread()  # signals are the main thread's to handle
        started = last_change = last_publish = time.monotonic()
        last_seen: tuple[tuple[int, int, int, int], ...] = ()  # (rank, seq, progress_seq, ticks)
        crash_seen_at: float | None = None
        while not self._stop_event.wait(POLL_S):
            statuses = self.source.read()
            seen = tuple(sorted((r, s.seq, s.progress_seq, s.ticks) for r, s in statuses.items()))
            now = time.monotonic()
            if seen != last_seen:
                last_seen, last_change = seen, now
            if self.on_progress and 0 in statuses:
                # Rank 0's status, and how many of this node's ranks have started (a status file each).
                self.on_progress({**statuses[0].as_seen(), "ranks_started": len(statuses)})
            if now - last_publish > PUBLISH_EVERY_S:
                last_publish = now
                self._publish()
            if any(s.error for s in statuses.values()):
                # A rank crashed: give the agent a moment to notice, then end the others,
                # keeping how every rank looked (alive? frozen?) before they were killed.
                if crash_seen_at is None:
                    crash_seen_at = now
                    self._publish()  # other nodes learn of it now, not at the next beat
                if now - crash_seen_at > CRASH_GRACE_S:
                    self.snapshot = self.world_statuses(self.source.seen())
                    self._give_up()
                    return
            if self._budget_spent():
                # --budget's end comes whatever the ranks do, even while they still start: no time
                # is left for their stacks, and being slow is not a hang (launch.py says it ran out).
                self.out_of_budget = True
                self._give_up()
                return
            # A crash within its grace is a crash, not a stall, even if the bound runs out meanwhile.
            if crash_seen_at is None and now - last_change > self._bound(statuses):
                local = self.source.seen()
                self.stall = Stall(
                    statuses=self.world_statuses(local),
                    waited_s=now - last_change,
                    world_size=self.plan.world_size,
                    elapsed_s=now - started,
                )
                self.flight = flight_dumps(self.run_dir, local)  # this node's ranks
                self.stacks = stall_stacks(self.stall)
                self._give_up()
                return

    def _bound(self, statuses: dict[int, RankStatus]) -> float:
        """--timeout, or more while ranks are still starting (importing torch, initialising CUDA).

        A frozen rank gets no allowance: its heartbeat stopped, it is not slow, it is stuck.
        """
        now = time.time()
        frozen = any(now - s.heartbeat > FROZEN_AFTER_S for s in statuses.values())
        starting = len(statuses) < self.plan.nproc or any(
            s.stage in stages.STARTUP for s in statuses.values()
        )
        return max(self.plan.timeout, STARTUP_ALLOWANCE_S) if starting and not frozen else self.plan.timeout

    def _budget_spent(self) -> bool:
        """Whether --budget's end is near enough that the launcher must end the run to end in time."""
        budget = self.plan.budget
        # Once rank 0 wrote its report the run is done but for its teardown: that verdict stands.
        return (
            budget is not None
            and time.time() >= budget.end - EXIT_S
            and rundir.read_rank0_report(self.run_dir) is None
        )

    def _give_up(self) -> None:
        self.gave_up_at = time.time()
        self.killed |= kill_workers()

    def _publish(self) -> None:
        self._send(self.source.seen)

    def publish_final(self, statuses: dict[int, SeenStatus], exits: dict[int, ExitInfo]) -> None:
        """How this node's ranks ended (exit codes, signals), for node 0's report."""
        self._send(lambda: {r: {**s, "exit": exits.get(r)} for r, s in statuses.items()})

    def _send(self, statuses: Callable[[], dict[int, SeenStatus]]) -> None:
        """Publish `statuses()`, made only in a multi-node run: annotating looks at every process."""
        presence = self.presence()
        if presence is not None:
            # The store may be gone (node 0 ended): then there is no one left to tell.
            with contextlib.suppress(Exception):
                presence.publish(statuses())

    def world_statuses(self, local: dict[int, SeenStatus]) -> dict[int, SeenStatus]:
        """This node's statuses, and in a multi-node run the other nodes' last published ones."""
        presence = self.presence()
        if presence is None:
            return local
        try:
            return {**presence.world_statuses(), **local}
        except Exception:
            return local

    @property
    def abandon_after(self) -> float:
        """How long the agent may take to return once the monitor gave up."""
        return BUDGET_ABANDON_AFTER_S if self.out_of_budget else ABANDON_AFTER_S

    def abandoned(self) -> bool:
        """The monitor gave up long enough ago that the agent should have returned."""
        return self.gave_up_at is not None and time.time() - self.gave_up_at > self.abandon_after

    def stop(self) -> None:
        self._stop_event.set()
        if self.is_alive():
            self.join(timeout=5)


class StatusFiles:
    """The status files of this launcher's own ranks (rank/status_channel.FileTransport): a StatusSource."""

    def __init__(self, run_dir: Path) -> None:
        self.run_dir = run_dir
        self.records: dict[int, RankStatus] = {}
        self._beats = BeatTracker()  # what each rank missed of its peers' beats, read after read

    def read(self) -> dict[int, RankStatus]:
        """Every rank's record now, its beats counted against its peers'."""
        self.records = read_statuses(self.run_dir)
        self._beats.see(counters(self.records))
        return self.records

    def seen(self) -> dict[int, SeenStatus]:
        """The records last read, annotated, and with two ranks or more the beats each missed of its
        peers': a rank is frozen when its peers beat on without it (liveness.py), not when a busy
        machine made every heartbeat late (docs/failures.md)."""
        annotated = annotate(self.records)
        if len(self.records) < 2:
            return annotated  # no peer to compare with: the age decides
        missed = self._beats.missed()
        return {rank: {**s, "missed_beats": missed.get(rank, 0)} for rank, s in annotated.items()}


def annotate(statuses: dict[int, RankStatus]) -> dict[int, SeenStatus]:
    """Add what only this host can see: each rank's process state and heartbeat age.

    Done where the ranks run, so that ages never mix two hosts' clocks. A rank's process is this
    launcher's descendant: any other process with its pid is a pid reused, the rank gone.
    """
    descendants = {child.pid for child in psutil.Process().children(recursive=True)}
    now = time.time()
    return {
        rank: seen(
            s.as_seen(),
            state_of(s.pid) if s.pid in descendants else ProcState.GONE,
            now - s.heartbeat,
            now - s.stage_since,
        )
        for rank, s in statuses.items()
    }


def kill_workers() -> set[int]:
    """Kill every descendant process, stopped ones included (SIGTERM cannot reach those)."""
    return {child.pid for child in end(psutil.Process().children(recursive=True), sigterm=False)}


# A stall's py-spy round, shorter than stacks.PY_SPY_TIMEOUT_S: the kill that ends the run waits on it.
STALL_STACKS_TIMEOUT_S = 5.0


def flight_dumps(run_dir: Path, statuses: dict[int, SeenStatus]) -> dict[int, RankTrace]:
    """rank -> the flight-recorder dump of each rank of this node, asked for and waited on FLIGHT_WAIT_S.

    Only ranks that run and have joined the process group can answer (a stopped or frozen one
    cannot); whatever came by then is read, and nothing may keep the monitor from its kill.
    """
    try:
        rundir.request_flight_dumps(run_dir)
        now = time.time()
        local = {
            r
            for r, s in statuses.items()
            if s.get("proc_state") not in ("exited", "stopped", "zombie")
            and now - s.get("heartbeat", now) <= FROZEN_AFTER_S
            # Not yet joined: no process group, no recorder, nothing that answers.
            and s.get("stage") not in (*stages.PRE_JOIN, stages.JOIN_WAIT)
        }
        deadline = time.monotonic() + FLIGHT_WAIT_S
        while time.monotonic() < deadline:
            if all(rundir.flight_dump_path(run_dir, r).exists() for r in local):
                break
            time.sleep(POLL_S / 2)
        return find_dumps(rundir.flight_dir(run_dir)).traces
    except Exception:  # a dump half-read, a run directory gone: the hang is named without it
        return {}


def stall_stacks(stall: Stall, timeout: float = STALL_STACKS_TIMEOUT_S) -> dict[int, str]:
    """rank -> the Python stack of each rank the stall names that runs on this host, by py-spy.

    Taken while the ranks still live (before the monitor kills them), all at once and together
    bounded by `timeout`; nothing when py-spy is not installed or cannot attach (no ptrace), and
    nothing may keep the monitor from its kill.
    """
    try:
        ranks = judge_stall(stall).ranks
    except Exception:  # a status the judge cannot read (another node's, half-written): no stacks
        return {}
    statuses = stall.statuses
    pids = {
        r: statuses[r]["pid"]
        for r in ranks
        if r in statuses and statuses[r].get("pid") and not statuses[r].get("remote")
        if statuses[r].get("proc_state") not in ("exited", "stopped")  # a stopped process cannot be read
    }
    return py_spy_dumps(pids, timeout=timeout)
