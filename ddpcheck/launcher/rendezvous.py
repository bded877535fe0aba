"""The rendezvous endpoint as seen from this node: is it here, which address faces it, is its port free."""

from __future__ import annotations

import socket

import psutil

from ddpcheck.errors import UsageError
from ddpcheck.launcher.options import parse_endpoint
from ddpcheck.launcher.plan import LaunchPlan
from ddpcheck.rank.network import route_address


def endpoint_is_local(endpoint: str) -> bool:
    """Whether the endpoint's host is one of this machine's addresses."""
    host, _ = parse_endpoint(endpoint)
    try:
        addresses = {info[4][0] for info in socket.getaddrinfo(host, None)}
    except socket.gaierror as exc:
        raise UsageError(f"--rdzv-endpoint host {host!r} does not resolve ({exc.strerror})") from None
    local = {a.address.split("%")[0] for addrs in psutil.net_if_addrs().values() for a in addrs}
    return any(a in local or a.startswith("127.") or a == "::1" for a in addresses)


def advertised_address(endpoint: str | None) -> str:
    """The address this node gives the others: an IP on the route to the rendezvous host.

    torch would advertise the hostname; a hostname the other nodes cannot resolve
    turns into a five-minute connect timeout, a classic multi-node hang.
    """
    if not endpoint:
        return "127.0.0.1"
    return route_address(*parse_endpoint(endpoint)) or socket.gethostname()


def check_rendezvous_port(plan: LaunchPlan) -> None:
    """On the node that hosts the store, a port taken by another program is bad input: say so now."""
    if not plan.rdzv_endpoint:
        return
    local = endpoint_is_local(plan.rdzv_endpoint)  # on every node: a host that does not resolve is bad input
    if plan.node_rank != 0 or not local:
        return
    host, port = parse_endpoint(plan.rdzv_endpoint)
    # Both families: a program listening on [::1] only holds the port as surely as one on 0.0.0.0.
    for family, anywhere in ((socket.AF_INET, ""), (socket.AF_INET6, "::")):
        try:
            probe = socket.socket(family, socket.SOCK_STREAM)
        except OSError:
            continue  # no IPv6 on this host: nothing can listen there
        with probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6:
                probe.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            try:
                probe.bind((anywhere, port))
            except OSError as exc:
                raise UsageError(
                    f"rendezvous port {host}:{port} is already in use on this host ({exc.strerror}); "
                    "choose a free port for --rdzv-endpoint"
                ) from None


def hosts_store(plan: LaunchPlan) -> bool:
    # Node 0 hosts the store; the others only connect, so two nodes on one machine never race for it.
    return bool(plan.rdzv_endpoint) and plan.node_rank == 0 and endpoint_is_local(plan.rdzv_endpoint)
