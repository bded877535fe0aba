"""Pure: the straggler judge (ddpcheck/failure/stragglers/) on synthetic flight-recorder samples.

A job is simulated collective by collective: each rank works for its time, then enqueues the
collective (time_created_ns, on its host's clock); the collective ends when its last member
arrives (plus a transfer time), and every rank starts its next work then. NCCL entries carry
the GPU time in the collective (duration_ms: the wait plus the transfer) once it completed.
The samples are what each rank's ring buffer held at the sampling times, built with
tests/support/fr_dumps.py's entry() and dump().
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ddpcheck.failure.flight import read_dump
from ddpcheck.failure.stragglers.judge import (
    HEAT_BUCKETS,
    MARGIN,
    MIN_COLLECTIVES,
    MIN_LAG_S,
    WAIT_SHARE,
    WINDOW_MIN,
    Judgement,
    StragglerVerdict,
    judge,
)
from ddpcheck.failure.stragglers.samples import Sample, sample_from_dumps
from ddpcheck.failure.stragglers.timeline import Estimator, peer_medians
from ddpcheck.failure.stragglers.words import check, label, rank_rows, stderr_line, table
from ddpcheck.report.model import Status
from tests.support.fr_dumps import dump, entry

BASE_NS = 1_790_000_000 * 10**9
STEP = 0.1  # seconds of work per collective
H200 = Path(__file__).parent / "fixtures" / "h200" / "nccl_trace_rank_0"
GLOO = Path(__file__).parent / "fixtures" / "gloo_stragglers"  # real dumps: README.md there says how


@dataclass(frozen=True)
class Rec:
    """One rank's collective in the simulated job, in true time (seconds)."""

    seq: int
    arrive: float
    release: float
    op: str
    pg: tuple[str, str]
    pg_id: int


def simulate(
    works: list[list[float]],
    ranks: list[int] | None = None,
    *,
    transfer: float = 0.0,
    pg: tuple[str, str] = ("0", "default_pg"),
    pg_id: int = 0,
    op: str = "all_reduce",
    start: float = 0.0,
) -> dict[int, list[Rec]]:
    """works[k][i]: rank ranks[i]'s work before the group's collective k+1 (seconds)."""
    ranks = ranks if ranks is not None else list(range(len(works[0])))
    out: dict[int, list[Rec]] = {r: [] for r in ranks}
    release = start
    for k, step in enumerate(works, start=1):
        arrive = {r: release + w for r, w in zip(ranks, step, strict=True)}
        release = max(arrive.values()) + transfer
        for r in ranks:
            out[r].append(Rec(k, arrive[r], release, op, pg, pg_id))
    return out


def merged(*jobs: dict[int, list[Rec]]) -> dict[int, list[Rec]]:
    out: dict[int, list[Rec]] = {}
    for job in jobs:
        for rank, recs in job.items():
            out.setdefault(rank, []).extend(recs)
    return {rank: sorted(recs, key=lambda r: r.arrive) for rank, recs in out.items()}


def ns(seconds: float) -> int:
    return round(seconds * 1e9)


def raw_dump(
    recs: list[Rec], at: float, *, backend: str, clock: float, ring: int | None, ahead: float = 0.0
) -> dict[str, Any]:
    """What a rank's flight recorder holds at true time `at`: the last `ring` entries enqueued by then.

    ahead: NCCL's CPU enqueues a collective before its GPU reaches it, by up to this (seeded)."""
    held = [r for r in recs if r.arrive <= at]
    held = held[-ring:] if ring else held
    entries = []
    for rec in held:
        e = entry(rec.seq, op=rec.op, backend=backend, pg=rec.pg, pg_id=rec.pg_id)
        lead = random.Random(ns(rec.arrive)).uniform(0, ahead) if ahead else 0.0
        e["time_created_ns"] = BASE_NS + ns(rec.arrive - lead + clock)
        if backend == "nccl":
            done = rec.release <= at
            e["state"] = "completed" if done else "started"
            e["time_discovered_started_ns"] = BASE_NS + ns(rec.arrive + clock)
            e["time_discovered_completed_ns"] = BASE_NS + ns(rec.release + clock) if done else None
            e["duration_ms"] = (rec.release - rec.arrive) * 1e3 if done else None
        entries.append(e)
    return dump(entries)


