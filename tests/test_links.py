"""`ddpcheck links`: the round-robin plan, the judge on synthetic matrices, and real runs over gloo."""

from __future__ import annotations

import itertools
import json
import random

import pytest

from ddpcheck.checks.links import LinksOptions
from ddpcheck.checks.links import check as links
from ddpcheck.checks.links.schedule import INTER, INTRA, link_plan, nodes_of, round_robin
from ddpcheck.report.model import Check, Report, Status
from tests.conftest import Run, assert_nothing_left, assert_usage_error, needs_gpu
from tests.support.saved_reports import Saved, saved_reports_fixture  # noqa: F401 (the fixture `saved_reports`)

SIZE = 1_000_000
OPTS = LinksOptions(size=SIZE, iters=10, warmup=2, threshold=0.5)


# ------------------------------------------------------------------ the schedule
@pytest.mark.parametrize("n", range(2, 18))
def test_round_robin_meets_every_pair_once(n: int) -> None:
    rounds = round_robin(n)
    assert len(rounds) == (n - 1 if n % 2 == 0 else n)
    pairs = [p for r in rounds for p in r]
    assert sorted(pairs) == list(itertools.combinations(range(n), 2))  # every pair, exactly once
    for r in rounds:
        busy = [x for p in r for x in p]
        assert len(busy) == len(set(busy))  # nobody in two pairs of one round
        assert len(r) == n // 2
    if n % 2:
        sitting_out = [next(x for x in range(n) if all(x not in p for p in r)) for r in rounds]
        assert sorted(sitting_out) == list(range(n))  # each rank sits out exactly one round


def test_plan_is_intra_node_pairs_then_rail_aligned_node_pairs() -> None:
    nodes = [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 10, 11]]
    plan = link_plan(nodes)
    intra = [r for r in plan if r.kind == INTRA]
    inter = [r for r in plan if r.kind == INTER]
    assert len(intra) == 3 and len(inter) == 3  # every node at once; 3 nodes: a round robin of 3 rounds
    node = {rank: i for i, ranks in enumerate(nodes) for rank in ranks}
    intra_pairs = sorted(p for r in intra for p in r.pairs)
    assert intra_pairs == sorted(p for ranks in nodes for p in itertools.combinations(ranks, 2))
    inter_pairs = sorted(p for r in inter for p in r.pairs)
    rails = [(a, b) for a, b in itertools.combinations(range(12), 2) if node[a] != node[b] and a % 4 == b % 4]
    assert inter_pairs == rails  # local rank i only with local rank i, each node pair once
    for r in plan:
        busy = [x for p in r.pairs for x in p]
        assert len(busy) == len(set(busy))


def test_plan_with_uneven_nodes_and_one_rank_per_node() -> None:
    plan = link_plan([[0, 1, 2], [3]])
    assert [r.kind for r in plan] == [INTRA] * 3 + [INTER]
    assert plan[-1].pairs == ((0, 3),)
    assert [r.kind for r in link_plan([[0], [1], [2], [3]])] == [INTER] * 3
    layout = [("a", 0, 1), ("a", 0, 0), ("b", 1, 0), ("b", 1, 1)]
    assert nodes_of(layout) == [[1, 0], [2, 3]]  # rail order is local-rank order
    assert link_plan([[0]]) == []


# ------------------------------------------------------------------ the judge, synthetic
def idents(hosts: list[str], per_host: int) -> list[dict]:
    return [
        {"rank": h * per_host + i, "local_rank": i, "host": host, "node": h, "device": "cpu"}
        for h, host in enumerate(hosts)
        for i in range(per_host)
    ]


def synthetic(ids: list[dict], gbps, latency_us=lambda s, d: 50.0, wrong=lambda s, d: 0) -> list[dict]:
    """What every rank's measure() returns, for links of bandwidth gbps(src, dst) GB/s."""
    nodes = nodes_of([(i["host"], i["node"], i["local_rank"]) for i in ids])
    plan = link_plan(nodes)
    data = [{"size_bytes": SIZE, "rounds": len(plan), "links": []} for _ in ids]
    for rnd in plan:
        for a, b in rnd.pairs:
            for src, dst in ((a, b), (b, a)):
                data[dst]["links"].append(
                    {
                        "peer": src,
                        "kind": rnd.kind,
                        "recv_s": SIZE / (gbps(src, dst) * 1e9),
                        "exchange_s": 0.0,
                        "latency_s": latency_us(src, dst) / 1e6,
                        "wrong": wrong(src, dst),
                    }
                )
    return data


