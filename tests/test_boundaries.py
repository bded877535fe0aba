"""Each judgement rule pinned at its boundary: just below and just above each threshold, most
against all, the median against the mean, higher-is-better against lower-is-better.

Pure tests over synthetic data. Each of the first six was written against a bug planted by
hand that the rest of the suite let through (docs/testing.md, "Mutation testing"): the test
named in each comment failed with the bug and passes without it.
"""

from __future__ import annotations

import math
import statistics

import pytest

from ddpcheck.checks.env import redact
from ddpcheck.checks.links import check as links
from ddpcheck.checks.links.outliers import EXACT_UP_TO, Findings, Pair, SlowLink
from ddpcheck.checks.reference import SPREAD_K, reference_of
from ddpcheck.checks.sweep.bisection import bisect, max_rounds
from ddpcheck.checks.train.judge import GRAD_RTOL, judge
from ddpcheck.report import baseline
from ddpcheck.report.model import Status
from tests.support.link_values import find_slow
from tests.test_baseline import links as links_report
from tests.test_links import OPTS as LINKS_OPTS
from tests.test_links import idents, synthetic
from tests.test_outliers import mesh, ring, spread
from tests.test_train import OPTS as TRAIN_OPTS
from tests.test_train import identities, world


def by_name(report) -> dict:
    return {c.name: c for c in report.checks}


# ------------------------------------------------------------------ links: most, not all
def _most_slow(s: int, d: int) -> float:
    """Rank 2 of 6: 3 of its 5 links out and 3 of its 5 links in at 0.05, the other four healthy."""
    if (s == 2 and d in (0, 1, 3)) or (d == 2 and s in (3, 4, 5)):
        return 0.05
    return 1.0


def test_a_rank_with_most_but_not_all_of_its_links_slow_is_named() -> None:
    """Bug 1 (a host named only when *all* its links are slow): 6 of 10 is most, not all."""
    found = find_slow(mesh(6, _most_slow), 0.5)
    assert [(s.rank, s.direction, len(s.slow), s.total) for s in found.ranks] == [(2, "both", 6, 10)]
    assert found.links == []  # its peers are not blamed for their one slow link each


def test_a_host_with_most_but_not_all_of_its_links_slow_is_named_as_the_host() -> None:
    ids = idents(["a", "b", "c", "d", "e", "f"], 1)
    check = by_name(links.judge(synthetic(ids, _most_slow), ids, LINKS_OPTS))["link bandwidth"]
    assert (check.status, check.ranks, check.hosts) == (Status.FAIL, [2], ["c"])
    assert check.detail.startswith("most links of host c: 0.05 GB/s against a median of 1 GB/s")


def test_half_of_a_hosts_links_slow_is_links_not_the_host() -> None:
    """5 of 10 is not most: the five links are named, not the host."""

    def half(s: int, d: int) -> float:
        return 0.05 if (s == 2 and d in (0, 1, 3)) or (d == 2 and s in (4, 5)) else 1.0

    found = find_slow(mesh(6, half), 0.5)
    assert found.ranks == []
    assert sorted((link.src, link.dst) for link in found.links) == [(2, 0), (2, 1), (2, 3), (4, 2), (5, 2)]


# ------------------------------------------------------------------ links: the median, not the mean
def test_one_very_fast_pair_does_not_hide_a_slow_link_or_blame_healthy_ranks() -> None:
    """Bug 5 (the reference the mean, not the median): a pair at 12x lifts the mean to 2.7x the
    median, so 0.5 x the mean is above every healthy link; the median names the slow link alone."""
    ids = idents(["a", "b", "c", "d"], 1)

    def gbps(s: int, d: int) -> float:
        return 12.0 if {s, d} == {0, 1} else 0.05 if {s, d} == {2, 3} else 1.0

    check = by_name(links.judge(synthetic(ids, gbps), ids, LINKS_OPTS))["link bandwidth"]
    assert (check.status, check.ranks, check.links) == (Status.FAIL, [2, 3], [[2, 3], [3, 2]])
    assert check.detail.startswith(
        "link 2 ↔ 3 (host c ↔ d, inter-node): 0.05 GB/s against a median of 1 GB/s"
    )