def samples(
    job: dict[int, list[Rec]],
    at: list[float] | None = None,
    *,
    backend: str = "gloo",
    hosts: dict[int, str] | None = None,
    clocks: dict[str, float] | None = None,
    offsets: bool = False,
    ring: int | None = None,
    ahead: float = 0.0,
    timing: bool = True,
) -> list[Sample]:
    """The watcher's samples at true times `at` (default: one, after the job's last collective).

    clocks: each host's clock minus the true time (seconds); offsets: the caller measured them;
    ahead: see raw_dump; timing: False drops NCCL's durations."""
    hosts = hosts if hosts is not None else {r: "a" for r in job}
    clocks = clocks or {}
    if at is None:
        at = [max(rec.release for recs in job.values() for rec in recs) + 1.0]
    out = []
    for t in at:
        clock = {r: clocks.get(hosts.get(r, ""), 0.0) for r in job}
        dumps = {
            r: raw_dump(recs, t, backend=backend, clock=clock[r], ring=ring, ahead=ahead)
            for r, recs in job.items()
        }
        if not timing:  # NCCL without TORCH_NCCL_ENABLE_TIMING: no duration
            for data in dumps.values():
                for e in data["entries"]:
                    e["duration_ms"] = None
        measured = {r: ns(clock[r]) for r in job} if offsets else None
        out.append(sample_from_dumps(dumps, hosts, measured))
    return out


def works(
    steps: int,
    world: int,
    *,
    seed: int = 0,
    jitter: float = 0.1,
    slow: dict[int, float] | None = None,
    slow_from: int = 0,
) -> list[list[float]]:
    """STEP seconds of work per rank and collective, times a uniform jitter of +-`jitter`, times
    slow[rank] from collective `slow_from` on."""
    rng = random.Random(seed)
    slow = slow or {}
    return [
        [
            STEP * (1 + rng.uniform(-jitter, jitter)) * (slow.get(r, 1.0) if k >= slow_from else 1.0)
            for r in range(world)
        ]
        for k in range(steps)
    ]


def verdict(judged: Judgement) -> StragglerVerdict | None:
    found = judged.verdicts
    assert len(found) <= 1, found
    return found[0] if found else None


EIGHT = {r: ("b06" if r < 4 else "b07") for r in range(8)}


# ---------------------------------------------------------------- one slow rank, healthy jobs
@pytest.mark.parametrize("backend", ["gloo", "nccl"])
@pytest.mark.parametrize(("factor", "share"), [(1.3, 0.3 / 1.3), (2.0, 0.5)])
def test_a_slower_rank_is_named_with_its_lag_and_its_peers_wait(
    backend: str, factor: float, share: float
) -> None:
    job = simulate(works(100, 8, seed=1, slow={5: factor}))
    judged = judge(samples(job, backend=backend, hosts=EIGHT))
    found = verdict(judged)
    assert found is not None
    assert (found.ranks, found.hosts, found.group, found.op) == ((5,), ("b07",), "0", "all_reduce")
    assert found.estimator == (Estimator.GPU if backend == "nccl" else Estimator.ENQUEUE)
    assert found.lag_s == pytest.approx(STEP * (factor - 1), rel=0.25)
    assert found.peers_wait_share == pytest.approx(share, abs=0.06)
    assert found.window_s == pytest.approx(99 * STEP * factor, rel=0.1)
    assert found.collectives == 99
    row = next(r for r in rank_rows(judged) if r["rank"] == 5)
    assert row["named"] and row["work_s"] == pytest.approx(STEP * factor, rel=0.1)
    assert all(not r["named"] and r["wait_share"] < 0.03 for r in rank_rows(judged) if r["rank"] != 5)


@pytest.mark.parametrize("backend", ["gloo", "nccl"])
def test_a_healthy_job_names_nobody(backend: str) -> None:
    judged = judge(samples(simulate(works(100, 8, seed=2)), backend=backend, hosts=EIGHT))
    assert judged.verdicts == []
    result = check(judged)
    assert result.status is Status.PASS and result.ranks == []
    # gloo without clock offsets: each host's ranks compared among themselves
    apart = ", each host's ranks among themselves" if backend == "gloo" else ""
    assert result.detail.startswith(
        f"no rank slows the job (99 collectives of 1 group compared{apart}, over "
    )


