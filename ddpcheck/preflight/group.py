"""The process group preflight() is asked to check: it exists, and it spans every rank.

Light (torch.distributed only, which the job has loaded): refused here, a bad call costs no import
of the checks' work, and no store or collective is touched.
"""

from __future__ import annotations

from typing import Any

from ddpcheck.preflight.options import PreflightOptions, PreflightUsageError, check_world


def checked(opts: PreflightOptions, group: Any) -> tuple[int, int]:
    """(this rank, the world size) of the group to check, or PreflightUsageError in one line."""
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
    check_world(opts, world_size)
    return rank, world_size
