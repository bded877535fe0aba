"""Ranks that no ddpcheck launcher watches (torchrun, srun, mpirun): heartbeats through the store.

After joining, every rank publishes its status record (stage and heartbeat) to a key of the
store every rank already shares (MASTER_ADDR:MASTER_PORT), over a connection of its own so
that a collective blocked on the default store never holds up a beat. Rank 0 watches every
rank's beat counter and notes, on its own monotonic clock, when each last changed: an age
that never mixes two hosts' clocks, and how many beats the others made meanwhile: a rank stopped
beating when its counter stood still while a peer's went on (failure/liveness.py), whatever the
clock says on a busy machine. It publishes that view for the other ranks. The rank that gives
up (its collective timed out, or a peer's connection dropped) then reads who stopped beating:
`observe()` returns annotated statuses for postmortem.judge_inline.

Under srun and mpirun, rank 0's process hosts the store and writes the report: the other ranks
leave only after it (`wait_for_rank0`), so that the launcher's teardown, which begins when the
first task exits, finds rank 0's account already out.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import threading
import time
from collections.abc import Callable, Mapping
from datetime import timedelta
from typing import TYPE_CHECKING, Any

import psutil

from ddpcheck.failure import liveness, stages
from ddpcheck.failure.liveness import (
    HEARTBEAT_INTERVAL_S,
    STOPPED_AFTER_BEATS,
    BeatTracker,
    counters,
)
from ddpcheck.failure.proc import ProcState, cmdline, state_of
from ddpcheck.failure.processes import end
from ddpcheck.failure.statuses import RankStatus, SeenStatus, seen
from ddpcheck.rank import arrival, rundir
from ddpcheck.rank.here import HostDir, mark_stopped_by_launcher
from ddpcheck.rank.status_channel import StoreTransport
from ddpcheck.torch_compat import store_has

if TYPE_CHECKING:
    from torch.distributed import Store

HEARTBEAT_SWITCH = "DDPCHECK_INLINE_HEARTBEAT"
KEY = "ddpcheck/rank/inline/status/"
# What rank 0's watch publishes there: its `n`th look, each rank's heartbeat `ages` and beats `missed`
# (by rank, a string: JSON's keys; `missed` is absent from an older ddpcheck's view).
VIEW_KEY = "ddpcheck/rank/inline/seen"
# Set for a stopped rank that a peer ended (reap), so that the others still call it stopped, not dead.
ENDED_KEY = "ddpcheck/rank/inline/ended/"
# Set by a rank once it has said its one line: mpirun drops what ranks print after it aborted the job.
SAID_KEY = "ddpcheck/rank/inline/said/"
# One store operation's bound: a store whose host froze must not hold up the rank giving up.
STORE_OP_TIMEOUT_S = 3.0
# How long a rank without a fresh view from rank 0 samples beats before it judges: long enough for a
# peer to beat STOPPED_AFTER_BEATS times, and a second more.
SAMPLE_S = STOPPED_AFTER_BEATS * HEARTBEAT_INTERVAL_S + 1.0
# One process is one rank: its session, once it has one.
current: Session | None = None


def connect(timeout_s: float = STORE_OP_TIMEOUT_S) -> Store:
    """A client connection of this rank's own to the store every rank of the launch shares."""
    from torch.distributed import TCPStore

    return TCPStore(
        os.environ["MASTER_ADDR"],
        int(os.environ["MASTER_PORT"]),
        is_master=False,
        timeout=timedelta(seconds=timeout_s),
        wait_for_workers=False,
    )


# How a rank that cannot reach rank 0's store says why: `ddpcheck env`'s finding
# (checks/env/refusals.store_unreachable), handed in by the CLI, as the rank side imports no check.
why_unreachable: Callable[[Mapping[str, str], float], str] | None = None

# Rank 0's store under srun and mpirun: held for the life of the process, as the peers read it.
_hosted: list[Store] = []


class StoreNotReached(RuntimeError):
    """A rank could not reach rank 0's store: what it says names the address and what is wrong with it."""


