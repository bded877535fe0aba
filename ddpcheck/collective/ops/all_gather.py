"""all_gather: every rank ends with every rank's block, block j from rank j (nccl-tests' size: the output)."""

from __future__ import annotations

from typing import Any

from ddpcheck.collective.ops.base import Blocked, Buffers, Received, Team
from ddpcheck.collective.pattern import UNWRITTEN, block_values, count_wrong, fill


class AllGather(Blocked):
    name = "all_gather"
    calls = ("all_gather_into_tensor",)

    def buffers(self, count: int, dtype: Any, device: Any, n: int) -> Buffers:
        import torch

        return {
            "input": torch.empty(count // n, dtype=dtype, device=device),
            "output": torch.empty(count, dtype=dtype, device=device),
        }

    def load(self, bufs: Buffers, team: Team, variant: int, pattern_dtype: str, faults: Any) -> None:
        fill(bufs["input"], block_values(team.rank(team.me)))
        faults.corrupt(bufs["input"])
        bufs["output"].fill_(UNWRITTEN)

    def run(self, bufs: Buffers, team: Team, variant: int) -> None:
        import torch.distributed as dist

        dist.all_gather_into_tensor(bufs["output"], bufs["input"], group=team.group)

    def verify(self, bufs: Buffers, team: Team, variant: int, pattern_dtype: str) -> Received:
        by_sender = {}
        for index, block in enumerate(bufs["output"].view(team.size, -1)):
            wrong = count_wrong(block, block_values(team.rank(index)))
            if wrong:
                by_sender[team.rank(index)] = wrong
        return Received(sum(by_sender.values()), by_sender)
