"""An inline rank's presence on its host from its first instant, before torch is imported.

Under torchrun, srun and mpirun the launcher tells a rank its number and the world's size in
its environment; nothing else is shared until the rank has imported torch and reached the store.
A rank that freezes or dies before that (a sick filesystem under `import torch`, the OOM killer)
left nothing its peers could read. So the entry point, before anything heavy, writes one small
file for this rank into a directory of the job's own on this host, `$TMPDIR/ddpcheck-job-<job>/`,
named `rank-<rank>-<pid>.json`, and rewrites it at each stage. A peer that gives up, or that its
launcher stops, reads it: the rank's pid, its stage, and its process's state (stopped, running,
a zombie, gone) say what became of it.

A rank removes its own file when it leaves. One that dies outright cannot: its file stays, so
that the peers can still say where it died, until the last rank of the job on this host is gone.
Each rank has a remover, a shell outside the rank's process tree that wakes when the rank is gone
however it went, and removes the directory once no live rank holds a file there: the last one
cleans up, and nothing of the job is left on the host.

Standard library only: the entry point loads it before Typer and torch.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import tempfile
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from ddpcheck.command import RANKED_COMMANDS  # the one declaration asked, loaded alone
from ddpcheck.failure.proc import ProcState, cmdline, state_of
from ddpcheck.failure.proc import environ as environ_of  # beside this module's own `environ` arguments
from ddpcheck.failure.rank_env import MPI_LOCAL_SIZE_VARIABLES, Launcher, launcher_of, rank_variable
from ddpcheck.failure.stages import DONE, KILLED_AFTER_ITS_PART, LEFT, STARTING, TERMINATED, WRITING_REPORT
from ddpcheck.failure.stages import IMPORTING_TORCH as IMPORTING_TORCH  # the entry point enters it here
from ddpcheck.rank import remover

JOB_PREFIX = "ddpcheck-job-"
REMOVER_NAME = "ddpcheck-job-remover"  # the remover shell's $0: how it is told from a rank
ENDED_AFTER = "ended-after"  # made by the remover that names the first such rank here
ENDED_FIRST = "ended-first"  # holds the file of the first rank that ended without a word while a peer ran
# Options that mean "launch ranks from here", even inside a launcher (launcher/plan.detect_inline).
LAUNCH_OPTIONS = ("--nproc", "--gpus", "--nnodes")


def remover_script() -> str:
    """The remover's shell (rank/remover.sh says what it does), with the stage names it reads; read
    when a rank starts one, not when `ddpcheck --help` loads this module."""
    return remover.script(
        "remover.sh", left=LEFT, finished=DONE, writing=WRITING_REPORT, terminated=TERMINATED
    )


@dataclass(frozen=True)
class Identity:
    """Who this process is in its launch, from the launcher's own variables."""

    rank: int
    world_size: int
    launcher: Launcher
    job: str  # the same for every rank of one launch, on every host
    rank_variable: str  # where the launcher put the rank: how a peer's process is known by its rank
    local_world_size: int  # ranks of the job on this host (0: not known)


@dataclass(frozen=True)
class RankFile:
    """What a rank's file and its process say about it, read by a peer on the same host."""

    rank: int
    pid: int
    host: str
    stage: str
    since: float  # when it entered the stage (time.time, this host's clock)
    state: ProcState


def identity(environ: dict[str, str] | os._Environ[str], argv: list[str]) -> Identity | None:
    """This process's rank in an inline launch of a ranked command, or None (not a rank; own launch)."""
    words = [a for a in argv if not a.startswith("-")]
    if not words or words[0] not in RANKED_COMMANDS:
        return None
    if any(a == o or a.startswith(o + "=") for a in argv for o in LAUNCH_OPTIONS):
        return None
    launcher = launcher_of(environ)
    if launcher is Launcher.NONE:
        return None
    rank, world, job = _launcher_variables(environ, launcher)
    if not (rank.isdigit() and world.isdigit()):
        return None
    here = _local_world(environ, launcher, int(world))
    job = re.sub(r"[^A-Za-z0-9_.-]", "_", job)[:80]  # a directory's name
    return Identity(int(rank), int(world), launcher, job, rank_variable(environ) or "", here)


def _local_world(environ: dict[str, str] | os._Environ[str], launcher: Launcher, world: int) -> int:
    if launcher is Launcher.SRUN:
        return world if environ.get("SLURM_STEP_NUM_NODES", environ.get("SLURM_NNODES")) == "1" else 0
    value = next((environ[n] for n in ("LOCAL_WORLD_SIZE", *MPI_LOCAL_SIZE_VARIABLES) if environ.get(n)), "")
    return int(value) if value.isdigit() else 0


