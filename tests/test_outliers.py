"""The links judge against peers (links/outliers.py, over checks/reference.py), pinned at its boundaries.

Pure and over plain numbers: the reference is the median (not the mean) and its noise the MAD of
the links at or above threshold x median; a single link is slow only strictly below threshold x
median AND further below than SPREAD_K robust sigmas (and its best pass too); a rank is named when
MORE than half of its links (not exactly half), or every link in one direction, are below the
threshold; the worst rank first, and the ranks named leave the next reference; two links compare
with nothing. tests/test_links.py covers the same rules end to end through judge().
"""

from __future__ import annotations

import statistics
from collections.abc import Callable

import pytest

from ddpcheck.checks.links.outliers import EXACT_UP_TO, Pair, SlowLink
from ddpcheck.checks.reference import MAD_TO_SIGMA, SPREAD_K, Reference, reference_of
from tests.support.link_values import find_slow

# Healthy links within +-30% of 1.0, deterministic; no rank has most of its links below 0.8.
SPREAD = (0.7, 0.85, 1.0, 1.15, 1.3)


def mesh(n: int, value: Callable[[int, int], float] = lambda s, d: 1.0) -> dict[Pair, float]:
    """Every directed link of n ranks."""
    return {(s, d): value(s, d) for s in range(n) for d in range(n) if s != d}


def spread(s: int, d: int) -> float:
    return SPREAD[(7 * s + 3 * d) % len(SPREAD)]


# ------------------------------------------------------------------ the reference
def test_reference_is_the_median_and_the_mad_of_the_healthy_links() -> None:
    values = [0.8, 1.0, 1.2, 1.0, 0.1, 0.1]
    ref = reference_of(values, 0.5)
    assert ref is not None
    assert ref.median == pytest.approx(0.9)  # the median (the mean is 0.7)
    # The MAD of the four at or above 0.45 (deviations .1 .1 .3 .1): 0.1; with the slow two it would be 0.2.
    assert ref.sigma == pytest.approx(MAD_TO_SIGMA * 0.1)


def test_a_value_exactly_at_threshold_x_median_counts_as_healthy_for_the_spread() -> None:
    ref = reference_of([3.0, 2.0, 2.0, 1.0], 0.5)  # median 2; 1.0 is exactly 0.5 x 2
    assert ref is not None and ref.median == 2.0
    assert ref.sigma == pytest.approx(MAD_TO_SIGMA * 0.5)  # deviations 1, 0, 0, 1 -> 0.5 (0 without it)
    assert reference_of([], 0.5) is None


def test_whole_number_figures_are_a_reference_too() -> None:
    """Integers are figures as floats are (read as float64): median 3, the MAD of 2..5 about it is 1."""
    assert reference_of([1, 2, 3, 4, 5], 0.5) == Reference(3.0, MAD_TO_SIGMA * 1.0)


def test_is_below_is_strict_and_is_slow_also_needs_the_noise() -> None:
    ref = Reference(median=1.0, sigma=0.1)  # noise bound: 1.0 - 2 x 0.1 = 0.8
    assert SPREAD_K == 2.0
    assert not ref.is_below(0.5, 0.5)  # at the threshold: not below
    assert ref.is_below(0.4999, 0.5)
    assert ref.is_slow(0.4999, 0.5)
    assert ref.is_below(0.79, 0.9) and not ref.is_slow(0.81, 0.9)  # below 0.9 x median, within the noise
    assert ref.is_slow(0.79, 0.9)  # below both
    assert not ref.is_slow(0.85, 0.8)  # within neither


# ------------------------------------------------------------------ single links
@pytest.mark.parametrize(("value", "slow"), [(0.49, True), (0.5, False), (0.51, False)])
def test_a_link_just_below_the_threshold_is_slow_just_above_is_not(value: float, slow: bool) -> None:
    values = mesh(6)
    values[(0, 1)] = value
    found = find_slow(values, 0.5)
    assert found.ranks == []  # one slow link among rank 0's ten: the link, not its ranks
    assert found.links == ([SlowLink(0, 1, value, 1.0)] if slow else [])
    assert found.reference == Reference(1.0, 0.0)