def test_healthy_jitter_of_ten_percent_never_names_anyone_and_a_third_slower_rank_always_is() -> None:
    for seed in range(40):
        assert judge(samples(simulate(works(60, 8, seed=seed)))).verdicts == [], seed
        slow = seed % 8
        found = verdict(judge(samples(simulate(works(60, 8, seed=seed, slow={slow: 1.3})))))
        assert found is not None and found.ranks == (slow,), seed


@settings(max_examples=40, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    jitter=st.floats(0.0, 0.045),
    world=st.integers(2, 8),
    steps=st.integers(MIN_COLLECTIVES + 1, 60),
)
def test_healthy_with_jitter_below_four_and_a_half_percent_never_names(
    seed: int, jitter: float, world: int, steps: int
) -> None:
    """Within +-4.5%, no rank arrives more than 9% of a step after another, and a collective's period
    is at least 95.5% of a step: no rank's peers can wait 10% of the window for it, whatever the draw."""
    assert WAIT_SHARE > 2 * 0.045 / (1 - 0.045)
    assert judge(samples(simulate(works(steps, world, seed=seed, jitter=jitter)))).verdicts == []


@settings(max_examples=40, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    jitter=st.floats(0.0, 0.03),
    world=st.integers(2, 8),
    factor=st.floats(1.3, 4.0),
    data=st.data(),
)
def test_one_rank_at_least_a_third_slower_is_always_named(
    seed: int, jitter: float, world: int, factor: float, data: st.DataObject
) -> None:
    """Its lag is at least 1.3 x 0.97 - 1.03 = 0.23 of a step, the period at most 1.3 x 1.03: its
    peers wait at least 17% of the window for it."""
    slow = data.draw(st.integers(0, world - 1))
    found = verdict(judge(samples(simulate(works(30, world, seed=seed, jitter=jitter, slow={slow: factor})))))
    assert found is not None and found.ranks == (slow,)


# ---------------------------------------------------------------- slowed from step N
def test_a_rank_slowed_from_step_n_is_named_once_its_peers_waited_enough_of_the_window() -> None:
    """Collectives 1 s apart (the window: the last minute), rank 3 50% slower from collective 60 on: at
    each slow collective its peers wait 0.5 s for it, so with j of them in the window they waited
    0.5j s of about 60: under 10% up to 11, over it from 13. Named from then on, never before."""
    job = simulate(
        [[w * 10 for w in row] for row in works(150, 8, seed=3, jitter=0.02, slow={3: 1.5}, slow_from=59)]
    )
    first_named = None
    for k in range(50, 151):
        done = max(r.release for r in job[0] if r.seq == k) + 1e-6
        judged = judge(samples(job, [done]))
        found = verdict(judged)
        (group,) = judged.judged
        after = sum(1 for seq in range(k - group.collectives + 1, k + 1) if seq >= 60)
        if found is None:
            assert first_named is None and after <= 12, k
        else:
            assert found.ranks == (3,) and after >= 12, k
            first_named = first_named or k
    assert first_named is not None and 71 <= first_named <= 72


def test_the_heat_map_shows_the_lag_where_it_began() -> None:
    job = simulate(works(100, 4, seed=4, jitter=0.0, slow={2: 2.0}, slow_from=50))
    judged = judge(samples(job))
    (heat,) = [g.heat for g in judged.judged if g.heat is not None]
    assert heat.ranks == [0, 1, 2, 3] and heat.hosts == ["a"] * 4
    assert len(heat.lag_s) == 4 and all(len(row) == HEAT_BUCKETS for row in heat.lag_s)
    row = heat.lag_s[2]
    assert all(v == 0.0 for v in row[:20])  # before the slowdown (at 50 of ~150 buckets' worth of time)
    assert all(v == pytest.approx(STEP) for v in row[-10:])
    assert all(v in (0.0, None) for r in (0, 1, 3) for v in heat.lag_s[r])


