"""The one status channel: every rank's stage, progress and heartbeat, one record, several transports.

Each rank keeps one `RankStatus` and publishes it whenever it enters a stage, and a daemon
thread republishes it (a heartbeat) about twice a second. Where it goes depends on who is
watching: the launcher's status files (`FileTransport`, read by the launcher's monitor.py), and under
torchrun/srun/mpirun, where no launcher watches, the process group's store
(`StoreTransport`, read by the rank that gives up). Across nodes the launcher forwards its
ranks' records through the rendezvous store (presence.py). A rank whose stage stopped moving
but whose heartbeat is fresh is alive and waiting; one whose heartbeat stopped is frozen.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from ddpcheck.errors import EXIT_COULD_NOT_COMPLETE
from ddpcheck.failure.liveness import HEARTBEAT_INTERVAL_S
from ddpcheck.failure.statuses import RankStatus
from ddpcheck.rank import interrupt
from ddpcheck.rank.rundir import status_dir

if TYPE_CHECKING:
    from torch.distributed import Store


class Transport(Protocol):
    def publish(self, record: RankStatus) -> None: ...


class FileTransport:
    """One JSON file per rank in the run directory, replaced atomically: the launcher's view."""

    def __init__(self, run_dir: str | Path, rank: int) -> None:
        self._path = status_dir(run_dir) / f"rank-{rank}.json"
        # Never the run directory itself: a launcher's SIGTERM may have removed it already (on
        # another thread, just before this rank began), and made again here it would outlive the rank.
        with contextlib.suppress(FileNotFoundError):  # then publish finds no directory: nobody to tell
            self._path.parent.mkdir(exist_ok=True)

    def publish(self, record: RankStatus) -> None:
        tmp = self._path.with_suffix(f".tmp{threading.get_ident()}")
        # The run directory is being removed: the run is over, there is no one to tell.
        with contextlib.suppress(FileNotFoundError):
            tmp.write_text(json.dumps(record.to_dict()))
            os.replace(tmp, self._path)


class StoreTransport:
    """A key in a torch.distributed store: the view of ranks that no launcher watches (inline runs).

    Sent from a thread of its own, latest record only: a store that is slow or gone (its host
    froze) delays nothing else, neither a stage change nor the status files. `connect` connects
    to the store on that thread: connecting costs the rank's main thread nothing.
    """

    def __init__(self, connect: Callable[[], Store], key: str) -> None:
        self._connect, self._key = connect, key
        self._pending: RankStatus | None = None
        self._ready = threading.Condition()
        self._closed = False
        threading.Thread(target=self._send, name="ddpcheck-store-status", daemon=True).start()

    def publish(self, record: RankStatus) -> None:
        with self._ready:
            self._pending = record
            self._ready.notify()

    def close(self) -> None:
        with self._ready:
            self._closed = True
            self._ready.notify()

    def _send(self) -> None:
        try:
            store = self._connect()
        except Exception:
            return  # no store to reach: nobody to tell
        while True:
            with self._ready:
                while self._pending is None and not self._closed:
                    self._ready.wait()
                if self._closed:
                    return
                record, self._pending = self._pending, None
            with contextlib.suppress(Exception):  # the store's host ended or froze: nobody to tell
                store.set(self._key, json.dumps(record.to_dict()))


class StatusWriter:
    """One rank's side of the channel: one record, published to every transport."""

    def __init__(self, run_dir: str | Path, identity: dict[str, Any]) -> None:
        self.record = RankStatus(**identity)
        self._lock = threading.Lock()
        self._file = FileTransport(run_dir, identity["rank"])
        # Transports that may fail (a store whose host went away) must never fail the rank.
        self._fallible: list[Transport] = []
        self._parent = os.getppid()
        self._stopped = threading.Event()
        # The longest this process did not run between two beats (a SIGSTOP, a frozen host), and where.
        self.longest_pause_s, self.paused_at = 0.0, ""
        self._last_beat = time.monotonic()
        self._write()
        self._thread = threading.Thread(target=self._beat, name="ddpcheck-heartbeat", daemon=True)
        self._thread.start()

    def add_transport(self, transport: Transport) -> None:
        """Publish to `transport` too, from the next stage or beat on (errors there are ignored)."""
        with self._lock:
            self._fallible.append(transport)
        self._write()

    def stage(self, name: str) -> None:
        """Enter a stage; `seq` counts stages, so ranks at the same point of a run agree on it."""
        with self._lock:
            record = self.record
            record.stage, record.seq, record.progress = name, record.seq + 1, None
            record.stage_since = time.time()
        self._write()

    def progress(self, done: int, total: int, label: str) -> None:
        with self._lock:
            self.record.progress = {"done": done, "total": total, "label": label}
            self.record.progress_seq += 1
        self._write()

    def tick(self) -> None:
        """Count one unit of work (an iteration); the heartbeat carries it, no write here.

        Long stages (a sweep size of 1 GiB on a slow link) thus show progress to the
        launcher without a file write per iteration.
        """
        self.record.ticks += 1

    def error(self, message: str) -> None:
        with self._lock:
            self.record.error = message
        self._write()

    def close(self) -> None:
        self._stopped.set()
        for transport in self._fallible:
            if hasattr(transport, "close"):
                transport.close()

    def pause(self, now: float | None = None) -> tuple[float, str]:
        """(seconds, stage): the longest this process did not run, the pause it is only now coming out
        of included (a SIGCONT wakes the thread asking before, maybe, the beating one)."""
        now_s = (time.monotonic() if now is None else now) - self._last_beat - HEARTBEAT_INTERVAL_S
        if now_s > self.longest_pause_s:
            return now_s, self.record.stage
        return self.longest_pause_s, self.paused_at

    def _beat(self) -> None:
        while not self._stopped.wait(HEARTBEAT_INTERVAL_S):
            now = time.monotonic()  # CLOCK_MONOTONIC runs on while the process is stopped
            self.longest_pause_s, self.paused_at = self.pause(now)
            self._last_beat = now
            if os.getppid() != self._parent:
                # The launcher died without tearing us down (mpirun after a second Ctrl-C): do not
                # outlive it, nor leave an inline rank's run directory behind (remove_on_leave).
                interrupt.leave(EXIT_COULD_NOT_COMPLETE, say=False)
            with self._lock:
                self.record.beats += 1
            self._write()

    def _write(self) -> None:
        with self._lock:
            self.record.heartbeat = time.time()
            record = dataclasses.replace(self.record)  # a snapshot: transports read it after the lock
            self._file.publish(record)
            fallible = list(self._fallible)
        for transport in fallible:  # outside the lock: a slow store must not hold up a stage change
            with contextlib.suppress(Exception):
                transport.publish(record)


def read_statuses(run_dir: str | Path) -> dict[int, RankStatus]:
    """Every rank's last written status, by global rank (ranks that never wrote are absent)."""
    statuses: dict[int, RankStatus] = {}
    for path in status_dir(run_dir).glob("rank-*.json"):  # none where the directory is not (yet)
        try:
            status = RankStatus.from_dict(json.loads(path.read_text()))
        except (OSError, ValueError, TypeError):  # TypeError: a record without a rank's identity
            continue  # mid-replace on a filesystem without atomic rename; read next poll
        statuses[status.rank] = status
    return statuses
