"""all_gather: every rank ends with every rank's block, block j from rank j (nccl-tests' size: the output)."""

from __future__ import annotations

from typing import Any

from ddpcheck.checks.sweep.ops.base import Blocked, Buffers, Received, Team
from ddpcheck.checks.sweep.pattern import UNWRITTEN, block_values, fill


class AllGather(Blocked):
    name = "all_gather"
    calls = ("all_gather_into_tensor",)

    def buffers(self, count: int, dtype: Any, device: Any, n: int) -> Buffers:
        import torch

        return {
            "input": torch.empty(count // n, dtype=dtype, device=device),
            "output": torch.empty(count, dtype=dtype, device=device),
        }

    def load(self, bufs: Buffers, team: Team, variant: int, dtype_name: str, faults: Any) -> None:
        fill(bufs["input"], block_values(team.rank(team.me)))
        faults.corrupt(bufs["input"])
        bufs["output"].fill_(UNWRITTEN)

    def run(self, bufs: Buffers, team: Team, variant: int) -> None:
        import torch.distributed as dist

        dist.all_gather_into_tensor(bufs["output"], bufs["input"], group=team.group)

    def verify(self, bufs: Buffers, team: Team, variant: int, dtype_name: str) -> Received:
        return self.received_blocks(bufs["output"], team, block_values)
