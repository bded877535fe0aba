"""Every collective ddpcheck checks, by name, in the order `ddpcheck collectives` runs them."""

from __future__ import annotations

from ddpcheck.collective.ops.all_gather import AllGather
from ddpcheck.collective.ops.all_reduce import AllReduce
from ddpcheck.collective.ops.all_to_all import AllToAll
from ddpcheck.collective.ops.base import Collective
from ddpcheck.collective.ops.broadcast import Broadcast
from ddpcheck.collective.ops.reduce import Reduce
from ddpcheck.collective.ops.reduce_scatter import ReduceScatter
from ddpcheck.collective.ops.sendrecv import SendRecv

OPS: dict[str, Collective] = {
    op.name: op
    for op in (AllReduce(), AllGather(), ReduceScatter(), Broadcast(), Reduce(), AllToAll(), SendRecv())
}