def noisy(seed: int, sigma: float = 0.15):
    """Healthy links with realistic noise: log-normal, about +-15% (what this machine shows)."""
    rng = random.Random(seed)
    cache: dict = {}
    return lambda s, d: cache.setdefault((s, d), rng.lognormvariate(0, sigma))


def by_name(report: Report) -> dict[str, Check]:
    return {c.name: c for c in report.checks}


def test_one_slow_host_is_named_not_its_peers() -> None:
    ids = idents(["a", "b", "c", "d", "e", "f"], 1)
    base = noisy(1)
    data = synthetic(ids, lambda s, d: base(s, d) * (0.03 if 2 in (s, d) else 1.0))
    check = by_name(links.judge(data, ids, OPTS))["link bandwidth"]
    assert check.status == Status.FAIL and check.ranks == [2] and check.hosts == ["c"]
    assert (
        check.detail.startswith("every link of host c: ") and "its NIC, cable or switch port" in check.detail
    )
    assert sorted(check.links) == sorted(
        [[2, x] for x in (0, 1, 3, 4, 5)] + [[x, 2] for x in (0, 1, 3, 4, 5)]
    )


def test_a_host_that_sends_slowly_is_named_by_its_outgoing_links() -> None:
    """tc shapes egress: every link out of host b is slow, every link into it healthy."""
    ids = idents(["a", "b", "c", "d"], 1)
    data = synthetic(ids, lambda s, d: 0.05 if s == 1 else 1.0)
    check = by_name(links.judge(data, ids, OPTS))["link bandwidth"]
    assert check.status == Status.FAIL and check.ranks == [1] and check.hosts == ["b"]
    assert check.detail.startswith("every link from host b: 0.05 GB/s against a median of 1 GB/s")
    assert sorted(check.links) == [[1, 0], [1, 2], [1, 3]]


def test_one_slow_link_names_both_ends() -> None:
    ids = idents(["a", "b", "c", "d"], 2)
    base = noisy(2)
    data = synthetic(ids, lambda s, d: base(s, d) * (0.1 if {s, d} == {2, 4} else 1.0))
    check = by_name(links.judge(data, ids, OPTS))["link bandwidth"]
    assert check.status == Status.FAIL and check.ranks == [2, 4] and check.hosts == ["b", "c"]
    assert check.detail.startswith("link 2 ↔ 4 (host b ↔ c, inter-node): ")
    assert sorted(check.links) == [[2, 4], [4, 2]]


def test_one_slow_direction_of_one_link() -> None:
    ids = idents(["a", "b", "c"], 1)
    data = synthetic(ids, lambda s, d: 0.1 if (s, d) == (0, 1) else 1.0)
    check = by_name(links.judge(data, ids, OPTS))["link bandwidth"]
    assert (check.status, check.ranks, check.links) == (Status.FAIL, [0, 1], [[0, 1]])
    assert check.detail.startswith("link 0 → 1 (host a → b, inter-node)")


@pytest.mark.parametrize("seed", range(20))
def test_healthy_links_with_realistic_noise_pass(seed: int) -> None:
    ids = idents(["a", "b", "c", "d"], 2)
    intra, inter, lat = noisy(seed), noisy(seed + 100), noisy(seed + 200, 0.25)
    data = synthetic(
        ids,
        lambda s, d: (40.0 * intra(s, d)) if s // 2 == d // 2 else 10.0 * inter(s, d),
        latency_us=lambda s, d: 30 * lat(s, d),
    )
    report = links.judge(data, ids, OPTS)
    assert report.verdict.value == "pass", [c.detail for c in report.failing()]
    assert "intra-node: 8 links, median" in by_name(report)["link bandwidth"].detail


def test_two_slow_hosts_are_both_named() -> None:
    ids = idents([f"n{i}" for i in range(8)], 2)
    base = noisy(3)
    slow_hosts = {"n2", "n6"}

    def gbps(s: int, d: int) -> float:
        inter = ids[s]["host"] != ids[d]["host"]
        slow = inter and {ids[s]["host"], ids[d]["host"]} & slow_hosts
        return base(s, d) * (20.0 if not inter else 0.4 if slow else 4.0)

    check = by_name(links.judge(synthetic(ids, gbps), ids, OPTS))["link bandwidth"]
    assert check.status == Status.FAIL and check.hosts == ["n2", "n6"] and check.ranks == [4, 5, 12, 13]
    assert check.detail.count("every link of host") == 2 and "(ranks 4, 5)" in check.detail


