"""Every collective ddpcheck checks, by name, in the order `ddpcheck collectives` runs them."""

from __future__ import annotations

from ddpcheck.checks.sweep.ops.all_gather import AllGather
from ddpcheck.checks.sweep.ops.all_reduce import AllReduce
from ddpcheck.checks.sweep.ops.all_to_all import AllToAll
from ddpcheck.checks.sweep.ops.base import Collective
from ddpcheck.checks.sweep.ops.broadcast import Broadcast
from ddpcheck.checks.sweep.ops.reduce import Reduce
from ddpcheck.checks.sweep.ops.reduce_scatter import ReduceScatter
from ddpcheck.checks.sweep.ops.sendrecv import SendRecv

OPS: dict[str, Collective] = {
    op.name: op
    for op in (AllReduce(), AllGather(), ReduceScatter(), Broadcast(), Reduce(), AllToAll(), SendRecv())
}
