"""What each rank measures in preflight: who and where it is, its software, its GPU's health, and the
all_reduce sweep (exact data check, bisection of a wrong sum, a short bandwidth sample) cut to the budget.

The work is `ddpcheck allreduce`'s own pieces: checks/sweep's sweep and its all_reduce
definition, rank/fingerprint.py, the NVML reader; nothing here re-implements them.
"""

from __future__ import annotations

import os
import socket
from typing import TYPE_CHECKING, Any

from ddpcheck.checks.sweep import sweep
from ddpcheck.checks.sweep.faults import SweepFaults
from ddpcheck.checks.sweep.ops import OPS
from ddpcheck.checks.sweep.pattern import sweep_sizes
from ddpcheck.failure import gpu_facts
from ddpcheck.preflight.judge import ALL_REDUCE, DTYPE
from ddpcheck.preflight.options import PreflightOptions
from ddpcheck.rank.budget import TAIL_S, Budget
from ddpcheck.rank.context import NullStatus, RankContext
from ddpcheck.rank.faults import Fault
from ddpcheck.rank.fingerprint import rank_fingerprint
from ddpcheck.rank.harness import device_identity

if TYPE_CHECKING:
    import torch

# The bandwidth sample: three sizes MIN:MAX (x16 each), warm-up and iterations, cut further to the
# budget; the smallest is the data check's when bandwidth is not asked for.
SAMPLE = {
    "cpu": {"min_bytes": 4 * 1024, "max_bytes": 1024**2, "warmup": 1, "iters": 5},
    "cuda": {"min_bytes": 1024**2, "max_bytes": 256 * 1024**2, "warmup": 2, "iters": 10},
}
STEP_FACTOR = 16.0
INJECTED_TORCH = "+injected"


def job_device(backend: str) -> torch.device:
    """The device the job's own collectives use: the current CUDA device under NCCL, else the CPU."""
    import torch

    if "nccl" in backend and torch.cuda.is_available():
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def where_i_run(rank: int) -> dict[str, Any]:
    """What the store carries for a rank before any collective: enough to name a missing peer's host."""
    node, local_world = os.environ.get("GROUP_RANK"), os.environ.get("LOCAL_WORLD_SIZE")
    return {
        "rank": rank,
        "host": socket.gethostname(),
        "node": int(node) if node and node.isdigit() else None,
        "local_world": int(local_world) if local_world and local_world.isdigit() else None,
    }


def identity(rank: int, device: torch.device) -> dict[str, Any]:
    """The rank map's identity (rank/rankmap.py): the harness's fields, from the job's environment."""
    here = where_i_run(rank)
    local = os.environ.get("LOCAL_RANK")
    return {
        "rank": rank,
        "local_rank": int(local) if local and local.isdigit() else (device.index or 0),
        "node": here["node"] or 0,
        "host": here["host"],
        "address": None,
        "pid": os.getpid(),
        **device_identity(device),
    }


def context(
    rank: int, world_size: int, device: torch.device, opts: PreflightOptions, measure_end: float
) -> RankContext:
    """A RankContext on the default group, the planted faults, the sweep's Budget ending at `measure_end`."""
    faults = [Fault(kind, r) for kind, r in opts.faults if kind == "corrupt"]
    return RankContext(
        rank=rank,
        local_rank=0,
        world_size=world_size,
        backend="nccl" if device.type == "cuda" else "gloo",
        device=device,
        host=socket.gethostname(),
        faults=SweepFaults(faults, rank),
        status=NullStatus(),
        # The sweep stops measuring TAIL_S before a Budget's end: this one's measuring ends at measure_end.
        budget=Budget(opts.budget_for(device.type), measure_end + TAIL_S),
    )


def measure(ctx: RankContext, opts: PreflightOptions) -> dict[str, Any]:
    """This rank's part: identity, fingerprint, GPU health, and the all_reduce sweep (when asked)."""
    fingerprint = rank_fingerprint()
    if ("torch", ctx.rank) in opts.faults:
        fingerprint["torch"] = f"{fingerprint['torch']}{INJECTED_TORCH}"
    on_gpu = ctx.device.type == "cuda"
    out: dict[str, Any] = {
        "identity": identity(ctx.rank, ctx.device),
        "fingerprint": fingerprint,
        "health": gpu_facts.read(ctx.device) if on_gpu and "health" in opts.checks else None,
        "sweep": None,
    }
    if "sum" in opts.checks or "bandwidth" in opts.checks:
        sample = SAMPLE[ctx.device.type]
        sizes = sweep_sizes(sample["min_bytes"], sample["max_bytes"], DTYPE, STEP_FACTOR)
        if "bandwidth" not in opts.checks:
            sizes = sizes[:1]  # the data check alone: one size, one timed call
        warmup, iters = (sample["warmup"], sample["iters"]) if "bandwidth" in opts.checks else (0, 1)
        out["sweep"] = sweep.measure_op(ctx, OPS[ALL_REDUCE], sizes, DTYPE, warmup, iters, ctx.budget)
    return out
