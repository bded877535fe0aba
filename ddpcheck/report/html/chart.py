"""A drawn chart and the numbers behind it: what every chart maker (a command's html.py) returns."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ddpcheck.report.model import Table
from ddpcheck.report.rows import Row, worst_rows


@dataclass
class Chart:
    """One drawn chart, and the table that holds the same numbers for people who read."""

    title: str
    svg: str
    table: Table
    notes: list[str] = field(default_factory=list)  # findings the chart marks, as sentences


def number(value: Any) -> float:
    """A table cell as a float: JSON reports carry NaN and infinities as strings, a gap as null."""
    if isinstance(value, bool) or value is None:
        return math.nan
    try:
        return float(value)
    except (TypeError, ValueError):
        return math.nan


# Bars a per-rank chart draws at most: beyond, the named ranks and the worst of the rest, so that
# the page of a 1,000-node run draws in a second and reads at a glance (every rank is in the JSON).
CHART_RANKS = 64


def worst_ranks(rows: list[Row], named: Callable[[Row], bool], badness: Callable[[Row], float]) -> list[Row]:
    """At most CHART_RANKS rows, in their order: every named one first, then the worst by `badness`."""
    return worst_rows(rows, CHART_RANKS, named, badness)


def of_ranks(shown: int, total: int, worst: str) -> str:
    """What a chart's title adds when it draws fewer ranks than the run had."""
    if shown == total:
        return ""
    return f" (the {shown} {worst} of {total:,} ranks; every rank in the JSON report)"