# ---------------------------------------------------------------- clocks
@pytest.mark.parametrize("backend", ["gloo", "nccl"])
def test_host_clocks_seconds_apart_do_not_matter_with_timing_or_measured_offsets(backend: str) -> None:
    clocks = {"b06": -7.3, "b07": 4.1}
    job = simulate(works(80, 8, seed=5, slow={6: 1.3}))
    offsets = backend == "gloo"  # NCCL's durations need no offset; gloo's enqueue times do
    found = verdict(judge(samples(job, backend=backend, hosts=EIGHT, clocks=clocks, offsets=offsets)))
    assert found is not None and found.ranks == (6,) and found.hosts == ("b07",)
    healthy = simulate(works(80, 8, seed=5))
    assert (
        judge(samples(healthy, backend=backend, hosts=EIGHT, clocks=clocks, offsets=offsets)).verdicts == []
    )


def test_without_offsets_gloo_compares_each_hosts_ranks_among_themselves() -> None:
    """Host b07's clock 3 s ahead would name its every rank if clocks were compared: they are not;
    rank 6, slow among b07's ranks, is named in b07's comparison."""
    clocks = {"b06": 0.0, "b07": 3.0}
    judged = judge(samples(simulate(works(80, 8, seed=6)), hosts=EIGHT, clocks=clocks))
    assert judged.verdicts == [] and [g.host for g in judged.groups] == ["b06", "b07"]
    assert check(judged).status is Status.PASS
    judged = judge(samples(simulate(works(80, 8, seed=6, slow={6: 1.3})), hosts=EIGHT, clocks=clocks))
    found = verdict(judged)
    assert found is not None and found.ranks == (6,)
    assert [label(g) for g in judged.judged] == [
        "group 0 (default_pg) on host b06",
        "group 0 (default_pg) on host b07",
    ]


def test_without_offsets_a_rank_alone_on_its_host_is_not_compared_by_gloo() -> None:
    hosts = {0: "a", 1: "b"}
    judged = judge(samples(simulate(works(40, 2, seed=7, slow={1: 2.0})), hosts=hosts, clocks={"b": 1.0}))
    assert judged.verdicts == []
    result = check(judged)
    assert result.status is Status.SKIP
    assert "ranks 0, 1 alone on their host and no clock offsets measured" in result.detail


# ---------------------------------------------------------------- process groups
def pipeline(slow: dict[int, float] | None = None) -> dict[int, list[Rec]]:
    """Two pipeline stages of 4 ranks, each its own data-parallel group: stage 1's all_reduce
    comes half a step after stage 0's, by design (on one clock)."""
    first = simulate(works(60, 4, seed=8), [0, 1, 2, 3], pg=("1", "dp0"), pg_id=1)
    slow4 = {r - 4: f for r, f in (slow or {}).items()}
    second = simulate(
        works(60, 4, seed=9, slow=slow4), [4, 5, 6, 7], pg=("2", "dp1"), pg_id=2, start=STEP / 2
    )
    return merged(first, second)


def test_a_pipelines_built_in_lateness_is_not_a_straggler_each_group_judged_alone() -> None:
    judged = judge(samples(pipeline()))
    assert [g.group for g in judged.judged] == ["1", "2"] and judged.verdicts == []
    assert check(judged).detail.startswith("no rank slows the job (118 collectives of 2 groups compared")


def test_a_slow_rank_is_named_in_its_own_group_only() -> None:
    judged = judge(samples(pipeline({5: 1.5}), hosts=EIGHT))
    found = verdict(judged)
    assert found is not None and (found.ranks, found.group, found.group_desc) == ((5,), "2", "dp1")
    line = stderr_line(found)
    assert line.startswith("ddpcheck watch: rank 5 (host b07) is slowing the job: its peers waited ")
    assert line.endswith(" for it, at all_reduce in group 2 (dp1)")
    by_group = {g.group: g.verdict for g in judged.groups}
    assert by_group["1"] is None


