"""The rendezvous endpoint as one node sees it (launcher/rendezvous.py), before anything starts.

Pins: which endpoints are this host (loopback, its own name and addresses; not another
address); a host that does not resolve is bad input on every node; the store is hosted by node 0
only, and only when the endpoint is this host; a port another program holds is a one-line
UsageError on that node (bound or listening, and only there), a free one passes and stays free;
the address a node advertises is the one on the route to the endpoint, never a hostname unless
there is no route.
"""

from __future__ import annotations

import contextlib
import socket
from collections.abc import Iterator

import psutil
import pytest

from ddpcheck.errors import UsageError
from ddpcheck.launcher import rendezvous
from ddpcheck.launcher.plan import LaunchPlan
from ddpcheck.launcher.rendezvous import (
    advertised_address,
    check_rendezvous_port,
    endpoint_is_local,
    hosts_store,
)

ELSEWHERE = "198.51.100.7"  # TEST-NET-2: documentation only, on no host


def local_addresses() -> set[str]:
    return {a.address.split("%")[0] for addrs in psutil.net_if_addrs().values() for a in addrs}


@pytest.fixture
def elsewhere() -> str:
    if ELSEWHERE in local_addresses():
        pytest.skip(f"{ELSEWHERE} is an address of this host")
    return ELSEWHERE


def plan(endpoint: str | None, node_rank: int = 0) -> LaunchPlan:
    return LaunchPlan(
        nproc=2,
        backend="gloo",
        device="cpu",
        nnodes=2,
        node_rank=node_rank,
        rdzv_endpoint=endpoint,
        timeout=5,
    )


@contextlib.contextmanager
def taken_port(listen: bool = True) -> Iterator[int]:
    """A port another program holds on 127.0.0.1: listening, or only bound."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as held:
        held.bind(("127.0.0.1", 0))
        if listen:
            held.listen()
        yield held.getsockname()[1]


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("", 0))
        return probe.getsockname()[1]


# ------------------------------------------------------------------ is the endpoint this host
def test_loopback_and_this_hosts_name_are_local(elsewhere: str) -> None:
    assert endpoint_is_local("127.0.0.1:29400")
    assert endpoint_is_local("127.5.6.7:29400")  # all of 127/8 is loopback
    assert endpoint_is_local("localhost:29400")
    assert endpoint_is_local("[::1]:29400")
    assert endpoint_is_local(f"{socket.gethostname()}:29400")
    assert not endpoint_is_local(f"{elsewhere}:29400")


def test_an_address_of_one_of_this_hosts_interfaces_is_local() -> None:
    routable = sorted(a for a in local_addresses() if "." in a and not a.startswith("127."))
    if not routable:
        pytest.skip("this host has no IPv4 address besides loopback")
    assert endpoint_is_local(f"{routable[0]}:29400")


def test_a_host_that_does_not_resolve_is_a_usage_error() -> None:
    with pytest.raises(
        UsageError, match=r"^--rdzv-endpoint host 'no-such-host\.invalid' does not resolve"
    ) as caught:
        endpoint_is_local("no-such-host.invalid:29400")
    assert caught.value.__suppress_context__  # one line: no chained gaierror traceback
    with pytest.raises(UsageError, match="does not resolve"):  # on every node, not only the one hosting
        check_rendezvous_port(plan("no-such-host.invalid:29400", node_rank=1))


# ------------------------------------------------------------------ who hosts the store
def test_node_0_hosts_the_store_only_when_the_endpoint_is_here(elsewhere: str) -> None:
    assert hosts_store(plan("127.0.0.1:29400", node_rank=0))
    assert hosts_store(plan(f"{socket.gethostname()}:29400", node_rank=0))
    assert not hosts_store(plan("127.0.0.1:29400", node_rank=1))  # two nodes on one machine: one host
    assert not hosts_store(plan(f"{elsewhere}:29400", node_rank=0))  # node 0 pointed at another machine
    assert not hosts_store(plan(None))
    assert not hosts_store(plan(""))


# ------------------------------------------------------------------ is the port free
@pytest.mark.parametrize("listen", [True, False])
def test_a_port_taken_here_is_a_one_line_usage_error(listen: bool) -> None:
    with taken_port(listen) as port, pytest.raises(UsageError) as caught:
        check_rendezvous_port(plan(f"127.0.0.1:{port}"))
    message = str(caught.value)
    assert message == (
        f"rendezvous port 127.0.0.1:{port} is already in use on this host (Address already in use); "
        "choose a free port for --rdzv-endpoint"
    )
    assert "\n" not in message and caught.value.__suppress_context__  # no chained OSError traceback


def test_a_free_port_passes_and_stays_free() -> None:
    port = free_port()
    assert check_rendezvous_port(plan(f"127.0.0.1:{port}")) is None
    with socket.socket() as after:  # the probe let go of it: the store can take it
        after.bind(("127.0.0.1", port))
        after.listen()


def test_only_the_node_that_hosts_the_store_checks_the_port(elsewhere: str) -> None:
    with taken_port() as port:
        check_rendezvous_port(plan(f"127.0.0.1:{port}", node_rank=1))  # it connects there; it binds nothing
        check_rendezvous_port(plan(f"{elsewhere}:{port}", node_rank=0))  # the store is on another host
        check_rendezvous_port(plan(None))  # a single-node run: torch picks its own port
        with pytest.raises(UsageError):
            check_rendezvous_port(plan(f"localhost:{port}", node_rank=0))


def test_a_port_taken_on_ipv6_loopback_is_a_usage_error() -> None:
    if not socket.has_ipv6 or "::1" not in local_addresses():
        pytest.skip("no IPv6 loopback")
    with socket.socket(socket.AF_INET6, socket.SOCK_STREAM) as held:
        held.bind(("::1", 0))
        held.listen()
        port = held.getsockname()[1]
        with pytest.raises(UsageError, match="already in use"):
            check_rendezvous_port(plan(f"[::1]:{port}"))


# ------------------------------------------------------------------ the address a node advertises
def test_without_an_endpoint_the_node_advertises_loopback() -> None:
    assert advertised_address(None) == "127.0.0.1"
    assert advertised_address("") == "127.0.0.1"


def test_the_advertised_address_faces_the_endpoint() -> None:
    assert advertised_address("127.0.0.1:29400") == "127.0.0.1"
    assert advertised_address("localhost:29400") == "127.0.0.1"
    here = advertised_address(f"{socket.gethostname()}:29400")
    assert here in local_addresses()  # an address of this host, not its name


def test_the_advertised_address_is_the_route_to_the_endpoints_host(monkeypatch: pytest.MonkeyPatch) -> None:
    asked: list[tuple[str, int]] = []

    def route(host: str, port: int = 9) -> str | None:
        asked.append((host, port))
        return "10.1.2.3"

    monkeypatch.setattr(rendezvous, "route_address", route)
    assert advertised_address("[fd00::9]:29500") == "10.1.2.3"
    assert asked == [("fd00::9", 29500)]  # brackets off, port as given


def test_with_no_route_the_node_falls_back_to_its_hostname(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(rendezvous, "route_address", lambda host, port=9: None)
    assert advertised_address("node01:29400") == socket.gethostname()


def test_a_malformed_endpoint_is_a_usage_error() -> None:
    with pytest.raises(UsageError, match="expected HOST:PORT"):
        advertised_address("node01")
    with pytest.raises(UsageError, match=r"1\.\.65535"):
        check_rendezvous_port(plan("127.0.0.1:0"))
