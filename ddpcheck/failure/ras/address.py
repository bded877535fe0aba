"""Where a job's RAS service listens: NCCL_RAS_ADDR read as NCCL reads it, else localhost:28028."""

from __future__ import annotations

import os
import re
import socket
from collections.abc import Mapping
from dataclasses import dataclass

DEFAULT_HOST = "localhost"  # NCCL binds "localhost:28028" unless NCCL_RAS_ADDR says otherwise
DEFAULT_PORT = 28028  # NCCL_RAS_CLIENT_PORT


@dataclass(frozen=True)
class RasAddress:
    host: str
    port: int
    scope_id: int = 0  # an IPv6 link-local address's interface ("[fe80::1%eth0]:28028")

    def __str__(self) -> str:
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"


def atoi(text: str) -> int:
    """C's atoi: leading blanks, a sign, digits; 0 when there are none."""
    match = re.match(r"\s*([+-]?\d+)", text)
    return int(match.group(1)) if match else 0


def _scope(interface: str) -> int:
    try:
        return socket.if_nametoindex(interface)
    except OSError:
        return 0  # if_nametoindex's 0: no such interface


def parse_ras_addr(value: str) -> RasAddress:
    """NCCL_RAS_ADDR as NCCL reads it (ncclSocketGetAddrFromString): "host:port" or "[ipv6]:port".

    A port that is absent is -1 to NCCL, which binds port 65535 ((uint16_t)-1); a value NCCL
    refuses (empty, one character, "[" without "]") leaves the job with no RAS client socket.
    """
    if len(value) <= 1:
        raise ValueError(f"NCCL_RAS_ADDR={value!r}: NCCL refuses it (string is null)")
    if value[0] == "[":
        inside, close, after = value[1:].partition("]")
        if not close:
            raise ValueError(f"NCCL_RAS_ADDR={value!r}: no [IPv6]:port pair NCCL can read")
        host, percent, interface = inside.partition("%")
        return RasAddress(host, atoi(after[1:]) & 0xFFFF, _scope(interface) if percent else 0)
    # parseStringList: the first ','-separated entry with a name before its ':'.
    for entry in value.split(","):
        name, colon, rest = entry.partition(":")
        if name:
            port_text = rest.split(":", 1)[0] if colon else ""
            return RasAddress(name, (atoi(port_text) if port_text else -1) & 0xFFFF)
    raise ValueError(f"NCCL_RAS_ADDR={value!r}: no <IPv4_or_hostname>:<port> pair NCCL can read")


def ras_address(environ: Mapping[str, str] | None = None) -> RasAddress:
    """Where a job with this environment listens: NCCL_RAS_ADDR if set, else localhost:28028."""
    value = (os.environ if environ is None else environ).get("NCCL_RAS_ADDR")
    return RasAddress(DEFAULT_HOST, DEFAULT_PORT) if value is None else parse_ras_addr(value)
