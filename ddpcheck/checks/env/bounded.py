"""Waits with a bound: a command under a timeout, killed with its children when late,
and a function in a daemon thread that is waited for at most a given time.

The probe overlaps its slow, independent parts with these (nvidia-smi while
torch imports, the MASTER_ADDR/MASTER_PORT probe in a thread).
"""

from __future__ import annotations

import subprocess
import threading
from collections.abc import Callable
from typing import Any

from ddpcheck.failure.processes import output_within, started


def spawn(binary: str | None, args: list[str]) -> subprocess.Popen[str] | None:
    if binary is None:
        return None
    try:
        return started([binary, *args])  # killed if this process leaves (own_sessions)
    except OSError:
        return None


def reap(proc: subprocess.Popen[str] | None, timeout_s: float, what: str, problems: list[str]) -> str | None:
    """The output of a started command, or None; a command past its time is killed, not left behind."""
    if proc is None:
        return None
    out = output_within(proc, timeout_s)
    if out is None:
        problems.append(f"{what} did not finish within {timeout_s:g} s: skipped")
        return None
    if proc.returncode != 0:
        problems.append(f"{what} exited with {proc.returncode}")
        return None
    return out


class Background:
    """Run a function in a daemon thread; wait for it at most a bound, never past exit."""

    def __init__(self, fn: Callable[[], Any]) -> None:
        self._box: dict[str, Any] = {}
        self._thread = threading.Thread(target=self._run, args=(fn,), name="ddpcheck-probe", daemon=True)
        self._thread.start()

    def _run(self, fn: Callable[[], Any]) -> None:
        try:
            self._box["value"] = fn()
        except Exception as exc:  # reported as a finding, not a crash
            self._box["value"] = {"error": f"{type(exc).__name__}: {exc}"}

    def result(self, timeout_s: float) -> Any:
        self._thread.join(timeout_s)
        return self._box.get("value")
