"""Which roots the data check of a rooted collective (broadcast, reduce) uses at each size."""

from __future__ import annotations

# Every root at every size up to this many ranks; beyond, this many roots per size, turning from
# size to size, so that a long sweep still visits many roots without n calls per size.
ROOTS_PER_SIZE = 8


def roots_for(n: int, size_index: int) -> list[int]:
    """Root 0 always (it is the one timed), and others in turn."""
    if n <= ROOTS_PER_SIZE:
        return list(range(n))
    start = 1 + size_index * (ROOTS_PER_SIZE - 1)
    return [0] + [1 + (start - 1 + k) % (n - 1) for k in range(ROOTS_PER_SIZE - 1)]
