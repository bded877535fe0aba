"""A drawn chart and the numbers behind it: what every chart maker of report/html returns."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from ddpcheck.report.model import Table


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