def test_several_slow_ranks_are_named_together() -> None:
    """A whole host slow (ranks 4-7 of 8, its NIC at a tenth): each is late by the margin over the
    median of its 7 peers (3 slow, 4 not); the host's clock offset measured."""
    slow = dict.fromkeys(range(4, 8), 1.5)
    found = verdict(judge(samples(simulate(works(60, 8, seed=10, slow=slow)), hosts=EIGHT, offsets=True)))
    assert found is not None and found.ranks == (4, 5, 6, 7) and found.hosts == ("b07",)
    assert stderr_line(found).startswith(
        "ddpcheck watch: ranks 4, 5, 6, 7 (host b07) are slowing the job: their peers waited "
    )


def test_nccl_gpu_time_names_the_rank_whose_cpu_enqueues_ahead_of_its_gpu() -> None:
    """NCCL's CPU enqueues a collective up to 80 ms (most of a step) before its GPU reaches it: the
    enqueue times say little, the GPU time in each collective names rank 2 anyway."""
    job = simulate(works(80, 8, seed=14, slow={2: 1.3}))
    found = verdict(judge(samples(job, backend="nccl", ahead=0.08)))
    assert found is not None and found.ranks == (2,) and found.estimator == Estimator.GPU
    assert found.lag_s == pytest.approx(0.3 * STEP, rel=0.25)
    assert judge(samples(simulate(works(80, 8, seed=14)), backend="nccl", ahead=0.08)).verdicts == []


def test_nccl_without_timing_is_judged_by_enqueue_times() -> None:
    job = simulate(works(60, 4, seed=15, slow={1: 1.5}))
    found = verdict(judge(samples(job, backend="nccl", timing=False)))
    assert found is not None and found.ranks == (1,) and found.estimator == Estimator.ENQUEUE


def test_ranks_with_no_host_given_share_one_clock() -> None:
    job = simulate(works(60, 4, seed=16, slow={0: 1.5}))
    judged = judge(samples(job, hosts={}))
    found = verdict(judged)
    assert found is not None and found.ranks == (0,) and found.hosts == ()
    assert [g.host for g in judged.groups] == [None]
    assert stderr_line(found).startswith("ddpcheck watch: rank 0 is slowing the job")


def test_a_rank_missing_from_a_sample_is_judged_on_what_the_other_samples_held() -> None:
    """Rank 3 did not answer the first sample: the collectives its last sample held are judged."""
    job = simulate(works(60, 4, seed=17, slow={3: 1.5}))
    last = max(r.release for r in job[0])
    taken = samples(job, [3.0, last + 1], ring=40)
    first = taken[0]
    taken[0] = Sample({r: t for r, t in first.traces.items() if r != 3}, first.hosts)
    found = verdict(judge(taken))
    assert found is not None and found.ranks == (3,) and found.collectives == 39


@given(st.lists(st.floats(-1e3, 1e3), min_size=2, max_size=12))
def test_each_ranks_peer_median_is_the_median_of_the_others(values: list[float]) -> None:
    import statistics

    by_rank = dict(enumerate(values))
    medians = peer_medians(by_rank)
    for rank in by_rank:
        assert medians[rank] == pytest.approx(statistics.median(v for r, v in by_rank.items() if r != rank))


# ---------------------------------------------------------------- the ring buffer
def test_ring_buffers_sampled_again_are_counted_once() -> None:
    job = simulate(works(100, 4, seed=11, slow={1: 1.5}))
    once = judge(samples(job))
    last = max(r.release for r in job[0])
    # a sample every 2 s (about 13 collectives), each ring holding the last 40: each collective seen ~3 times
    again = judge(samples(job, [t * 2.0 for t in range(1, int(last / 2) + 2)], ring=40))
    assert rank_rows(again) == rank_rows(once)
    assert verdict(again) == verdict(once) and verdict(once) is not None
    assert verdict(once).collectives == 99


def test_nccl_entries_completed_between_samples_keep_their_duration() -> None:
    job = simulate(works(60, 4, seed=12, slow={2: 1.5}))
    last = max(r.release for r in job[0])
    taken = samples(job, [1.0, 3.0, last + 1], backend="nccl")
    assert any(e.state == "started" for e in taken[0].traces[0].entries)
    found = verdict(judge(taken))
    assert found is not None and found.ranks == (2,) and found.collectives == 59


