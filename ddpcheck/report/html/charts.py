"""Which charts a report gets: each chart module reads the tables it knows, by name.

A command plugs in by the names of its JSON tables, not by its own name: `collectives` writes
`bandwidth` rows as `allreduce` does and gets the same chart; a table nobody charts is still
shown as a table.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ddpcheck.report.model import Report, Table


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
    if isinstance(value, (int, float)):
        return float(value)
    try:
        return float(value)
    except (TypeError, ValueError):
        return math.nan


def charts_for(report: Report) -> list[Chart]:
    from ddpcheck.report.html import bandwidth, links, profile, train

    makers: list[Callable[[Report], list[Chart]]] = [
        bandwidth.charts,
        links.charts,
        profile.charts,
        train.charts,
    ]
    return [chart for make in makers for chart in make(report)]