def test_a_link_below_the_threshold_but_within_the_noise_is_not_named() -> None:
    values = mesh(6, spread)
    assert find_slow(values, 0.8).links == []  # the 0.7s are below 0.8 x median, well within the noise
    ref = reference_of(list(values.values()), 0.8)
    assert ref is not None and ref.median == 1.0
    assert ref.median - SPREAD_K * ref.sigma == pytest.approx(0.555, rel=1e-3)
    values[(0, 1)] = 0.6  # below 0.8 x median, above the noise bound
    assert find_slow(values, 0.8).links == []
    values[(0, 1)] = 0.5  # below both
    found = find_slow(values, 0.8)
    assert found.ranks == [] and [(link.src, link.dst) for link in found.links] == [(0, 1)]


def test_a_healthy_spread_names_nobody() -> None:
    for threshold in (0.2, 0.5, 0.8):
        found = find_slow(mesh(8, spread), threshold)
        assert (found.ranks, found.links) == ([], [])
        assert found.reference is not None and found.reference.median == 1.0


def test_the_reference_is_the_median_not_the_mean() -> None:
    """One very fast pair: the mean (2.83) x 0.5 is above every healthy link; the median is 1."""
    values = mesh(4)
    values[(0, 1)] = values[(1, 0)] = 12.0
    assert 0.5 * statistics.mean(values.values()) > 1.0  # a mean reference would blame the healthy ten
    found = find_slow(values, 0.5)
    assert (found.ranks, found.links) == ([], [])
    assert found.reference is not None and found.reference.median == 1.0


def test_a_single_link_is_named_only_when_its_best_pass_was_slow_too() -> None:
    values = mesh(5)
    values[(2, 3)] = 0.1
    best = dict(values)
    best[(2, 3)] = 0.9  # one pass was healthy: a burst of load, not a cable
    assert find_slow(values, 0.5, best).links == []
    best[(2, 3)] = 0.3
    assert [(link.src, link.dst, link.value) for link in find_slow(values, 0.5, best).links] == [(2, 3, 0.1)]
    assert [(link.src, link.dst) for link in find_slow(values, 0.5).links] == [(2, 3)]  # no best: values rule


def test_best_does_not_spare_a_slow_rank() -> None:
    values = mesh(5, lambda s, d: 0.1 if 2 in (s, d) else 1.0)
    best = mesh(5)  # every pass of every link healthy: the rank rule does not read best
    found = find_slow(values, 0.5, best)
    assert [s.rank for s in found.ranks] == [2] and found.links == []


def test_two_links_compare_with_nothing_three_do() -> None:
    two = {(0, 1): 1.0, (2, 3): 0.1}  # every rank has one peer: no rank rule either
    found = find_slow(two, 0.5)
    assert (found.ranks, found.links) == ([], [])
    assert found.reference is not None and found.reference.median == pytest.approx(0.55)
    three = {(0, 1): 1.0, (1, 0): 1.0, (2, 3): 0.1}
    found = find_slow(three, 0.5)
    assert found.ranks == [] and found.links == [SlowLink(2, 3, 0.1, 1.0)]


# ------------------------------------------------------------------ slow ranks
def test_a_rank_with_most_of_its_links_slow_is_named_as_the_rank() -> None:
    slow = {(0, 1), (0, 2), (0, 3), (1, 0), (2, 0), (3, 0)}  # 6 of rank 0's 10 links
    values = mesh(6, lambda s, d: 0.3 if (s, d) in slow else 1.0)
    found = find_slow(values, 0.5)
    (rank,) = found.ranks
    assert (rank.rank, rank.direction, rank.total, rank.reference) == (0, "both", 10, 1.0)
    assert rank.slow == sorted(slow)
    assert rank.median == pytest.approx(0.3)  # the median of its ten: six at 0.3, four at 1.0
    assert found.links == []  # its slow links are its, not named again one by one
    assert found.reference == Reference(1.0, 0.0)  # of the links that touch no named rank