def test_a_ring_too_small_leaves_gaps_and_only_whole_pairs_are_judged() -> None:
    job = simulate(works(200, 4, seed=13, slow={3: 1.5}))
    last = max(r.release for r in job[0])
    # every 3 s (about 20 collectives), a ring of 8: gaps between samples
    taken = samples(job, [t * 3.0 for t in range(1, int(last / 3) + 2)], ring=8)
    found = verdict(judge(taken))
    assert found is not None and found.ranks == (3,)
    assert found.collectives < 199 and found.window_s < last / 2


# ---------------------------------------------------------------- nothing to judge
def test_no_samples_no_collectives_a_world_of_one_and_too_few_are_skips() -> None:
    assert check(judge([])).detail == "no flight-recorder sample was taken"
    empty = [sample_from_dumps({0: dump([]), 1: dump([])})]
    assert check(judge(empty)).status is Status.SKIP
    assert check(judge(empty)).detail.startswith("the job ran no collectives")
    p2p = [sample_from_dumps({0: dump([entry(1, op="send", is_p2p=True)]), 1: dump([])})]
    assert check(judge(p2p)).detail.startswith("the job ran no collectives")
    one = judge(samples(simulate(works(50, 1))))
    assert check(one).status is Status.SKIP
    assert check(one).detail == "every process group has a single rank: nobody to compare with"
    few = judge(samples(simulate(works(MIN_COLLECTIVES, 4, slow={0: 3.0}))))
    assert check(few).status is Status.SKIP
    assert check(few).detail == (
        "group 0 (default_pg): too few collectives held by every rank (9, at least 10 needed): "
        "the job was watched too briefly"
    )
    assert table(few) is None and rank_rows(few) == []


def test_the_real_h200_nccl_dump_a_world_of_one_is_skipped_and_its_durations_read() -> None:
    trace = read_dump(H200, 0)  # a fixture of this repository's own
    timed = {(e.pg, e.seq_id): e.duration_ms for e in trace.entries if e.duration_ms is not None}
    assert len(timed) == 15 and timed[("0", 1)] == pytest.approx(0.478, abs=1e-3)
    judged = judge([Sample({0: trace}, {0: "h200"})])
    assert check(judged).status is Status.SKIP
    assert check(judged).detail == "every process group has a single rank: nobody to compare with"


@pytest.mark.parametrize(("job", "named"), [("healthy", ()), ("rank2_slower", (2,))])
def test_real_gloo_dumps_a_rank_sleeping_30_percent_longer_is_named_and_a_healthy_job_not(
    job: str, named: tuple[int, ...]
) -> None:
    traces = {r: read_dump(GLOO / job / f"fr{r}", r) for r in range(4)}
    judged = judge([Sample(traces, dict.fromkeys(range(4), "h"))])
    assert tuple(r for v in judged.verdicts for r in v.ranks) == named
    assert judged.judged[0].collectives == 59
    if named:
        (found,) = judged.verdicts
        assert found.peers_wait_share == pytest.approx(0.3 / 1.3, abs=0.05)
        assert found.lag_s == pytest.approx(0.015, abs=0.005)


# ---------------------------------------------------------------- the thresholds, either side
def steady(
    world: int, steps: int, rank: int, factor: float, late_at: set[int] | None = None
) -> list[list[float]]:
    """No jitter: every rank STEP, `rank` factor x STEP at the collectives (1-based) in late_at (all)."""
    return [
        [STEP * (factor if r == rank and (late_at is None or k in late_at) else 1.0) for r in range(world)]
        for k in range(1, steps + 1)
    ]


@pytest.mark.parametrize(("share", "named"), [(WAIT_SHARE - 0.002, False), (WAIT_SHARE + 0.002, True)])
def test_the_wait_floor(share: float, named: bool) -> None:
    """No jitter, rank 2 of 4 late at every collective by share / (1 - share) of a step: its peers wait
    `share` of the window for it; just under the floor not named, just over it named (late by MARGIN
    at no collective either way)."""
    factor = 1 / (1 - share)
    judged = judge(samples(simulate(steady(4, 30, 2, factor))))
    row = next(r for r in rank_rows(judged) if r["rank"] == 2)
    assert row["wait_share"] == pytest.approx(share, abs=1e-6)
    assert row["late"] == 0  # 1.1x its peers' work: late by MARGIN at none; evidence, not the gate
    assert (verdict(judged) is not None) is named


