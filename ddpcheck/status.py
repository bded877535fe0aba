"""The channel from every rank to its launcher: stage, progress and a heartbeat.

Each rank rewrites one small JSON file in the run directory whenever it enters
a stage, and a daemon thread refreshes its heartbeat. The launcher reads the
files even when ranks are stuck: a rank whose stage stopped moving but whose
heartbeat is fresh is alive and waiting; one whose heartbeat stopped is frozen.
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

HEARTBEAT_INTERVAL_S = 0.5
# Four missed beats: long enough to survive a loaded machine, short enough for a verdict in seconds.
FROZEN_AFTER_S = 4 * HEARTBEAT_INTERVAL_S + 1.0


def status_dir(run_dir: str | Path) -> Path:
    return Path(run_dir) / "status"


class StatusWriter:
    """One rank's side of the channel."""

    def __init__(self, run_dir: str | Path, identity: dict[str, Any]) -> None:
        self._path = status_dir(run_dir) / f"rank-{identity['rank']}.json"
        self._path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._state: dict[str, Any] = {
            **identity,
            "stage": "launched",
            "seq": 0,
            "stage_since": time.time(),
            "heartbeat": time.time(),
            "progress": None,
            "progress_seq": 0,
            "ticks": 0,
            "error": None,
            "error_at": None,
        }
        self._parent = os.getppid()
        # Where else stage changes go: with no launcher watching (under torchrun or srun),
        # the process group's store, so that rank 0 can say who is behind.
        self.mirror: Callable[[dict[str, Any]], None] | None = None
        self._stopped = threading.Event()
        self._write()
        self._thread = threading.Thread(target=self._beat, name="ddpcheck-heartbeat", daemon=True)
        self._thread.start()

    def stage(self, name: str) -> None:
        """Enter a stage; `seq` counts stages, so ranks at the same point of a run agree on it."""
        with self._lock:
            self._state.update(stage=name, seq=self._state["seq"] + 1, stage_since=time.time(), progress=None)
        self._write()
        if self.mirror is not None:
            with contextlib.suppress(Exception):  # a lost store must not fail the rank
                self.mirror(dict(self._state))

    def progress(self, done: int, total: int, label: str) -> None:
        with self._lock:
            self._state["progress"] = {"done": done, "total": total, "label": label}
            self._state["progress_seq"] += 1
        self._write()

    def tick(self) -> None:
        """Count one unit of work (an iteration); the heartbeat carries it, no write here.

        Long stages (a sweep size of 1 GiB on a slow link) thus show progress to the
        launcher without a file write per iteration.
        """
        self._state["ticks"] += 1

    def error(self, message: str) -> None:
        with self._lock:
            self._state.update(error=message, error_at=time.time())
        self._write()

    def close(self) -> None:
        self._stopped.set()

    def _beat(self) -> None:
        while not self._stopped.wait(HEARTBEAT_INTERVAL_S):
            if os.getppid() != self._parent:
                # The launcher died without tearing us down: do not outlive it.
                os._exit(3)
            self._write()

    def _write(self) -> None:
        with self._lock:
            self._state["heartbeat"] = time.time()
            text = json.dumps(self._state)
            tmp = self._path.with_suffix(f".tmp{threading.get_ident()}")
            tmp.write_text(text)
            os.replace(tmp, self._path)


def read_statuses(run_dir: str | Path) -> dict[int, dict[str, Any]]:
    """Every rank's last written status, by global rank (ranks that never wrote are absent)."""
    statuses: dict[int, dict[str, Any]] = {}
    directory = status_dir(run_dir)
    if not directory.is_dir():
        return statuses
    for path in directory.glob("rank-*.json"):
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError):
            continue  # mid-replace on a filesystem without atomic rename; read next poll
        statuses[int(data["rank"])] = data
    return statuses
