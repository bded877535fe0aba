"""The job's rank processes: the launcher's descendants, each with the rank its environment gives.

Shared by `watch` (the job it started) and `attach` (a job it finds).
"""

from __future__ import annotations

import socket
from dataclasses import dataclass

import psutil

# Where a rank's number comes from, first found first: torchrun's under any outer launcher. The same
# as checks/watch/agent.py's (which runs inside the job, standard library only); a test keeps them equal.
RANK_VARIABLES = ("RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "SLURM_PROCID")

# Python's own helper processes, started by a rank or its launcher with the rank's environment: not
# ranks (multiprocessing's resource tracker, spawned with RANK=0 set, was taken for rank 0). The same
# as checks/watch/agent.py's; a test keeps them equal.
PYTHON_HELPERS = ("multiprocessing.resource_tracker", "multiprocessing.forkserver")

# The root of a job that is a launcher: none of its own processes is a rank until it starts them.
LAUNCHERS = ("torchrun", "torch.distributed.run", "torch.distributed.launch", "mpirun", "mpiexec", "srun")


@dataclass(frozen=True)
class RankProcess:
    rank: int
    pid: int
    host: str


class ProcessTree:
    """Finds the rank processes under one root (the job's first process); reads a rank's environment once."""

    def __init__(self, root_pid: int, root_environ: dict[str, str] | None = None) -> None:
        """`root_environ`: the environment the root was started with, when the caller started it.

        Read from /proc, a process being exec'd shows an empty environment: under srun (one watcher
        per task) task 2's job was then taken for rank 0 as well, a world of 4. Given, it is known.
        """
        self.root_pid = root_pid
        self.host = socket.gethostname()
        self._environ: dict[int, dict[str, str]] = {}
        self._helpers: set[int] = set()
        if root_environ is not None and any(name in root_environ for name in RANK_VARIABLES):
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
        parents = {}
        for proc in procs:
            try:
                parents[proc.pid] = proc.ppid()
            except psutil.Error:
                continue
        variable = self._rank_variable(procs)
        for proc in procs:
            if self._is_helper(proc):
                continue
            environ = self._environ_of(proc)
            if variable is None:
                rank = 0 if proc.pid == self.root_pid and not self._is_launcher(proc) else None
            else:
                value = environ.get(variable, "")
                rank = int(value) if value.isdigit() else None
            if rank is None:
                continue
            depth = _depth(proc.pid, parents, self.root_pid)
            if rank not in found or depth < found[rank][0]:
                found[rank] = (depth, proc.pid)
        return {rank: RankProcess(rank, pid, self.host) for rank, (_, pid) in sorted(found.items())}

    def _is_helper(self, proc: psutil.Process) -> bool:
        if proc.pid in self._helpers:
            return True
        try:
            helper = is_python_helper(proc.cmdline())
        except psutil.Error:
            return False
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
        return pid == self.root_pid and not any(name in self._environ.get(pid, {}) for name in RANK_VARIABLES)

    def _rank_variable(self, procs: list[psutil.Process]) -> str | None:
        """The variable that numbers the ranks: torchrun's RANK over the outer launcher's."""
        present = set()
        for proc in procs:
            present.update(name for name in RANK_VARIABLES if name in self._environ_of(proc))
        return next((name for name in RANK_VARIABLES if name in present), None)

    def _environ_of(self, proc: psutil.Process) -> dict[str, str]:
        """Its environment; kept once it names a rank. One without is read again at the next scan: a
        process the launcher has forked but not yet exec'd still shows the launcher's environment,
        and kept so, that rank would never be seen (docs/watch.md)."""
        if proc.pid in self._environ:
            return self._environ[proc.pid]
        try:
            environ = proc.environ()
        except psutil.Error:
            return {}
        if any(name in environ for name in RANK_VARIABLES):
            self._environ[proc.pid] = environ
        return environ


def is_launcher(argv: list[str]) -> bool:
    """torchrun, mpirun or srun itself: its ranks are yet to come, it is none of them."""
    words = " ".join(argv[:3])
    return any(name in words for name in LAUNCHERS)


def is_python_helper(argv: list[str]) -> bool:
    """`python -B -c "from multiprocessing.resource_tracker import main; ..."` and the like."""
    code = argv[argv.index("-c") + 1] if "-c" in argv[:-1] else ""
    return any(f"from {name} import" in code for name in PYTHON_HELPERS)


def _depth(pid: int, parents: dict[int, int], root: int) -> int:
    depth = 0
    while pid != root and pid in parents and depth < 64:
        pid = parents[pid]
        depth += 1
    return depth


def state(pid: int) -> str:
    """The process's state letter from /proc (R, S, D, T stopped, t traced, Z zombie), or 'gone'."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rpartition(")")[2].split()[0]
    except (OSError, IndexError):
        return "gone"


def alive(pid: int) -> bool:
    return state(pid) not in ("gone", "Z", "X")


def cpu_seconds(pid: int) -> float | None:
    try:
        times = psutil.Process(pid).cpu_times()
        return times.user + times.system
    except psutil.Error:
        return None
