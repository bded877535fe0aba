"""--budget on a sweep: how many more sizes, and how many iterations each, fit in the time left.

Pure: the sweep (collective/sweep.py) calls `fit_sweep` at every size, after that
size's data check, with times every rank agreed on; it is tested with synthetic times.
The data check is never cut: only the timing (warm-up, then iterations) and the sizes
after the current one are. A size's cost is projected from the size measured, in
proportion to its bytes: an over-estimate where latency dominates (small messages cost
about the same), never an under-estimate while bandwidth is flat or falling, and it is
projected again from each new size, so an early over-estimate trims nothing for good.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from ddpcheck.rank.budget import budget_check
from ddpcheck.report.model import Check, Table
from ddpcheck.report.units import human_bytes

# Fewer timed iterations than this and one late call sets the figure: trimmed sweeps give up
# sizes before they go below it.
MIN_ITERS = 3


@dataclass(frozen=True)
class Fit:
    """What runs next: this size's timing with `warmup` and `iters`; `sizes` sizes in all, this one first."""

    sizes: int
    warmup: int
    iters: int


def fit_sweep(
    sizes_left: list[int],
    check_s: float,
    call_s: float,
    warmup: int,
    iters: int,
    seconds_left: float,
) -> Fit:
    """The most of the sweep that fits in `seconds_left`, cutting iterations before sizes.

    `sizes_left[0]` is the size whose data check just took `check_s`; `call_s` is one timed
    call at that size (measured or projected). In order: everything as asked; warm-up cut
    to one and as many iterations as fit every size (at least MIN_ITERS); MIN_ITERS and the
    sizes that fit; this size alone, with as many iterations as fit (at least one: a size
    whose data was checked gets a figure).
    """
    here = sizes_left[0]
    ratios = [size / here for size in sizes_left[1:]]

    def cost(count: int, w: int, it: int) -> float:
        after = sum(r * (check_s + (w + it) * call_s) for r in ratios[: count - 1])
        return (w + it) * call_s + after

    if cost(len(sizes_left), warmup, iters) <= seconds_left:
        return Fit(len(sizes_left), warmup, iters)
    least = min(iters, MIN_ITERS)
    short_warmup = min(warmup, 1)
    # Cost is linear in the iterations: fixed + it * per_iter for the whole sweep.
    fixed = cost(len(sizes_left), short_warmup, 0)
    per_iter = cost(len(sizes_left), short_warmup, 1) - fixed
    most = math.floor((seconds_left - fixed) / per_iter) if per_iter > 0 else iters
    if most >= least:
        return Fit(len(sizes_left), short_warmup, min(iters, most))
    count = len(sizes_left) - 1
    while count >= 1 and cost(count, short_warmup, least) > seconds_left:
        count -= 1
    if count >= 1:
        return Fit(count, short_warmup, least)
    alone = math.floor(seconds_left / call_s) if call_s > 0 else least
    return Fit(1, 0, max(1, min(least, alone)))


# ---------------------------------------------------------------- what was cut, for the report
def budget_findings(accounts: list[dict[str, Any]]) -> tuple[Check, Table] | None:
    """The `budget` check (what the sweep ran of what was asked) and its JSON table; None without --budget.

    `accounts`: rank 0's account of each collective (sweep.measure_op), which every rank
    shares: the sizes and iterations were agreed on. Cutting to fit is what --budget asks
    for, so the check passes; its line says what was cut.
    """
    budgeted = [a for a in accounts if a.get("budget")]
    if not budgeted:
        return None
    seconds = budgeted[0]["budget"]["budget_s"]
    clauses, rows, cut = [], [], False
    for account in budgeted:
        asked, ran = account["budget"], account["sizes"]
        row = {
            "op": account["op"],
            "budget_s": seconds,
            "sizes_asked": len(asked["sizes_asked"]),
            "sizes_run": len(ran),
            "min_bytes": asked["sizes_asked"][0],
            "max_bytes_asked": asked["sizes_asked"][-1],
            "max_bytes_run": ran[-1]["size_bytes"] if ran else None,
            "iters_asked": asked["iters_asked"],
            "iters_least": min((r["iters"] for r in ran), default=None),
            "iters_most": max((r["iters"] for r in ran), default=None),
            "warmup_asked": asked["warmup_asked"],
            "warmup_least": min((r["warmup"] for r in ran), default=None),
        }
        rows.append(row)
        if ran:  # a collective this backend cannot run (SKIP) was not cut: it never started
            clauses.append(_clause(row))
            cut |= row["sizes_run"] < row["sizes_asked"] or row["iters_least"] < row["iters_asked"]
    what = "; ".join(clauses) or "nothing ran"
    return budget_check(seconds, what, cut, rows)


def _clause(row: dict[str, Any]) -> str:
    asked = f"{human_bytes(row['min_bytes'])}-{human_bytes(row['max_bytes_asked'])}"
    if row["sizes_run"] < row["sizes_asked"]:
        sizes = f"sizes {human_bytes(row['min_bytes'])}-{human_bytes(row['max_bytes_run'])} of {asked}"
    else:
        sizes = f"every size ({asked})"
    least, most = row["iters_least"], row["iters_most"]
    if least < row["iters_asked"]:
        iters = f"{least}{f'-{most}' if most != least else ''} iters of {row['iters_asked']}"
    else:
        iters = f"{row['iters_asked']} iters"
    return f"{row['op']} {sizes}, {iters}"
