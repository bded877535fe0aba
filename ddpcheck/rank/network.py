"""Which of this host's addresses faces a peer."""

from __future__ import annotations

import socket


def route_address(host: str, port: int = 9) -> str | None:
    """This host's address on the route to `host`, or None when there is no route.

    A UDP connect only selects the route and source address; it sends no packet.
    """
    try:
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        with socket.socket(family, socket.SOCK_DGRAM) as probe:
            probe.connect((host, port))
            return probe.getsockname()[0]
    except OSError:
        return None
