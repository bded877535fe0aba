"""all_reduce: every rank ends with the sum of every rank's buffer (nccl-tests' all_reduce_perf)."""

from __future__ import annotations

from typing import Any

from ddpcheck.checks.sweep.ops.base import Buffers, Collective, Received, Team
from ddpcheck.checks.sweep.pattern import Pattern, count_wrong, fill


def bus_factor(n: int) -> float:
    """2(n-1)/n: each rank sends and receives (n-1)/n of the buffer twice (reduce-scatter, all-gather)."""
    return 2 * (n - 1) / n


class AllReduce(Collective):
    name = "all_reduce"
    reduces = True

    def bus_factor(self, n: int) -> float:
        return bus_factor(n)

    def load(self, bufs: Buffers, team: Team, variant: int, dtype_name: str, faults: Any) -> None:
        fill(bufs["data"], Pattern.for_world(team.size, dtype_name).contribution(team.me))
        faults.corrupt(bufs["data"])

    def run(self, bufs: Buffers, team: Team, variant: int) -> None:
        import torch.distributed as dist

        dist.all_reduce(bufs["data"], group=team.group)

    def verify(self, bufs: Buffers, team: Team, variant: int, dtype_name: str) -> Received:
        expected = Pattern.for_world(team.size, dtype_name).expected()
        return Received(count_wrong(bufs["data"], expected), {})
