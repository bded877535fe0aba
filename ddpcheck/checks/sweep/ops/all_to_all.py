"""all_to_all: rank r sends its block k to rank k (nccl-tests' alltoall; size: each rank's whole buffer)."""

from __future__ import annotations

from typing import Any

from ddpcheck.checks.sweep.ops.base import Blocked, Buffers, Received, Team, corrupt_blocks
from ddpcheck.checks.sweep.pattern import UNWRITTEN, block_values, fill


class AllToAll(Blocked):
    name = "all_to_all"
    calls = ("all_to_all_single",)

    def buffers(self, count: int, dtype: Any, device: Any, n: int) -> Buffers:
        import torch

        return {
            "input": torch.empty(count, dtype=dtype, device=device),
            "output": torch.empty(count, dtype=dtype, device=device),
        }

    def load(self, bufs: Buffers, team: Team, variant: int, dtype_name: str, faults: Any) -> None:
        me = team.rank(team.me)
        for index, block in enumerate(bufs["input"].view(team.size, -1)):
            fill(block, block_values(me, team.rank(index)))
        corrupt_blocks(faults, bufs["input"], team.size)
        bufs["output"].fill_(UNWRITTEN)

    def run(self, bufs: Buffers, team: Team, variant: int) -> None:
        import torch.distributed as dist

        dist.all_to_all_single(bufs["output"], bufs["input"], group=team.group)

    def verify(self, bufs: Buffers, team: Team, variant: int, dtype_name: str) -> Received:
        me = team.rank(team.me)
        return self.received_blocks(bufs["output"], team, lambda sender: block_values(sender, me))
