"""`ddpcheck.preflight()`: the checks inside the user's own job, on its own process group, in seconds.

    import ddpcheck
    torch.distributed.init_process_group(...)
    ddpcheck.preflight()          # raises PreflightFailed on every rank when the job should not start

Every rank waits (bounded by the budget) for every other through the job's store, then runs the
all_reduce sum check (a wrong rank named by bisection), a short bandwidth sample (against
min_busbw when given), the nodes' agreement on torch/CUDA/NCCL/driver/GPU, NVML's health of each
GPU and the rank map; rank 0 prints the Report, every rank returns it. docs/preflight.md.

Light to import: torch is imported inside the calls. The module is itself callable, so that
`ddpcheck.preflight(...)` works whether `ddpcheck.preflight` was reached as the function (ddpcheck's
lazy attribute) or as this package (after `import ddpcheck.preflight` or `python -m`).
"""

from __future__ import annotations

import sys
import time
import types
from typing import TYPE_CHECKING, Any

from ddpcheck.preflight import options
from ddpcheck.preflight.failed import PreflightFailed
from ddpcheck.preflight.options import CHECKS, PreflightUsageError

if TYPE_CHECKING:
    from ddpcheck.report.model import Report

__all__ = ["CHECKS", "PreflightFailed", "PreflightUsageError", "preflight"]


def preflight(
    group: Any = None,
    checks: list[str] | tuple[str, ...] | None = None,
    budget_s: float | None = None,
    min_busbw: float | None = None,
    raise_on_failure: bool = True,
    *,
    quiet: bool = False,
    json_path: str | None = None,
    inject: list[str] | str | None = None,
) -> Report:
    """Check the job's process group and devices in at most `budget_s` seconds; call it on every rank.

    group: the process group to check: None (the default group) or one spanning every rank.
    checks: a subset of CHECKS ("sum", "bandwidth", "versions", "health", "rankmap"); arrival always.
    budget_s: the bound on this call (default 10 s with GPUs, 5 s on CPU ranks); the bandwidth
        sample is cut to fit it, never the data check.
    min_busbw: FAIL when the all_reduce's peak bus bandwidth (GB/s) is below it.
    raise_on_failure: raise PreflightFailed on every rank when a check fails or a rank never
        arrives (default); False returns the Report instead.
    quiet: rank 0 prints only the failing checks and the verdict line. json_path: rank 0 writes
        the JSON report there. inject: faults planted on purpose ("corrupt@1", "torch@1",
        "absent@1") to prove the gate catches them.

    Returns the Report (the same on every rank). Raises PreflightUsageError (one line, before any
    collective) on a bad argument or without an initialised process group.
    """
    started = time.time()  # the budget counts from here: the first call's imports too
    opts = options.build(checks, budget_s, min_busbw, quiet, json_path, inject)
    options.flag("raise_on_failure", raise_on_failure)
    # Before the work's imports (a second on a busy host), and before any collective.
    rank, world_size = _checked(opts, group)
    from ddpcheck.preflight import run

    try:
        report = run.run(opts, rank, world_size, started)
    except Exception as exc:  # the checks themselves broke on this rank: a report that says so
        report = run.could_not_complete(opts, rank, exc, started)
        run.show(report, opts, 0)  # every rank that broke says so: rank 0 may be the one that did not
        if raise_on_failure:
            raise PreflightFailed(report) from exc
        return report
    run.show(report, opts, rank)
    if raise_on_failure and report.failing():
        raise PreflightFailed(report)
    return report


def _checked(opts: options.PreflightOptions, group: Any) -> tuple[int, int]:
    """(this rank, the world size) of the group to check, or PreflightUsageError in one line: it
    exists and spans every rank. torch.distributed only (the job has loaded it): no store touched."""
    import torch.distributed as dist

    if not dist.is_available() or not dist.is_initialized():
        raise PreflightUsageError(
            "ddpcheck.preflight() needs a process group: call torch.distributed.init_process_group() "
            "first (or run `python -m ddpcheck.preflight` under torchrun or srun)"
        )
    world_size, rank = dist.get_world_size(), dist.get_rank()
    if group is not None and group is not dist.group.WORLD:
        try:
            size = dist.get_world_size(group)
        except Exception as exc:
            raise PreflightUsageError(
                f"group= is not a process group: {' '.join(str(exc).split())}"
            ) from None
        if size < 1:
            raise PreflightUsageError(
                f"group= does not hold this rank (rank {rank}): call preflight on its members"
            )
        if size != world_size:
            raise PreflightUsageError(
                f"group= has {size} of the {world_size} ranks: preflight checks a group that spans "
                "every rank (pass the default group, or none)"
            )
    options.check_world(opts, world_size)
    return rank, world_size


class _CallableModule(types.ModuleType):
    """This package, callable as preflight() itself."""

    def __call__(self, *args: Any, **kwargs: Any) -> Report:
        return preflight(*args, **kwargs)


sys.modules[__name__].__class__ = _CallableModule
