"""broadcast: every rank ends with the root's buffer; the root turns (nccl-tests' -r -1)."""

from __future__ import annotations

from typing import Any

from ddpcheck.collective.ops.base import Buffers, Collective, Received, Team
from ddpcheck.collective.ops.roots import roots_for
from ddpcheck.collective.pattern import UNWRITTEN, block_values, count_wrong, fill


class Broadcast(Collective):
    name = "broadcast"

    def bus_factor(self, n: int) -> float:
        return 1.0

    def buffers(self, count: int, dtype: Any, device: Any, n: int) -> Buffers:
        import torch

        return {"data": torch.empty(count, dtype=dtype, device=device)}

    def variants(self, n: int, size_index: int) -> list[int]:
        return roots_for(n, size_index)

    def load(self, bufs: Buffers, team: Team, variant: int, pattern_dtype: str, faults: Any) -> None:
        if team.me == variant:
            fill(bufs["data"], block_values(team.rank(variant)))
            faults.corrupt(bufs["data"])
        else:
            bufs["data"].fill_(UNWRITTEN)

    def run(self, bufs: Buffers, team: Team, variant: int) -> None:
        import torch.distributed as dist

        dist.broadcast(bufs["data"], src=team.rank(variant), group=team.group)

    def verify(self, bufs: Buffers, team: Team, variant: int, pattern_dtype: str) -> Received:
        root = team.rank(variant)
        wrong = count_wrong(bufs["data"], block_values(root))
        return Received(wrong, {root: wrong} if wrong else {})

    def senders(self, n: int, variant: int) -> list[int]:
        return [variant]
