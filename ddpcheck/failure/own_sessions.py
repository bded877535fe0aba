"""The tools this process started in sessions of their own (nvidia-smi, py-spy), under a timeout that
kills each one's whole group when late. A terminal's Ctrl-C does not reach them, so a process that
leaves at once (rank/interrupt.leave) kills them first: a hung one would run on.

A signal that comes while one starts (after it is forked, before it is listed here) waits until it
is listed: leaving in between left a hung nvidia-smi running (seen once in CI).

Standard library only, and no subprocess: rank/interrupt.py, loaded before the Ctrl-C handler is
in, imports it.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import subprocess

# Weak: a tool reaped and forgotten leaves the set (watch samples stacks with py-spy all job long).
_listed: weakref.WeakSet[subprocess.Popen] = weakref.WeakSet()
_lock = threading.RLock()  # re-entered by a signal handler that runs while the main thread holds it
_starting = 0
_held: list[Callable[[], object]] = []  # what a signal during a start left to do once it is listed


def start(popen: Callable[[], subprocess.Popen]) -> subprocess.Popen:
    """`popen()` (a tool in a session of its own), listed to be killed on leaving before a signal
    held meanwhile is acted on. Raises what `popen` raises."""
    global _starting
    with _lock:
        _starting += 1
    try:
        proc = popen()
        with _lock:  # not while leaving reads the set: a set changed under a reader raises
            _listed.add(proc)
    finally:
        with _lock:
            _starting -= 1
            then = _held.copy() if _starting == 0 else []
            del _held[: len(then)]
        for act in then:
            act()
    return proc


def held(act: Callable[[], object]) -> bool:
    """Whether a tool is starting now; then `act` (leaving) runs once it is listed, not now."""
    with _lock:
        if _starting:
            _held.append(act)
        return bool(_starting)


def kill_all() -> None:
    """Kill each listed tool's group that is not reaped yet (a reaped one's pid may be another's)."""
    with _lock:
        listed = list(_listed)
    for proc in listed:
        if proc.returncode is None:
            with contextlib.suppress(OSError):
                os.killpg(proc.pid, signal.SIGKILL)
