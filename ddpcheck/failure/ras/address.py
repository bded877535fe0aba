"""Where a job's RAS service listens: NCCL_RAS_ADDR read as NCCL reads it, else localhost:28028."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

DEFAULT_HOST = "localhost"  # NCCL binds "localhost:28028" unless NCCL_RAS_ADDR says otherwise
DEFAULT_PORT = 28028  # NCCL_RAS_CLIENT_PORT


@dataclass(frozen=True)
class RasAddress:
    host: str  # an IPv6 link-local address keeps its interface ("fe80::1%eth0"): getaddrinfo reads it
    port: int

    def __str__(self) -> str:
        host = self.host.partition("%")[0]
        return f"[{host}]:{self.port}" if ":" in host else f"{host}:{self.port}"


def atoi(text: str) -> int:
    """C's atoi: leading blanks, a sign, digits; 0 when there are none."""
    match = re.match(r"\s*([+-]?\d+)", text)
    return int(match.group(1)) if match else 0


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
        return RasAddress(inside, atoi(after[1:]) & 0xFFFF)
    # parseStringList: the first ','-separated entry with a name before its ':'.
    for entry in value.split(","):
        name, colon, rest = entry.partition(":")
        if name:
            port_text = rest.split(":", 1)[0] if colon else ""
            return RasAddress(name, (atoi(port_text) if port_text else -1) & 0xFFFF)
    raise ValueError(f"NCCL_RAS_ADDR={value!r}: no <IPv4_or_hostname>:<port> pair NCCL can read")


def ras_address(environ: Mapping[str, str]) -> RasAddress:
    """Where a job with this environment listens: NCCL_RAS_ADDR if set, else localhost:28028."""
    value = environ.get("NCCL_RAS_ADDR")
    return RasAddress(DEFAULT_HOST, DEFAULT_PORT) if value is None else parse_ras_addr(value)