# ------------------------------------------------------------------ baseline: latency is lower-is-better
def _latency_report(latency_us: float) -> dict:
    report = links_report({(0, 1): 1.0, (1, 0): 1.0}, 2, ("a", "b"))
    for row in report["tables"]["links"]:
        row["latency_us"] = latency_us if row["src"] == 0 else 50.0
    return report


def test_a_link_whose_latency_grew_fails_against_its_baseline() -> None:
    """Bug 2 (latency compared as if higher were better): 50 us -> 150 us is 3x worse, not better."""
    result = baseline.compare(_latency_report(50.0), _latency_report(150.0), 0.2)
    assert result.check.status == Status.FAIL
    assert "link 0 -> 1 (a -> b) latency 0.33x" in result.check.detail
    assert result.check.ranks == [0, 1] and result.check.hosts == ["a", "b"]
    rows = {row["figure"]: row for row in result.table.rows}
    assert rows["link 0 -> 1 (a -> b) latency"]["ratio"] == 3.0  # now / then
    assert rows["link 0 -> 1 (a -> b) latency"]["speed"] == pytest.approx(0.333, abs=1e-3)


def test_a_link_whose_latency_fell_is_better_not_a_failure() -> None:
    result = baseline.compare(_latency_report(50.0), _latency_report(20.0), 0.2)
    assert result.check.status == Status.PASS
    assert "better than the baseline: link 0 -> 1 (a -> b) latency 2.50x" in result.check.detail


@pytest.mark.parametrize(
    ("now_us", "status"),
    [(62.4, "PASS"), (62.6, "FAIL"), (40.1, "PASS"), (39.9, "better")],
)
def test_latency_tolerance_mirrors_bandwidth(now_us: float, status: str) -> None:
    """Tolerance 0.2 of throughput: latency may grow to 1/0.8 = 1.25x (62.5 us) and counts as
    better below 0.8x (40 us)."""
    result = baseline.compare(_latency_report(50.0), _latency_report(now_us), 0.2)
    assert {row["figure"]: row["status"] for row in result.table.rows}[
        "link 0 -> 1 (a -> b) latency"
    ] == status


# ------------------------------------------------------------------ train: the last step against the first
def _losses(data: list[dict], losses: list[float]) -> list[dict]:
    for rank in data:
        for step, loss in zip(rank["steps"], losses, strict=True):
            step["loss"] = loss
    return data


def test_a_loss_that_falls_then_rises_above_its_start_fails() -> None:
    """Bug 3 (descent judged on step 1 against step 0): it fell at step 1, rose by the end."""
    data = _losses(world(2), [1.3, 1.0, 1.2, 1.35, 1.4])
    loss = by_name(judge(data, identities(2), TRAIN_OPTS))["loss descent"]
    assert loss.status == Status.FAIL
    assert loss.detail.startswith("the mean loss did not fall: 1.3000 at step 0, 1.4000 at step 4")


def test_a_loss_that_rises_at_first_then_falls_below_its_start_passes() -> None:
    data = _losses(world(2), [1.3, 1.5, 1.4, 1.35, 1.29])
    loss = by_name(judge(data, identities(2), TRAIN_OPTS))["loss descent"]
    assert loss.status == Status.PASS and "fell from 1.3000 at step 0 to 1.2900 at step 4" in loss.detail


def test_a_loss_that_ends_where_it_began_did_not_fall() -> None:
    data = _losses(world(2), [1.3, 1.2, 1.1, 1.2, 1.3])
    assert by_name(judge(data, identities(2), TRAIN_OPTS))["loss descent"].status == Status.FAIL