def test_a_rank_with_exactly_half_its_links_slow_is_not_a_slow_rank() -> None:
    slow = {(0, 1), (0, 2), (0, 3), (1, 0), (2, 0)}  # 5 of 10, neither direction entirely
    values = mesh(6, lambda s, d: 0.3 if (s, d) in slow else 1.0)
    found = find_slow(values, 0.5)
    assert found.ranks == []
    assert sorted((link.src, link.dst) for link in found.links) == sorted(slow)  # named link by link


@pytest.mark.parametrize("direction", ["out", "in"])
def test_every_link_in_one_direction_names_the_rank(direction: str) -> None:
    def value(s: int, d: int) -> float:
        return 0.1 if (s if direction == "out" else d) == 3 else 1.0

    found = find_slow(mesh(6, value), 0.5)
    (rank,) = found.ranks
    assert (rank.rank, rank.direction, rank.total, rank.median) == (3, direction, 5, 0.1)
    assert len(rank.slow) == 5 and found.links == []


def test_all_but_one_link_in_one_direction_is_not_a_slow_rank() -> None:
    slow = {(3, 0), (3, 1), (3, 2), (3, 4)}  # 4 of its 5 links out, none in: not every, not most
    values = mesh(6, lambda s, d: 0.1 if (s, d) in slow else 1.0)
    found = find_slow(values, 0.5)
    assert found.ranks == []
    assert sorted((link.src, link.dst) for link in found.links) == sorted(slow)


def test_its_peers_are_not_blamed_and_the_worst_rank_comes_first() -> None:
    def value(s: int, d: int) -> float:
        return 0.05 if 4 in (s, d) else 0.3 if 1 in (s, d) else 1.0

    found = find_slow(mesh(6, value), 0.5)
    assert [s.rank for s in found.ranks] == [4, 1]  # worst first, not in rank order
    second = found.ranks[1]
    assert second.total == 8 and (1, 4) not in second.slow  # the named rank's links leave the second's
    assert second.median == pytest.approx(0.3) and second.reference == 1.0
    assert found.links == [] and found.reference == Reference(1.0, 0.0)


def test_with_three_ranks_the_slow_majority_is_not_the_reference() -> None:
    """Two of three links pairs touch rank 1; its reference is the healthy pair 0 <-> 2."""
    found = find_slow(mesh(3, lambda s, d: 0.2 if 1 in (s, d) else 2.0), 0.5)
    (rank,) = found.ranks
    assert (rank.rank, rank.reference, rank.median, rank.total) == (1, 2.0, 0.2, 4)
    assert found.links == []  # the two links left compare with nothing


def test_a_rank_with_one_peer_is_only_a_link() -> None:
    """A rank linked to a single peer is indistinguishable from that one link."""
    values = mesh(4)
    values |= {(4, 0): 0.1, (0, 4): 0.1}
    found = find_slow(values, 0.5)
    assert found.ranks == []
    assert sorted((link.src, link.dst) for link in found.links) == [(0, 4), (4, 0)]


def ring(n: int, value: Callable[[int, int], float]) -> dict[Pair, float]:
    """Each rank linked both ways to the two ranks either side of it: 4n links, fast at any n."""
    return {(s, (s + k) % n): value(s, (s + k) % n) for s in range(n) for k in (-2, -1, 1, 2)}


@pytest.mark.parametrize(("n", "second_total"), [(EXACT_UP_TO, 6), (EXACT_UP_TO + 1, 8)])
def test_up_to_exact_up_to_ranks_one_at_a_time_beyond_one_pass(n: int, second_total: int) -> None:
    """Two neighbouring slow ranks: one at a time, the second's links to the first leave it;
    beyond EXACT_UP_TO one shared reference names both in one pass, with all their links."""

    def value(s: int, d: int) -> float:
        return 0.05 if 10 in (s, d) else 0.3 if 11 in (s, d) else 1.0

    found = find_slow(ring(n, value), 0.5)
    assert [(r.rank, r.total) for r in found.ranks] == [(10, 8), (11, second_total)]
    assert all(r.direction == "both" and r.reference == 1.0 for r in found.ranks)
    assert found.links == []  # ranks 9 and 12: half their links slow, not most