@pytest.mark.parametrize(("factor", "late"), [(MARGIN - 0.01, 0), (MARGIN + 0.01, 29)])
def test_the_margin_says_where_it_was_late_and_does_not_name(factor: float, late: int) -> None:
    """Either side of MARGIN the rank is late at none or all of the collectives; its peers wait 16-17%
    of the window for it either way, and it is named either way."""
    judged = judge(samples(simulate(steady(8, 30, 4, factor))))
    row = next(r for r in rank_rows(judged) if r["rank"] == 4)
    assert (row["late"], row["late_share"]) == (late, late / 29)
    assert verdict(judged) is not None and verdict(judged).ranks == (4,)


def two_collectives(steps: int, world: int, *, seed: int, slow: dict[int, float] | None = None) -> dict:
    """A step of two collectives: the gradient sync after STEP of work (x slow[rank]), then a small
    all_reduce (a loss, found_inf) after 1 ms of work, on time for everyone; +-10% jitter on both."""
    rng = random.Random(seed)
    slow = slow or {}
    rows = []
    for _ in range(steps):
        rows.append([STEP * slow.get(r, 1.0) * (1 + rng.uniform(-0.1, 0.1)) for r in range(world)])
        rows.append([1e-3 * (1 + rng.uniform(-0.1, 0.1)) for _ in range(world)])
    return simulate(rows)


def test_a_rank_late_at_the_first_of_two_collectives_a_step_is_named_though_on_time_at_half() -> None:
    """Issue 50's job: all_reduce(grads), then all_reduce(flag), rank 2 of 4 working 1.5x before the
    first. It is late at half the collectives (the old rule wanted 60%) and its peers wait a third of
    the window for it: named, at the gradient sync."""
    judged = judge(samples(two_collectives(40, 4, seed=21, slow={2: 1.5})))
    found = verdict(judged)
    assert found is not None and found.ranks == (2,) and found.op == "all_reduce"
    assert found.peers_wait_share == pytest.approx(0.5 / 1.5, abs=0.05)
    row = next(r for r in rank_rows(judged) if r["rank"] == 2)
    assert 0.4 <= row["late_share"] <= 0.55, row
    assert judge(samples(two_collectives(40, 4, seed=21))).verdicts == []


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), world=st.integers(2, 8), factor=st.floats(1.3, 3.0), data=st.data())
def test_two_collectives_a_step_one_rank_slow_before_the_first_is_always_named(
    seed: int, world: int, factor: float, data: st.DataObject
) -> None:
    """Its peers wait about (F - 1) / F of each step for it at the gradient sync, at least 23%, and
    nothing at the small all_reduce; +-10% jitter over 30 steps moves that by a few percent. The
    same job healthy: its most waited-for rank about 3% (2 ranks), never near the 10% floor."""
    slow = data.draw(st.integers(0, world - 1))
    judged = judge(samples(two_collectives(30, world, seed=seed, slow={slow: factor})))
    assert verdict(judged) is not None and verdict(judged).ranks == (slow,)
    assert judge(samples(two_collectives(30, world, seed=seed))).verdicts == []


@pytest.mark.parametrize(("lag", "named"), [(MIN_LAG_S * 0.9, False), (MIN_LAG_S * 1.1, True)])
def test_the_least_lag(lag: float, named: bool) -> None:
    """Collectives 1 ms apart, one rank later by a lag about MIN_LAG_S (15-18% of the window): a wait
    under MIN_LAG_S is scheduling noise and not counted."""
    step = [[1e-3 + (lag if r == 1 else 0.0) for r in range(4)] for _ in range(30)]
    found = verdict(judge(samples(simulate(step))))
    assert (found is not None) is named


def test_the_window_is_the_last_minute_and_at_least_the_last_twenty() -> None:
    """300 collectives 1 s apart; rank 0 slow for the first 200: the last minute holds none of them."""
    steps = [[1.0 * (2.0 if r == 0 and k < 200 else 1.0) for r in range(4)] for k in range(300)]
    judged = judge(samples(simulate(steps)))
    assert judged.verdicts == [] and judged.judged[0].collectives == 61
    assert judged.judged[0].window_s == pytest.approx(61.0)
    slow_steps = [[10.0 * (1.5 if r == 0 else 1.0) for r in range(4)] for _ in range(40)]
    found = verdict(judge(samples(simulate(slow_steps))))
    assert found is not None and found.collectives == WINDOW_MIN