def rendezvous_store(timeout: timedelta) -> Store:
    """The store the process group joins through; a rank that cannot reach rank 0's store raises
    StoreNotReached, which says where it looked and why it failed (what `ddpcheck env` finds).

    Under torchrun, its agent's (torch's own env:// rendezvous). Under srun and mpirun rank 0 hosts
    it, opened at once and never waiting for the others: torch's rendezvous would wait for every
    rank inside the store's constructor, and on a timeout the store would close with it, taking every
    rank's heartbeat along before anyone could read who never came.
    """
    import torch.distributed as dist

    if os.environ.get("TORCHELASTIC_USE_AGENT_STORE") == "True":
        store, _, _ = next(dist.rendezvous("env://", timeout=timeout))  # this host's own agent's
        return store
    is_host = os.environ["RANK"] == "0"
    began = time.monotonic()
    try:
        store = dist.TCPStore(
            os.environ["MASTER_ADDR"],
            int(os.environ["MASTER_PORT"]),
            int(os.environ["WORLD_SIZE"]),
            is_master=is_host,
            timeout=timeout,
            wait_for_workers=False,
            multi_tenant=True,  # this rank's own connections (its heartbeat, rank 0's watch) share it
        )
    except Exception as exc:
        if is_host:
            raise  # rank 0 hosts it: its own failure, not an unreachable store
        waited_s = round(time.monotonic() - began)
        where = f"{os.environ.get('MASTER_ADDR')}:{os.environ.get('MASTER_PORT')}"
        if why_unreachable is None:
            raise StoreNotReached(f"could not reach rank 0's store at {where} within {waited_s} s") from exc
        raise StoreNotReached(why_unreachable(os.environ, waited_s)) from exc
    if is_host:
        _hosted.append(store)
    return store


def read_records(store: Store, world_size: int) -> dict[int, RankStatus]:
    """Every rank's last published record; stops at the first failure (the store is gone or frozen)."""
    records: dict[int, RankStatus] = {}
    for rank in range(world_size):
        key = f"{KEY}{rank}"
        try:
            if store_has(store, key):
                records[rank] = RankStatus.from_dict(json.loads(store.get(key)))
        except Exception:
            break
    return records


class Watch(threading.Thread):
    """Rank 0's watch: when it last saw each rank's beat counter change, by its own clock, and how
    many beats the others made since."""

    def __init__(self, connect: Callable[[], Store], world_size: int) -> None:
        """`connect`: connects to the store, on this thread (the rank's main thread does not wait)."""
        super().__init__(name="ddpcheck-beat-watch", daemon=True)
        self._connect, self._world = connect, world_size
        self._lock = threading.Lock()
        self._records: dict[int, RankStatus] = {}
        self._beats = BeatTracker()
        self._stopped = threading.Event()
        self._published = 0

    def run(self) -> None:
        try:
            store = self._connect()
        except Exception:
            return
        while not self._stopped.wait(HEARTBEAT_INTERVAL_S):
            records = read_records(store, self._world)
            now = time.monotonic()
            with self._lock:
                self._records.update(records)
                self._beats.see(counters(records), at=now)
                ages, missed = self._beats.ages(now), self._beats.missed()
            self._published += 1
            with contextlib.suppress(Exception):
                store.set(VIEW_KEY, json.dumps({"n": self._published, "ages": ages, "missed": missed}))

    def snapshot(self) -> tuple[dict[int, RankStatus], dict[int, float], dict[int, int]]:
        """Every rank's last record, its heartbeat's age and the beats its peers made since."""
        with self._lock:
            return dict(self._records), self._beats.ages(time.monotonic()), self._beats.missed()

    def stop(self) -> None:
        self._stopped.set()


