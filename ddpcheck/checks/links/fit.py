"""--budget on `links`: how many iterations each round, and how many passes, fit in the time left.

Pure: measure_plan (check.py) calls `fit_step` at every round, after that round's warm-up, with
times every rank agreed on; it is tested with synthetic times. The rounds are never cut (every
link is measured at least once: a link not measured cannot be judged); in order, the warm-up
of the later rounds (to one exchange), the timed exchanges and round trips of each round (to
one each), then the passes after the first are. Each round is projected from the rounds before
it and re-projected at the next, so an early over-estimate cuts nothing for good.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from ddpcheck.rank.budget import budget_check
from ddpcheck.report.model import Check, Table


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
