"""--budget on the rank side: the wall-clock end every rank sizes its work by.

The launcher (or, under torchrun, srun and mpirun, each rank's own command line) turns
`--budget SECONDS` into an end on the wall clock, counted from the start of the `ddpcheck`
process itself, so that starting Python and torch, launching the ranks and joining the
group all count. The ranks stop measuring TAIL_S before that end: the gather, the judge,
the teardown and the report need it. A launcher that watches ends the run EXIT_S before
the end whatever the ranks are doing (launcher/monitor.py).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ddpcheck.rank.context import RankContext
    from ddpcheck.report.model import Check, Table

# What a run needs after its last measurement (gather, judge, teardown, report), with a margin
# for NCCL's teardown on many GPUs (docs/fleet.md).
TAIL_S = 3.0
# What the launcher needs after it gave up on its ranks: kill them, write the report, show it.
EXIT_S = 1.0


@dataclass(frozen=True)
class Budget:
    """`seconds` of budget ending at `end` (time.time()); measurement stops TAIL_S before it."""

    seconds: float
    end: float

    @property
    def measure_end(self) -> float:
        return self.end - TAIL_S

    def measure_left(self, now: float | None = None) -> float:
        """Seconds this rank may still spend measuring (negative once past)."""
        return self.measure_end - (time.time() if now is None else now)

    def agreed(self, ctx: RankContext, seconds: list[float]) -> tuple[list[float], float]:
        """Every rank's slowest of each of `seconds` (up to the microsecond) and the least measuring
        time left (down to the millisecond): one all_reduce, so that every rank fits its work alike."""
        *slowest, least_left = ctx.agree_max(
            [*(math.ceil(s * 1e6) for s in seconds), -math.floor(self.measure_left() * 1e3)]
        )
        return [us / 1e6 for us in slowest], -least_left / 1e3

    def share(self, parts: int, now: float | None = None) -> Budget:
        """The next of `parts` equal shares of the measuring time left (one collective of several)."""
        now = time.time() if now is None else now
        left = max(0.0, self.measure_left(now))
        return Budget(self.seconds, now + left / max(1, parts) + TAIL_S)


def budget_check(seconds: float, said: str, cut: bool, rows: list[dict[str, Any]]) -> tuple[Check, Table]:
    """Every measuring command's `budget` check and JSON table: cutting to fit is what --budget asks
    for, so the check passes; its line says what ran, and whether anything was cut."""
    from ddpcheck.report.model import Check, Status, Table  # not on --help's path

    detail = f"budget {seconds:g} s: {said}" + (" (cut to fit)" if cut else "")
    return Check("budget", Status.PASS, detail), Table("budget", "What --budget cut", {}, rows)
