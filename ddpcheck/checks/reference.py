"""A figure judged against its peers: the median of comparable figures and their robust noise.

Shared by the judges that name what is slower than its peers (links, devices): a value is
slow when it is below `threshold` x the reference median and also further below it than
the measurement's own noise explains (SPREAD_K robust standard deviations, from the median
absolute deviation of the values that are not slow), so a noisy but healthy run does not cry wolf.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

# How many robust standard deviations below the reference a single slow link must also be (docs/links.md).
SPREAD_K = 2.0
MAD_TO_SIGMA = 1.4826  # the MAD of a normal distribution is 0.6745 sigma
# Up to this many peers, each one's reference leaves its own figure out exactly; beyond, one
# figure barely moves the median of all the others, and one reference serves all (linear time).
EXACT_UP_TO = 64


@dataclass(frozen=True)
class Reference:
    median: float
    sigma: float

    def is_slow(self, value: float, threshold: float) -> bool:
        """One link on its own: below threshold x the median, and further below than the noise."""
        return self.is_below(value, threshold) and value < self.median - SPREAD_K * self.sigma

    def is_below(self, value: float, threshold: float) -> bool:
        """One of many links that agree (a rank's): below threshold x the median is enough."""
        return value < threshold * self.median


def reference_of(values: Sequence[float] | np.ndarray, threshold: float) -> Reference | None:
    """The median of `values` and their noise: the MAD of those at or above threshold x median.

    The slow links themselves are left out of the spread: with two slow hosts of eight, a
    third of the links are slow, and their distance from the median would pass for noise.
    numpy's median is statistics.median's to the last bit (the middle value, or the two middle
    ones' sum halved), in linear time: millions of links at a thousand nodes.
    """
    array = np.asarray(values, dtype=np.float64)
    if array.size == 0:
        return None
    median = median_of(array)
    healthy = array[array >= threshold * median]
    deviation = np.subtract(healthy, median, out=healthy)  # healthy is a copy: reused in place
    mad = median_of(np.abs(deviation, out=deviation), scratch=True)
    return Reference(median, MAD_TO_SIGMA * mad)


def median_of(array: np.ndarray, scratch: bool = False) -> float:
    """np.median to the last bit (NaN if any value is), in a third of its time: one partition at
    the middle, the value below it the largest before it, where np.median partitions at both.
    `scratch`: the array is the caller's copy, free to reorder."""
    if array.size == 0:
        return float(np.median(array))
    middle = array.size // 2
    ordered = array if scratch else array.copy()
    ordered.partition(middle)
    if np.isnan(ordered[middle:].max()):  # a partition puts NaN last
        return float(np.median(array))
    if array.size % 2:
        return float(ordered[middle])
    return float((ordered[:middle].max() + ordered[middle]) / 2)