def _launcher_variables(
    environ: dict[str, str] | os._Environ[str], launcher: Launcher
) -> tuple[str, str, str]:
    """(rank, world size, job) as `launcher` gives them."""
    get = environ.get
    if launcher is Launcher.TORCHRUN:
        # --rdzv-id defaults to "none": the agent's store port tells two launches on one host apart.
        job = (
            f"t{get('TORCHELASTIC_RUN_ID')}-{get('MASTER_PORT', '')}-{get('TORCHELASTIC_RESTART_COUNT', '0')}"
        )
        return get("RANK", ""), get("WORLD_SIZE", ""), job
    if launcher is Launcher.MPIRUN and "OMPI_COMM_WORLD_RANK" in environ:
        job = get("OMPI_MCA_ess_base_jobid") or get("PMIX_NAMESPACE") or str(os.getppid())
        return get("OMPI_COMM_WORLD_RANK", ""), get("OMPI_COMM_WORLD_SIZE", ""), f"m{job}"
    if launcher is Launcher.MPIRUN:
        job = get("PMI_JOBID") or get("PMIX_NAMESPACE") or str(os.getppid())
        return get("PMI_RANK", ""), get("PMI_SIZE", ""), f"p{job}"
    step = get("SLURM_STEP_ID") or get("SLURM_STEPID", "")
    world = get("SLURM_STEP_NUM_TASKS") or get("SLURM_NTASKS", "")
    return get("SLURM_PROCID", ""), world, f"s{get('SLURM_JOB_ID')}.{step}"


def job_dir(job: str) -> Path:
    return Path(tempfile.gettempdir()) / f"{JOB_PREFIX}{job}"


class Arrival:
    """This rank's file in the job's directory: made now, rewritten at each stage, removed on leaving."""

    def __init__(self, me: Identity) -> None:
        self.identity = me
        self.dir = job_dir(me.job)
        self.launcher = os.getppid()  # its other children are this rank's siblings
        self.stage_name = ""
        with contextlib.suppress(FileExistsError):
            self.dir.mkdir(mode=0o700)
        # The shell that removes the directory once this rank, and every other here, is gone; its
        # stderr is the rank's: where the user reads what became of a stopped rank.
        args = [REMOVER_NAME, str(self.dir), str(os.getpid()), str(self.launcher), me.rank_variable]
        remover.start(remover_script(), args, stderr=True)
        self.stage(STARTING)

    def stage(self, name: str) -> None:
        """Enter a stage (only a change is written: a file of ~150 bytes, replaced whole). Once its
        launcher stopped it, that stays: the heartbeat, still beating meanwhile, republishes the stage
        the rank was in, which would make it a rank that ended mid-run for the peers that judge later."""
        if name == self.stage_name or self.stage_name == TERMINATED:
            return
        self.stage_name = name
        _write(self.dir, self.identity.rank, os.getpid(), name, time.time())

    def record_for(self, rank: int, pid: int, stage: str, since: float) -> None:
        """A file for a peer that had none (stopped before it could write one), which this rank ended:
        the peers that judge later still find where it was."""
        _write(self.dir, rank, pid, stage, since)

    def leave(self) -> None:
        """This rank ends by itself. Its file stays, saying so (a peer that finds no file of a rank takes
        it for one killed before it could write one), unless its launcher stopped it first (SIGTERM:
        the file says that already); the directory goes if this was the last rank here."""
        if self.stage_name != TERMINATED:
            self.stage(LEFT)
        announced = list(read(self.dir).values())
        pids = {p.pid for p in announced}
        if (
            all(p.state.ended for p in announced if p.pid != os.getpid())
            and not unannounced_siblings(self.identity.rank_variable, pids, self.launcher)
            and not killed_after_its_part_unnamed(self.dir, announced)
        ):
            # ended-first/ too: a rank that said its word leaves nothing for a remover to say.
            remove_job_dir(self.dir)


def remove_job_dir(directory: Path) -> None:
    """Renamed away, then removed: a remover that looks meanwhile finds no directory. One half emptied
    (`said/` gone, ended-first/ still there) would let a second remover say its line again.
    Named by this process's pid: if it is killed mid-removal (mpirun's teardown), its own remover,
    which knows that pid, removes the rest."""
    gone = directory.with_name(f"{directory.name}.gone-{os.getpid()}")
    try:
        os.rename(directory, gone)
    except FileNotFoundError:
        return  # removed by another meanwhile
    except OSError:
        gone = directory  # a leftover of that name from a reused pid: remove in place
    shutil.rmtree(gone, ignore_errors=True)


def killed_after_its_part_unnamed(directory: Path, announced: Iterable[RankFile]) -> bool:
    """A rank here ended at 'done' or 'writing the report' (killed after its part of the run) that its
    remover has not named yet (no ended-after/), nor set aside for an earlier end (no ended-first/):
    the directory is left to that remover, which names it and then removes it."""
    if (directory / ENDED_AFTER).is_dir() or (directory / ENDED_FIRST).is_dir():
        return False
    return any(p.stage in KILLED_AFTER_ITS_PART and p.state.ended for p in announced)


