"""`ddpcheck links` judged at fleet scale: numpy over every link, the same names as the per-link rules.

Pure: synthetic links of 128 nodes x 4 (512 ranks, 66,560 directed links, tests/support/
scale_data.py) fed to the real judge name exactly the slow host, the slow rank and the slow link,
and the report stays bounded (the slowest links, every slow one, node x node). At the boundaries
(one reference per rank up to EXACT_UP_TO ranks, one shared beyond; values exactly at the
threshold; exactly half of a rank's links slow) the vectorised judge names what the per-link
rules (tests/support/outliers_oracle.py) name, with the same numbers.
"""

from __future__ import annotations

import json
import random
import statistics
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from ddpcheck.checks.links import LinksOptions
from ddpcheck.checks.links.check import judge
from ddpcheck.checks.links.columns import (
    LinkColumns,
    group_medians,
    group_minimum,
    grouped_medians,
    merge_groups,
    smallest,
)
from ddpcheck.checks.links.outliers import Pair
from ddpcheck.checks.links.schedule import link_plan, nodes_of
from ddpcheck.checks.links.tables import NODE_GRID_MAX, REPORTED_LINKS
from ddpcheck.checks.reference import EXACT_UP_TO, median_of, reference_of
from ddpcheck.report.model import Report, Status
from tests.support import outliers_oracle, scale_data
from tests.support.link_values import find_slow
from tests.test_links import idents, noisy, synthetic

GOLDEN = Path(__file__).parent / "golden" / "links_judge.json"

OPTS = LinksOptions(size=64 * 2**20, iters=20, warmup=5, threshold=0.5)
NODES, GPUS = 128, 4


@cache
def _fleet(nodes: int, gpus: int) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    identities = scale_data.rank_identities(scale_data.hosts_of_fleet(nodes), gpus)
    return identities, scale_data.links_data(identities)


def _slowed(data: list[dict[str, Any]], slow: dict[Pair, float]) -> list[dict[str, Any]]:
    """A copy of every rank's data with link (src, dst) slowed by the factor given."""
    into: dict[int, dict[int, float]] = {}
    for (src, dst), factor in slow.items():
        into.setdefault(dst, {})[src] = factor
    out = []
    for dst, rank_data in enumerate(data):
        links = dict(rank_data["links"])
        if dst in into:
            factors = np.array([into[dst].get(int(p), 1.0) for p in links["peer"]])
            for column in ("recv_s", "best_pass_recv_s"):
                links[column] = links[column] / factors
        out.append({**rank_data, "links": links})
    return out


def _checks(report: Report) -> dict[str, Any]:
    return {c.name: c for c in report.checks}


def test_a_thousand_ranks_name_the_slow_host_the_slow_rank_and_the_slow_link() -> None:
    ids, healthy = _fleet(NODES, GPUS)
    host = list(range(5 * GPUS, 6 * GPUS))  # every link out of node 5 (gpu-a006) at a tenth
    rank = 9 * GPUS + 3  # every link of rank 39, both ways, at a tenth
    cable = (20 * GPUS + 2, 100 * GPUS + 2)  # one inter-node link, one direction, at a twentieth
    slow = {
        (int(p), d): 0.1
        for d, r in enumerate(healthy)
        for p in r["links"]["peer"]
        if p in host or rank in (p, d)
    }
    slow[cable] = 0.05
    report = judge(_slowed(healthy, slow), ids, OPTS)
    bandwidth = _checks(report)["link bandwidth"]
    assert bandwidth.status == Status.FAIL
    assert bandwidth.ranks == sorted([*host, rank, *cable])
    assert bandwidth.hosts == ["gpu-a006", "gpu-a010", "gpu-a021", "gpu-a101"]
    # The host as a whole, inside it and out of it (its rank on the slow rank's rail also receives slowly).
    assert "every intra-node link of host gpu-a006 (ranks 20-23)" in bandwidth.detail
    assert (
        "; most links of host gpu-a006 (ranks 20-23): 2.27 GB/s against a median of 22.8" in bandwidth.detail
    )
    assert (
        f"rank {rank} on host gpu-a010: 254 of its 254 inter-node links slow (both ways)" in bandwidth.detail
    )
    assert f"link {cable[0]} → {cable[1]} (host gpu-a021 → gpu-a101, inter-node)" in bandwidth.detail
    assert [cable[0], cable[1]] in bandwidth.links and [cable[1], cable[0]] not in bandwidth.links
    assert {tuple(p) for p in bandwidth.links} <= set(slow)
    # The report keeps the slowest links and every slow one (those of a slow host: thousands), not 66,560.
    rows = report.table("links").rows
    assert len(bandwidth.links) <= len(rows) <= REPORTED_LINKS + len(bandwidth.links)
    assert {(r["src"], r["dst"]) for r in rows if r["status"] == "FAIL"} == {
        tuple(p) for p in bandwidth.links
    }
    assert "66,560 links" in report.table("links").title
    grid = report.table("link_nodes").rows
    assert len(grid) == NODES and all(len(r["ratios"]) == NODES for r in grid)
    assert grid[5]["label"] == "gpu-a006" and max(v for v in grid[5]["ratios"] if v is not None) < 0.15
    assert grid[20]["ratios"][100] < 0.1 and grid[100]["ratios"][20] > 0.9  # the cable, one direction
    hosts = {r["host"]: r for r in report.table("link_hosts").rows}
    assert hosts["gpu-a006"]["status"] == "FAIL" and hosts["gpu-a007"]["status"] == "PASS"


