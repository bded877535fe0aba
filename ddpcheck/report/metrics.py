"""What one Prometheus metric family a command exports is: each measuring command says which
its reports hold (its declaration's `metrics`); report/formats/prometheus.py writes them all.

Base units only: every figure the terminal quotes in GB/s is exported in bytes per second
(x GIGA), every millisecond in seconds (x MILLI).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NamedTuple

GIGA = 1e9
MILLI = 1e-3
MICRO = 1e-6
TERA = 1e12

Row = dict[str, Any]
Tables = Mapping[str, list[Row]]  # a report's rows by table name
Samples = list[tuple[list[str], float | None]]  # (label values, value); None is left out


class Metric(NamedTuple):
    """One metric family: its name, help, labels (the `command` label aside) and samples."""

    name: str
    help: str
    labels: tuple[str, ...]
    samples: Samples


def number(value: Any, scale: float = 1.0) -> float | None:
    """A figure in base units, or None where the row holds no number."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) * scale


def rank_and_host(row: Row) -> list[str]:
    """The label values that name who measured a row."""
    return [str(row.get("rank")), str(row.get("host", ""))]
