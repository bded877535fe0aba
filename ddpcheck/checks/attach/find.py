"""The job's rank processes on this node, from one pid (a launcher's or a rank's) or from all of /proc.

From a pid, the job's root is found by walking up while the parent is a launcher or carries a rank
variable (a rank's data-loader worker -> its rank -> torchrun -> mpirun ...); the ranks are the
root's descendants as `watch` finds them (failure/processes.py). srun's tasks are not its children
(slurmstepd starts them): they are the processes whose SLURM_SRUN_COMM_PORT is a port srun listens on.
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass, field

import psutil

from ddpcheck.errors import UsageError
from ddpcheck.failure.proc import maps_any
from ddpcheck.failure.processes import ProcessTree, RankProcess, argv_of, environ_of, is_launcher
from ddpcheck.failure.rank_env import has_rank

# Above the ranks but none of them: the launchers watch knows, and what starts ranks for them.
HELPERS = ("slurmstepd", "prterun", "prted", "orted", "hydra_pmi_proxy")


class NoJob(UsageError):
    """PID is no job, ended meanwhile, or cannot be read: one line, exit 2."""


@dataclass
class Job:
    roots: list[int]  # the processes the ranks were found under (ended by --kill, but never slurmstepd)
    ranks: dict[int, RankProcess]
    environ: dict[int, dict[str, str]] = field(default_factory=dict)  # rank -> its environment
    started: float = 0.0  # the earliest rank's start (time.time()): older dump files are another job's


def _name(proc: psutil.Process) -> str:
    try:
        return proc.name()
    except psutil.Error:
        return "?"


def is_python(proc: psutil.Process) -> bool:
    argv = argv_of(proc)
    words = [os.path.basename(argv[0]) if argv else "", _name(proc)]
    return any(w.startswith("python") for w in words)


def is_starter(proc: psutil.Process) -> bool:
    """A launcher, or what starts ranks for one (slurmstepd, Open MPI's daemons)."""
    argv = argv_of(proc)
    return is_launcher(argv) or _name(proc) in HELPERS or any(h in " ".join(argv[:2]) for h in HELPERS)


def _check_readable(pid: int) -> psutil.Process:
    try:
        proc = psutil.Process(pid)
        proc.environ()
        return proc
    except psutil.NoSuchProcess:
        raise NoJob(f"PID {pid}: no such process") from None
    except psutil.AccessDenied:
        raise NoJob(
            f"PID {pid}: no rights to read it (its environment and memory are its owner's): "
            "run attach as its user, or as root"
        ) from None
    except psutil.Error as error:
        raise NoJob(f"PID {pid}: cannot read it: {error}") from None


def root_of(proc: psutil.Process) -> psutil.Process:
    """The topmost process of the job that `proc` belongs to, on this node."""
    root = proc
    mine = {os.getpid(), *(p.pid for p in psutil.Process().parents())}
    while True:
        try:
            parent = root.parent()
        except psutil.Error:
            return root
        # pid 1 is no stop of its own: in a container (or a node's pid namespace) torchrun is often pid 1.
        if parent is None or parent.pid in mine:
            return root
        if _name(parent) == "slurmstepd":
            return parent  # the step's tasks on this node are its children
        if not (is_starter(parent) or has_rank(environ_of(parent))):
            return root
        root = parent


def from_pid(pid: int) -> Job:
    proc = _check_readable(pid)
    if pid == os.getpid():
        raise NoJob(f"PID {pid}: that is this attach itself")
    if not (is_python(proc) or is_starter(proc)):
        raise NoJob(
            f"PID {pid} ({_name(proc)}) is no job: neither a python process nor a launcher "
            f"({', '.join(('torchrun', 'srun', 'mpirun'))})"
        )
    if _name(proc) == "srun" or os.path.basename((argv_of(proc) or [""])[0]) == "srun":
        roots = _srun_steps(proc)
    else:
        roots = [root_of(proc).pid]
    return _job(roots)


def _srun_steps(srun: psutil.Process) -> list[int]:
    """The slurmstepd on this node that started this srun's tasks (srun's ports are in their environment)."""
    try:
        ports = {str(c.laddr.port) for c in srun.net_connections("tcp") if c.status == psutil.CONN_LISTEN}
    except psutil.Error:
        ports = set()
    roots = []
    for proc in psutil.process_iter(["name"]):
        if proc.info["name"] in ("slurmstepd", "srun") or proc.pid == os.getpid():
            continue
        environ = environ_of(proc)
        if ports and environ.get("SLURM_SRUN_COMM_PORT") in ports and has_rank(environ):
            root = root_of(proc)
            if root.pid not in roots:
                roots.append(root.pid)
    if not roots:
        raise NoJob(
            f"PID {srun.pid} (srun): none of its tasks runs on this node "
            "(attach on the tasks' nodes: srun --overlap --jobid J ddpcheck attach --all)"
        )
    return roots


def from_all() -> Job:
    """Every rank process on this node: a python with a rank variable, under a launcher or loading torch."""
    mine = {os.getpid(), *(p.pid for p in psutil.Process().parents())}
    # Under srun (--overlap --jobid J): only job J's processes, not another job's sharing the node.
    slurm_job = os.environ.get("SLURM_JOB_ID")
    roots: list[int] = []
    for proc in psutil.process_iter(["name"]):
        if proc.pid in mine or not is_python(proc) or is_starter(proc):
            continue
        environ = environ_of(proc)
        if not has_rank(environ) or "ddpcheck" in " ".join(argv_of(proc)[:3]):
            continue
        if slurm_job and environ.get("SLURM_JOB_ID") != slurm_job:
            continue
        try:
            under_launcher = is_starter(proc.parent()) if proc.parent() else False
        except psutil.Error:
            continue
        if not (under_launcher or maps_any(proc.pid, "libtorch")):
            continue
        root = root_of(proc)
        if root.pid not in roots:
            roots.append(root.pid)
    if not roots:
        within = f" of Slurm job {slurm_job}" if slurm_job else ""
        raise NoJob(f"--all: no rank process{within} on this node (no python with RANK, SLURM_PROCID, ...)")
    if len(roots) > 1 and not slurm_job:
        shown = ", ".join(f"{pid} ({' '.join(argv_of(psutil.Process(pid))[:3])[:40]})" for pid in roots)
        raise NoJob(f"--all: {len(roots)} jobs on this node, under pids {shown}: attach one by its pid")
    return _job(roots)


def _job(roots: list[int]) -> Job:
    ranks: dict[int, RankProcess] = {}
    environ: dict[int, dict[str, str]] = {}
    started: list[float] = []
    for root in roots:
        tree = ProcessTree(root)
        found = tree.ranks()
        clash = set(found) & set(ranks)
        if clash:
            raise NoJob(
                f"several jobs on this node (under pids {', '.join(map(str, roots))}) carry the same ranks: "
                "attach one of them by its pid"
            )
        ranks.update(found)
        for rank, process in found.items():
            environ[rank] = tree.environ_of_pid(process.pid)
            with contextlib.suppress(psutil.Error):
                started.append(psutil.Process(process.pid).create_time())
    if not ranks:
        raise NoJob(f"PID {roots[0]}: no rank process under it (the job ended, or has not started its ranks)")
    return Job(roots, ranks, environ, min(started) if started else 0.0)
