"""devices' own --inject kinds as its ranks strike them: `slowgpu` and `sdc` (__init__.py declares them)."""

from __future__ import annotations

from typing import Any

from ddpcheck.rank.faults import Faults

# slowgpu: rank R computes each product this many times and counts it once: a quarter of its speed.
SLOWGPU_FACTOR = 4


class DeviceFaults(Faults):
    """A devices rank's faults: the harness's, a slow device and a wrong product."""

    def slowgpu_repeats(self) -> int:
        """How many times this rank computes each product it counts once."""
        return SLOWGPU_FACTOR if self.has("slowgpu") else 1

    def sdc(self, product: Any) -> None:
        """Make one element of a matrix product wrong in place, if it is meant to be."""
        if self.has("sdc"):
            product.view(-1)[0] += 1