# ---------------------------------------------------------------- what the user sees
def test_the_stderr_line_and_the_check_word_for_word() -> None:
    one = StragglerVerdict(
        (5,), ("b07",), "0", "default_pg", "all_reduce", 0.031, 0.31, 60.2, 400, Estimator.GPU
    )
    assert stderr_line(one) == (
        "ddpcheck watch: rank 5 (host b07) is slowing the job: its peers waited 31% of the last 60 s for it, "
        "at all_reduce"
    )
    two = StragglerVerdict(
        (4, 12), ("b07", "b08"), "3", "dp", "reduce_scatter", 0.5, 0.4, 5.25, 20, "enqueue"
    )
    assert stderr_line(two) == (
        "ddpcheck watch: ranks 4, 12 (hosts b07, b08) are slowing the job: their peers waited 40% of the "
        "last 5.2 s (20 collectives) for them, at reduce_scatter in group 3 (dp)"
    )
    nameless = StragglerVerdict((1,), (), "0", "default_pg", "broadcast", 0.002, 0.05, 0.5, 20, Estimator.GPU)
    assert stderr_line(nameless).startswith("ddpcheck watch: rank 1 is slowing the job: its peers waited 5% ")

    judged = judge(
        samples(simulate(steady(4, 30, 3, 2.0)), hosts={0: "a", 1: "a", 2: "a", 3: "b07"}, offsets=True)
    )
    result = check(judged)
    assert (result.status, result.ranks, result.hosts) == (Status.WARN, [3], ["b07"])
    assert result.detail == (
        "rank 3 (host b07) is slowing the job: its peers waited 50% of the last 5.8 s (29 collectives) "
        "for it, at all_reduce (29 collectives of group 0 (default_pg), lag 100.0 ms each, from enqueue "
        "times (time_created_ns), the hosts' clocks aligned by measured offsets)"
    )


@pytest.mark.parametrize(("window_s", "said"), [
    (0.6701, "of the last 0.7 s (20 collectives) for it"),  # early in a run: was "of the last 670.1 ms"
    (0.04, "of the last 0.04 s (20 collectives) for it"),
    (9.96, "of the last 10 s (20 collectives) for it"),
    (10.0, "of the last 10 s for it"),
    (59.6, "of the last 60 s for it"),
])  # fmt: skip
def test_the_window_is_said_in_seconds_and_a_short_one_with_its_collectives(window_s, said) -> None:
    """Early in a run the window is its 20 collectives, a fraction of a second: said as such, never in ms."""
    line = stderr_line(
        StragglerVerdict(
            (1,), ("a",), "0", "default_pg", "all_reduce", 0.01, 0.2, window_s, 20, Estimator.GPU
        )
    )
    assert said in line and " ms " not in line, line


def test_the_table_has_a_row_per_rank_of_each_judged_group() -> None:
    judged = judge(samples(simulate(steady(3, 30, 1, 2.0)), hosts={0: "a", 1: "a", 2: "a"}))
    shown = table(judged)
    assert shown is not None and shown.name == "stragglers" and shown.group_by == "group"
    assert list(shown.columns) == [
        "rank", "host", "work_s", "lag_s", "wait_share", "late_share", "own_past", "named"
    ]  # fmt: skip
    assert [(r["rank"], r["host"], r["named"]) for r in shown.rows] == [
        (0, "a", False),
        (1, "a", True),
        (2, "a", False),
    ]
    assert shown.rows[1]["work_s"] == pytest.approx(0.2) and shown.rows[1]["lag_s"] == pytest.approx(0.1)
    assert shown.rows[1]["wait_share"] == pytest.approx(0.5) and shown.rows[0]["wait_share"] == 0
    assert shown.rows[0]["lag_s"] == pytest.approx(-0.05)  # the median of its peers is (0.1 + 0.2) / 2 later
    assert shown.groups()[0][0] == "Stragglers: group 0 (default_pg)"