def test_the_ranks_whose_own_loss_rose_are_named_unless_all_did() -> None:
    data = world(3)
    for step, loss in zip(data[2]["steps"], [1.0, 1.5, 2.0, 2.5, 3.0], strict=True):
        step["loss"] = loss  # ranks 0 and 1 fall by 0.4, rank 2 rises by 2: the mean rises
    loss = by_name(judge(data, identities(3), TRAIN_OPTS))["loss descent"]
    assert (loss.status, loss.ranks) == (Status.FAIL, [2])
    assert "(it rose on rank 2 on host h0)" in loss.detail


# ------------------------------------------------------------------ train: the gradient tolerance
@pytest.mark.parametrize(
    ("times_tolerance", "status"), [(0.9, Status.PASS), (1.0, Status.PASS), (1.1, Status.FAIL)]
)
def test_a_gradient_is_judged_at_its_tolerance(times_tolerance: float, status: Status) -> None:
    """Bug 6 (the tolerance 1000x looser): a gradient 1.1x the tolerance off the mean fails."""
    data = world(3)
    scale = data[1]["steps"][2]["grad_scale"][0]
    data[1]["steps"][2]["grad_dev"] = [times_tolerance * GRAD_RTOL * scale, 0.0]
    grads = by_name(judge(data, identities(3), TRAIN_OPTS))["gradient synchronisation"]
    assert grads.status == status, grads.detail
    if status == Status.FAIL:
        assert grads.ranks == [1] and grads.detail.startswith(
            "at step 2 the synchronised gradient is not the mean of the ranks' local gradients "
            "(tolerance 1e-05"
        )
        assert "these ranks' averaged gradients are wrong while others' are right" in grads.detail
    else:
        assert f"largest difference {times_tolerance:.2g} of the tolerance" in grads.detail


def test_gradient_tolerance_is_relative_to_the_scale() -> None:
    data = world(2)
    for rank in data:
        for step in rank["steps"]:
            step["grad_scale"] = [1e3, 1e3]
            step["grad_dev"] = [0.5 * GRAD_RTOL * 1e3, 0.0]  # 5e-3 absolute: within at this scale
    assert by_name(judge(data, identities(2), TRAIN_OPTS))["gradient synchronisation"].status == Status.PASS
    data[0]["steps"][0]["grad_dev"] = [2 * GRAD_RTOL * 1e3, 0.0]
    assert by_name(judge(data, identities(2), TRAIN_OPTS))["gradient synchronisation"].ranks == [0]


# ------------------------------------------------------------------ env: secret names
@pytest.mark.parametrize(
    "name",
    [
        "SESSIONID",  # caught only by its prefix: not a secret word, no secret suffix
        "MY_SESSIONID",
        "PASSWORDHASH",
        "DB_PASSWORDFILE",
        "TOKENVALUE",
        "HF_TOKENFILE",
        "SECRETVALUE",
        "CREDENTIALID",
        "AUTHORIZATIONHEADER",
        "COOKIEJAR",
        "PRIVATEDATA",
    ],
)
def test_names_that_start_with_a_secret_word_are_secret(name: str) -> None:
    """Bug 4 (the prefix rule lost): each of these is caught by its prefix alone."""
    assert not any(
        word in redact.SECRET_WORDS or word.endswith(redact.SECRET_SUFFIXES) for word in name.split("_")
    )
    assert redact.is_secret_name(name)
    assert redact.redact_value(name, "hunter2") == redact.REDACTED


@pytest.mark.parametrize(
    "name",
    [
        "MYSESSIONID",  # the prefix must start the word
        "AUTHOR",  # AUTH is a whole word only; AUTHORIZ is the prefix
        "PKEY",
        "KEYBOARD",
        "PASSPORT",  # PASS is a word, not a prefix
        "PWD",  # alone, the working directory
        "LOCAL_RANK",
    ],
)
def test_names_that_only_contain_a_secret_word_are_not(name: str) -> None:
    assert not redact.is_secret_name(name)
    assert redact.redact_value(name, "plain") == "plain"


