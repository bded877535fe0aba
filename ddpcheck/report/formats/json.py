"""`--json PATH`: the report as JSON, every row of every table ('-' = standard output)."""

from __future__ import annotations

import json
import math
from typing import Any

from ddpcheck.report.formats.text import write_or_print
from ddpcheck.report.model import Report


def write(report: Report, path: str) -> None:
    """Write the report as JSON; '-' means standard output."""
    write_or_print(path, json.dumps(_finite(report.to_dict()), indent=2, default=str, allow_nan=False) + "\n")


def _finite(value: Any) -> Any:
    """NaN and infinities as strings: JSON has no such numbers, and strict parsers (jq) reject them.

    A faulty GPU that returns NaN must still give a readable report.
    """
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value