class StoreStatuses:
    """The records the inline ranks publish to the store they share, a StatusSource: annotated with the
    beats each missed by rank 0's watch (this process's own, on rank 0), by the view rank 0 publishes
    once it has published since `first` was read, or else by this rank's own sampling since then."""

    def __init__(
        self, store: Store, world_size: int, watch: Watch | None, first: dict[int, RankStatus]
    ) -> None:
        self._store, self._world, self._watch, self._first = store, world_size, watch, first
        self._first_view = _read_view(store)
        self._began = time.monotonic()
        self._sampled = BeatTracker()  # this rank's own count, for when rank 0 does not watch
        self._sampled.see(counters(first))

    def seen(self) -> dict[int, SeenStatus]:
        if self._watch is not None:
            records, ages, missed = self._watch.snapshot()
            return annotate({**records, **read_records(self._store, self._world)}, ages, missed)
        records = read_records(self._store, self._world) or self._first
        self._sampled.see(counters(records))
        view = _read_view(self._store)
        if view and self._first_view and view["n"] != self._first_view["n"]:
            # Rank 0 is alive and watching, and has watched since the start.
            ages = {int(r): a for r, a in view["ages"].items()}
            return annotate(records, ages, {int(r): m for r, m in view.get("missed", {}).items()})
        waited = time.monotonic() - self._began
        ages = {
            r: waited if r in self._first and self._first[r].beats == s.beats else 0.0
            for r, s in records.items()
        }
        return annotate(records, ages, self._sampled.missed())


class Session:
    """One inline rank's share of the store: its published record and, on rank 0, the watch."""

    def __init__(self, rank: int, world_size: int, wait_s: float = STORE_OP_TIMEOUT_S) -> None:
        """`wait_s`: how long its connections wait for the store to open (it opens with the rendezvous)."""
        self.rank, self.world_size = rank, world_size
        self._wait_s = wait_s
        # Connections of their own, opened on their own threads (or when first read): they share
        # nothing with the process group's, and cost the rank's main thread nothing.
        self._store: Store | None = None
        self.transport = StoreTransport(self._connect, f"{KEY}{rank}")
        self.watch: Watch | None = None
        if rank == 0:
            self.watch = Watch(self._connect, world_size)
            self.watch.start()
        else:
            # Connected ahead: when this rank gives up, rank 0 (whose process may host the store,
            # under srun and mpirun) may be about to leave.
            threading.Thread(target=self._connect_ahead, name="ddpcheck-store-connect", daemon=True).start()

    def _connect(self) -> Store:
        """`connect`, waiting up to `wait_s` for the store to open (rank 0 may be still coming), then
        with the usual bound on each operation."""
        store = connect(max(self._wait_s, STORE_OP_TIMEOUT_S))
        store.set_timeout(timedelta(seconds=STORE_OP_TIMEOUT_S))
        return store

    def _connect_ahead(self) -> None:
        with contextlib.suppress(Exception):
            self._store = self._connect()

    def wait_for_waiters(self, culprits: list[int], bound_s: float) -> None:
        """Rank 0, done: stay until every other rank gave up too (its store may be theirs), within a bound."""
        deadline = time.monotonic() + bound_s
        try:
            self.store  # noqa: B018 (connects, if it has not yet)
        except Exception:
            return  # its store is gone (torchrun's agent's, or rank 0 never opened it): none to wait for
        while time.monotonic() < deadline:
            if not any(
                r != self.rank
                and r not in culprits
                and s.stage != stages.DONE
                and not _has(self.store, f"{SAID_KEY}{r}")
                for r, s in read_records(self.store, self.world_size).items()
            ):
                return  # none is waiting
            time.sleep(HEARTBEAT_INTERVAL_S / 2)

    @property
    def store(self) -> Store:
        """The connection this rank reads the others' records with, opened when first needed."""
        if self._store is None:
            self._store = connect()
        return self._store

    def observe(self, wait_s: float, connect_s: float = STORE_OP_TIMEOUT_S) -> dict[int, SeenStatus]:
        """Every rank's annotated status, waiting up to `wait_s` for a rank that stopped beating: the
        store's (StoreStatuses), and this host's ranks that never reached it (HostDir).

        Only the host's when the store does not answer (its host, rank 0 or the launcher, is gone or frozen).
        """
        host = HostDir()
        try:
            if self._store is None:
                self._store = connect(connect_s)
        except Exception:
            return host.seen()
        began = time.monotonic()
        first = read_records(self.store, self.world_size)
        if not first and _has(self.store, VIEW_KEY) is None:
            return host.seen()  # connected earlier, but its host has gone since: nothing to wait for
        store = StoreStatuses(self.store, self.world_size, self.watch, first)
        while True:
            statuses = store.seen()
            statuses.update({r: s for r, s in host.seen().items() if r not in statuses})
            mark_stopped_by_launcher(statuses)
            for rank, status in statuses.items():
                if status["proc_state"] == "exited" and _has(self.store, f"{ENDED_KEY}{rank}"):
                    status["proc_state"] = "stopped"
            if time.monotonic() - began >= wait_s or liveness.culprits(statuses, besides=self.rank):
                return statuses
            time.sleep(HEARTBEAT_INTERVAL_S / 2)

    def said(self) -> None:
        """This rank's one line is out (rank 0 may leave, and with it the store, now)."""
        with contextlib.suppress(Exception):
            self.store.set(f"{SAID_KEY}{self.rank}", "1")

    def wait_for_rank0(self, bound_s: float) -> None:
        """Done, and said: stay until rank 0 has left (its store closes with it), within a bound.

        Under srun and mpirun the first task to exit starts the launcher's teardown (SIGTERM);
        rank 0 writes the report, so it leaves first and nothing ends it mid-report.
        """
        deadline = time.monotonic() + bound_s
        while time.monotonic() < deadline:
            try:
                if not store_has(self.store, f"{SAID_KEY}{self.rank}"):
                    return  # said() set it: torch 2.2 (no Store.check) answers a store gone so
            except Exception:
                return  # the store is gone: rank 0 has left
            time.sleep(HEARTBEAT_INTERVAL_S / 2)

    def close(self) -> None:
        if self.watch is not None:
            self.watch.stop()


