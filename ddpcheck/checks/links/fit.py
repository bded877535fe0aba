"""--budget on `links`: how many iterations each round, and how many passes, fit in the time left.

measure_plan (check.py) asks its `Pacer` at every round, after that round's warm-up; the pacer
agrees the costs with every rank and calls `fit_step`, pure and tested with synthetic times.
The rounds are never cut (every link is measured at least once: a link not measured cannot be
judged); in order, the warm-up of the later rounds (to one exchange), the timed exchanges and
round trips of each round (to one each), then the passes after the first are. Each round is
projected from the rounds before it and re-projected at the next, so an early over-estimate
cuts nothing for good.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ddpcheck.rank.budget import budget_check
from ddpcheck.report.model import Check, Table

if TYPE_CHECKING:
    from ddpcheck.rank.context import RankContext

# The share of the time left that the rounds left are planned to fill, each round: on a busy host
# a round costs more than the one before it, and the gather after the last waits for a core too
# (docs/fleet.md).
BUDGET_SPENT = 0.6


@dataclass(frozen=True)
class StepCost:
    """What one round costs, as every rank agreed: per exchange, per round trip, and the rest
    (the barriers that start each phase together)."""

    exchange_s: float
    trip_s: float
    fixed_s: float


@dataclass(frozen=True)
class StepFit:
    """This round's timed exchanges and round trips; the warm-up of the rounds after it; and
    whether every round left (the passes asked) fits at all, even at one exchange each."""

    iters: int
    trips: int
    warmup: int
    fits: bool


def fit_step(
    steps_left: int, cost: StepCost, warmup: int, iters: int, trips: int, seconds_left: float
) -> StepFit:
    """The most of the rounds left (this one first, its warm-up done) that fits in `seconds_left`.

    As asked when that fits; else warm-up cut to one and as many iterations as fit every round
    (the round trips in proportion, at least one of each); else one of each, and `fits` False:
    the caller measures no further pass (the first pass always ends: its links are measured).
    """

    def total(w: int, it: int) -> float:
        tr = _trips(it, iters, trips)
        this = it * cost.exchange_s + tr * cost.trip_s + cost.fixed_s
        later = (steps_left - 1) * (cost.fixed_s + (w + it) * cost.exchange_s + tr * cost.trip_s)
        return this + later

    if total(warmup, iters) <= seconds_left:
        return StepFit(iters, trips, warmup, True)
    short = min(warmup, 1)
    low, high = 1, iters  # the cost grows with the iterations: the most that fit, by bisection
    if total(short, low) > seconds_left:
        return StepFit(1, 1, short, False)
    while low < high:
        middle = (low + high + 1) // 2
        low, high = (middle, high) if total(short, middle) <= seconds_left else (low, middle - 1)
    return StepFit(low, _trips(low, iters, trips), short, True)


def _trips(iters: int, iters_asked: int, trips_asked: int) -> int:
    return max(1, math.ceil(trips_asked * iters / iters_asked))


class Pacer:
    """--budget in measure_plan: what each round may spend, from what the rounds before it cost
    (without a budget: every round and every pass as asked).

    Every rank must run the same iterations (a pair's two ranks exchange in lockstep) and stop
    after the same pass: the costs and the time left are agreed (one all_reduce a round, the
    slowest rank's costs, the least time left), then the same pure function runs everywhere.
    """

    def __init__(self, ctx: RankContext, warmup: int, iters: int, trips: int) -> None:
        self.ctx, self.asked = ctx, (warmup, iters, trips)
        self.warmup, self.next_pass_fits = warmup, True
        # Until a round has run: a round trip as dear as an exchange, nothing else (cautious).
        self.trip_s: float | None = None
        self.exchange_s = self.fixed_s = 0.0
        self.iters_run: list[int] = []
        self.warmups_run: list[int] = []

    def fit(self, steps_left: int, pass_left: int, rounds: int, exchange_s: float) -> tuple[int, int]:
        """This round's timed exchanges and round trips; the next rounds' warm-up; whether one
        more pass fits. `steps_left`, `pass_left`: the rounds left in all, in this pass (this one
        included); `exchange_s`: this round's last warm-up exchange."""
        if self.ctx.budget is None:
            return self.asked[1:]
        # The dearer of this round's warm-up and the last round's timed exchanges: rounds alternate
        # between links inside a node and links between nodes.
        exchange_s = max(exchange_s, self.exchange_s)
        trip_s = exchange_s if self.trip_s is None else self.trip_s
        slowest, left_s = self.ctx.budget.agreed(self.ctx, [exchange_s, trip_s, self.fixed_s])
        cost, left = StepCost(*slowest), left_s * BUDGET_SPENT
        fit = fit_step(steps_left, cost, *self.asked, left)
        self.warmups_run.append(self.warmup)
        self.warmup = fit.warmup
        self.next_pass_fits = fit_step(pass_left + rounds, cost, *self.asked, left).fits
        self.iters_run.append(fit.iters)
        return fit.iters, fit.trips

    def spent(
        self, step_s: float, warm_s: float, timed_s: float, trips_s: float, iters: int, trips: int
    ) -> None:
        """What the round just run cost this rank: per exchange, per round trip, and the rest."""
        if self.ctx.budget is None:
            return
        self.exchange_s = timed_s / iters
        self.trip_s = trips_s / (trips + 1)  # the first round trip is a warm-up
        self.fixed_s = max(0.0, step_s - warm_s - timed_s - trips_s)

    def account(self, passes_asked: int, passes_run: int, warmup_asked: int) -> dict[str, Any]:
        assert self.ctx.budget is not None
        return {
            "budget_s": self.ctx.budget.seconds,
            "passes_asked": passes_asked,
            "passes_run": passes_run,
            "iters_asked": self.asked[1],
            "iters_least": min(self.iters_run, default=self.asked[1]),
            "iters_most": max(self.iters_run, default=self.asked[1]),
            "warmup_asked": warmup_asked,
            "warmup_least": min(self.warmups_run, default=warmup_asked),
        }


# ---------------------------------------------------------------- what was cut, for the report
def budget_findings(account: dict[str, Any] | None) -> tuple[Check, Table] | None:
    """The `budget` check (what of the plan ran) and its JSON table; None without --budget.

    `account`: rank 0's (every rank agreed on the same cuts). Cutting to fit is what --budget
    asks for, so the check passes; its line says what was cut.
    """
    if not account:
        return None
    row = dict(account)
    parts = []
    if row["passes_run"] < row["passes_asked"]:
        parts.append(f"{row['passes_run']} of {row['passes_asked']} passes")
    elif row["passes_asked"] > 1:
        parts.append(f"{row['passes_asked']} passes")
    least, most, asked = row["iters_least"], row["iters_most"], row["iters_asked"]
    each = "a link a pass" if row["passes_asked"] > 1 else "a link"
    if least < asked:
        parts.append(f"{least}{f'-{most}' if most != least else ''} timed exchanges of {asked} {each}")
    else:
        parts.append(f"{asked} timed exchanges {each}")
    if row["warmup_least"] < row["warmup_asked"]:
        parts.append(f"warm-up {row['warmup_least']} of {row['warmup_asked']}")
    cut = (
        row["passes_run"] < row["passes_asked"] or least < asked or row["warmup_least"] < row["warmup_asked"]
    )
    return budget_check(row["budget_s"], "every link, " + ", ".join(parts), cut, [row])
