"""A SIGINT or SIGTERM to `python -m pytest` ends the run promptly, and every process its tests started.

Without this, SIGTERM killed the controller outright: its xdist workers ran on with the ranks,
launchers and daemons of their tests, and wrote `OSError: cannot send (already closed?)` once
they had something to report. SIGINT was ignored by a pytest started in the background of a
script (such a shell starts it with SIGINT ignored, and Python keeps that); when it did reach
the controller, the workers' tests went on until execnet interrupted them five seconds later,
and the processes those tests had started outlived the run.

Here each process of the run (the controller, each worker, or the one process of `-n 0`) turns
the first SIGINT or SIGTERM into a KeyboardInterrupt, so that pytest stops the test at hand and
tears its fixtures down; the controller passes SIGINT on to its workers first. The processes
below it at that moment are noted, and whatever of them is still there at the end of the run
is ended: SIGTERM (a ddpcheck rank removes its run directory on it), then SIGKILL.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from types import FrameType
from typing import Any

import psutil
import pytest

# A ddpcheck run directory's remover ends by itself once its rank is gone (ddpcheck/rank/rundir.py).
REMOVER = "ddpcheck-remover"
GRACE_S = 3.0

_interrupted = False
_started: list[psutil.Process] = []
_previous: dict[int, Any] = {}


def _is_controller(config: pytest.Config) -> bool:
    return not hasattr(config, "workerinput") and config.pluginmanager.has_plugin("dsession")


def install(config: pytest.Config) -> None:
    """pytest_configure: SIGINT and SIGTERM stop the run through KeyboardInterrupt, once."""
    if threading.current_thread() is not threading.main_thread():
        return  # pytest.main() called from a thread: only the main thread may handle signals
    controller = _is_controller(config)

    def interrupt(signum: int, frame: FrameType | None) -> None:
        global _interrupted
        if controller:
            # The workers are the controller's children: each stops its own test and tears down.
            for worker in psutil.Process().children():
                with contextlib.suppress(psutil.Error):
                    worker.send_signal(signal.SIGINT)
        if _interrupted:
            return  # teardown is under way (execnet's own SIGINT, a second Ctrl-C): let it finish
        _interrupted = True
        _started[:] = psutil.Process().children(recursive=True)
        raise KeyboardInterrupt

    for signum in (signal.SIGINT, signal.SIGTERM):
        _previous[signum] = signal.signal(signum, interrupt)


def end_what_the_tests_started() -> None:
    """pytest_unconfigure: after an interruption, what the run had started and is still there, ended;
    the signals handled as before the run (mutmut runs one session after another in its process)."""
    global _interrupted
    for signum, handler in _previous.items():
        signal.signal(signum, handler)
    _previous.clear()
    alive = [p for p in _started if _running(p)]
    _started.clear()
    _interrupted = False
    workers = [p for p in alive if REMOVER not in _cmdline(p)]
    _end(workers)
    # Their removers now have nothing to wait for; a moment to remove the directories, then gone.
    _, removers = psutil.wait_procs([p for p in alive if p not in workers], timeout=GRACE_S)
    _end(removers, grace_s=0)


def _end(processes: list[psutil.Process], grace_s: float = GRACE_S) -> None:
    for process in processes:
        with contextlib.suppress(psutil.Error):
            process.terminate()
    _, alive = psutil.wait_procs(processes, timeout=grace_s)
    for process in alive:
        with contextlib.suppress(psutil.Error):
            process.kill()
    psutil.wait_procs(alive, timeout=GRACE_S)


def _running(process: psutil.Process) -> bool:
    try:
        return process.is_running() and process.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _cmdline(process: psutil.Process) -> str:
    try:
        return " ".join(process.cmdline())
    except psutil.Error:
        return ""
