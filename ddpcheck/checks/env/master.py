"""Probing MASTER_ADDR and MASTER_PORT: resolve the address, then bind-test the port on this host
or make one TCP connect (short timeout) toward the configured master - never anywhere else.
"""

from __future__ import annotations

import errno
import ipaddress
import socket
from collections.abc import Callable, Mapping
from typing import Any

from ddpcheck.failure.ras.link import lookup_within

RESOLVE_TIMEOUT_S = 1.0  # a name lookup; the refusals before a run use it too
PORT_TIMEOUT_S = 1.0  # one TCP connect toward the master
PROBE_MASTER_S = RESOLVE_TIMEOUT_S + PORT_TIMEOUT_S  # the longest probe_master takes


def parse_port(text: str | None) -> int | None:
    """A TCP port 1..65535, or None when the text is not one."""
    if text is None or not text.strip().isdecimal():
        return None
    port = int(text.strip())
    return port if 1 <= port <= 65535 else None


def configured(environ: Mapping[str, str]) -> dict[str, Any]:
    """MASTER_ADDR and MASTER_PORT as the environment sets them, the port parsed."""
    port_text = environ.get("MASTER_PORT")
    return {"addr": environ.get("MASTER_ADDR"), "port_text": port_text, "port": parse_port(port_text)}


def resolved(environ: Mapping[str, str], timeout_s: float) -> dict[str, Any]:
    """configured(), and what MASTER_ADDR resolves to when it is set (bounded by `timeout_s`)."""
    master = configured(environ)
    if master["addr"]:
        master["resolved"], master["resolve_error"] = resolve(master["addr"], timeout_s)
    return master


def resolve(host: str, timeout_s: float) -> tuple[list[str], str | None]:
    """The addresses `host` resolves to, or why none: getaddrinfo has no timeout of its own."""
    found = lookup_within(host, None, timeout_s)
    if found is None:
        return [], f"timeout: the resolver did not answer within {timeout_s:g} s"
    if isinstance(found, Exception):  # OSError mostly; whatever it is, it is a finding, not a crash
        return [], str(found) or type(found).__name__
    return list(dict.fromkeys(str(info[4][0]) for info in found)), None


def try_bind(address: str, port: int) -> str:
    """Can a store listen on this port here? 'free', 'in use', 'denied' or the error.

    Binds the wildcard address as torch's TCPStore does, with SO_REUSEADDR as it
    does, so a connection lingering in TIME_WAIT does not count as 'in use'.
    """
    family = socket.AF_INET6 if ":" in address else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind(("::" if family == socket.AF_INET6 else "0.0.0.0", port))
        except OSError as exc:
            return {errno.EADDRINUSE: "in use", errno.EACCES: "denied"}.get(exc.errno, str(exc))
    return "free"


def try_connect(address: str, port: int, timeout_s: float) -> str:
    """One TCP connect: 'open', 'refused', 'timeout' or the error text."""
    try:
        with socket.create_connection((address, port), timeout=timeout_s):
            return "open"
    except ConnectionRefusedError:
        return "refused"
    except TimeoutError:
        return "timeout"
    except OSError as exc:
        return str(exc)


def probe_master(environ: Mapping[str, str], is_local: Callable[[str], bool]) -> dict[str, Any]:
    """Resolve MASTER_ADDR; then bind-test MASTER_PORT if the master is this host, else connect to it."""
    facts: dict[str, Any] = {
        "resolved": [],
        "resolve_error": None,
        "local": None,
        "bind": None,
        "connect": None,
        **resolved(environ, RESOLVE_TIMEOUT_S),
    }
    if not facts["resolved"]:
        return facts
    facts["local"] = facts["addr"] == socket.gethostname() or any(is_local(a) for a in facts["resolved"])
    port = facts["port"]
    if port is None:
        return facts
    if facts["local"]:
        facts["bind"] = try_bind(facts["resolved"][0], port)
    else:
        # The only traffic this probe sends off the host: toward the configured master.
        facts["connect"] = try_connect(facts["resolved"][0], port, PORT_TIMEOUT_S)
    return facts


def is_loopback(address: str) -> bool:
    try:
        return ipaddress.ip_address(address.split("%")[0]).is_loopback
    except ValueError:
        return False
