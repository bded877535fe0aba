"""Bytes as people write them and read them: one parser for options, one formatter for reports;
figures rounded to significant digits."""

from __future__ import annotations

import re

from ddpcheck.errors import UsageError

KIB = 1024
MIB = 1024**2
GIB = 1024**3
UNLIMITED = "unlimited"  # a resource limit without a bound, as `ddpcheck env` records it

_SIZE_RE = re.compile(r"^\s*(\d+)\s*([kKmMgG]?)[iI]?[bB]?\s*$")
_SIZE_UNITS = {"": 1, "k": KIB, "m": MIB, "g": GIB}
_SCALES = (("G", GIB), ("M", MIB), ("K", KIB))


def human_bytes(size: int | None, *, exact: bool = False, amount: bool = False) -> str:
    """A size in the units it was asked in: '4K', '64M'.

    A message size that is no whole multiple (buffers split into n blocks, rounded down) is
    shown in bytes ('4092B'); from 1000K on it is rounded to a tenth of M or G ('1.5M', and
    '1.0M' for 1048572 bytes, beside '1M') unless `exact` (a baseline's figure labels must
    tell 1048572B from 1M). `amount`: memory and limits,
    as 'df -h' shows them ('15.6 GiB', '512 B'; '?' when unknown).
    """
    if amount:
        if size is None:
            return "?"
        for unit, scale in _SCALES:
            if size >= scale:
                return f"{size / scale:.1f} {unit}iB"
        return f"{size} B"
    assert size is not None, "a message size is always known"
    for unit, scale in _SCALES:
        if size >= scale and size % scale == 0:
            return f"{size // scale}{unit}"
    if exact or size < 1000 * KIB:
        return f"{size}B"
    # From 1000K on, in M: 1048572B (1M split into 3 blocks, rounded down) reads '1.0M' beside '1M'.
    return f"{size / MIB:.1f}M" if size < 1000 * MIB else f"{size / GIB:.1f}G"


def significant(value: float, digits: int = 4) -> float:
    """Rounded to significant digits: CPU ranks reach thousandths of a TFLOP/s, GPUs hundreds."""
    return float(f"{value:.{digits}g}")


def parse_size(text: str) -> int:
    """'64', '4K', '16M', '1G' (binary multiples) -> bytes."""
    match = _SIZE_RE.match(text)
    if not match:
        raise UsageError(f"malformed size {text!r}: use bytes with an optional K, M or G suffix")
    return int(match.group(1)) * _SIZE_UNITS[match.group(2).lower()]


def parse_sizes(text: str) -> tuple[int, int]:
    """'MIN:MAX' or a single size -> (min_bytes, max_bytes)."""
    parts = text.split(":")
    if len(parts) > 2:
        raise UsageError(f"malformed --sizes {text!r}: expected MIN:MAX, e.g. 1K:64M")
    low, high = parse_size(parts[0]), parse_size(parts[-1])
    if low <= 0:
        raise UsageError(f"--sizes must start above 0 bytes, got {text!r}")
    if low > high:
        raise UsageError(f"--sizes MIN must not exceed MAX, got {text!r}")
    if high > 16 * GIB:
        raise UsageError(f"--sizes MAX above 16G is not supported, got {text!r}")
    return low, high
