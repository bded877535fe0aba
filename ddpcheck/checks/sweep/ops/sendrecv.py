"""sendrecv: a ring, rank r sends to r+1 and receives from r-1, both at once (nccl-tests' sendrecv_perf).

The data check also runs the ring the other way (r to r-1), so that with three ranks or
more every sender is seen by two receivers and every receiver hears two senders: that
tells a bad sender from a bad receiver from a bad link.
"""

from __future__ import annotations

from typing import Any

from ddpcheck.checks.sweep.ops.base import Buffers, Collective, Received, Team
from ddpcheck.checks.sweep.pattern import UNWRITTEN, block_values, count_wrong, fill


class SendRecv(Collective):
    name = "sendrecv"
    min_ranks = 2
    calls = ("batch_isend_irecv",)

    def bus_factor(self, n: int) -> float:
        return 1.0

    def buffers(self, count: int, dtype: Any, device: Any, n: int) -> Buffers:
        import torch

        return {
            "send": torch.empty(count, dtype=dtype, device=device),
            "recv": torch.empty(count, dtype=dtype, device=device),
        }

    def variants(self, n: int, size_index: int) -> list[int]:
        return [1] if n <= 2 else [1, -1]  # with two ranks both rings are the same pair

    def timed_variant(self) -> int:
        return 1

    def load(self, bufs: Buffers, team: Team, variant: int, dtype_name: str, faults: Any) -> None:
        fill(bufs["send"], block_values(team.rank(team.me), team.rank(team.me + variant)))
        faults.corrupt(bufs["send"])
        bufs["recv"].fill_(UNWRITTEN)

    def run(self, bufs: Buffers, team: Team, variant: int) -> None:
        import torch.distributed as dist

        ops = [
            dist.P2POp(dist.isend, bufs["send"], team.rank(team.me + variant), team.group),
            dist.P2POp(dist.irecv, bufs["recv"], team.rank(team.me - variant), team.group),
        ]
        for request in dist.batch_isend_irecv(ops):
            request.wait()

    def verify(self, bufs: Buffers, team: Team, variant: int, dtype_name: str) -> Received:
        sender = team.rank(team.me - variant)
        wrong = count_wrong(bufs["recv"], block_values(sender, team.rank(team.me)))
        return Received(wrong, {sender: wrong} if wrong else {})

    def observers(self, sender: int, n: int, variant: int) -> list[int]:
        return [(sender + variant) % n]
