"""Which ranks and which links are slower than their peers: pure, over plain numbers.

A value is a speed (higher is better: GB/s, or 1 / latency). A link is slow when it is
below `threshold` x the reference - the median of comparable links - and also further
below it than the measurement's own noise explains (SPREAD_K robust standard deviations,
from the median absolute deviation of the links that are not slow), so a noisy but healthy
run does not cry wolf.

The culprit is the rank most of whose links are below the threshold (the noise guard is
for single links: many links agreeing are evidence enough), in one direction or the other
(a NIC that sends slowly slows every link out of its host, not the links into it). Its
peers are not blamed: each has only one slow link among many. A rank's reference
leaves out its own links and those of ranks already found slow, so with three ranks
and one slow, the two healthy ranks' link is the reference, not the slow majority.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from dataclasses import dataclass

# How many robust standard deviations below the reference a single slow link must also be.
# Two: on CPU ranks here healthy links usually spread by about 30% (sigma), so 2 sigma stays
# above the CPU threshold of 0.2 and the guard only bites when a run is noisier still.
SPREAD_K = 2.0
MAD_TO_SIGMA = 1.4826  # the MAD of a normal distribution is 0.6745 sigma
# Up to this many ranks, each rank's reference leaves its own links out exactly; beyond,
# one rank's links barely move the median of all the others and one reference serves all.
EXACT_UP_TO = 64

Pair = tuple[int, int]


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


@dataclass(frozen=True)
class SlowRank:
    rank: int
    direction: str  # "out": the links it sends on; "in": those it receives on; "both"
    median: float  # the median of its links in that direction
    reference: float
    slow: list[Pair]  # its slow links, (src, dst)
    total: int  # how many links it has in that direction


@dataclass(frozen=True)
class SlowLink:
    src: int
    dst: int
    value: float
    reference: float


@dataclass(frozen=True)
class Findings:
    ranks: list[SlowRank]
    links: list[SlowLink]
    reference: Reference | None  # of the links that touch no slow rank; None when nothing compares


def reference_of(values: list[float], threshold: float) -> Reference | None:
    """The median of `values` and their noise: the MAD of those at or above threshold x median.

    The slow links themselves are left out of the spread: with two slow hosts of eight, a
    third of the links are slow, and their distance from the median would pass for noise.
    """
    if not values:
        return None
    median = statistics.median(values)
    healthy = [v for v in values if v >= threshold * median]
    mad = statistics.median(abs(v - median) for v in healthy)
    return Reference(median, MAD_TO_SIGMA * mad)


def find_slow(values: dict[Pair, float], threshold: float) -> Findings:
    """Slow ranks first (greedily, the worst one at a time), then slow links among the rest."""
    by_end: dict[str, dict[int, list[Pair]]] = {"out": defaultdict(list), "in": defaultdict(list)}
    for pair in values:
        by_end["out"][pair[0]].append(pair)
        by_end["in"][pair[1]].append(pair)
    ranks = sorted(set(by_end["out"]) | set(by_end["in"]))
    suspects: list[SlowRank] = []
    named: set[int] = set()
    while True:
        found = _slow_ranks(values, by_end, ranks, named, threshold)
        if not found:
            break
        if len(ranks) <= EXACT_UP_TO:
            found = found[:1]  # one at a time: the next reference leaves the culprit out
        suspects += found
        named |= {s.rank for s in found}
    clean = [v for (s, d), v in values.items() if s not in named and d not in named]
    reference = reference_of(clean, threshold)
    links = []
    if reference is not None and len(clean) >= 3:  # two links (one pair) compare with nothing
        links = [
            SlowLink(s, d, v, reference.median)
            for (s, d), v in sorted(values.items())
            if s not in named and d not in named and reference.is_slow(v, threshold)
        ]
    return Findings(suspects, links, reference)


def _slow_ranks(
    values: dict[Pair, float],
    by_end: dict[str, dict[int, list[Pair]]],
    ranks: list[int],
    named: set[int],
    threshold: float,
) -> list[SlowRank]:
    """Ranks (not yet named) most of whose links in one direction are slow, the worst first."""
    shared = None
    if len(ranks) > EXACT_UP_TO:
        shared = reference_of(
            [v for (s, d), v in values.items() if s not in named and d not in named], threshold
        )
    candidates: list[SlowRank] = []
    for rank in ranks:
        if rank in named:
            continue
        reference = shared or reference_of(
            [v for (s, d), v in values.items() if not {s, d} & (named | {rank})], threshold
        )
        if reference is None:
            continue  # nothing measured without this rank: nothing to compare it with
        for direction, other in (("out", 1), ("in", 0)):
            own = {p: values[p] for p in by_end[direction].get(rank, []) if p[other] not in named}
            if len(own) < 2:
                continue  # a rank with one link is indistinguishable from that link
            # Most of a rank's links below the threshold is evidence enough, however noisy each is:
            # on CPU ranks healthy links spread by 100% when pairs contend for cores, and the
            # noise guard would hide a rank slowed to a tenth (measured: 2 runs of 7, 5 ranks).
            slow = [p for p, v in own.items() if reference.is_below(v, threshold)]
            if 2 * len(slow) > len(own):
                median = statistics.median(own.values())
                candidates.append(SlowRank(rank, direction, median, reference.median, sorted(slow), len(own)))
    candidates.sort(key=lambda c: c.median / c.reference)
    unique: dict[int, SlowRank] = {}
    for c in candidates:  # a rank slow both ways is named once, with its worse direction's figures
        first = unique.get(c.rank)
        if first is None:
            unique[c.rank] = c
        else:
            slow = sorted({*first.slow, *c.slow})
            unique[c.rank] = SlowRank(
                c.rank, "both", first.median, first.reference, slow, first.total + c.total
            )
    return list(unique.values())
