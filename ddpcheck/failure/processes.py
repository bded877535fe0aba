"""Other processes, read and ended: the job's rank processes (a launcher's descendants, each with the
rank its environment gives), and ending a group of them. A process's state by its pid: failure/proc.py.

Shared by `watch` (the job it started), `attach` (a job it finds), the launcher's monitor and the ranks.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import psutil

from ddpcheck.failure import own_sessions
from ddpcheck.failure.proc import environ, state_of
from ddpcheck.failure.rank_env import RANK_VARIABLES, has_rank, is_python_helper, single_node_rank

# How long a process has to end after SIGTERM, and again after SIGKILL, before it is given up on.
GRACE_S = 5.0
_POLL_S = 0.05

TORCHRUN_MODULES = ("torch.distributed.run", "torch.distributed.launch")  # `python -m` these: torchrun
# The root of a job that is a launcher: none of its own processes is a rank until it starts them.
LAUNCHERS = ("torchrun", *TORCHRUN_MODULES, "mpirun", "mpiexec", "srun")


@dataclass(frozen=True)
class RankProcess:
    rank: int
    pid: int
    host: str


class ProcessTree:
    """Finds the rank processes under one root (the job's first process); reads a rank's environment once."""

    def __init__(
        self,
        root_pid: int,
        root_environ: dict[str, str] | None = None,
        declared: Callable[[int], int | None] | None = None,
    ) -> None:
        """`root_environ`: the environment the root was started with, when the caller started it.

        Read from /proc, a process being exec'd shows an empty environment: under srun (one watcher
        per task) task 2's job was then taken for rank 0 as well, a world of 4. Given, it is known.
        `declared`: a pid's rank as torch.distributed gave it (watch's rank records), None where not
        known: it wins over the environment (a framework's own ranks carry no rank variable).
        """
        self.root_pid = root_pid
        self.host = socket.gethostname()
        self._declared = declared
        self._declared_ranks: dict[int, int] = {}
        self._environ: dict[int, dict[str, str]] = {}
        self._helpers: set[int] = set()
        if root_environ is not None and has_rank(root_environ):
            self._environ[root_pid] = dict(root_environ)

    def descendants(self) -> list[psutil.Process]:
        try:
            root = psutil.Process(self.root_pid)
            return [root, *root.children(recursive=True)]
        except psutil.Error:
            return []

    def ranks(self) -> dict[int, RankProcess]:
        """Rank -> its process: the topmost process carrying that rank (its workers carry it too)."""
        found: dict[int, tuple[int, int]] = {}  # rank -> (depth, pid)
        procs = self.descendants()
        parents = _parents(procs)
        environs = {proc.pid: self._environ_of(proc) for proc in procs}  # one read of each per scan
        variable = next((n for n in RANK_VARIABLES if any(n in e for e in environs.values())), None)
        for proc in procs:
            if self._is_helper(proc):
                continue
            rank = self.declared_rank(proc.pid)
            if rank is None:
                rank = self._rank_in_environ(proc, environs[proc.pid], variable)
            if rank is None:
                continue
            depth = _depth(proc.pid, parents, self.root_pid)
            if rank not in found or depth < found[rank][0]:
                found[rank] = (depth, proc.pid)
        return {rank: RankProcess(rank, pid, self.host) for rank, (_, pid) in sorted(found.items())}

    def _rank_in_environ(
        self, proc: psutil.Process, environ: dict[str, str], variable: str | None
    ) -> int | None:
        """Its rank as its environment gives it: `variable` (torchrun's RANK over the outer launcher's);
        where no process has one, a framework's local rank, and else the root (a plain
        `python train.py`) is rank 0."""
        if variable is not None:
            value = environ.get(variable, "")
            return int(value) if value.isdigit() else None
        rank = single_node_rank(environ)
        if rank is None and proc.pid == self.root_pid and not self._is_launcher(proc):
            return 0
        return rank

    def _is_helper(self, proc: psutil.Process) -> bool:
        if proc.pid in self._helpers:
            return True
        helper = is_python_helper(argv_of(proc))
        if helper:
            self._helpers.add(proc.pid)
        return helper

    def _is_launcher(self, proc: psutil.Process) -> bool:
        try:
            return is_launcher(proc.cmdline())
        except psutil.Error:
            return True

    def guessed(self, pid: int) -> bool:
        """Whether `pid` was taken for rank 0 only because no process of the job carried a rank."""
        return (
            pid == self.root_pid
            and not has_rank(self._environ.get(pid, {}))
            and self.declared_rank(pid) is None
        )

    def declared_rank(self, pid: int) -> int | None:
        """The rank torch.distributed gave `pid`, kept once known."""
        if pid not in self._declared_ranks and self._declared is not None:
            rank = self._declared(pid)
            if rank is not None:
                self._declared_ranks[pid] = rank
        return self._declared_ranks.get(pid)

    def environ_of_pid(self, pid: int) -> dict[str, str]:
        """A process's environment: the copy a scan kept where it names a rank, else read now."""
        return self._environ.get(pid) or environ(pid) or {}

    def _environ_of(self, proc: psutil.Process) -> dict[str, str]:
        """Its environment; kept once it names a rank. One without is read again at the next scan: a
        process the launcher has forked but not yet exec'd still shows the launcher's environment,
        and kept so, that rank would never be seen (docs/watch.md)."""
        if proc.pid in self._environ:
            return self._environ[proc.pid]
        environ = environ_of(proc)
        if has_rank(environ):
            self._environ[proc.pid] = environ
        return environ


