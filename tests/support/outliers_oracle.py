"""The links judge's rules as they were written first: per link, in plain Python (an oracle).

checks/links/outliers.py judges over numpy arrays (8.4 million links at 1,024 nodes x 8); this is
the per-link version it replaced, kept only so that tests/test_links_scale.py can check that both
name the same ranks and links, with the same numbers, on the same data. Do not use it elsewhere.
"""

from __future__ import annotations

import statistics
from collections import defaultdict

from ddpcheck.checks.links.outliers import Findings, Pair, SlowLink, SlowRank
from ddpcheck.checks.reference import EXACT_UP_TO, MAD_TO_SIGMA, Reference


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