def test_a_healthy_thousand_ranks_pass_and_the_report_says_what_it_kept() -> None:
    ids, healthy = _fleet(NODES, GPUS)
    report = judge(healthy, ids, OPTS)
    assert report.verdict.value == "pass", [c.detail for c in report.checks]
    links = report.table("links")
    assert len(links.rows) == REPORTED_LINKS
    assert links.title == f"The {REPORTED_LINKS} slowest and every slow one of 66,560 links"
    assert "of 66,560 links" in report.table("slowest_links").title
    assert len(report.table("link_ranks").rows) == len(ids) and len(report.table("link_hosts").rows) == NODES


def test_beyond_the_grid_a_cell_is_a_block_of_nodes() -> None:
    ids = scale_data.rank_identities(scale_data.hosts_of_fleet(NODE_GRID_MAX + 2), 1)
    report = judge(scale_data.links_data(ids, slow_hosts={"gpu-a004"}), ids, OPTS)
    grid = report.table("link_nodes")
    assert "blocks of 2 consecutive nodes" in grid.title and len(grid.rows) == NODE_GRID_MAX // 2 + 1
    assert grid.rows[1]["label"] == "gpu-a003 to gpu-a004" and grid.rows[1]["nodes"] == 2
    assert min(grid.rows[1]["ratios"][2:]) < 0.15 and min(grid.rows[2]["ratios"][3:]) > 0.9


def test_the_fleet_data_are_the_plans_links() -> None:
    ids = [
        {"rank": r, "host": h, "node": n, "local_rank": lr}
        for r, (h, n, lr) in enumerate(
            [("a", 0, 0), ("a", 0, 1), ("a", 0, 2), ("b", 1, 0), ("c", 2, 0), ("c", 2, 1)]
        )
    ]
    data = scale_data.links_data(ids)
    plan = link_plan(nodes_of([(i["host"], i["node"], i["local_rank"]) for i in ids]))
    planned = {(s, d, rnd.kind == "inter") for rnd in plan for a, b in rnd.pairs for s, d in ((a, b), (b, a))}
    made = {
        (int(p), d, bool(inter))
        for d, r in enumerate(data)
        for p, inter in zip(r["links"]["peer"], r["links"]["inter"], strict=True)
    }
    assert made == planned and all(r["rounds"] == len(plan) for r in data)


# ------------------------------------------------------------------ the same names as the per-link rules
def _mesh(n: int, seed: int) -> dict[Pair, float]:
    """n ranks, every directed link, values on a grid of 0.05 (so some sit exactly at threshold x median)."""
    rng = random.Random(seed)
    slow = set(rng.sample(range(n), rng.choice([0, 1, 2])))
    values = {}
    for s in range(n):
        for d in range(n):
            if s != d:
                value = rng.choice([0.5, 0.6, 0.9, 1.0, 1.0, 1.1, 1.2])
                if s in slow or (d in slow and rng.random() < 0.5):  # some slow out only, some half-slow
                    value = rng.choice([0.05, 0.5, 0.55])
                values[(s, d)] = value
    return values


