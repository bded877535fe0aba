"""The launcher's stall detector (launcher/monitor.py), over real status files in a tmp run dir.

Pins: the bound is --timeout, or max(--timeout, STARTUP_ALLOWANCE_S) while a rank is missing or
still at a start-up stage, unless some rank's heartbeat is older than FROZEN_AFTER_S; a stall is
declared only once no rank's seq, progress_seq or ticks moved for the bound (a heartbeat alone is
not progress), and any one rank moving restarts the wait; the Stall carries the annotated
statuses (this node's over the other nodes'), the world size and the wait; a rank's error ends
the run 2 s later with a snapshot and no stall, published to the other nodes at once; a presence
that fails is ignored; `abandoned` after ABANDON_AFTER_S; `annotate` adds process state and
ages; `kill_workers` kills every descendant, stopped and grandchildren included.

Ranks are never started: the status files are written here, and `kill_workers` is replaced in
the Monitor tests (it would kill every child of this process); it is tested alone on `sleep`s.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from ddpcheck.failure import stages
from ddpcheck.failure.explain import judge_stall
from ddpcheck.failure.liveness import FROZEN_AFTER_S, STOPPED_AFTER_BEATS, Stall
from ddpcheck.failure.statuses import SeenStatus
from ddpcheck.launcher import monitor
from ddpcheck.launcher.monitor import ABANDON_AFTER_S, STARTUP_ALLOWANCE_S, Monitor, annotate, kill_workers
from ddpcheck.launcher.plan import LaunchPlan
from ddpcheck.rank.status_channel import FileTransport, RankStatus, StatusWriter


def write(run_dir: Path, rank: int, stage: str = "measure: 4K", **fields: Any) -> dict[str, Any]:
    """One rank's status file, as its StatusWriter would have written it."""
    record = RankStatus(rank=rank, local_rank=rank, node=0, host="h", address=None, pid=0, stage=stage)
    record.seq = fields.pop("seq", 3)
    for name, value in fields.items():
        setattr(record, name, value)
    FileTransport(run_dir, rank).publish(record)
    return record.to_dict()


def plan(timeout: float, nproc: int = 2, nnodes: int = 1) -> LaunchPlan:
    return LaunchPlan(nproc=nproc, backend="gloo", device="cpu", nnodes=nnodes, timeout=timeout)


class FakePresence:
    """What the monitor asks of presence.Presence: publish, and the other nodes' statuses."""

    def __init__(self, remote: dict[int, SeenStatus] | None = None, fail: bool = False) -> None:
        self.remote = remote or {}
        self.fail = fail
        self.published: list[dict[int, SeenStatus]] = []

    def publish(self, statuses: dict[int, SeenStatus]) -> None:
        if self.fail:
            raise RuntimeError("store gone")
        self.published.append(statuses)

    def world_statuses(self) -> dict[int, SeenStatus]:
        if self.fail:
            raise RuntimeError("store gone")
        return self.remote


