"""How Ctrl-C (SIGINT), and a scheduler's SIGTERM while ranks run, end a ddpcheck process.

A terminal's Ctrl-C comes at any moment: while Python imports ddpcheck or torch, while the
agent starts ranks, while the report is written, during the interpreter's own teardown.
Python's default, a KeyboardInterrupt raised wherever the main thread happens to be, leaves
tracebacks, silent exits and run directories behind (docs/failures.md). So ddpcheck decides
instead:

- by default (`install`, the first thing the entry point does) the process leaves at once:
  what it owes flushed, the paths given to `remove_on_leave` removed, one line, exit 130,
  through os._exit: nothing half-done runs on, and no interpreter teardown;
- while ranks or a user's job run (`deferred`), the signal is only noted: the code that
  started them polls the event, or gets one KeyboardInterrupt (`raise_once`), ends them,
  and then leaves the same way. Later signals are ignored: that teardown is bounded.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from enum import Enum
from pathlib import Path
from types import FrameType
from typing import ClassVar, NoReturn

from ddpcheck.errors import EXIT_COULD_NOT_COMPLETE, EXIT_INTERRUPTED
from ddpcheck.errors import say as say_line
from ddpcheck.failure import own_sessions
from ddpcheck.failure.rank_env import ranks_given
from ddpcheck.rank import arrival, remover

LINE = "ddpcheck: interrupted; every rank was stopped"


class Mode(Enum):
    """What a signal does now: the process leaves at once, or the signal is noted (and raised once)."""

    LEAVE = "leave"
    NOTE = "note"
    RAISE_ONCE = "raise once"


class _State:
    mode: ClassVar[Mode] = Mode.LEAVE
    stopped: ClassVar[threading.Event] = threading.Event()  # a signal came; set for the rest of the process
    removals: ClassVar[list[Path]] = []
    say: ClassVar[bool] = True  # False on an inline rank other than 0: one line per run, rank 0's
    leaving: ClassVar[threading.Lock] = threading.Lock()
    launcher_watched: ClassVar[bool] = False
    sigterm_ignored: ClassVar[bool] = False  # ignore_sigterm: for the rest of the process


# How often a launcher's rank looks whether the launcher is still there.
LAUNCHER_LOOK_S = 0.5


def install(noted_before: list[int] | None = None, parent: int | None = None) -> None:
    """From here on a Ctrl-C ends this process at once and cleanly (see `leave`).

    A SIGINT that is ignored stays ignored: a shell starts background jobs so, and Ctrl-C
    is not meant for them. A rank of a launcher also leaves when the launcher is gone.
    `noted_before`: the signals the entry point noted while this module loaded, read once this
    handler is in place (a signal comes to one or the other, never to neither); one is a Ctrl-C.
    `parent`: the process that started this one, as the entry point read it first (default: now).
    """
    speak(_first_rank(os.environ))
    # Python finds the temp directory by making and removing a file in it: leaving between the two
    # leaves that file. Asked now, before a Ctrl-C can leave at once; none at all is for later to say.
    with contextlib.suppress(OSError):
        tempfile.gettempdir()
    if signal.getsignal(signal.SIGINT) is not signal.SIG_IGN:
        signal.signal(signal.SIGINT, _on_signal)
    if noted_before:
        _on_signal(signal.SIGINT, None)
    if ranks_given(os.environ):
        _leave_with_launcher(os.getppid() if parent is None else parent)


def leave_on_sigterm() -> None:
    """An inline rank about to make its run directory: a launcher's SIGTERM (another rank failed;
    mpirun on a Ctrl-C) now leaves the same clean way, until the run answers it itself
    (act_from_a_thread); by default the rank would die there, its run directory left."""
    if signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
        signal.signal(signal.SIGTERM, _on_signal)


def _leave_with_launcher(parent: int) -> None:
    """Once the process that started this rank is gone, act as on a Ctrl-C: it was most likely one.

    mpirun ended by a second Ctrl-C leaves its ranks running: one still importing torch or
    joining the others would wait out its rendezvous timeout, one giving up could not remove its
    run directory, and `watch` per task would leave the user's job running. A SIGINT of its own
    takes each of them the way a Ctrl-C does, whatever it is doing then. A launcher that died
    before the entry point's first line ran is not seen: its orphan waits out its rendezvous.
    """
    if _State.launcher_watched:
        return
    _State.launcher_watched = True

    def watch() -> None:
        block_in_this_thread()
        while os.getppid() == parent:
            time.sleep(LAUNCHER_LOOK_S)
        if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
            leave(EXIT_COULD_NOT_COMPLETE, say=False)
        os.kill(os.getpid(), signal.SIGINT)

    threading.Thread(target=watch, name="ddpcheck-launcher-watch", daemon=True).start()


def speak(say: bool) -> None:
    """Whether this process says the line when interrupted: under torchrun, srun or mpirun rank 0 does."""
    _State.say = say


def _first_rank(environ: Mapping[str, str]) -> bool:
    """Before the CLI knows whether it runs as a rank: not a rank other than 0 of a launch."""
    return all(rank == "0" for rank in ranks_given(environ))


def leave(code: int = EXIT_INTERRUPTED, say: bool = True) -> NoReturn:
    """End an interrupted process: flush what it owes, remove its temp paths, say so once, exit 130.

    `say=False`: a process that leaves for another reason (its launcher died) says nothing here.

    os._exit: the interpreter's teardown would destroy torch's native threads (the agent's
    store, gloo's) un-joined, which calls std::terminate, and could block on dead sockets.
    Called from the main thread's handler and `act_from_a_thread`'s at once, one of them leaves.
    """
    if not _State.leaving.acquire(blocking=False):
        while True:  # the other caller is leaving; this one waits for the process to end
            time.sleep(1)
    for stream in (sys.stdout, sys.stderr):
        # The signal may have come in the middle of a write to this very stream (a reentrant call).
        with contextlib.suppress(Exception):
            stream.flush()
    own_sessions.kill_all()
    for path in _State.removals:
        remover.remove_now(path)
    arrival.leave()
    if _State.say and say:
        say_line(LINE)
    os._exit(code)


def act_from_a_thread(on_sigterm: Callable[[], None]) -> None:
    """A rank under torchrun, srun or mpirun: act on SIGINT and SIGTERM even while the main thread
    waits in native code (joining the process group, a collective whose peers are gone).

    No Python handler runs there until that wait returns: torchrun kills a rank that took 30 s
    over a Ctrl-C (its run directory left behind), and torchrun, srun and mpirun stop every rank
    with SIGTERM once one failed, answered only after the collective's timeout. The C-level
    handler writes each signal to the wakeup pipe at once: a thread reads it, leaves on SIGINT,
    and on the first SIGTERM calls `on_sigterm` on a thread of its own (a Ctrl-C still leaves).
    """
    read, write = os.pipe()
    os.set_blocking(write, False)
    signal.set_wakeup_fd(write, warn_on_full_buffer=False)
    signal.signal(signal.SIGTERM, lambda signum, frame: None)

    def watch() -> None:
        answered = False
        while data := os.read(read, 64):
            if signal.SIGTERM in data and not answered:
                answered = True
                threading.Thread(target=on_sigterm, name="ddpcheck-sigterm", daemon=True).start()
            if signal.SIGINT in data and signal.getsignal(signal.SIGINT) is _on_signal:
                _State.stopped.set()
                _leave_once_listed(EXIT_INTERRUPTED)

    threading.Thread(target=watch, name="ddpcheck-sigint", daemon=True).start()


def interrupted() -> bool:
    """Whether a Ctrl-C (or, while ranks ran, a SIGTERM) came."""
    return _State.stopped.is_set()


def remove_on_leave(path: Path) -> None:
    """A temp path that an interrupted process removes before it leaves."""
    _State.removals.append(path)


def forget(path: Path) -> None:
    """The path is removed or handed over (a kept log directory): leaving no longer removes it."""
    with contextlib.suppress(ValueError):
        _State.removals.remove(path)


@contextlib.contextmanager
def deferred(raise_once: bool = False, sigterm: bool = True) -> Iterator[threading.Event]:
    """While ranks run: a Ctrl-C (and a SIGTERM, with `sigterm`) is noted, not acted on at once.

    Yields the event that a signal sets; the caller polls it, or with `raise_once` gets one
    KeyboardInterrupt in its main thread, ends what it started, and leaves. Off the main
    thread (a test calling in) the signals keep whatever handlers they have.
    """
    if threading.current_thread() is not threading.main_thread():
        yield _State.stopped
        return
    wanted = [signal.SIGINT, *([signal.SIGTERM] if sigterm else [])]
    previous_mode = _State.mode
    previous = {sig: signal.getsignal(sig) for sig in wanted}
    _State.mode = Mode.RAISE_ONCE if raise_once else Mode.NOTE
    for sig in wanted:
        if previous[sig] is not signal.SIG_IGN:
            signal.signal(sig, _on_signal)
    try:
        yield _State.stopped
    finally:
        _State.mode = previous_mode
        for sig, handler in previous.items():
            if not (sig == signal.SIGTERM and _State.sigterm_ignored):
                signal.signal(sig, handler)


def ignore_sigterm() -> None:
    """This process's account is complete (a rank's, a watcher's): it exits with its verdict. A
    launcher's SIGTERM now (srun -K ending the step once the first task exited) would only turn
    that verdict into "Terminated" and leave what it was removing: ignored for the rest of the
    process, also by a `deferred` that ends later and during interpreter teardown, where Python
    restores the default handler of the ones it set."""
    _State.sigterm_ignored = True
    signal.signal(signal.SIGTERM, signal.SIG_IGN)


def _on_signal(signum: int, frame: FrameType | None) -> None:
    if _State.leaving.locked():  # a second Ctrl-C while leaving: a nested leave() waited forever
        return
    if _State.mode is Mode.LEAVE:
        _State.stopped.set()
        _leave_once_listed(EXIT_INTERRUPTED if signum == signal.SIGINT else 128 + signum)
        return
    first = not _State.stopped.is_set()
    _State.stopped.set()
    if first and _State.mode is Mode.RAISE_ONCE:
        raise KeyboardInterrupt


def _leave_once_listed(code: int) -> None:
    """Leave now, or, while a tool is starting, as soon as it is listed to be killed (own_sessions)."""
    if not own_sessions.held(lambda: leave(code)):
        leave(code)


def block_in_this_thread() -> None:
    """Keep SIGINT and SIGTERM off this (helper) thread and the native threads it starts.

    A process-wide signal goes to any thread that does not block it; one delivered to a
    thread inside torch's native code (the agent's store, a socket wait) interrupts that
    code's system call there. Blocked here, both reach only the main thread, where ddpcheck
    handles them. Processes started from this thread inherit the mask (ranks unblock them).
    """
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
