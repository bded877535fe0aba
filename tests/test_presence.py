"""Which nodes reached the rendezvous store (launcher/presence.py), over a real TCPStore on loopback.

Pins: every Presence writes its node rank, host and route address on arrival; `arrived` reads
exactly the node ranks of this run (0 .. nnodes-1); `describe_missing` names the missing node
ranks and who did arrive, and says nothing when all arrived; `publish` / `world_statuses` carry
each node's rank statuses to the others, keyed by global rank, marked remote, never echoing a
node's own; a store nobody listens on is StoreUnreachable within the store's floor of 1 s (not
--timeout when that is smaller), and so is a host store whose port is taken.
"""

from __future__ import annotations

import gc
import socket
import time
from collections.abc import Callable, Iterator

import pytest
import torch.distributed  # noqa: F401  (imported once here, not inside the first test's timing)

from ddpcheck.launcher.presence import PREFIX, STATUS_PREFIX, Presence, StoreUnreachable

HOST = socket.gethostname()


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.fixture
def open_presence() -> Iterator[Callable[..., Presence]]:
    """Open Presences on one loopback endpoint (the first is node 0, the host); close them all after."""
    opened: list[Presence] = []
    endpoint = f"127.0.0.1:{free_port()}"

    def open_one(node_rank: int, nnodes: int, timeout: float = 5.0) -> Presence:
        presence = Presence(endpoint, node_rank, nnodes, is_host=not opened, timeout=timeout)
        opened.append(presence)
        # Its arrival is a set, which does not wait (see `published`): confirmed on its own
        # connection, so that the others' reads after this line see it.
        assert presence.store.check([f"{PREFIX}{node_rank}"])
        return presence

    yield open_one
    for presence in reversed(opened):  # clients first, the host's server last
        del presence.store
    opened.clear()
    gc.collect()


def test_each_node_records_its_host_and_route_address(open_presence) -> None:
    host = open_presence(0, 2)
    client = open_presence(1, 2)
    me = {"host": HOST, "address": "127.0.0.1"}  # the address on the route to the store: loopback here
    assert host.arrived() == {0: me, 1: me}
    assert client.arrived() == host.arrived()  # one store, the same view from every node
    assert host.describe_missing() == "" and client.describe_missing() == ""
    assert host.store.get(f"{PREFIX}1") == b'{"host": "' + HOST.encode() + b'", "address": "127.0.0.1"}'


def test_a_node_gives_its_address_on_the_route_to_the_store_not_a_name() -> None:
    presence = Presence(f"localhost:{free_port()}", 0, 1, is_host=True, timeout=5)
    try:
        assert presence.arrived() == {0: {"host": HOST, "address": "127.0.0.1"}}  # not "localhost"
    finally:
        del presence.store
        gc.collect()


def test_the_nodes_that_never_arrived_are_named_with_those_that_did(open_presence) -> None:
    host = open_presence(0, 4)
    alone = f"node 0 on {HOST} (127.0.0.1)"
    assert host.describe_missing() == f"node rank(s) 1, 2, 3 never arrived (arrived: {alone})"
    open_presence(2, 4)
    assert host.describe_missing() == (
        f"node rank(s) 1, 3 never arrived (arrived: {alone}, node 2 on {HOST} (127.0.0.1))"
    )
    assert sorted(host.arrived()) == [0, 2]


def test_only_this_runs_node_ranks_count(open_presence) -> None:
    host = open_presence(0, 2)
    open_presence(5, 6)  # a launcher told --nnodes 6: node 5 is no node of a 2-node run
    assert sorted(host.arrived()) == [0]
    assert host.describe_missing().startswith("node rank(s) 1 never arrived")


def published(presence: Presence, statuses: dict) -> None:
    """Publish, then wait for the store to have it. TCPStore's set sends and does not wait for an
    answer, and the store serves each connection apart: another node's read right after could be
    served first (1 run in about 16 of this file read {} here). A read on the publisher's own
    connection is answered after its set."""
    presence.publish(statuses)
    assert presence.store.check([f"{STATUS_PREFIX}{presence.node_rank}"])


def test_statuses_travel_between_nodes_keyed_by_global_rank_and_marked_remote(open_presence) -> None:
    host = open_presence(0, 3)
    node1 = open_presence(1, 3)
    open_presence(2, 3)  # arrived, never published
    assert host.world_statuses() == {}
    published(host, {0: {"stage": "measure", "seq": 5}, 1: {"stage": "measure", "seq": 5}})
    published(node1, {2: {"stage": "join", "seq": 3}, 3: {"stage": "measure", "seq": 5}})
    assert host.world_statuses() == {
        2: {"stage": "join", "seq": 3, "remote": True},
        3: {"stage": "measure", "seq": 5, "remote": True},
    }  # int keys (JSON made them strings), its own statuses not echoed back
    assert node1.world_statuses() == {
        0: {"stage": "measure", "seq": 5, "remote": True},
        1: {"stage": "measure", "seq": 5, "remote": True},
    }
    published(node1, {2: {"stage": "done", "seq": 7}})  # the latest publication replaces the last one
    assert host.world_statuses() == {2: {"stage": "done", "seq": 7, "remote": True}}
    assert host.store.check([f"{STATUS_PREFIX}1"]) and not host.store.check([f"{STATUS_PREFIX}2"])


def test_nobody_listening_is_store_unreachable_within_the_stores_floor() -> None:
    endpoint = f"127.0.0.1:{free_port()}"
    began = time.monotonic()
    with pytest.raises(StoreUnreachable) as caught:
        Presence(endpoint, 1, 2, is_host=False, timeout=0.1)
    waited = time.monotonic() - began
    assert 1.0 <= waited < 8.0, waited  # --timeout below 1 s is raised to 1 s; then it gives up
    assert endpoint.split(":")[1] in str(caught.value)
    assert isinstance(caught.value.__cause__, RuntimeError)  # torch's error, kept as the cause


def test_a_host_store_on_a_taken_port_is_store_unreachable() -> None:
    with socket.socket() as held:
        held.bind(("", 0))
        held.listen()
        port = held.getsockname()[1]
        began = time.monotonic()
        with pytest.raises(StoreUnreachable, match=r"EADDRINUSE|address already in use"):
            Presence(f"127.0.0.1:{port}", 0, 2, is_host=True, timeout=5)
        assert time.monotonic() - began < 2.0  # a bind that fails fails at once
