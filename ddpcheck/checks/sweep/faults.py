"""The sweep's --inject kind as its ranks strike it: `corrupt` (declared in checks/sweep/__init__.py)."""

from __future__ import annotations

from typing import Any

from ddpcheck.rank.faults import Faults

CORRUPT_STRIDE = 13


class SweepFaults(Faults):
    """A sweeping rank's faults: the harness's, and a wrong contribution."""

    def corrupt(self, tensor: Any) -> None:
        """Make this rank's contribution wrong in place, if it is meant to be."""
        if self.has("corrupt"):
            tensor.view(-1)[::CORRUPT_STRIDE] += 1
