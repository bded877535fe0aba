"""`--budget SECONDS`: the whole command, launch included, within a time box (a job prolog's).

Declared once here, taken by the commands whose work can be sized by time (Command.budgeted:
`allreduce` and `collectives`, whose sweeps shrink to fit; `links` and `devices`, whose
iterations and passes do). The clock starts with the
`ddpcheck` process itself; what is left when the ranks are about to start bounds
`--timeout`, and the end crosses to the ranks in the RunSpec (rank/budget.py), or, under
torchrun, srun and mpirun, each rank's command line starts its own clock.

Torch-free: the CLI validates it before anything starts.
"""

from __future__ import annotations

import math
import os
import threading
import time
from dataclasses import dataclass

from ddpcheck.command import option
from ddpcheck.errors import EXIT_USAGE, UsageError, say
from ddpcheck.launcher.options import MAX_TIMEOUT_S
from ddpcheck.rank.budget import EXIT_S, TAIL_S, Budget
from ddpcheck.report.fleet import FLEET

# Below this, less than a second is left to measure once the report's tail is set aside.
MIN_LEFT_S = TAIL_S + 1.0


@dataclass(frozen=True, kw_only=True)
class BudgetOptions:
    """--budget: every command whose work is sized by the time left takes it."""

    budget: float | None = option(
        None,
        help="End within SECONDS, launch included (a job prolog's time box): iterations, then sizes "
        "or passes are cut to fit, never a data check; --timeout is bounded by what is left.",
        panel=FLEET,
        metavar="SECONDS",
    )

    def validate(self) -> None:
        if self.budget is not None and not 0 < self.budget <= MAX_TIMEOUT_S:
            raise UsageError(f"--budget must be in (0, {MAX_TIMEOUT_S:.0f}] seconds, got {self.budget:g}")

    def watch_starting(self) -> threading.Timer | None:
        """A timer that ends this process (exit 2) at the budget's end while ddpcheck and torch are
        still starting: importing torch takes seconds, many more on a loaded host (docs/fleet.md).
        start() cancels it as the ranks start: the launcher's watchdog (or the ranks' bound) takes over."""
        if self.budget is None:
            return None
        began = process_start()
        wait = max(0.0, began + self.budget - EXIT_S - time.time())
        timer = threading.Timer(wait, _ran_out_starting, (self.budget, began))
        timer.daemon = True
        timer.start()
        return timer

    def start(self, starting: threading.Timer | None) -> Budget | None:
        """The budget from this process's start, `starting`'s watch over; exit 2 when too little is
        left to measure anything."""
        if starting is not None:
            starting.cancel()
        if self.budget is None:
            return None
        budget = Budget(self.budget, process_start() + self.budget)
        refuse_if_spent(budget, time.time())
        return budget


def _ran_out_starting(seconds: float, began: float) -> None:
    spent = time.time() - began
    # Exit 2, as a budget refused after the start: nothing was launched, the budget cannot hold it.
    say(
        f"ddpcheck: error: --budget {seconds:g}: it ran out while ddpcheck and torch were still "
        f"starting ({spent:.1f} s); nothing was launched: give a larger budget"
    )
    os._exit(EXIT_USAGE)


def process_start() -> float:
    """When this `ddpcheck` process started (time.time()): starting Python and torch counts."""
    import psutil

    return psutil.Process().create_time()


def refuse_if_spent(budget: Budget, now: float) -> None:
    left = budget.end - now
    if left < MIN_LEFT_S:
        spent = budget.seconds - left
        raise UsageError(
            f"--budget {budget.seconds:g}: {spent:.1f} s went on starting ddpcheck and torch, and the "
            f"report needs the last {TAIL_S:g} s: too little is left to launch and measure; give more "
            f"than {math.ceil(spent + MIN_LEFT_S)} s, and the ranks' own start on top"
        )


def bounded_timeout(timeout: float, budget: Budget | None, now: float | None = None) -> float:
    """--timeout, or the time the budget has left when that is shorter: every wait ends within it."""
    if budget is None:
        return timeout
    now = time.time() if now is None else now
    return max(0.1, min(timeout, budget.end - now))
