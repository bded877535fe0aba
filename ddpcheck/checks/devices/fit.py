"""--budget on `devices`: how many iterations a pass, and how many passes, fit in the time left.

Pure: measure() (check.py) calls `fit_iters` once, before the first pass, with the slowest
rank's seconds per product (its checksum product, timed), and `fit_passes` after each pass
with the slowest rank's seconds for that pass; both are tested with synthetic times. The
checksum products are never cut, and at least one pass runs (each figure is a pass's): in
order, the iterations of every pass (to what fits all the passes asked, at least one), then
the passes after the one that ran.
"""

from __future__ import annotations

import math
from typing import Any

from ddpcheck.rank.budget import budget_check
from ddpcheck.report.model import Check, Table


def fit_iters(
    call_s: float, figures: int, turns: int, floor_s: float, iters: int, passes: int, seconds_left: float
) -> int:
    """The most iterations (up to `iters`, at least one) with which `passes` passes fit.

    A pass times `figures` figures (products and copies, each call costed as one product), on
    `turns` ranks one after another (CPU ranks take turns; GPUs measure at once: one turn), each
    figure at least `floor_s` long (CPU passes: see check.timed).
    """
    per_figure = seconds_left / max(1, passes * turns * figures)
    if max(floor_s, iters * call_s) <= per_figure:
        return iters
    most = math.floor(per_figure / call_s) if call_s > 0 else iters
    return max(1, min(iters, most))


def fit_passes(pass_s: float, passes_left: int, seconds_left: float) -> int:
    """How many more of `passes_left` passes, each as long as the last (`pass_s`), fit."""
    if pass_s <= 0:
        return passes_left
    return max(0, min(passes_left, math.floor(seconds_left / pass_s)))


def budget_findings(account: dict[str, Any] | None) -> tuple[Check, Table] | None:
    """The `budget` check (what of the passes ran) and its JSON table; None without --budget.

    `account`: rank 0's (every rank agreed on the same cuts). Cutting to fit is what --budget
    asks for, so the check passes; its line says what was cut.
    """
    if not account:
        return None
    row = dict(account)
    passes = (
        f"{row['passes_run']} of {row['passes_asked']} passes"
        if row["passes_run"] < row["passes_asked"]
        else f"{row['passes_asked']} passes"
    )
    iters = (
        f"{row['iters_run']} iters of {row['iters_asked']}"
        if row["iters_run"] < row["iters_asked"]
        else f"{row['iters_asked']} iters"
    )
    cut = row["passes_run"] < row["passes_asked"] or row["iters_run"] < row["iters_asked"]
    return budget_check(row["budget_s"], f"{passes}, {iters} a figure", cut, [row])