def test_of_three_ranks_the_slow_one_is_named() -> None:
    """Two of three links touch the slow rank: the median of all would be slow; the peers' link is not."""
    ids = idents(["a"], 3)
    data = synthetic(ids, lambda s, d: 0.2 if 1 in (s, d) else 2.0)
    check = by_name(links.judge(data, ids, OPTS))["link bandwidth"]
    assert check.status == Status.FAIL and check.ranks == [1]
    assert check.detail.startswith("rank 1 on host a: 4 of its 4 intra-node links slow (both ways), 0.2 GB/s")


def test_a_latency_outlier_alone() -> None:
    ids = idents(["a", "b", "c", "d", "e"], 1)
    data = synthetic(ids, lambda s, d: 1.0, latency_us=lambda s, d: 900.0 if 4 in (s, d) else 40.0)
    checks = by_name(links.judge(data, ids, OPTS))
    assert checks["link bandwidth"].status == Status.PASS
    assert checks["link latency"].status == Status.WARN and checks["link latency"].ranks == [4]
    assert "900 us against a median of 40 us" in checks["link latency"].detail
    gpus = [{**i, "device": f"cuda:{i['local_rank']}"} for i in ids]  # on CPU ranks the scheduler adds to it
    assert by_name(links.judge(data, gpus, OPTS))["link latency"].status == Status.FAIL


def test_two_ranks_compare_with_nothing_and_the_floor_still_judges() -> None:
    ids = idents(["a"], 2)
    data = synthetic(ids, lambda s, d: 0.3)
    checks = by_name(
        links.judge(data, ids, LinksOptions(size=SIZE, iters=1, warmup=0, threshold=0.5, min_gbps=1))
    )
    assert (
        checks["link bandwidth"].status == Status.SKIP
        and "nothing to compare" in checks["link bandwidth"].detail
    )
    floor = checks["bandwidth floor"]
    assert floor.status == Status.FAIL and floor.ranks == [0, 1] and sorted(floor.links) == [[0, 1], [1, 0]]
    assert floor.detail.startswith("2 links below --min-gbps 1: ")


def test_bytes_changed_in_transit() -> None:
    ids = idents(["a", "b", "c"], 1)
    data = synthetic(ids, lambda s, d: 1.0, wrong=lambda s, d: 7 if (s, d) == (2, 0) else 0)
    check = by_name(links.judge(data, ids, OPTS))["link data"]
    assert (check.status, check.ranks, check.links) == (Status.FAIL, [0, 2], [[2, 0]])


def test_check_links_are_serialised_only_when_named() -> None:
    assert "links" not in Check("x", Status.PASS).to_dict()
    named = Check("x", Status.FAIL, links=[[1, 2]])
    assert named.to_dict()["links"] == [[1, 2]] and Check.from_dict(named.to_dict()).links == [[1, 2]]


