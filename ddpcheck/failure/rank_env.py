"""Who a process is in a launch, from the variables its launcher set: its rank, and which launcher.

torchrun sets RANK (and TORCHELASTIC_RUN_ID), Open MPI OMPI_COMM_WORLD_RANK, MPICH and Intel MPI
(Hydra) PMI_RANK, an srun step SLURM_PROCID beside its step id. Standard library only, and cheap:
every rank imports it in its first instant, and watch's agent loads it by path inside the user's job.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import Enum

# (name, rank, size, local rank, local size) variables of each MPI family.
MPI_FAMILIES = (
    ("Open MPI", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
     "OMPI_COMM_WORLD_LOCAL_SIZE"),
    ("MPICH/Intel MPI", "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "MPI_LOCALNRANKS"),
)  # fmt: skip
# Where a rank's number comes from, first found first: torchrun's under any outer launcher.
RANK_VARIABLES = ("RANK", *(family[1] for family in MPI_FAMILIES), "SLURM_PROCID")
# ...and the world's size, likewise; an MPI family's ranks on this node.
SIZE_VARIABLES = ("WORLD_SIZE", *(family[2] for family in MPI_FAMILIES), "SLURM_NTASKS")
MPI_LOCAL_SIZE_VARIABLES = tuple(family[4] for family in MPI_FAMILIES)
# An srun step's nodes (the older name second); then the allocation's, which a step may use only part of.
STEP_NODE_VARIABLES = ("SLURM_STEP_NUM_NODES", "SLURM_NNODES")
NODE_VARIABLES = (*STEP_NODE_VARIABLES, "SLURM_JOB_NUM_NODES")
# An srun step's id (the older name second); a batch script's own step is "batch", no srun step.
STEP_VARIABLES = ("SLURM_STEP_ID", "SLURM_STEPID")
BATCH_STEP = "batch"
# Python's own helper processes, started by a rank or its launcher with the rank's environment: not ranks.
PYTHON_HELPERS = ("multiprocessing.resource_tracker", "multiprocessing.forkserver")


class Launcher(str, Enum):
    """The launcher that started this process as one rank of many (NONE: no launcher's rank)."""

    TORCHRUN = "torchrun"
    MPIRUN = "mpirun"  # Open MPI's, MPICH's or Intel MPI's
    SRUN = "srun"
    NONE = "none"

    def __str__(self) -> str:  # its value, in text as in JSON (a str Enum says its name)
        return self.value

    @property
    def rank0_hosts_store(self) -> bool:
        """Rank 0's own process hosts the store the ranks share (torchrun's agent hosts its own), and the
        first task to exit starts the launcher's teardown of the others."""
        return self in (Launcher.SRUN, Launcher.MPIRUN)

    @property
    def kills_late(self) -> bool:
        """Its SIGKILL follows its SIGTERM only after the cluster's KillWait, and it waits for a stopped
        task after the others exited (unless --kill-on-bad-exit)."""
        return self is Launcher.SRUN


def srun_step(environ: Mapping[str, str]) -> str | None:
    """The id of the srun step this process is a task of; None outside one (a batch script's own step)."""
    step = next((environ[name] for name in STEP_VARIABLES if name in environ), None)
    return None if step == BATCH_STEP else step


def first_number(environ: Mapping[str, str], names: tuple[str, ...]) -> int | None:
    """The first of `names` that holds a whole number, None when none does."""
    return next((int(environ[name]) for name in names if environ.get(name, "").isdigit()), None)


def node_count(environ: Mapping[str, str]) -> int:
    """The nodes a launch spans (Slurm's count), else 1."""
    count = first_number(environ, NODE_VARIABLES)
    return 1 if count is None else count


def launcher_of(environ: Mapping[str, str]) -> Launcher:
    """Which launcher started this process. An mpirun inside a Slurm allocation starts its ranks
    through an srun step of its own daemons: mpirun's variables come before srun's."""
    if "TORCHELASTIC_RUN_ID" in environ and "RANK" in environ:
        return Launcher.TORCHRUN
    if any(family[1] in environ for family in MPI_FAMILIES):
        return Launcher.MPIRUN
    if srun_step(environ) is not None and "SLURM_PROCID" in environ:
        return Launcher.SRUN
    return Launcher.NONE


def rank_variable(environ: Mapping[str, str]) -> str | None:
    """The variable that holds this process's rank, the first of RANK_VARIABLES it has."""
    return next((name for name in RANK_VARIABLES if name in environ), None)


def single_node_rank(environ: Mapping[str, str]) -> int | None:
    """A framework's own rank process on one node, started with its local rank only (Lightning's
    Trainer: LOCAL_RANK, NODE_RANK 0; its rank 0 is the process that started them): that local rank.
    None on other nodes, whose ranks their local ranks do not give."""
    local, node = environ.get("LOCAL_RANK", ""), environ.get("NODE_RANK", "0")
    return int(local) if local.isdigit() and node == "0" else None


def has_rank(environ: Mapping[str, str]) -> bool:
    return rank_variable(environ) is not None


def rank_of(environ: Mapping[str, str]) -> int | None:
    """This process's rank: the first rank variable that holds a number."""
    return first_number(environ, RANK_VARIABLES)


def ranks_given(environ: Mapping[str, str]) -> list[str]:
    """Every rank a launcher gave this process (an outer launcher's too); SLURM_PROCID only inside an
    srun step, as a batch script has SLURM_PROCID=0 of its own."""
    step = srun_step(environ) is not None
    return [environ[name] for name in RANK_VARIABLES if name in environ and (step or name != "SLURM_PROCID")]


def is_python_helper(argv: list[str]) -> bool:
    """`python -B -c "from multiprocessing.resource_tracker import main; ..."` and the like."""
    code = argv[argv.index("-c") + 1] if "-c" in argv[:-1] else ""
    return any(f"from {name} import" in code for name in PYTHON_HELPERS)