@pytest.mark.parametrize(
    "name", ["API_TOKEN", "DBPASSWORD", "MYAPIKEY", "SLURM_JWT", "DB_PWD", "X_KEY", "NCCL_AUTH"]
)
def test_words_suffixes_and_pwd_in_longer_names_are_secret(name: str) -> None:
    assert redact.is_secret_name(name)


def test_a_password_in_a_url_is_removed_and_the_rest_kept() -> None:
    assert (
        redact.redact_value("MASTER_ENDPOINT", "etcd://user:pw@host:2379/x")
        == "etcd://user:<redacted>@host:2379/x"
    )
    assert redact.redact_value("MASTER_ENDPOINT", "etcd://host:2379") == "etcd://host:2379"


# ------------------------------------------------------------------ a loss that never was finite
def test_a_nan_loss_on_one_rank_names_it_and_the_step() -> None:
    data = world(3)
    data[1]["steps"][3]["loss"] = math.nan
    loss = by_name(judge(data, identities(3), TRAIN_OPTS))["loss descent"]
    assert loss.status == Status.FAIL and loss.ranks == [1]
    assert loss.detail.startswith("the loss turned non-finite (nan) at step 3 on rank 1 on host h0")


# ------------------------------------------------------------------ found by mutation testing (mutmut)
def test_a_single_link_exactly_at_the_noise_bound_is_not_slow() -> None:
    from ddpcheck.checks.reference import Reference

    ref = Reference(median=1.0, sigma=0.125)  # the noise bound: 1.0 - 2 x 0.125 = 0.75, exactly
    assert ref.is_below(0.75, 0.9) and not ref.is_slow(0.75, 0.9)
    assert ref.is_slow(0.7499, 0.9)


def test_a_rank_that_only_receives_is_still_judged() -> None:
    """Rank 3 appears only as a receiver (a partial matrix): every link into it is slow."""
    values = mesh(3)
    values.update({(0, 3): 0.05, (1, 3): 0.05, (2, 3): 0.05})
    found = find_slow(values, 0.5)
    assert [(s.rank, s.direction, s.total) for s in found.ranks] == [(3, "both", 3)]
    assert found.links == []


def test_a_rank_that_only_sends_is_still_judged() -> None:
    """Rank 3, the highest, appears only as a sender: the counts of links in are as long as those out."""
    values = mesh(3)
    values.update({(3, 0): 0.05, (3, 1): 0.05, (3, 2): 0.05})
    found = find_slow(values, 0.5)
    assert [(s.rank, s.direction, s.total) for s in found.ranks] == [(3, "both", 3)]
    assert found.links == []


@pytest.mark.parametrize("direction", ["out", "in"])
def test_two_links_in_one_direction_are_enough_to_name_a_rank(direction: str) -> None:
    """3 ranks, rank 0's two links out (or in) slow, its two others healthy: half, but a whole direction."""
    values = mesh(3)
    for peer in (1, 2):
        values[(0, peer) if direction == "out" else (peer, 0)] = 0.05
    found = find_slow(values, 0.5)
    assert [(s.rank, s.direction, len(s.slow), s.total) for s in found.ranks] == [(0, direction, 2, 2)]


def test_two_links_left_after_naming_a_rank_compare_with_nothing() -> None:
    """Rank 2 named; the one pair left (0 <-> 1) is fast one way and slow the other: no reference."""
    values = mesh(3, lambda s, d: 0.05 if 2 in (s, d) else 1.0)
    values[(1, 0)] = 0.1
    found = find_slow(values, 0.5)
    assert [s.rank for s in found.ranks] == [2] and found.links == []


def test_a_rank_with_one_peer_does_not_stop_the_others_being_judged() -> None:
    """Rank 0 links only to rank 1 (skipped: one peer); ranks 1-4 are a mesh with rank 4 slow."""
    values = {(s, d): 0.05 if 4 in (s, d) else 1.0 for s in range(1, 5) for d in range(1, 5) if s != d}
    values.update({(0, 1): 1.0, (1, 0): 1.0})
    found = find_slow(values, 0.5)
    assert [s.rank for s in found.ranks] == [4] and found.links == []


