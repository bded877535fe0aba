"""The figures a baseline compares: what one number is, and what it depends on.

Each measuring command says which figures its report holds (its `figures(report)`, beside
its check); report/baseline.py compares them like for like without knowing any command.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class FigureKind:
    """A kind of figure and the parts of the setup it depends on (setup_of's keys in baseline.py)."""

    name: str
    label: str  # what the kind is called when a comparison leaves it out
    needs: tuple[str, ...]
    # A coarser kind that stands in for another only when that one cannot be compared.
    stands_in_for: str | None = None


@dataclass(frozen=True)
class Figure:
    """One number a report holds, with what names it and who to blame when it regresses."""

    kind: FigureKind
    key: tuple[Any, ...]  # matches the same figure in the other report
    label: str
    unit: str
    value: float
    higher_is_better: bool
    ranks: tuple[int, ...] = ()
    hosts: tuple[str, ...] = ()
    bandwidth_bound: bool = True  # False: a message too small to measure bandwidth (busbw only)


def rows_of(report: dict[str, Any], table: str) -> list[dict[str, Any]]:
    """A saved report's table rows, whatever an edited file holds there."""
    rows = report.get("tables", {}).get(table)
    return [r for r in rows if isinstance(r, dict)] if isinstance(rows, list) else []


def positive(value: Any) -> float | None:
    """A finite positive figure, or None: zero busbw (one rank) or NaN has no ratio."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) and value > 0 else None