@pytest.mark.parametrize("n", [3, 5, 8, 17])
@pytest.mark.parametrize("seed", range(3))
def test_the_vectorised_judge_names_what_the_per_link_rules_name(n: int, seed: int) -> None:
    values = _mesh(n, seed)
    rng = random.Random(seed + 100)
    best = {p: v * rng.choice([1.0, 1.0, 3.0]) for p, v in values.items()}
    for threshold in (0.5, 0.6):
        assert find_slow(values, threshold, best) == outliers_oracle.find_slow(values, threshold, best)
        assert find_slow(values, threshold) == outliers_oracle.find_slow(values, threshold)


@pytest.mark.parametrize("n", [EXACT_UP_TO, EXACT_UP_TO + 1])
def test_either_side_of_one_shared_reference_the_same_names(n: int) -> None:
    # Up to EXACT_UP_TO ranks each rank's reference leaves its own links out (the per-link rules
    # take seconds there: one seed); beyond, one reference serves all.
    values = _mesh(n, 1)
    assert find_slow(values, 0.5) == outliers_oracle.find_slow(values, 0.5)


def test_small_runs_judge_and_tabulate_as_the_per_link_judge_did() -> None:
    # tests/golden/links_judge.json: these two runs' checks and tables as the per-link judge (plain
    # Python, a dict per link) wrote them; the numpy judge must write them byte for byte.
    ids = idents(["a", "b", "c"], 4)
    base = noisy(7)
    data = synthetic(
        ids,
        lambda s, d: base(s, d) * (4.0 if s // 4 == d // 4 else 1.0) * (0.05 if 6 in (s, d) else 1.0),
        latency_us=lambda s, d: 50.0 * base(d, s),
        wrong=lambda s, d: 3 if (s, d) == (1, 9) else 0,
    )
    options = LinksOptions(size=1 << 20, iters=1, warmup=0, threshold=0.2, min_gbps=0.5)
    runs = {"slow rank, 3 hosts x 4": judge(data, ids, options).to_dict()}
    ids = idents([f"n{i}" for i in range(9)], 1)
    base = noisy(8)
    data = synthetic(ids, lambda s, d: base(s, d) * (0.02 if (s, d) == (3, 7) else 1.0))
    runs["slow link, 9 hosts"] = judge(
        data, ids, LinksOptions(size=1 << 20, iters=1, warmup=0, threshold=0.5)
    ).to_dict()
    got = {name: {k: report[k] for k in ("checks", "tables", "table_meta")} for name, report in runs.items()}
    assert json.dumps(got, indent=1, ensure_ascii=False) + "\n" == GOLDEN.read_text()


@pytest.mark.parametrize(
    "lengths",
    [
        [1, 2, 3, 4, 0, 7],  # a few lengths: the rows of each length partitioned at their middle
        list(range(1, 40)),  # many lengths, odd and even
        [1] * 8 + [5000],  # one group far longer than the others
        [6] * 9,  # every group as long: one reshape, no copy
    ],
)
@pytest.mark.parametrize("grouped", [False, True])  # as given, or already in group order (no sort)
def test_group_medians_are_statistics_median(lengths: list[int], grouped: bool) -> None:
    rng = random.Random(len(lengths))
    groups = [g for g, n in enumerate(lengths) for _ in range(n)]
    if not grouped:
        rng.shuffle(groups)
    values = [rng.choice([0.1, 0.7, 1.0, 1.3, rng.random()]) for _ in groups]
    got = group_medians(np.array(groups), np.array(values), len(lengths) + 1).tolist()
    by_group = {
        g: [v for h, v in zip(groups, values, strict=True) if h == g] for g in range(len(lengths) + 1)
    }
    want = [statistics.median(by_group[g]) if by_group[g] else None for g in range(len(lengths) + 1)]
    assert [None if np.isnan(x) else x for x in got] == want


def test_merged_groups_are_each_groups_values_of_every_part() -> None:
    # A rank's links out and in, for one median: grouped parts, of one length or of several, or not grouped.
    rng = random.Random(3)
    for lengths in ([[2, 2, 2], [3, 3, 3]], [[1, 0, 4], [2, 5, 0]]):
        parts, want = [], [[] for _ in range(3)]
        for part_lengths in lengths:
            groups = [g for g, n in enumerate(part_lengths) for _ in range(n)]
            values = [rng.random() for _ in groups]
            for g, v in zip(groups, values, strict=True):
                want[g].append(v)
            parts.append((np.array(groups, dtype=np.int64), np.array(values)))
        shuffled = np.array(rng.sample(range(len(parts[1][0])), len(parts[1][0])), dtype=np.int64)
        for case in (parts, [parts[0], (parts[1][0][shuffled], parts[1][1][shuffled])]):
            values, counts = merge_groups(case, 3)
            assert counts.tolist() == [len(w) for w in want]
            starts = np.cumsum(counts) - counts
            got = [sorted(values[a : a + n].tolist()) for a, n in zip(starts, counts, strict=True)]
            assert got == [sorted(w) for w in want]
            medians = grouped_medians(values.copy(), counts, scratch=True)
            assert [None if np.isnan(m) else m for m in medians] == [
                statistics.median(w) if w else None for w in want
            ]


def test_group_minimum_ignores_nan_grouped_or_not() -> None:
    values = np.array([0.5, np.nan, 0.2, np.nan, 0.9, 0.7])
    grouped = np.array([0, 0, 1, 2, 3, 3])
    assert [None if np.isnan(v) else v for v in group_minimum(grouped, values, 5)] == [
        0.5,
        0.2,
        None,
        0.7,
        None,
    ]
    order = np.array([4, 1, 3, 0, 5, 2])
    scattered = group_minimum(grouped[order], values[order], 5)
    assert [None if np.isnan(v) else v for v in scattered] == [0.5, 0.2, None, 0.7, None]


def test_median_of_is_numpys_to_the_bit() -> None:
    rng = random.Random(5)
    for n in [*range(1, 12), 1000, 1001]:
        values = np.array([rng.choice([0.1, 0.7, 1.0, rng.random(), 1e300]) for _ in range(n)])
        assert median_of(values) == np.median(values) == statistics.median(values.tolist())
        assert median_of(values.copy(), scratch=True) == np.median(values)
    assert np.isnan(median_of(np.array([1.0, np.nan, 2.0])))


def test_median_of_nothing_is_nan_as_numpys() -> None:
    """An empty array has no middle: NaN, as np.median says. reference_of reaches it when the median
    is NaN (a NaN figure): no value is at or above NaN x threshold, so the spread is of nothing."""
    with pytest.warns(RuntimeWarning):  # numpy's "Mean of empty slice"
        assert np.isnan(median_of(np.array([])))
    with pytest.warns(RuntimeWarning):
        reference = reference_of([1.0, np.nan, 2.0], 0.5)
    assert reference is not None and np.isnan(reference.median) and np.isnan(reference.sigma)


def test_smallest_leaves_nan_out_and_breaks_ties_by_index() -> None:
    keys = np.array([0.5, np.nan, 0.2, 0.5, np.nan, 0.1, 0.5])
    assert smallest(keys, 4).tolist() == [5, 2, 0, 3]
    assert smallest(keys, 10).tolist() == [5, 2, 0, 3, 6]
    assert smallest(keys, 0).tolist() == []


def test_links_sent_out_of_rank_order_are_judged_alike() -> None:
    # measure() sends each rank's links in peer order, and rank 0 keeps them so for the links in;
    # in any other order they are sorted for it: the same tables.
    ids, healthy = _fleet(4, 2)
    reversed_data = []
    for rank_data in healthy:
        links = {k: np.asarray(v)[::-1] for k, v in rank_data["links"].items()}
        reversed_data.append({**rank_data, "links": links})
    assert LinkColumns.from_rank_data(reversed_data).received is None
    assert LinkColumns.from_rank_data(healthy).received is not None
    assert (
        judge(reversed_data, ids, OPTS).to_dict()["tables"] == judge(healthy, ids, OPTS).to_dict()["tables"]
    )