def _one_slow_rank(n: int, slow: int = 5) -> dict:
    values = mesh(n, lambda s, d: 1.0 + 1e-5 * (s * n + d))  # healthy links, all different
    for pair in values:
        if slow in pair:
            values[pair] = 0.05
    return values


def test_up_to_exact_up_to_ranks_a_rank_is_judged_against_the_links_without_it() -> None:
    values = _one_slow_rank(EXACT_UP_TO)
    found = find_slow(values, 0.5)
    assert [s.rank for s in found.ranks] == [5]
    without = statistics.median(v for (s, d), v in values.items() if 5 not in (s, d))
    assert found.ranks[0].reference == without


def test_beyond_exact_up_to_ranks_one_reference_of_every_link_serves_all() -> None:
    values = _one_slow_rank(EXACT_UP_TO + 1)
    found = find_slow(values, 0.5)
    assert [s.rank for s in found.ranks] == [5]
    assert found.ranks[0].reference == statistics.median(values.values())  # its own slow links too


def test_the_worst_rank_relative_to_its_own_reference_is_named_first() -> None:
    """Ranks 0 and 1 slow; rank 1's reference (links without it) is higher than rank 0's, so rank 1,
    a hair faster in GB/s, is the further below its reference: ratio, not product, orders them."""
    healthy = {(s, d): 0.9 + 0.01 * (4 * s + d) for s in range(2, 6) for d in range(2, 6) if s != d}
    values = dict(healthy)
    for peer in range(1, 6):
        values[(0, peer)] = values[(peer, 0)] = 0.1  # every link of rank 0
    for peer in (2, 3):
        values[(1, peer)] = values[(peer, 1)] = 0.10001  # most links of rank 1...
    for peer in (4, 5):
        values[(1, peer)] = values[(peer, 1)] = 2.0  # ...and four fast ones, lifting rank 0's reference
    found = find_slow(values, 0.5)
    assert [s.rank for s in found.ranks][:1] == [0]
    assert found.ranks[0].median / found.ranks[0].reference < 0.10001 / statistics.median(
        v for (s, d), v in values.items() if 1 not in (s, d)
    )


# ------------------------------------------------------------------ links: the numpy judge (issue #25)
def test_no_links_find_nothing_and_no_reference() -> None:
    """No links at all (nothing measured): no rank, no link, nothing to compare with, and no error."""
    assert find_slow({}, 0.5) == Findings([], [], None)


def test_a_single_link_exactly_at_the_judges_own_noise_bound_is_not_slow() -> None:
    """The noise rule is strict in the vectorised judge too: a link exactly SPREAD_K sigmas below the
    median (and below threshold x median) is within the noise; one ulp lower, it is slow."""
    values = mesh(6, spread)
    values[(0, 1)] = 0.5  # below 0.8 x the median: left out of the spread, below the median either way
    ref = reference_of(list(values.values()), 0.8)
    assert ref is not None
    bound = ref.median - SPREAD_K * ref.sigma
    assert 0.5 < bound < 0.7  # so the link at the bound leaves the reference as it is
    values[(0, 1)] = bound
    found = find_slow(values, 0.8)
    assert (found.ranks, found.links, found.reference) == ([], [], ref)
    values[(0, 1)] = math.nextafter(bound, 0.0)
    assert find_slow(values, 0.8).links == [SlowLink(0, 1, values[(0, 1)], ref.median)]


# Beyond EXACT_UP_TO ranks one shared reference counts every rank's links and slow links at once, and
# only the ranks those counts name are judged (by the same rules): each rule at its boundary there.
FLEET = EXACT_UP_TO + 1


