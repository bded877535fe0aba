"""broadcast: every rank ends with the root's buffer; the root turns (nccl-tests' -r -1)."""

from __future__ import annotations

from typing import Any

from ddpcheck.checks.sweep.ops.base import Buffers, Received, Rooted, Team
from ddpcheck.checks.sweep.pattern import UNWRITTEN, block_values, count_wrong, fill


class Broadcast(Rooted):
    name = "broadcast"

    def load(self, bufs: Buffers, team: Team, variant: int, dtype_name: str, faults: Any) -> None:
        if team.me == variant:
            fill(bufs["data"], block_values(team.rank(variant)))
            faults.corrupt(bufs["data"])
        else:
            bufs["data"].fill_(UNWRITTEN)

    def run(self, bufs: Buffers, team: Team, variant: int) -> None:
        import torch.distributed as dist

        dist.broadcast(bufs["data"], src=team.rank(variant), group=team.group)

    def verify(self, bufs: Buffers, team: Team, variant: int, dtype_name: str) -> Received:
        root = team.rank(variant)
        wrong = count_wrong(bufs["data"], block_values(root))
        return Received(wrong, {root: wrong} if wrong else {})

    def senders(self, n: int, variant: int) -> list[int]:
        return [variant]
