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

Over numpy arrays (one entry per directed link), linear in the links but for the sorts that
group them: a thousand nodes of eight GPUs measure 8.4 million links.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ddpcheck.checks.links.columns import stable_order
from ddpcheck.checks.reference import EXACT_UP_TO, SPREAD_K, Reference, reference_of

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


def find_slow_links(
    src: np.ndarray, dst: np.ndarray, value: np.ndarray, threshold: float, best: np.ndarray | None = None
) -> Findings:
    """Slow ranks first (greedily, the worst one at a time), then slow links among the rest.

    One entry per directed link, sorted by (src, dst). `best`: each link's best measurement (of
    several passes); a single link is named only when that one is slow too.
    """
    links = _Links(src, dst, value)
    suspects: list[SlowRank] = []
    named = np.zeros(links.size, dtype=bool)
    while True:
        found, shared = _slow_ranks(links, named, threshold)
        if not found:
            break
        if len(links.ranks) <= EXACT_UP_TO:
            found = found[:1]  # one at a time: the next reference leaves the culprit out
        suspects += found
        named[[s.rank for s in found]] = True
    alive = links.alive(named)
    # Beyond EXACT_UP_TO ranks the last look for slow ranks left out the same ranks: its reference.
    reference = shared if shared is not None else reference_of(value[alive], threshold)
    slow_links = []
    if reference is not None and np.count_nonzero(alive) >= 3:  # two links (one pair) compare with nothing
        slow = alive & _is_slow(value, reference, threshold)
        if best is not None:
            slow &= _is_slow(best, reference, threshold)
        slow_links = [
            SlowLink(int(s), int(d), float(v), reference.median)
            for s, d, v in zip(src[slow].tolist(), dst[slow].tolist(), value[slow].tolist(), strict=True)
        ]
    return Findings(suspects, slow_links, reference)


def _is_slow(values: np.ndarray, reference: Reference, threshold: float) -> np.ndarray:
    """Reference.is_slow, every link at once."""
    return (values < threshold * reference.median) & (values < reference.median - SPREAD_K * reference.sigma)


class _Links:
    """The directed links, and each rank's out and in links found by slicing, not by scanning."""

    def __init__(self, src: np.ndarray, dst: np.ndarray, value: np.ndarray) -> None:
        self.src, self.dst, self.value = src, dst, value
        self.size = int(max(src.max(initial=-1), dst.max(initial=-1))) + 1
        self.out_starts = np.searchsorted(src, np.arange(self.size + 1))
        self.out_counts, self.in_counts = np.diff(self.out_starts), np.bincount(dst, minlength=self.size)
        self.ranks = np.flatnonzero(self.out_counts + self.in_counts)
        self._by_dst: np.ndarray | None = None  # sorted when first needed: a healthy fleet never does
        self.in_starts = np.empty(0, dtype=np.int64)

    @property
    def by_dst(self) -> np.ndarray:
        """The links in (dst, src) order (within a rank, in (src, dst) order)."""
        if self._by_dst is None:
            self._by_dst = stable_order(self.dst, self.size)
            self.in_starts = np.searchsorted(self.dst[self._by_dst], np.arange(self.size + 1))
        return self._by_dst

    def alive(self, named: np.ndarray) -> np.ndarray:
        if not named.any():
            return np.ones(len(self.src), dtype=bool)
        return ~named[self.src] & ~named[self.dst]

    def out_of(self, rank: int) -> np.ndarray:
        return np.arange(self.out_starts[rank], self.out_starts[rank + 1])

    def two_peers(self, rank: int, alive: np.ndarray) -> bool:
        """Whether this rank's live links reach two peers or more: a rank with one peer is
        indistinguishable from that one link."""
        out, into = self.out_of(rank), self.into(rank)
        peers = np.concatenate([self.dst[out[alive[out]]], self.src[into[alive[into]]]])
        return bool(len(peers) and np.any(peers != peers[0]))

    def into(self, rank: int) -> np.ndarray:
        by_dst = self.by_dst
        return by_dst[self.in_starts[rank] : self.in_starts[rank + 1]]


def _slow_ranks(
    links: _Links, named: np.ndarray, threshold: float
) -> tuple[list[SlowRank], Reference | None]:
    """Ranks (not yet named) most of whose links in one direction are slow, the worst first; and
    the reference they were all held to (beyond EXACT_UP_TO ranks; None up to it)."""
    src, dst, value, size = links.src, links.dst, links.value, links.size
    alive = links.alive(named)
    exact = len(links.ranks) <= EXACT_UP_TO
    held: list[tuple[int, Reference]] = []  # each rank to look at closer, and its reference
    shared = None
    if exact:
        for rank in links.ranks.tolist():
            if named[rank]:
                continue
            reference = reference_of(value[alive & (src != rank) & (dst != rank)], threshold)
            if reference is not None:  # else nothing measured without this rank: nothing to compare
                held.append((rank, reference))
    else:
        # Before any rank is named every link is alive: no copies of millions of them.
        everyone = not named.any()
        shared = reference_of(value if everyone else value[alive], threshold)
        if shared is not None:
            # One reference for all: count every rank's links and slow links at once, and look
            # closer only at the ranks whose counts name them.
            below = value < threshold * shared.median
            if everyone:
                n_out, n_in = links.out_counts, links.in_counts
            else:
                below &= alive
                n_out, n_in = np.bincount(src[alive], minlength=size), np.bincount(dst[alive], minlength=size)
            s_out, s_in = np.bincount(src[below], minlength=size), np.bincount(dst[below], minlength=size)
            named_now = (2 * (s_out + s_in) > n_out + n_in) | ((n_out >= 2) & (s_out == n_out))
            named_now |= (n_in >= 2) & (s_in == n_in)
            held = [(rank, shared) for rank in np.flatnonzero(named_now & ~named).tolist()]
    judged = (_judge_rank(links, r, alive, ref, threshold) for r, ref in held if links.two_peers(r, alive))
    return sorted((c for c in judged if c is not None), key=lambda c: c.median / c.reference), shared


def _judge_rank(
    links: _Links, rank: int, alive: np.ndarray, reference: Reference, threshold: float
) -> SlowRank | None:
    out, into = links.out_of(rank), links.into(rank)
    out, into = out[alive[out]], into[alive[into]]
    # Most of a rank's links below the threshold is evidence enough, however noisy each is
    # (the noise guard is for single links, and hid a slow rank on CPU ranks: docs/links.md).
    bound = threshold * reference.median
    slow_out, slow_in = out[links.value[out] < bound], into[links.value[into] < bound]
    if 2 * (len(slow_out) + len(slow_in)) > len(out) + len(into):
        direction, own, slow = "both", np.concatenate([out, into]), np.concatenate([slow_out, slow_in])
    elif len(out) >= 2 and len(slow_out) == len(out):
        direction, own, slow = "out", out, slow_out  # a NIC that sends slowly: every link out
    elif len(into) >= 2 and len(slow_in) == len(into):
        direction, own, slow = "in", into, slow_in
    else:
        return None
    median = float(np.median(links.value[own]))
    pairs = sorted(zip(links.src[slow].tolist(), links.dst[slow].tolist(), strict=True))
    return SlowRank(rank, direction, median, reference.median, pairs, len(own))