def _fleet_ring(slow: set[Pair], missing: set[Pair] = frozenset()) -> dict[Pair, float]:
    """ring(FLEET): healthy links all different, `slow` ones at 0.05, `missing` ones not measured."""
    links = ring(FLEET, lambda s, d: 0.05 if (s, d) in slow else 1.0 + 1e-5 * (s * FLEET + d))
    return {pair: value for pair, value in links.items() if pair not in missing}


@pytest.mark.parametrize("direction", ["out", "in"])
def test_beyond_exact_up_to_two_links_in_one_direction_name_a_rank(direction: str) -> None:
    """Rank 30 measured on only two links in `direction`, both slow, and on four healthy ones the
    other way: 2 of 6 is not most, but a whole direction of at least two links is."""
    two = [(30, 31), (30, 29)] if direction == "out" else [(31, 30), (29, 30)]
    gone = {(30, 32), (30, 28)} if direction == "out" else {(32, 30), (28, 30)}
    found = find_slow(_fleet_ring(set(two), gone), 0.5)
    assert [(s.rank, s.direction, len(s.slow), s.total) for s in found.ranks] == [(30, direction, 2, 2)]
    assert found.links == []


def test_beyond_exact_up_to_most_but_not_all_in_either_direction_names_the_rank() -> None:
    """Rank 30: 3 of its 4 links in and 2 of its 4 out slow: 5 of 8 is most, though neither direction
    is entirely slow (and more of them are in than out)."""
    slow = {(28, 30), (29, 30), (31, 30), (30, 31), (30, 32)}
    found = find_slow(_fleet_ring(slow), 0.5)
    assert [(s.rank, s.direction, sorted(s.slow), s.total) for s in found.ranks] == [
        (30, "both", sorted(slow), 8)
    ]
    assert found.links == []


def test_beyond_exact_up_to_a_named_ranks_links_leave_the_next_count_and_reference() -> None:
    """Rank 64 (the highest) has 6 of its 8 links slow, but not those with rank 0; rank 0 has 4 of its 8
    slow: half, not named in the first pass. Without rank 64's links, 4 of 6 are: rank 0 is named next,
    held to the median of the links that do not touch 64, and the findings' reference leaves both out."""
    slow = {(64, p) for p in (62, 63, 1)} | {(p, 64) for p in (62, 63, 1)}
    slow |= {(0, 63), (63, 0), (0, 1), (0, 2)}
    values = _fleet_ring(slow)
    found = find_slow(values, 0.5)
    assert [(s.rank, s.direction, s.total) for s in found.ranks] == [(64, "both", 8), (0, "both", 6)]
    without_64 = [v for (s, d), v in values.items() if 64 not in (s, d)]
    assert found.ranks[1].reference == statistics.median(without_64) != statistics.median(values.values())
    rest = [v for (s, d), v in values.items() if not {0, 64} & {s, d}]
    assert found.reference == reference_of(rest, 0.5) and found.links == []


def test_beyond_exact_up_to_a_rank_with_one_peer_does_not_stop_the_others_being_judged() -> None:
    """Rank 0 links only to rank 1, both ways slow: counted as most-slow, but one peer is one link (named
    as two links); rank 31, every link slow, is judged after it all the same."""
    values = {(s + 1, d + 1): v for (s, d), v in _fleet_ring(set()).items()}
    for pair in values:
        if 31 in pair:
            values[pair] = 0.05
    values.update({(0, 1): 0.05, (1, 0): 0.05})
    found = find_slow(values, 0.5)
    assert [s.rank for s in found.ranks] == [31]
    assert [(link.src, link.dst) for link in found.links] == [(0, 1), (1, 0)]


# ------------------------------------------------------------------ bisection, found by mutation testing
def test_bisection_refuses_a_run_that_answers_for_other_groups_than_it_was_given() -> None:
    with pytest.raises(ValueError):
        bisect(8, lambda groups: [True] * (len(groups) + 1))
    with pytest.raises(ValueError):
        bisect(8, lambda groups: [True] * (len(groups) - 1))


