"""reduce: the root ends with the sum of every rank's buffer; the root turns (nccl-tests' -r -1)."""

from __future__ import annotations

from typing import Any

from ddpcheck.collective.ops.base import Buffers, Collective, Received, Team
from ddpcheck.collective.ops.roots import roots_for
from ddpcheck.collective.pattern import Pattern, count_wrong, fill


class Reduce(Collective):
    name = "reduce"
    reduces = True

    def bus_factor(self, n: int) -> float:
        return 1.0

    def buffers(self, count: int, dtype: Any, device: Any, n: int) -> Buffers:
        import torch

        return {"data": torch.empty(count, dtype=dtype, device=device)}

    def variants(self, n: int, size_index: int) -> list[int]:
        return roots_for(n, size_index)

    def load(self, bufs: Buffers, team: Team, variant: int, pattern_dtype: str, faults: Any) -> None:
        fill(bufs["data"], Pattern.for_world(team.size, pattern_dtype).contribution(team.me))
        faults.corrupt(bufs["data"])

    def run(self, bufs: Buffers, team: Team, variant: int) -> None:
        import torch.distributed as dist

        dist.reduce(bufs["data"], dst=team.rank(variant), group=team.group)

    def verify(self, bufs: Buffers, team: Team, variant: int, pattern_dtype: str) -> Received:
        if team.me != variant % team.size:
            return Received(0, {})  # only the root's buffer holds the result
        expected = Pattern.for_world(team.size, pattern_dtype).expected()
        return Received(count_wrong(bufs["data"], expected), {})
