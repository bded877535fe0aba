"""train's own --inject kinds as its ranks strike them: `diverge` and `nan` (__init__.py declares them)."""

from __future__ import annotations

from typing import Any

from ddpcheck.rank.faults import Faults

# diverge: added to every element of the first parameter; far above rounding, small enough
# that the loss still falls, so only the checks that compare weights can catch it.
DIVERGE_NUDGE = 1e-3


def fault_step(steps: int) -> int:
    """The step one-shot faults (diverge, nan) strike: the middle, so 'first at step S' says something."""
    return steps // 2


class TrainFaults(Faults):
    """A training rank's faults: the harness's, `slow`, and weights or a loss gone wrong."""

    def diverge(self, module: Any, step: int, steps: int) -> None:
        """After the optimizer step at fault_step(steps), nudge this rank's first parameter."""
        if self.has("diverge") and step == fault_step(steps):
            import torch

            with torch.no_grad():
                next(iter(module.parameters())).add_(DIVERGE_NUDGE)

    def nan(self, loss: Any, step: int, steps: int) -> Any:
        """This rank's loss, turned NaN at fault_step(steps) (backward then spreads it)."""
        if self.has("nan") and step == fault_step(steps):
            return loss * float("nan")
        return loss
