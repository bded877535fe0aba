"""What the terminal and the HTML page show of a long table; the JSON report keeps every row."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

# The rows that are not PASS first, then the first and last rows, in their order. 64: no report
# of up to 64 ranks loses a row, and a screen of a thousand-node run stays a screen.
SHOWN_ROWS = 64


def shown_rows(rows: list[dict[str, Any]], limit: int = SHOWN_ROWS) -> list[dict[str, Any]]:
    """At most `limit` rows, in their order: every row whose status is not PASS, then the first and
    the last rows in turn (a long loss table keeps its first and its last steps)."""
    if len(rows) <= limit:
        return rows
    keep = set([i for i, r in enumerate(rows) if r.get("status") not in (None, "PASS")][:limit])
    head, tail = 0, len(rows) - 1
    while len(keep) < limit:
        keep.add(head)
        head += 1
        if len(keep) < limit:
            keep.add(tail)
            tail -= 1
    return [rows[i] for i in sorted(keep)]


Row = dict[str, Any]

# A `stderr` table's row: each text it may hold, and its panel's title (the terminal and the page).
TAILS = (("stderr_tail", "last lines of stderr"), ("stack", "Python stack (py-spy, before the kill)"))


def worst_rows(
    rows: list[Row], limit: int, named: Callable[[Row], bool], badness: Callable[[Row], float]
) -> list[Row]:
    """At most `limit` rows, in their order: every named one first, then the worst by `badness`."""
    if len(rows) <= limit:
        return rows
    flagged = [i for i, r in enumerate(rows) if named(r)][:limit]
    rest = sorted((i for i, r in enumerate(rows) if not named(r)), key=lambda i: -badness(rows[i]))
    keep = set(flagged) | set(rest[: limit - len(flagged)])
    return [rows[i] for i in sorted(keep)]


def left_out_line(shown: int, total: int) -> str:
    """The one line that says a table was cut, and where the rest is."""
    return (
        f"showing {shown:,} of {total:,} rows (any not passing, then the first and last); "
        "every row is in the JSON report"
    )