def test_a_big_world_reports_node_by_node() -> None:
    ids = idents([f"n{i:02d}" for i in range(40)], 2)  # 80 ranks: one reference serves every rank
    base = noisy(4)
    data = synthetic(
        ids, lambda s, d: base(s, d) * (5.0 if s // 2 == d // 2 else 0.05 if 14 in (s, d) else 1.0)
    )
    report = links.judge(data, ids, OPTS)
    check = by_name(report)["link bandwidth"]
    assert (check.status, check.ranks, check.hosts) == (Status.FAIL, [14], ["n07"])
    assert check.detail.startswith("rank 14 on host n07: 78 of its 78 inter-node links slow (both ways)")
    rows = report.table("links").rows
    assert len(rows) == 40 * 2 + 40 * 39  # each node's own links, one row per node pair and direction
    assert all(r["rails"] == 2 for r in rows if r["kind"] == INTER)
    assert report.table("link_matrix").rows == []  # 40 nodes: too many for a terminal
    small = links.judge(synthetic(ids[:40], lambda s, d: 1.0), ids[:40], OPTS)  # 20 nodes, 40 ranks
    matrix = small.table("link_matrix").rows
    assert len(matrix) == 20 and matrix[0]["label"] == "n00" and len(matrix[0]["ratios"]) == 20
    assert report.table("link_ranks").columns == {}  # 80 rows: JSON only


# ------------------------------------------------------------------ real runs over gloo
def _named(run) -> dict[str, list[int]]:
    return {c["name"]: c["ranks"] for c in run.failing()}


# Real launches cost seconds each here: an odd world passes, and the shared run of the HTML tests names
# its slowed rank; any world and culprit is the pure judge tests' above and test_properties.py's.
@pytest.mark.parametrize("nproc", [3])
def test_healthy_links_pass(ddpcheck, scratch, nproc: int) -> None:
    run = ddpcheck("links", "--nproc", str(nproc), "--size", "256K")
    assert run.code == 0, run.stdout + run.stderr
    rows = run.table("links")
    assert sorted((r["src"], r["dst"]) for r in rows) == [
        (s, d) for s in range(nproc) for d in range(nproc) if s != d
    ]
    assert all(r["gbps"] > 0 and r["latency_us"] > 0 and r["wrong"] == 0 for r in rows)
    assert set(rows[0]) >= {"src", "dst", "src_host", "dst_host", "gbps", "latency_us", "ratio"}
    assert len(run.table("link_ranks")) == nproc
    assert run.report["options"]["size"] == 256 * 1024 and run.report["options"]["threshold"] == 0.2
    assert f"{nproc} rounds" in run.stdout  # odd: n rounds, one rank sitting out each
    assert "Link bandwidth as a fraction of the median" in run.stdout
    assert_nothing_left(scratch, run)


def test_a_slowed_rank_is_named_exactly(saved_reports: dict[str, Saved]) -> None:
    """The shared real run (tests/support/saved_reports.py): 3 ranks, rank 1's links slowed."""
    saved = saved_reports["links"]
    nproc, rank = 3, 1
    run = Run(saved.code, saved.stdout, saved.stderr, json.loads(saved.json.read_text()), seconds=0.0)
    assert run.code == 1, run.stdout + run.stderr
    assert _named(run)["link bandwidth"] == [rank]
    bandwidth = run.check("link bandwidth")
    assert f"rank {rank} on host" in bandwidth["detail"]
    assert all(rank in pair for pair in bandwidth["links"]) and len(bandwidth["links"]) >= nproc - 1
    slowest = run.table("slowest_links")[: 2 * (nproc - 1)]  # rank R's links, both ways, come first
    assert all(rank in (r["src"], r["dst"]) and r["status"] == "FAIL" for r in slowest), slowest


def test_two_ranks_have_one_link_and_a_floor(ddpcheck, scratch) -> None:
    run = ddpcheck("links", "--nproc", "2", "--size", "64K", "--iters", "3", "--min-gbps", "1000")
    assert run.code == 1, run.stdout + run.stderr
    assert run.check("link bandwidth")["status"] == "SKIP"
    floor = run.check("bandwidth floor")
    assert (
        floor["status"] == "FAIL" and floor["ranks"] == [0, 1] and sorted(floor["links"]) == [[0, 1], [1, 0]]
    )
    assert_nothing_left(scratch, run)


@pytest.mark.parametrize(
    "args",
    [
        ("--size", "0"),
        ("--threshold", "1"),
        ("--threshold", "0"),
        ("--threshold", "-0.5"),
        ("--nproc", "1"),
        ("--iters", "0"),
        ("--size", "12Q"),
        ("--min-gbps", "-1"),
        ("--inject", "slowlink@4"),
    ],
)
def test_bad_input_is_one_line(ddpcheck, scratch, args: tuple[str, ...]) -> None:
    assert_usage_error(
        ddpcheck("links", "--nproc", "2", *args) if "--nproc" not in args else ddpcheck("links", *args),
        scratch,
    )


def test_slowlink_is_for_links_only(ddpcheck, scratch) -> None:
    run = ddpcheck("allreduce", "--inject", "slowlink@0")
    assert_usage_error(run, scratch)
    assert "applies to links" in run.stderr


@needs_gpu
def test_links_on_gpus_over_nccl(ddpcheck, scratch) -> None:
    import torch

    gpus = min(torch.cuda.device_count(), 8)
    if gpus < 2:
        pytest.skip("needs 2 GPUs: NCCL refuses two ranks on one GPU, and one rank has no link")
    run = ddpcheck("links", "--gpus", str(gpus), "--size", "16M")
    assert run.code == 0, run.stdout + run.stderr
    assert (run.report["world"]["backend"], run.report["world"]["device"]) == ("nccl", "cuda")
    assert len(run.table("links")) == gpus * (gpus - 1) and all(r["gbps"] > 0 for r in run.table("links"))
    if gpus >= 3:  # with two ranks one link compares with nothing
        slowed = ddpcheck("links", "--gpus", str(gpus), "--size", "16M", "--inject", "slowlink@1")
        assert slowed.code == 1 and _named(slowed)["link bandwidth"] == [1], slowed.stdout
    assert_nothing_left(scratch, run)