def argv_of(proc: psutil.Process) -> list[str]:
    """Its command line, empty when it cannot be read (gone, another user's)."""
    try:
        return proc.cmdline()
    except psutil.Error:
        return []


def environ_of(proc: psutil.Process) -> dict[str, str]:
    """Its environment, empty when it cannot be read (gone, another user's)."""
    return environ(proc.pid) or {}


def is_launcher(argv: list[str]) -> bool:
    """torchrun, mpirun or srun itself: its ranks are yet to come, it is none of them."""
    words = " ".join(argv[:3])
    return any(name in words for name in LAUNCHERS)


def _depth(pid: int, parents: dict[int, int], root: int | None = None) -> int:
    """How many parents up `pid` is from `root`, or from the first whose parent `parents` does not hold."""
    depth = 0
    while pid != root and pid in parents and depth < 64:
        pid = parents[pid]
        depth += 1
    return depth


def end(
    procs: Iterable[psutil.Process], *, sigterm: bool = True, grace_s: float = GRACE_S
) -> list[psutil.Process]:
    """End these processes: SIGTERM, each once and a child before its parent (a stopped one continued,
    to act on it), then SIGKILL what still runs `grace_s` after it was free to act on it; without
    `sigterm`, SIGKILL at once. Returns those SIGKILL was sent to.

    Ended means a zombie or gone: a zombie is its parent's to reap (psutil's wait_procs would reap a
    child of this process, its exit status lost to the Popen that started it, and wait the whole
    grace on another's zombie).
    """
    procs = list(procs)
    left = _terminate_children_first(procs, grace_s) if sigterm else procs
    _send(left, signal.SIGKILL)
    _running_after(left, grace_s)
    return left


def _terminate_children_first(procs: list[psutil.Process], grace_s: float) -> list[psutil.Process]:
    """SIGTERM every one of `procs`; those not ended within `grace_s` of being free to act on it.

    A parent among them is held stopped (SIGSTOP) until its children have ended or had their grace: a
    launcher sends its own SIGTERM on to its ranks (torchrun does), and a second SIGTERM that lands
    while a rank's chained faulthandler still writes watch's record of it ends the rank mid-record.
    """
    parent = _parents(procs)
    depth = {proc.pid: _depth(proc.pid, parent) for proc in procs}
    parents = [proc for proc in procs if proc.pid in parent.values()]
    try:
        _send(parents, signal.SIGSTOP)
        _send(procs, signal.SIGTERM)
        for level in sorted(set(depth.values()), reverse=True):
            group = [proc for proc in procs if depth[proc.pid] == level]
            _send(group, signal.SIGCONT)
            _running_after(group, grace_s)
    finally:
        _send(parents, signal.SIGCONT)
    return [proc for proc in procs if not state_of(proc.pid).ended]


def _parents(procs: list[psutil.Process]) -> dict[int, int]:
    """pid -> its parent's pid, for those of `procs` whose parent is one of them."""
    pids = {proc.pid for proc in procs}
    parent = {}
    for proc in procs:
        with contextlib.suppress(psutil.Error):
            parent[proc.pid] = proc.ppid()
    return {pid: ppid for pid, ppid in parent.items() if ppid in pids}


def _send(procs: list[psutil.Process], *signals: signal.Signals) -> None:
    for proc in procs:
        for sig in signals:
            with contextlib.suppress(psutil.Error):
                proc.send_signal(sig)


def _running_after(procs: list[psutil.Process], seconds: float) -> list[psutil.Process]:
    """Those of `procs` not ended within `seconds`."""
    deadline = time.monotonic() + seconds
    left = [proc for proc in procs if not state_of(proc.pid).ended]
    while left and time.monotonic() < deadline:
        time.sleep(_POLL_S)
        left = [proc for proc in left if not state_of(proc.pid).ended]
    return left


def started(argv: list[str]) -> subprocess.Popen[str]:
    """`argv` started for its output (text), in a session of its own: a timeout then kills it with
    anything it started (output_within), and so does a process that leaves at once (own_sessions).
    Raises OSError when it cannot start."""
    return own_sessions.start(
        lambda: subprocess.Popen(
            argv,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            stdin=subprocess.DEVNULL,
            text=True,
            start_new_session=True,
        )
    )


def output_within(proc: subprocess.Popen[str], timeout_s: float) -> str | None:
    """The output of a command started in a session of its own; None when it ran past `timeout_s`,
    and then it is killed with whatever it started (its process group)."""
    try:
        out, _ = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except OSError:
            proc.kill()
        proc.communicate()
        return None
    return out