@pytest.fixture
def kills(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """Replace kill_workers: record when the monitor called it."""
    calls: list[float] = []

    def fake() -> set[int]:
        calls.append(time.monotonic())
        return {424242}

    monkeypatch.setattr(monitor, "kill_workers", fake)
    return calls


@pytest.fixture
def watch(tmp_path: Path, kills: list[float]) -> Iterator[Callable[..., Monitor]]:
    """Start a Monitor on tmp_path; every one started is stopped after the test."""
    started: list[Monitor] = []

    def start(the_plan: LaunchPlan, presence: FakePresence | None = None, **kwargs: Any) -> Monitor:
        dog = Monitor(tmp_path, the_plan, kwargs.pop("on_progress", None), presence=lambda: presence)
        dog.start()
        started.append(dog)
        return dog

    yield start
    for dog in started:
        dog.stop()
        assert not dog.is_alive()


def wait_for(dog: Monitor, limit: float = 8.0) -> None:
    """Until the monitor gave up (it ends its thread then), bounded."""
    dog.join(timeout=limit)
    assert not dog.is_alive(), "the monitor never gave up"


# ------------------------------------------------------------------ the bound
def bound(statuses: dict[int, RankStatus], timeout: float = 0.5, nproc: int = 2) -> float:
    return Monitor(Path("/nonexistent"), plan(timeout, nproc), None)._bound(statuses)


def status(stage: str = "measure: 4K", age: float = 0.2) -> RankStatus:
    return RankStatus(0, 0, 0, "h", None, 0, stage=stage, heartbeat=time.time() - age)


def test_the_bound_is_the_timeout_once_every_rank_is_past_start_up() -> None:
    assert bound({0: status(), 1: status(stages.JOIN)}) == 0.5  # joining is not starting
    assert bound({0: status(stages.DONE), 1: status(stages.GATHER)}) == 0.5


@pytest.mark.parametrize("stage", stages.STARTUP)
def test_a_rank_at_a_start_up_stage_gets_the_allowance(stage: str) -> None:
    assert bound({0: status(), 1: status(stage)}) == STARTUP_ALLOWANCE_S
    assert bound({0: status(), 1: status(stage)}, timeout=300.0) == 300.0  # never less than --timeout


def test_a_rank_that_never_wrote_gets_the_allowance() -> None:
    assert bound({0: status()}) == STARTUP_ALLOWANCE_S
    assert bound({}) == STARTUP_ALLOWANCE_S
    assert bound({0: status(), 1: status()}, nproc=3) == STARTUP_ALLOWANCE_S


def test_a_frozen_rank_cancels_the_allowance() -> None:
    just_alive = FROZEN_AFTER_S - 0.5
    just_frozen = FROZEN_AFTER_S + 0.5
    assert bound({0: status(), 1: status(stages.DEVICE, age=just_alive)}) == STARTUP_ALLOWANCE_S
    assert bound({0: status(), 1: status(stages.DEVICE, age=just_frozen)}) == 0.5
    # Frozen anywhere: the waiting of the others is not start-up either.
    assert bound({0: status(age=just_frozen), 1: status(stages.LAUNCHED)}) == 0.5
    assert bound({0: status(age=just_frozen)}) == 0.5  # even with a rank missing


# ------------------------------------------------------------------ stalls
def test_a_stall_is_declared_after_the_timeout_with_what_every_rank_said(
    tmp_path: Path, watch, kills: list[float]
) -> None:
    for rank in (0, 1):
        write(tmp_path, rank, pid=os.getpid())
    began = time.monotonic()
    dog = watch(plan(0.4, nproc=2, nnodes=3))
    wait_for(dog)
    stall = dog.stall
    assert stall is not None
    assert time.monotonic() - began > 0.4
    assert 0.4 < stall.waited_s < 0.4 + 2.0
    assert stall.elapsed_s is not None and stall.elapsed_s >= stall.waited_s
    assert stall.world_size == 6  # nproc x nnodes, not the ranks seen here
    assert sorted(stall.statuses) == [0, 1]
    assert stall.statuses[0]["stage"] == "measure: 4K" and stall.statuses[0]["proc_state"] == "exited"
    assert "heartbeat_age_s" in stall.statuses[1] and "in_stage_s" in stall.statuses[1]
    assert len(kills) == 1 and dog.killed == {424242} and dog.gave_up_at is not None
    assert not dog.abandoned()  # the agent gets ABANDON_AFTER_S to return


def test_ranks_still_starting_are_not_stalled_at_the_timeout(
    tmp_path: Path, watch, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(monitor, "STARTUP_ALLOWANCE_S", 1.0)
    write(tmp_path, 0)
    write(tmp_path, 1, stage=stages.DEVICE)  # initialising CUDA
    dog = watch(plan(0.2))
    time.sleep(0.6)
    assert dog.is_alive() and dog.stall is None  # three timeouts passed: still within the allowance
    wait_for(dog)
    assert dog.stall is not None and dog.stall.waited_s > 1.0


def test_a_missing_rank_is_waited_for_as_long_as_the_allowance(
    tmp_path: Path, watch, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(monitor, "STARTUP_ALLOWANCE_S", 0.9)
    write(tmp_path, 0)
    dog = watch(plan(0.2, nproc=2))
    wait_for(dog)
    assert dog.stall is not None and dog.stall.waited_s > 0.9
    assert sorted(dog.stall.statuses) == [0] and dog.stall.world_size == 2


def test_a_frozen_rank_is_stalled_at_the_timeout_even_while_another_starts(tmp_path: Path, watch) -> None:
    write(tmp_path, 0, heartbeat=time.time() - FROZEN_AFTER_S - 5)  # its heartbeat stopped
    write(tmp_path, 1, stage=stages.LAUNCHED)
    began = time.monotonic()
    dog = watch(plan(0.3))
    wait_for(dog, limit=10.0)  # not STARTUP_ALLOWANCE_S (120 s)
    assert dog.stall is not None and time.monotonic() - began < 10.0
    assert dog.stall.statuses[0]["heartbeat_age_s"] > FROZEN_AFTER_S


def test_late_heartbeats_that_go_on_are_no_freeze_and_a_rank_left_behind_is(tmp_path: Path, watch) -> None:
    """A busy machine makes every heartbeat late; a frozen rank is one whose peers beat on without it.

    Ranks 0 and 1 beat with heartbeats 10 s old (as a watchdog starved of the CPU reads them);
    rank 2 stopped beating. By age all three were frozen; by their beats only rank 2 is.
    """
    stale = time.time() - FROZEN_AFTER_S - 10
    write(tmp_path, 2, heartbeat=stale, beats=3)
    dog = watch(plan(0.3 * STOPPED_AFTER_BEATS + 0.5))
    for beat in range(4, 4 + 2 * STOPPED_AFTER_BEATS):
        for rank in (0, 1):
            write(tmp_path, rank, heartbeat=stale, beats=beat)
        time.sleep(0.15)
    wait_for(dog)
    stall = dog.stall
    assert stall is not None
    assert [r for r in range(3) if stall.statuses[r]["heartbeat_age_s"] > FROZEN_AFTER_S] == [0, 1, 2]
    assert {r: stall.statuses[r]["missed_beats"] >= STOPPED_AFTER_BEATS for r in range(3)} == {
        0: False, 1: False, 2: True
    }  # fmt: skip
    # The status files name no process of this test's: as if all three still ran.
    running = {r: {**s, "proc_state": "running"} for r, s in stall.statuses.items()}
    check = judge_stall(Stall(running, stall.waited_s, 3))
    assert check.ranks == [2] and check.detail.startswith("rank 2 (host h, pid ?) is frozen: "), check.detail
    assert "ranks 0, 1 waited" in check.detail


@pytest.mark.parametrize("field", ["seq", "progress_seq", "ticks"])
def test_one_rank_moving_restarts_the_wait(tmp_path: Path, watch, field: str) -> None:
    write(tmp_path, 0)
    write(tmp_path, 1)
    dog = watch(plan(0.6))
    moving_s = 1.0
    began = time.monotonic()
    step = 0
    while time.monotonic() - began < moving_s:
        step += 1
        write(tmp_path, 1, **{field: 10 + step})  # only rank 1, only this field
        time.sleep(0.1)
    assert dog.is_alive() and dog.stall is None  # moving for longer than the timeout: no stall
    wait_for(dog)
    stall = dog.stall
    assert stall is not None and 0.6 < stall.waited_s < 0.6 + 2.0
    assert stall.elapsed_s is not None
    assert stall.elapsed_s - stall.waited_s > moving_s - 0.3  # counted from the last move, not the start
    assert stall.statuses[1][field] == 10 + step


def test_heartbeats_alone_are_not_progress(tmp_path: Path, watch) -> None:
    writers = [
        StatusWriter(
            tmp_path, {"rank": r, "local_rank": r, "node": 0, "host": "h", "address": None, "pid": 1}
        )
        for r in (0, 1)
    ]
    try:
        for writer in writers:
            writer.stage("measure: 4K")
        dog = watch(plan(0.6))
        wait_for(dog)  # beats every 0.5 s keep the heartbeat fresh; seq, progress and ticks stay
        stall = dog.stall
        assert stall is not None and 0.6 < stall.waited_s < 0.6 + 2.0
        assert all(s["heartbeat_age_s"] < FROZEN_AFTER_S for s in stall.statuses.values())  # alive, waiting
        assert max(s["beats"] for s in stall.statuses.values()) >= 1
    finally:
        for writer in writers:
            writer.close()


def test_the_stall_shows_the_other_nodes_under_this_nodes_own(tmp_path: Path, watch) -> None:
    write(tmp_path, 0)
    write(tmp_path, 1)
    remote = {1: {"stage": "stale copy", "remote": True}, 2: {"stage": "measure", "remote": True}}
    dog = watch(plan(0.3, nnodes=2), FakePresence(remote))
    wait_for(dog)
    assert dog.stall is not None and sorted(dog.stall.statuses) == [0, 1, 2]
    assert dog.stall.statuses[1]["stage"] == "measure: 4K"  # this node's own view wins
    assert dog.stall.statuses[2] == remote[2]


def test_a_presence_that_fails_is_ignored(tmp_path: Path, watch, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(monitor, "PUBLISH_EVERY_S", 0.0)  # publish at every poll
    write(tmp_path, 0)
    write(tmp_path, 1)
    dog = watch(plan(0.3, nnodes=2), FakePresence(fail=True))
    wait_for(dog)
    assert dog.stall is not None and sorted(dog.stall.statuses) == [0, 1]  # only what this node saw


# ------------------------------------------------------------------ progress, publishing, stop
def test_rank_0_drives_the_progress_display_and_statuses_are_published_annotated(
    tmp_path: Path, watch, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(monitor, "PUBLISH_EVERY_S", 0.15)
    shown: list[SeenStatus] = []
    write(tmp_path, 0, progress={"done": 2, "total": 9, "label": "4K"})
    write(tmp_path, 1)
    presence = FakePresence()
    dog = watch(plan(60.0), presence, on_progress=shown.append)
    time.sleep(0.7)
    dog.stop()
    assert shown and all(s["rank"] == 0 and s["progress"]["done"] == 2 for s in shown)
    assert all(s["ranks_started"] == 2 for s in shown)  # the display counts the ranks started
    assert presence.published and all(sorted(p) == [0, 1] for p in presence.published)
    assert all("proc_state" in s and "heartbeat_age_s" in s for p in presence.published for s in p.values())
    assert dog.stall is None and dog.gave_up_at is None


def test_without_rank_0_nothing_drives_the_progress_display(tmp_path: Path, watch) -> None:
    shown: list[SeenStatus] = []
    write(tmp_path, 1)  # a node without rank 0
    dog = watch(plan(60.0), on_progress=shown.append)
    time.sleep(0.4)
    assert dog.is_alive()  # still watching: rank 1's status is no progress to show, and no error
    dog.stop()
    assert shown == []


def test_stop_ends_a_watch_that_never_gave_up(tmp_path: Path, watch, kills: list[float]) -> None:
    write(tmp_path, 0)
    write(tmp_path, 1)
    dog = watch(plan(60.0))
    time.sleep(0.25)
    began = time.monotonic()
    dog.stop()
    assert not dog.is_alive() and time.monotonic() - began < 1.0
    assert dog.stall is None and dog.snapshot is None and kills == []


def test_publish_final_sends_exits_as_they_are(tmp_path: Path) -> None:
    presence = FakePresence()
    dog = Monitor(tmp_path, plan(5.0), None, presence=lambda: presence)
    statuses = {0: {"rank": 0, "stage": "done"}, 1: {"rank": 1, "stage": "measure"}}
    dog.publish_final(statuses, {1: {"exitcode": -9, "signal": "SIGKILL"}})
    assert presence.published == [
        {
            0: {"rank": 0, "stage": "done", "exit": None},
            1: {"rank": 1, "stage": "measure", "exit": {"exitcode": -9, "signal": "SIGKILL"}},
        }
    ]  # already annotated by the caller: not annotated again
    assert statuses[1] == {"rank": 1, "stage": "measure"}  # the caller's dicts are untouched


def test_without_a_presence_the_world_is_this_node(tmp_path: Path) -> None:
    dog = Monitor(tmp_path, plan(5.0), None)
    local = {0: {"stage": "x"}}
    assert dog.world_statuses(local) is local
    dog.publish_final(local, {})  # nobody to tell: no error


# ------------------------------------------------------------------ crashes
class FastClock:
    """time for the monitor module, with a monotonic clock running `speed` times as fast."""

    def __init__(self, speed: float) -> None:
        self.speed, self.origin = speed, time.monotonic()

    def monotonic(self) -> float:
        return self.origin + (time.monotonic() - self.origin) * self.speed

    def time(self) -> float:
        return time.time()


def test_a_crash_ends_the_run_two_seconds_later_with_a_snapshot_and_no_stall(
    tmp_path: Path, watch, kills: list[float], monkeypatch: pytest.MonkeyPatch
) -> None:
    speed = 4.0  # the 2 s grace passes in 0.5 s
    monkeypatch.setattr(monitor, "time", FastClock(speed))
    monkeypatch.setattr(monitor, "PUBLISH_EVERY_S", 1e9)  # only the crash's own publication
    write(tmp_path, 0)
    write(tmp_path, 1, error="RuntimeError: injected crash")
    presence = FakePresence({2: {"stage": "measure", "remote": True}})
    began = time.monotonic()
    dog = watch(plan(60.0, nnodes=2), presence)
    # Its first look publishes the crash; waited for, not slept for (a fixed 0.25 s had 0.15 s to
    # spare on the near side and 0.35 s on the far one).
    while not presence.published and time.monotonic() < began + 10:
        time.sleep(0.01)
    assert dog.is_alive() and dog.gave_up_at is None
    assert len(presence.published) == 1  # the other nodes learn of the crash at once
    assert presence.published[0][1]["error"] == "RuntimeError: injected crash"
    wait_for(dog)
    assert (time.monotonic() - began) * speed > 2.0
    assert dog.stall is None and len(kills) == 1 and dog.gave_up_at is not None
    snapshot = dog.snapshot
    assert snapshot is not None and sorted(snapshot) == [0, 1, 2]  # with the other node's ranks
    assert snapshot[1]["error"] == "RuntimeError: injected crash" and "proc_state" in snapshot[1]


def test_a_crash_is_not_turned_into_a_stall_during_its_grace(
    tmp_path: Path, watch, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(monitor, "time", FastClock(4.0))
    write(tmp_path, 0)
    write(tmp_path, 1, error="RuntimeError: injected crash")  # alive, tearing down
    dog = watch(plan(1.0))  # the timeout ends 1 s into the 2 s grace
    wait_for(dog)
    assert dog.stall is None and dog.snapshot is not None


def test_abandoned_only_after_the_agent_had_its_time(tmp_path: Path) -> None:
    dog = Monitor(tmp_path, plan(5.0), None)
    assert not dog.abandoned()  # never gave up
    dog.gave_up_at = time.time() - (ABANDON_AFTER_S - 0.5)
    assert not dog.abandoned()
    dog.gave_up_at = time.time() - (ABANDON_AFTER_S + 0.5)
    assert dog.abandoned()


# ------------------------------------------------------------------ annotate, kill_workers
@pytest.fixture
def children() -> Iterator[Callable[..., subprocess.Popen]]:
    """Start harmless children; whatever is left of them is killed and reaped after the test."""
    started: list[subprocess.Popen] = []

    def spawn(*argv: str) -> subprocess.Popen:
        proc = subprocess.Popen(argv or ("sleep", "60"))
        started.append(proc)
        return proc

    yield spawn
    for proc in started:
        descendants: list[psutil.Process] = []
        with contextlib.suppress(psutil.Error):
            descendants = psutil.Process(proc.pid).children(recursive=True)
        for p in [proc, *descendants]:
            try:
                p.send_signal(signal.SIGCONT)
                p.kill()
            except (ProcessLookupError, psutil.Error):
                pass
        proc.wait(timeout=5)


def wait_state(pid: int, state: str) -> None:
    deadline = time.monotonic() + 5
    while psutil.Process(pid).status() != state:
        assert time.monotonic() < deadline, f"{pid} never became {state}"
        time.sleep(0.01)


class FrozenWallClock:
    """time for the monitor module, its wall clock standing at `now`: ages come out exact, however
    long annotate's walk of /proc took on a busy machine (10 ms more turned 0.04 s into 0.1)."""

    def __init__(self, now: float) -> None:
        self.now = now

    def time(self) -> float:
        return self.now

    def monotonic(self) -> float:
        return time.monotonic()


@pytest.mark.integration
def test_annotate_adds_the_process_state_and_ages(children, monkeypatch: pytest.MonkeyPatch) -> None:
    running, stopped, ended = children(), children(), children("true")
    stopped.send_signal(signal.SIGSTOP)
    wait_state(stopped.pid, psutil.STATUS_STOPPED)
    wait_state(ended.pid, psutil.STATUS_ZOMBIE)  # exited, not yet reaped
    now = time.time()
    monkeypatch.setattr(monitor, "time", FrozenWallClock(now))

    def record(rank: int, pid: int, **fields: Any) -> RankStatus:
        return RankStatus(rank, rank, 0, "h", None, pid, **{"heartbeat": now, "stage_since": now, **fields})

    statuses = {
        0: record(0, running.pid, heartbeat=now - 2.26, stage_since=now - 7.0, stage="measure"),
        1: record(1, stopped.pid, heartbeat=now - 0.04),
        2: record(2, ended.pid),
        3: record(3, os.getpid()),  # not one of this process's descendants: not a rank of this node
        4: record(4, 0, stage="launched"),  # no process yet, its heartbeat just written
    }
    annotated = annotate(statuses)
    assert {r: s["proc_state"] for r, s in annotated.items()} == {
        0: "running",  # ProcState's word for psutil's sleeping (failure/proc.py)
        1: psutil.STATUS_STOPPED,
        2: "exited",
        3: "exited",
        4: "exited",
    }
    assert annotated[0]["heartbeat_age_s"] == 2.3 and annotated[0]["in_stage_s"] == 7.0  # tenths
    assert annotated[1]["heartbeat_age_s"] == 0.0
    assert annotated[4]["heartbeat_age_s"] == 0.0 and annotated[4]["in_stage_s"] == 0.0
    assert annotated[0]["stage"] == "measure" and "proc_state" not in vars(statuses[0])  # a copy, keys kept


@pytest.mark.integration
def test_kill_workers_kills_every_descendant_stopped_and_grandchildren_too(children) -> None:
    plain, stopped = children(), children()
    parent = children("sh", "-c", "sleep 60 & wait")
    deadline = time.monotonic() + 5
    while not psutil.Process(parent.pid).children():
        assert time.monotonic() < deadline, "the grandchild never started"
        time.sleep(0.01)
    (grandchild,) = psutil.Process(parent.pid).children()
    stopped.send_signal(signal.SIGSTOP)
    wait_state(stopped.pid, psutil.STATUS_STOPPED)
    ours = {plain.pid, stopped.pid, parent.pid, grandchild.pid}
    mine = {c.pid for c in psutil.Process().children(recursive=True)}
    if mine != ours:
        pytest.skip(f"this process has other children ({sorted(mine - ours)}): kill_workers would kill them")
    began = time.monotonic()
    killed = kill_workers()
    assert killed == ours
    assert time.monotonic() - began < 5.0
    for proc in (plain, stopped, parent):
        assert proc.wait(timeout=5) is not None
    assert not grandchild.is_running() or grandchild.status() == psutil.STATUS_ZOMBIE
    assert psutil.Process().children(recursive=True) == []