def test_bisection_of_three_with_a_bad_link_and_a_corrupt_rank() -> None:
    link = lambda a, b: lambda groups: [a in g and b in g for g in groups]  # noqa: E731
    assert bisect(3, link(0, 1)) == [0, 1]  # each end tried beside rank 2, proven good by neither
    assert bisect(3, lambda gs: [(0 in g and 1 in g) or 2 in g for g in gs]) == [0, 1, 2]
    assert bisect(8, link(0, 3)) == [0, 1, 2, 3]  # the fault needs both quarters: the half is named


def _faults(n: int) -> list:
    """Every one- and two-rank corruption, lone-silent rank and bad link among n ranks."""
    pairs = [(a, b) for a in range(n) for b in range(a + 1, n)]
    return (
        [lambda gs, r=r: [r in g for g in gs] for r in range(n)]
        + [lambda gs, r=r: [r in g and len(g) > 1 for g in gs] for r in range(n)]
        + [lambda gs, a=a, b=b: [a in g or b in g for g in gs] for a, b in pairs]
        + [lambda gs, a=a, b=b: [a in g and b in g for g in gs] for a, b in pairs]
    )


def _rounds(n: int, fault) -> int:
    calls = []
    bisect(n, lambda groups: calls.append(groups) or fault(groups))
    return len(calls)


def test_bisection_ends_well_within_its_bound_on_every_fault() -> None:
    """The bound only cuts a defect that would never end (it returns None, nothing localised): every
    fault of 2-24 ranks, and a corrupt rank or bad link among 1,024, takes at most half of it."""
    for n in range(2, 25):
        assert max(_rounds(n, fault) for fault in _faults(n)) <= max_rounds(n) // 2, n
    wide = [lambda gs: [700 in g for g in gs], lambda gs: [3 in g and 1000 in g for g in gs]]
    assert max(_rounds(1024, fault) for fault in wide) <= max_rounds(1024) // 2


# ------------------------------------------------------------------ links against a baseline, by host pair
def test_host_pair_figures_carry_units_labels_and_latency_lower_is_better() -> None:
    """Another layout (2 ranks per host, then 1): host pairs stand in, latency judged lower-is-better."""
    then = links_report({(0, 2): 1.0, (2, 0): 1.0, (1, 3): 1.0, (0, 1): 10.0}, 4, ("a", "b"))
    now = links_report({(0, 1): 1.0, (1, 0): 1.0}, 2, ("a", "b"))
    for row in now["tables"]["links"]:
        row["latency_us"] = 150.0 if row["src"] == 0 else 20.0
    result = baseline.compare(then, now, 0.2)
    rows = {row["figure"]: row for row in result.table.rows}
    assert {f: (r["unit"], r["status"]) for f, r in rows.items()} == {
        "links a -> b bandwidth (median)": ("GB/s", "PASS"),
        "links a -> b latency (median)": ("us", "FAIL"),
        "links b -> a bandwidth (median)": ("GB/s", "PASS"),
        "links b -> a latency (median)": ("us", "better"),
    }
    assert result.check.status == Status.FAIL and "links a -> b latency (median) 0.33x" in result.check.detail


def test_rank_pair_figures_carry_their_units() -> None:
    result = baseline.compare(_latency_report(50.0), _latency_report(50.0), 0.2)
    assert {row["figure"]: row["unit"] for row in result.table.rows} == {
        "link 0 -> 1 (a -> b) bandwidth": "GB/s",
        "link 0 -> 1 (a -> b) latency": "us",
        "link 1 -> 0 (b -> a) bandwidth": "GB/s",
        "link 1 -> 0 (b -> a) latency": "us",
    }


def test_a_link_without_both_hosts_has_no_host_pair_figure() -> None:
    from ddpcheck.checks.links.figures import link_figures

    report = links_report({(0, 1): 1.0}, 2, ("a", "b"))
    report["tables"]["links"][0]["dst_host"] = None
    assert [f.kind.name for f in link_figures(report)] == ["link", "link"]
