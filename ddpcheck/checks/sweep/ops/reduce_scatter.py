"""reduce_scatter: rank r ends with block r of the sum of every rank's input (nccl-tests' size: the input)."""

from __future__ import annotations

from typing import Any

from ddpcheck.checks.sweep.ops.base import Blocked, Buffers, Received, Team
from ddpcheck.checks.sweep.pattern import Pattern, count_wrong, fill


class ReduceScatter(Blocked):
    name = "reduce_scatter"
    reduces = True
    calls = ("reduce_scatter_tensor",)

    def buffers(self, count: int, dtype: Any, device: Any, n: int) -> Buffers:
        import torch

        return {
            "input": torch.empty(count, dtype=dtype, device=device),
            "output": torch.empty(count // n, dtype=dtype, device=device),
        }

    def load(self, bufs: Buffers, team: Team, variant: int, dtype_name: str, faults: Any) -> None:
        fill(bufs["input"], Pattern.for_world(team.size, dtype_name).contribution(team.me))
        faults.corrupt(bufs["input"])

    def run(self, bufs: Buffers, team: Team, variant: int) -> None:
        import torch.distributed as dist

        dist.reduce_scatter_tensor(bufs["output"], bufs["input"], group=team.group)

    def verify(self, bufs: Buffers, team: Team, variant: int, dtype_name: str) -> Received:
        block = bufs["output"].numel()
        # Block r starts at element r * block of the summed input: the expected period, shifted.
        expected = Pattern.for_world(team.size, dtype_name).expected(offset=team.me * block)
        return Received(count_wrong(bufs["output"], expected), {})
