"""Which rank failed first of its own accord, and which only followed it: the crash judge's order."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, TypeVar

Failed = TypeVar("Failed")


def first_failure(
    ended: Iterable[Failed],
    *,
    when: Callable[[Failed], Any],
    collateral: Callable[[Failed], bool] = lambda _: False,
) -> tuple[Failed | None, list[Failed]]:
    """The rank that failed first of its own accord (by `when`), and the others that ended meanwhile.

    When every failure is collateral, the earliest is the lead all the same.
    """
    ordered = sorted(ended, key=when)
    primary = [f for f in ordered if not collateral(f)]
    first = primary[0] if primary else (ordered[0] if ordered else None)
    return first, [f for f in ordered if f is not first]