def unannounced_siblings(rank_variable: str, announced: set[int], launcher: int) -> list[int]:
    """Live ranks of this launch beside this one with no file yet: stopped, or slow, before they could
    write one. Their peers' files must stay, or such a rank, continued later, would find none and take
    its peers for never arrived."""
    found = siblings(rank_variable, launcher)
    return [pid for pid in found if pid not in announced and not state_of(pid).ended]


def siblings(rank_variable: str, launcher: int) -> dict[int, str]:
    """pid -> its `rank_variable`, of every other process this rank's launcher started (its children
    that carry the variable; a remover of an earlier rank here carries that rank's environment: not one).

    None once the launcher is gone: this rank's parent is then init, whose children are anybody's
    (other jobs' removers, which carry their rank's environment, would keep a directory)."""
    parent, me, found = os.getppid(), os.getpid(), {}
    if parent != launcher:
        return {}
    try:
        tasks = os.listdir(f"/proc/{parent}/task")
    except OSError:
        return {}
    for task in tasks:
        try:
            with open(f"/proc/{parent}/task/{task}/children") as children:
                pids = [int(pid) for pid in children.read().split()]
        except (OSError, ValueError):
            continue
        for pid in pids:
            if pid == me or REMOVER_NAME.encode() in cmdline(pid).split(b"\0"):
                continue
            variables = environ_of(pid) or {}  # gone meanwhile: none
            if rank_variable in variables:
                found[pid] = variables[rank_variable]
    return found


def _write(directory: Path, rank: int, pid: int, stage: str, since: float) -> None:
    path = directory / f"rank-{rank}-{pid}.json"
    # os.uname().nodename is socket.gethostname(), without loading socket before Typer (--help).
    record = {"rank": rank, "pid": pid, "host": os.uname().nodename, "stage": stage, "since": since}
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with contextlib.suppress(OSError):
        try:
            tmp.write_text(json.dumps(record))
        except FileNotFoundError:
            # A peer that left before this rank arrived thought itself the last, and removed it.
            directory.mkdir(mode=0o700, exist_ok=True)
            tmp.write_text(json.dumps(record))
        os.replace(tmp, path)


def read(directory: Path) -> dict[int, RankFile]:
    """Every rank's last file in `directory`, with its process's state; the newest file per rank."""
    found: dict[int, RankFile] = {}
    for path in directory.glob("rank-*-*.json"):
        try:
            record = json.loads(path.read_text())
            presence = RankFile(
                rank=int(record["rank"]),
                pid=int(record["pid"]),
                host=str(record["host"]),
                stage=str(record["stage"]),
                since=float(record["since"]),
                state=state_of(int(record["pid"])),
            )
        except (OSError, ValueError, KeyError, TypeError):
            continue  # being replaced, or half-written by a rank killed mid-write
        old = found.get(presence.rank)
        if (
            old is None
            or (old.state.ended and not presence.state.ended)
            or (old.state.ended == presence.state.ended and presence.since > old.since)
        ):
            found[presence.rank] = presence
    return found


# This process's arrival, once the entry point made it (None: not an inline rank).
current: Arrival | None = None


def start(environ: dict[str, str] | os._Environ[str], argv: list[str]) -> Arrival | None:
    """Announce this process on its host if it is a rank of an inline launch; at most once."""
    global current
    if current is None:
        me = identity(environ, argv)
        if me is not None:
            with contextlib.suppress(OSError):
                sweep_abandoned(keep=job_dir(me.job))
                current = Arrival(me)
    return current


def stage(name: str) -> None:
    """Enter a stage, if this process announced itself (nothing otherwise)."""
    if current is not None:
        current.stage(name)


def leave() -> None:
    """This process ends by itself (its verdict, an error, a signal it answered): its file goes."""
    if current is not None:
        current.leave()


class StageTransport:
    """The harness's status channel, seen from here: each stage the rank enters goes into its file."""

    def publish(self, record: object) -> None:
        stage(str(getattr(record, "stage", "")))


def sweep_abandoned(keep: Path | None = None, older_than_s: float = 60.0) -> None:
    """Job directories of earlier launches where no file names a live rank, removed: every rank there
    was killed together with its remover (Slurm ends a whole step's cgroup at once). One younger than
    `older_than_s` may be a job whose first rank has not yet written its file: it stays."""
    for directory in Path(tempfile.gettempdir()).glob(f"{JOB_PREFIX}*"):
        try:
            if directory == keep or time.time() - directory.stat().st_mtime < older_than_s:
                continue
            if not all(p.state.ended for p in read(directory).values()):
                continue
            remove_job_dir(directory)
        except OSError:
            continue  # another user's, or removed meanwhile by its own remover
