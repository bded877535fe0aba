"""The launch plan: how many ranks of which kind, over which backend, from the options and this machine."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field

from ddpcheck.errors import UsageError
from ddpcheck.launcher import mpi, slurm
from ddpcheck.launcher.options import LaunchOptions
from ddpcheck.rank.budget import Budget
from ddpcheck.report.naming import counted

# torch's rank variables that hold a number, as torchrun sets them (or srun's and mpirun's, mapped).
NUMBERED = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK", "MASTER_PORT")


@dataclass
class LaunchPlan:
    """Resolved launch: how many ranks of which kind, over which backend."""

    nproc: int
    backend: str
    device: str  # "cuda" or "cpu"
    nnodes: int = 1
    node_rank: int = 0
    rdzv_endpoint: str | None = None
    timeout: float = 60.0  # --timeout: the bound on every wait
    notes: list[str] = field(default_factory=list)  # said before the launch, not part of the report
    device_index: int | None = None  # the GPU of this rank when not its local rank (inline runs)
    budget: Budget | None = None  # --budget, from this process's start

    @property
    def world_size(self) -> int:
        return self.nproc * self.nnodes

    def report_world(self) -> dict[str, int | str]:
        """The world a report of this launch names, when no rank 0 wrote one."""
        return {"size": self.world_size, "backend": self.backend, "device": self.device, "nodes": self.nnodes}


def plan_launch(opts: LaunchOptions) -> LaunchPlan:
    """Decide ranks, backend and device from the options and this machine (exit 2 if impossible)."""
    import torch
    import torch.distributed as dist

    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    backend = opts.backend
    notes: list[str] = []
    if backend == "nccl" and gpus == 0:
        raise UsageError("--backend nccl needs CUDA GPUs, and this machine has none visible; use gloo")
    if backend == "nccl" and not dist.is_nccl_available():
        raise UsageError("--backend nccl: this torch build has no NCCL; use gloo")
    if opts.gpus is not None:
        if opts.gpus > gpus:
            raise UsageError(f"--gpus {opts.gpus}: this machine has {counted(gpus, 'visible GPU')}")
        nproc, device = opts.gpus, "cuda"
    elif opts.nproc is not None:
        nproc = opts.nproc
        device = "cuda" if gpus and nproc <= gpus and backend != "gloo" else "cpu"
        if gpus and device == "cpu" and backend == "auto":
            notes.append(
                f"--nproc {nproc} is more ranks than this machine's {counted(gpus, 'GPU')} "
                f"(NCCL refuses two ranks on one GPU): running {nproc} CPU ranks over gloo"
            )
        if backend == "nccl" and nproc > gpus:
            raise UsageError(
                f"--nproc {nproc} over nccl needs {nproc} GPUs (NCCL refuses two ranks on one GPU); "
                f"this machine has {gpus}"
            )
    elif gpus and backend != "gloo":
        nproc, device = gpus, "cuda"
    else:
        nproc, device = 2, "cpu"
        if backend == "auto":
            notes.append("no GPU visible: running 2 CPU ranks over gloo")
    if backend == "auto":
        backend = "nccl" if device == "cuda" else "gloo"
    return LaunchPlan(
        nproc=nproc,
        backend=backend,
        device=device,
        nnodes=opts.nnodes,
        node_rank=opts.node_rank,
        rdzv_endpoint=opts.rdzv_endpoint,
        timeout=opts.timeout,
        notes=notes,
    )


def plan_inline(opts: LaunchOptions) -> LaunchPlan:
    """The plan of a process that torchrun, srun or mpirun already started as one rank."""
    import torch

    world_size = int(os.environ["WORLD_SIZE"])
    local_world = int(os.environ.get("LOCAL_WORLD_SIZE", world_size))
    local_rank = int(os.environ["LOCAL_RANK"])
    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    # Decide from what every rank of this node sees alike (LOCAL_WORLD_SIZE and the GPU count),
    # never from the local rank alone: a world whose ranks pick different backends hangs.
    # One GPU per task (srun --gpus-per-task=1) shows each rank its own GPU as cuda:0.
    device_index = local_rank if local_world <= gpus else 0 if gpus == 1 else None
    if opts.backend == "nccl" and device_index is None:
        raise UsageError(
            f"--backend nccl: {local_world} ranks on this node but {gpus} visible GPU(s); "
            "NCCL needs one GPU per rank"
        )
    device = "cuda" if opts.backend != "gloo" and device_index is not None else "cpu"
    backend = opts.backend if opts.backend != "auto" else ("nccl" if device == "cuda" else "gloo")
    return LaunchPlan(
        nproc=local_world,
        backend=backend,
        device=device,
        nnodes=max(1, world_size // local_world),
        node_rank=int(os.environ.get("GROUP_RANK", "0")),
        timeout=opts.timeout,
        device_index=device_index if device == "cuda" else None,
    )


def detect_inline(opts: LaunchOptions) -> bool:
    """Whether this process is already one rank of a launch (torchrun, an srun step, mpirun).

    Under srun and mpirun the launcher's rank variables are mapped onto torch's here
    (launcher_environment, which says why mpirun comes first). Launch options (--nproc, --gpus,
    --nnodes) mean "launch from here" even inside a Slurm step: the one-task-per-node recipe.
    """
    if all(k in os.environ for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR")):
        check_rank_variables(os.environ)
        return True
    explicit = opts.gpus is not None or opts.nproc is not None or opts.nnodes > 1
    mapped = None if explicit else launcher_environment(os.environ, opts.rdzv_endpoint)
    if mapped is not None:
        os.environ.update(mapped)
    return mapped is not None


def launcher_environment(
    environ: Mapping[str, str], rdzv_endpoint: str | None = None
) -> dict[str, str] | None:
    """torch's rank variables that this mpirun rank or srun task stands for; None under neither.
    mpirun comes before srun: an mpirun inside a Slurm allocation starts its ranks through an srun
    step of its own daemons (their SLURM_PROCID is the daemon's, not the rank's)."""
    if mpi.under_mpirun(environ):
        mapped = mpi.torch_environment(environ, rdzv_endpoint)
    elif slurm.under_srun(environ):
        mapped = slurm.torch_environment(environ)
    else:
        return None
    check_rank_variables(mapped)
    return mapped


def check_rank_variables(environ: Mapping[str, str]) -> None:
    """torch's rank variables as a launcher set them: whole numbers, the rank inside its world (exit 2)."""
    bad = [
        f"{name}={environ[name]!r}" for name in NUMBERED if name in environ and not environ[name].isdigit()
    ]
    if bad:
        raise UsageError(
            f"the launcher's environment is not a rank's: {', '.join(bad)} (whole numbers expected)"
        )
    rank, world = int(environ.get("RANK", "0")), int(environ.get("WORLD_SIZE", "1"))
    if not 0 <= rank < world:
        raise UsageError(f"the launcher's environment is not a rank's: RANK={rank} of WORLD_SIZE={world}")
