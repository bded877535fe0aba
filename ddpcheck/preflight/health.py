"""Each rank's GPU health for preflight: the GPU's facts (failure/gpu_facts.py) and `ddpcheck devices`'
judge of them, as they are.

The one preflight module that reaches into that command's folder (tests/test_house.py allows it).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ddpcheck.checks.devices import health
from ddpcheck.failure import gpu_facts
from ddpcheck.report.model import Check, Status, Table

if TYPE_CHECKING:
    import torch


def read(device: torch.device) -> dict[str, Any] | None:
    """This rank's GPU facts through NVML (or nvidia-smi); None on a CPU rank."""
    return gpu_facts.read(device) if device.type == "cuda" else None


def judge(
    all_facts: list[dict[str, Any] | None], identities: list[dict[str, Any]]
) -> tuple[Check, Table | None]:
    if all(f is None for f in all_facts):
        return Check("health", Status.SKIP, "CPU ranks: no GPU to read"), None
    return health.judge(all_facts, identities), health.table(all_facts, identities)
