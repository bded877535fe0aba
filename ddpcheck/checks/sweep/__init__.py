"""The collective sweep, and one small definition per collective (nccl-tests' common.cu, its op files)."""

from __future__ import annotations

from collections.abc import Mapping

# The sweep's own --inject kind (faults.py strikes it), taken by every command that sweeps.
CORRUPT_FAULT: Mapping[str, str] = {
    "corrupt": "rank R adds 1 to every 13th element it contributes (to each receiver)"
}
