"""Which nodes reached the rendezvous, so that one that never arrives can be named.

Every launcher of a multi-node run writes its node rank, host and address into the
rendezvous store (node 0 hosts it; torch's c10d rendezvous shares the same
multi-tenant store) before the rendezvous starts. When the rendezvous times out,
the keys that are missing are the nodes that never arrived.
"""

from __future__ import annotations

import json
import socket
from datetime import timedelta

from ddpcheck.failure.statuses import SeenStatus
from ddpcheck.launcher.options import parse_endpoint
from ddpcheck.rank.network import route_address
from ddpcheck.torch_compat import store_has

PREFIX = "ddpcheck/node/"
STATUS_PREFIX = "ddpcheck/statuses/"


class StoreUnreachable(Exception):
    """The rendezvous store could not be reached (or, on node 0, opened)."""


class Presence:
    """This node's entry in the rendezvous store, and a view of everyone's."""

    def __init__(self, endpoint: str, node_rank: int, nnodes: int, is_host: bool, timeout: float) -> None:
        from torch.distributed import TCPStore

        host, port = parse_endpoint(endpoint)
        self.nnodes = nnodes
        self.node_rank = node_rank
        try:
            self.store = TCPStore(
                host,
                port,
                is_master=is_host,
                multi_tenant=True,  # the c10d rendezvous opens the same store in this process
                timeout=timedelta(seconds=max(1.0, timeout)),
                wait_for_workers=False,
            )
        except (RuntimeError, TimeoutError, ValueError) as exc:
            raise StoreUnreachable(str(exc)) from exc
        me = {"host": socket.gethostname(), "address": route_address(host, port)}
        self.store.set(f"{PREFIX}{node_rank}", json.dumps(me))

    def arrived(self) -> dict[int, dict[str, str]]:
        """Node rank -> {host, address} of every node that reached the store."""
        keys = {node: f"{PREFIX}{node}" for node in range(self.nnodes)}
        return {
            node: json.loads(self.store.get(key)) for node, key in keys.items() if store_has(self.store, key)
        }

    def publish(self, statuses: dict[int, SeenStatus]) -> None:
        """This node's ranks' statuses, for node 0's report when a rank elsewhere hangs."""
        self.store.set(f"{STATUS_PREFIX}{self.node_rank}", json.dumps(statuses))

    def world_statuses(self) -> dict[int, SeenStatus]:
        """The other nodes' last published statuses, by global rank, marked remote."""
        keys = [f"{STATUS_PREFIX}{node}" for node in range(self.nnodes) if node != self.node_rank]
        published = [json.loads(self.store.get(key)) for key in keys if store_has(self.store, key)]
        return {int(rank): {**status, "remote": True} for each in published for rank, status in each.items()}

    def describe_missing(self) -> str:
        arrived = self.arrived()
        missing = [n for n in range(self.nnodes) if n not in arrived]
        if not missing:
            return ""
        here = ", ".join(f"node {n} on {a['host']} ({a['address']})" for n, a in sorted(arrived.items()))
        return f"node rank(s) {', '.join(map(str, missing))} never arrived (arrived: {here or 'none'})"
