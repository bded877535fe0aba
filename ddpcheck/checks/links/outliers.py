"""Which ranks and which links are slower than their peers: pure, over plain numbers.

A value is a speed (higher is better: GB/s, or 1 / latency). A link is slow when it is
below `threshold` x the reference - the median of comparable links - and also further
below it than the measurement's own noise explains (SPREAD_K robust standard deviations,
from the median absolute deviation of the links that are not slow), so a noisy but healthy
run does not cry wolf.

The culprit is the rank most of whose links are below the threshold (the noise guard is
for single links: many links agreeing are evidence enough), or every one of whose links in
one direction is (a NIC that sends slowly slows every link out of its host, not those in). Its
peers are not blamed: each has only one slow link among many. A rank's reference
leaves out its own links and those of ranks already found slow, so with three ranks
and one slow, the two healthy ranks' link is the reference, not the slow majority.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from dataclasses import dataclass

from ddpcheck.checks.peers import EXACT_UP_TO, Reference, reference_of

Pair = tuple[int, int]


@dataclass(frozen=True)
class SlowRank:
    rank: int
    direction: str  # "out": every link it sends on is slow; "in": every one it receives on; "both": most
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


def find_slow(values: dict[Pair, float], threshold: float, best: dict[Pair, float] | None = None) -> Findings:
    """Slow ranks first (greedily, the worst one at a time), then slow links among the rest.

    `best`: each link's best measurement (of several passes); a single link is named only when
    that one is slow too.
    """
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
            if s not in named
            and d not in named
            and reference.is_slow(v, threshold)
            and reference.is_slow((best or values)[(s, d)], threshold)
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
        out = {p: values[p] for p in by_end["out"].get(rank, []) if p[1] not in named}
        into = {p: values[p] for p in by_end["in"].get(rank, []) if p[0] not in named}
        if len({p[1] for p in out} | {p[0] for p in into}) < 2:
            continue  # a rank with one peer is indistinguishable from that one link
        # Most of a rank's links below the threshold is evidence enough, however noisy each is
        # (the noise guard is for single links): on CPU ranks healthy links spread by 100% when
        # pairs contend for cores, and the guard hid a rank slowed to a tenth in 2 runs of 7.
        slow_out = [p for p, v in out.items() if reference.is_below(v, threshold)]
        slow_in = [p for p, v in into.items() if reference.is_below(v, threshold)]
        if 2 * (len(slow_out) + len(slow_in)) > len(out) + len(into):
            direction, own, slow = "both", {**out, **into}, slow_out + slow_in
        elif len(out) >= 2 and len(slow_out) == len(out):
            direction, own, slow = "out", out, slow_out  # a NIC that sends slowly: every link out
        elif len(into) >= 2 and len(slow_in) == len(into):
            direction, own, slow = "in", into, slow_in
        else:
            continue
        median = statistics.median(own.values())
        candidates.append(SlowRank(rank, direction, median, reference.median, sorted(slow), len(own)))
    candidates.sort(key=lambda c: c.median / c.reference)
    return candidates
