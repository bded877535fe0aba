"""reduce: the root ends with the sum of every rank's buffer; the root turns (nccl-tests' -r -1)."""

from __future__ import annotations

from typing import Any

from ddpcheck.checks.sweep.ops.base import Buffers, Received, Rooted, Team
from ddpcheck.checks.sweep.pattern import Pattern, count_wrong, fill


class Reduce(Rooted):
    name = "reduce"
    reduces = True

    def load(self, bufs: Buffers, team: Team, variant: int, dtype_name: str, faults: Any) -> None:
        fill(bufs["data"], Pattern.for_world(team.size, dtype_name).contribution(team.me))
        faults.corrupt(bufs["data"])

    def run(self, bufs: Buffers, team: Team, variant: int) -> None:
        import torch.distributed as dist

        dist.reduce(bufs["data"], dst=team.rank(variant), group=team.group)

    def verify(self, bufs: Buffers, team: Team, variant: int, dtype_name: str) -> Received:
        if team.me != variant % team.size:
            return Received(0, {})  # only the root's buffer holds the result
        expected = Pattern.for_world(team.size, dtype_name).expected()
        return Received(count_wrong(bufs["data"], expected), {})
