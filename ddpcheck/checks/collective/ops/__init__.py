"""Every collective ddpcheck checks, by name, in the order `ddpcheck collectives` runs them."""

from __future__ import annotations

from ddpcheck.checks.collective.ops.all_gather import AllGather
from ddpcheck.checks.collective.ops.all_reduce import AllReduce
from ddpcheck.checks.collective.ops.all_to_all import AllToAll
from ddpcheck.checks.collective.ops.base import Collective
from ddpcheck.checks.collective.ops.broadcast import Broadcast
from ddpcheck.checks.collective.ops.reduce import Reduce
from ddpcheck.checks.collective.ops.reduce_scatter import ReduceScatter
from ddpcheck.checks.collective.ops.sendrecv import SendRecv

OPS: dict[str, Collective] = {
    op.name: op
    for op in (AllReduce(), AllGather(), ReduceScatter(), Broadcast(), Reduce(), AllToAll(), SendRecv())
}
