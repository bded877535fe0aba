"""Running under `mpirun`: the MPI launcher's rank variables mapped onto torch.distributed's.

`mpirun -np 4 ddpcheck allreduce` starts one process per rank. Open MPI sets
OMPI_COMM_WORLD_RANK/_SIZE/_LOCAL_RANK/_LOCAL_SIZE; MPICH and Intel MPI (Hydra) set
PMI_RANK/PMI_SIZE and MPI_LOCALRANKID/MPI_LOCALNRANKS. mpirun says nothing about where rank 0
listens, so MASTER_ADDR/MASTER_PORT come from the environment (`mpirun -x MASTER_ADDR -x
MASTER_PORT`) or --rdzv-endpoint. On one host without them, every rank derives the same
endpoint: 127.0.0.1 and a port from the job's id, which mpirun gives every rank alike
(Open MPI 4: OMPI_MCA_ess_base_jobid and PMIX_NAMESPACE; Hydra: PMI_KVSNAME).
"""

from __future__ import annotations

import zlib
from collections.abc import Mapping

from ddpcheck.errors import UsageError
from ddpcheck.failure.rank_env import MPI_FAMILIES
from ddpcheck.launcher.options import parse_endpoint
from ddpcheck.launcher.slurm import PORT_BASE, PORT_SPAN

# Variables whose value every rank of one mpirun job shares and two jobs do not.
JOB_ID_VARIABLES = ("OMPI_MCA_ess_base_jobid", "PMIX_NAMESPACE", "PMI_KVSNAME", "PMI_PORT")
HOW_TO_PASS = (
    "mpirun across hosts: pass rank 0's address, e.g. `mpirun -x MASTER_ADDR=<host of rank 0> "
    "-x MASTER_PORT=29500 ...`, or --rdzv-endpoint HOST:PORT"
)


def _family(environ: Mapping[str, str]) -> tuple[str, str, str, str, str] | None:
    return next((f for f in MPI_FAMILIES if f[1] in environ and f[2] in environ), None)


def under_mpirun(environ: Mapping[str, str]) -> bool:
    """A rank of an mpirun job with several ranks."""
    family = _family(environ)
    return family is not None and environ[family[2]].isdigit() and int(environ[family[2]]) > 1


def port_for_job(job_id: str) -> int:
    """A port every rank of one mpirun job derives alike; two jobs at once differ (most likely)."""
    return PORT_BASE + zlib.crc32(job_id.encode()) % PORT_SPAN


def torch_environment(environ: Mapping[str, str], rdzv_endpoint: str | None = None) -> dict[str, str]:
    """The RANK/WORLD_SIZE/LOCAL_RANK/... variables this mpirun rank stands for (exit 2 if it cannot)."""
    family = _family(environ)
    if family is None:
        raise UsageError("not an mpirun rank: neither OMPI_COMM_WORLD_RANK nor PMI_RANK is set")
    name, rank_var, size_var, local_var, local_size_var = family
    try:
        rank, world = int(environ[rank_var]), int(environ[size_var])
        local_rank = int(environ.get(local_var, "0"))
        local_world = int(environ[local_size_var]) if local_size_var in environ else None
    except ValueError as exc:
        raise UsageError(f"incomplete {name} environment: {exc}") from None
    if "MASTER_ADDR" in environ and "MASTER_PORT" in environ:
        address, port = environ["MASTER_ADDR"], environ["MASTER_PORT"]
    elif rdzv_endpoint:
        host, number = parse_endpoint(rdzv_endpoint)
        address, port = host, str(number)
    elif local_world == world:
        job = next((environ[v] for v in JOB_ID_VARIABLES if environ.get(v)), None)
        if job is None:
            raise UsageError(f"{name} gave no job id to derive a port from: {HOW_TO_PASS}")
        address, port = "127.0.0.1", str(port_for_job(job))
    else:
        raise UsageError(f"{HOW_TO_PASS} (the {world} ranks span hosts, or the local count is unknown)")
    local_world = local_world or world
    return {
        "RANK": str(rank),
        "WORLD_SIZE": str(world),
        "LOCAL_RANK": str(local_rank),
        "LOCAL_WORLD_SIZE": str(local_world),
        # Ranks are placed by node in blocks by default (--map-by slot); only names depend on it.
        "GROUP_RANK": str(rank // local_world),
        "MASTER_ADDR": address,
        "MASTER_PORT": port,
    }
