"""Byte units, and how sizes and resource limits are shown in checks and tables."""

from __future__ import annotations

GIB = 1024**3
MIB = 1024**2
UNLIMITED = "unlimited"  # a resource limit without a bound, as the probe records it


def human_size(n: int | None) -> str:
    if n is None:
        return "?"
    for unit, scale in (("GiB", GIB), ("MiB", MIB), ("KiB", 1024)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} B"