def _has(store: Store, key: str) -> bool | None:
    """Whether the store holds `key`; None when it does not answer (its host is gone or frozen)."""
    try:
        return store_has(store, key)
    except Exception:
        return None


def _read_view(store: Store) -> dict[str, Any] | None:
    try:
        return json.loads(store.get(VIEW_KEY)) if store_has(store, VIEW_KEY) else None
    except Exception:
        return None


def annotate(
    records: dict[int, RankStatus], ages: dict[int, float], missed: dict[int, int]
) -> dict[int, SeenStatus]:
    """Records plus process state, heartbeat age and missed beats (statuses.seen).

    A rank on this host is looked at directly (its process, and its heartbeat against this
    host's own clock); one elsewhere by the age rank 0 (or this rank, sampling) measured. The
    age is what a report says; whether a rank stopped beating is `missed_beats`: how many
    beats a peer made since this rank's counters last moved (failure/liveness.py).
    """
    here, now = socket.gethostname(), time.time()
    annotated: dict[int, SeenStatus] = {}
    for rank, record in records.items():
        same_host = record.host == here
        annotated[rank] = seen(
            record.as_seen(),
            process_state(record.pid) if same_host else ProcState.RUNNING,
            now - record.heartbeat if same_host else ages.get(rank, 0.0),
            now - record.stage_since if same_host else None,
            missed_beats=missed.get(rank, 0),
            same_host=same_host,
        )
    return annotated


def process_state(pid: int) -> ProcState:
    """A ddpcheck rank's process on this host; another process with its pid is a pid reused: GONE."""
    state = state_of(pid)
    if not state.ended and b"ddpcheck" not in cmdline(pid):
        return ProcState.GONE
    return state


def reap(statuses: dict[int, SeenStatus], end_stopped: bool, store: Store | None = None) -> list[int]:
    """Remove the run directories that same-host peers which died left behind.

    With `end_stopped` (under torchrun, whose SIGTERM cannot reach a stopped process and which
    then waits its whole shutdown timeout), end a stopped peer first: SIGKILL, as torchrun
    itself would after that timeout. Returns the ranks ended here.
    """
    ended = []
    for rank, status in statuses.items():
        if not status.get("same_host") or status["pid"] == os.getpid():
            continue
        if status["proc_state"] == "stopped" and end_stopped:
            with contextlib.suppress(Exception):
                store.set(f"{ENDED_KEY}{rank}", "stopped")
            with contextlib.suppress(psutil.Error):
                end([psutil.Process(status["pid"])], sigterm=False)
                ended.append(rank)
            if status.get("arrived") is False and arrival.current is not None:
                since = time.time() - (status.get("in_stage_s") or 0.0)
                arrival.current.record_for(rank, status["pid"], status["stage"], since)
        elif status["proc_state"] != "exited":
            continue
        for path in rundir.inline_dirs_of(status["pid"]):
            shutil.rmtree(path, ignore_errors=True)
    return ended
