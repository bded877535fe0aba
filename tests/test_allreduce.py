"""`ddpcheck allreduce`: the pure judge on synthetic data, and real runs of 2, 3 and 4 gloo ranks."""

from __future__ import annotations

import math

import pytest
import torch

from ddpcheck.checks.allreduce import AllreduceOptions
from ddpcheck.checks.allreduce import check as allreduce_check
from ddpcheck.checks.allreduce.check import judge
from ddpcheck.checks.sweep import sweep
from ddpcheck.checks.sweep.ops.all_reduce import bus_factor
from ddpcheck.checks.sweep.pattern import EXACT_LIMIT, Pattern, sweep_sizes
from ddpcheck.report.units import human_bytes
from tests.conftest import assert_nothing_left, needs_gpu

OPTS = AllreduceOptions(min_bytes=1024, max_bytes=4096, dtype="float32", iters=2, warmup=1)


def identities(n: int, hosts: int = 1) -> list[dict]:
    per_host = n // hosts
    return [
        {
            "rank": r,
            "local_rank": r % per_host,
            "host": f"h{r // per_host}",
            "pid": 100 + r,
            "device": "cpu",
            "device_name": "cpu",
            "device_uuid": None,
            "pci_bus_id": None,
        }
        for r in range(n)
    ]


def rank_data(n: int, *, got: float | None = None, wrong: int = 0, seconds: float = 1e-3) -> dict:
    sizes = [
        {"size_bytes": s, "count": s // 4, "seconds": seconds, "wrong": wrong} for s in (1024, 2048, 4096)
    ]
    expected = float(n * (n - 1) // 2)
    return {"classic": {"got": expected if got is None else got, "expected": expected}, "sizes": sizes}


# ------------------------------------------------------------------ pure parts
@pytest.mark.parametrize("dtype", list(EXACT_LIMIT))
@pytest.mark.parametrize("world", [1, 2, 3, 8, 300])
def test_pattern_sums_are_exact_in_every_dtype(dtype: str, world: int) -> None:
    pattern = Pattern.for_world(world, dtype)
    torch_dtype = getattr(torch, dtype)
    total = torch.zeros(pattern.period, dtype=torch_dtype)
    for index in range(world):
        contribution = torch.tensor(pattern.contribution(index), dtype=torch_dtype)
        total += contribution  # every partial sum must stay exact, as inside the reduction
    assert total.tolist() == [float(x) if dtype != "int32" else x for x in pattern.expected()]
    assert max(pattern.expected()) <= EXACT_LIMIT[dtype]


def test_pattern_differs_between_ranks() -> None:
    pattern = Pattern.for_world(4, "float32")
    assert len({tuple(pattern.contribution(i)) for i in range(4)}) == 4


def test_bfloat16_beyond_256_ranks_falls_back_to_one_hot() -> None:
    assert Pattern.for_world(300, "bfloat16").one_hot
    assert not Pattern.for_world(128, "bfloat16").one_hot


def test_sweep_sizes_double_and_round_to_whole_elements() -> None:
    assert sweep_sizes(1024, 8192, "float32") == [1024, 2048, 4096, 8192]
    assert sweep_sizes(3, 12, "float64") == [8]  # 3 and 6 round to one element, 12 to one too
    assert sweep_sizes(1000, 1000, "float32") == [1000]
    assert sweep_sizes(1024, 65536, "float32", 4) == [1024, 4096, 16384, 65536]  # --step-factor 4
    assert sweep_sizes(4, 16, "float32", 1.5) == [4, 8, 12]  # 4, 6, 9, 13 in whole elements; 19 > 16


def test_bus_factor_follows_nccl_tests() -> None:
    assert bus_factor(1) == 0
    assert bus_factor(2) == 1
    assert math.isclose(bus_factor(8), 1.75)


def test_judge_passes_clean_data() -> None:
    report = judge([rank_data(4) for _ in range(4)], identities(4), OPTS)
    assert report.verdict.value == "pass"
    rows = report.table("bandwidth").rows
    assert [r["size_bytes"] for r in rows] == [1024, 2048, 4096]
    assert rows[0]["algbw_gbps"] == round(1024 / 1e-3 / 1e9, 3)
    assert rows[0]["busbw_gbps"] == round(1024 / 1e-3 / 1e9 * 1.5, 3)


def test_judge_names_the_localised_rank_and_its_host() -> None:
    data = [rank_data(4, got=7.0, wrong=5) for _ in range(4)]
    data[0]["culprits"] = [2]
    report = judge(data, identities(4, hosts=2), OPTS)
    classic, data_check = report.checks[0], report.checks[2]
    assert classic.status.value == "FAIL" and classic.ranks == [2] and classic.hosts == ["h1"]
    assert "rank 2 on host h1" in classic.detail
    assert data_check.status.value == "FAIL" and data_check.ranks == [2]
    assert report.table("bandwidth").rows[0]["wrong"] == 20
    assert report.verdict.exit_code == 1


def test_judge_uses_the_slowest_rank_time() -> None:
    data = [rank_data(2), rank_data(2, seconds=4e-3)]
    rows = judge(data, identities(2), OPTS).table("bandwidth").rows
    assert rows[0]["time_us"] == 4000


def test_min_busbw_turns_a_slow_peak_into_a_failure() -> None:
    slow = AllreduceOptions(**{**OPTS.__dict__, "min_busbw": 100.0})
    report = judge([rank_data(2) for _ in range(2)], identities(2), slow)
    assert report.checks[3].name == "bandwidth" and report.checks[3].status.value == "FAIL"


def test_one_rank_passes_with_no_bandwidth_table_and_says_why() -> None:
    """One rank times an in-place no-op (the H200 printed algbw 61,058 GB/s at 1 GiB): no table."""
    report = judge([rank_data(1)], identities(1), OPTS)
    assert report.table("bandwidth") is None
    bandwidth = next(c for c in report.checks if c.name == "bandwidth")
    assert bandwidth.status.value == "SKIP" and bandwidth.detail.startswith("one rank: no traffic")
    assert report.verdict.value == "pass"


def test_human_bytes() -> None:
    assert human_bytes(1024) == "1K"
    assert human_bytes(64 * 1024**2) == "64M"
    assert human_bytes(1000) == "1000B"


# ------------------------------------------------------------------ real runs
# Each real launch costs seconds on a 2-core machine, so each one asserts all it can. The worlds and
# culprits the bisection can meet are covered without processes (test_properties.py: any world 2-64).
def test_real_ranks_pass(ddpcheck, scratch) -> None:
    world = 3
    run = ddpcheck("allreduce", "--nproc", str(world), "--sizes", "1K:64K", "--iters", "3")
    assert run.code == 0, run.stdout + run.stderr
    report = run.report
    assert report["verdict"] == "pass" and report["world"]["size"] == world
    assert report["world"]["backend"] == "gloo"
    classic = run.table("classic")
    assert [r["got"] for r in classic] == [world * (world - 1) / 2] * world
    assert [r["local_rank"] for r in classic] == list(range(world))
    rows = run.table("bandwidth")
    assert [r["size_bytes"] for r in rows] == [1024 * 2**i for i in range(7)]
    for row in rows:
        assert set(row) >= {"size_bytes", "count", "dtype", "time_us", "algbw_gbps", "busbw_gbps", "wrong"}
        assert row["wrong"] == 0 and row["time_us"] > 0
        assert math.isclose(
            row["busbw_gbps"], row["algbw_gbps"] * 2 * (world - 1) / world, rel_tol=0.01, abs_tol=2e-3
        )
    assert {c["name"] for c in report["checks"]} == {
        "classic all_reduce",
        "rank map",
        "data integrity",
        "bandwidth",
        "nodes agree",
        "expected bandwidth",  # SKIP on CPU ranks: no expectation (ddpcheck/checks/sweep/expected.py)
    }
    assert len({r["pid"] for r in report["ranks"]}) == world
    assert "Classic check" in run.stdout and "PASS" in run.stdout
    assert run.stderr == ""  # no torch banner or warning reaches the user's terminal on a pass
    assert_nothing_left(scratch, run)


# A ring of two (where the bisection cannot split the pair by halves) and the last rank of four.
@pytest.mark.parametrize(("world", "culprit"), [(2, 0), (4, 3)])
def test_corrupt_rank_is_named_exactly(ddpcheck, scratch, world: int, culprit: int) -> None:
    run = ddpcheck(
        "allreduce",
        "--nproc",
        str(world),
        "--sizes",
        "1K:8K",
        "--iters",
        "1",
        "--inject",
        f"corrupt@{culprit}",
    )
    assert run.code == 1, run.stdout + run.stderr
    failing = run.failing()
    assert {c["name"] for c in failing} == {"classic all_reduce", "data integrity"}
    for check in failing:
        assert check["ranks"] == [culprit]
        assert f"rank {culprit} on host" in check["detail"]
    assert all(row["wrong"] > 0 for row in run.table("bandwidth"))
    assert f"rank {culprit} on host" in run.stdout
    assert_nothing_left(scratch, run)


def test_two_corrupt_ranks_are_both_named(ddpcheck, scratch) -> None:
    run = ddpcheck(
        "allreduce",
        "--nproc",
        "4",
        "--sizes",
        "4K",
        "--iters",
        "1",
        "--inject",
        "corrupt@1",
        "--inject",
        "corrupt@2",
    )
    assert run.code == 1
    assert run.check("data integrity")["ranks"] == [1, 2]
    assert_nothing_left(scratch, run)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float64", "int32"])
def test_other_dtypes_compare_exactly(ddpcheck, scratch, dtype: str) -> None:
    """One launch per dtype: rank 1 corrupts, ranks 0 and 2 must not be named (an inexact pattern
    for the dtype would name them too: a false alarm)."""
    run = ddpcheck(
        "allreduce",
        "--nproc",
        "3",
        "--sizes",
        "1K:16K",
        "--iters",
        "1",
        "--dtype",
        dtype,
        "--inject",
        "corrupt@1",
    )
    assert run.code == 1, run.stdout + run.stderr
    assert run.check("data integrity")["ranks"] == [1]
    assert {r["dtype"] for r in run.table("bandwidth")} == {dtype}
    assert [r["size_bytes"] for r in run.table("bandwidth")] == [1024 * 2**i for i in range(5)]
    assert_nothing_left(scratch, run)


def test_step_factor_min_busbw_and_json_to_stdout(ddpcheck, scratch) -> None:
    """One launch: --step-factor spaces the sweep, --min-busbw fails it, --json - is pure JSON."""
    import json

    run = ddpcheck(
        "allreduce", "--nproc", "2", "--sizes", "1K:64K", "--step-factor", "4", "--iters", "1",
        "--min-busbw", "10000", "--json", "-",
    )  # fmt: skip
    assert run.code == 1, run.stdout + run.stderr
    report = json.loads(run.stdout)
    assert report["verdict"] == "fail" and report["command"] == "allreduce"
    assert set(report) >= {
        "ddpcheck",
        "command",
        "verdict",
        "elapsed_s",
        "world",
        "ranks",
        "checks",
        "tables",
        "options",
    }
    assert [row["size"] for row in report["tables"]["bandwidth"]] == ["1K", "4K", "16K", "64K"]
    assert report["options"]["step_factor"] == 4
    (bandwidth,) = [c for c in report["checks"] if c["name"] == "bandwidth"]
    assert bandwidth["status"] == "FAIL" and "below --min-busbw" in bandwidth["detail"]
    assert_nothing_left(scratch)


def test_default_run_says_it_uses_cpu_ranks(ddpcheck, scratch) -> None:
    run = ddpcheck("allreduce")
    assert run.code == 0, run.stdout + run.stderr
    assert "no GPU visible: running 2 CPU ranks over gloo" in run.stdout
    assert run.report["world"]["size"] == 2
    assert_nothing_left(scratch, run)


@needs_gpu
def test_gpu_ranks_over_nccl(ddpcheck, scratch) -> None:
    gpus = torch.cuda.device_count()
    run = ddpcheck("allreduce", "--gpus", str(gpus), "--sizes", "1M:64M")
    assert run.code == 0, run.stdout + run.stderr
    assert run.report["world"]["backend"] == "nccl" and run.report["world"]["device"] == "cuda"
    assert all(r["device_uuid"] or r["pci_bus_id"] for r in run.report["ranks"])
    assert_nothing_left(scratch, run)


@needs_gpu
def test_gpu_corrupt_is_localised(ddpcheck, scratch) -> None:
    run = ddpcheck("allreduce", "--gpus", "1", "--sizes", "1M", "--inject", "corrupt@0")
    assert run.code == 1 and run.check("data integrity")["ranks"] == [0]


def test_judge_says_when_the_fault_could_not_be_localised() -> None:
    data = [rank_data(2, got=2.0, wrong=3) for _ in range(2)]
    data[0].update(culprits=[], unlocalised=True)
    report = judge(data, identities(2), OPTS)
    data_check = report.checks[2]
    assert data_check.status.value == "FAIL" and data_check.ranks == [0, 1]
    assert "could not localise" in data_check.detail


def test_a_sweep_the_backend_refused_is_skipped_not_a_crash() -> None:
    data = [rank_data(2) for _ in range(2)]
    for d in data:
        d.update(sizes=[], skipped="the gloo backend cannot run it with bfloat16: not supported")
    report = judge(data, identities(2), OPTS)
    skipped = [c for c in report.checks if c.status.value == "SKIP"]
    assert [c.name for c in skipped] == ["data integrity", "bandwidth"]
    assert all("cannot run it with bfloat16" in c.detail for c in skipped)
    assert report.verdict.value == "pass" and report.table("bandwidth") is None


class _OneRankOfFour:
    """A rank's context as measure() uses it, every rank agreeing that the classic sum was wrong."""

    world_size, rank, device, budget = 4, 0, "cpu", None

    def stage(self, what: str) -> None:
        pass

    def agree_max(self, values: list[int]) -> list[int]:
        return [1 for _ in values]


def test_a_wrong_classic_sum_alone_is_localised_by_bisection(monkeypatch: pytest.MonkeyPatch) -> None:
    """The sweep right at every size, the one-element classic sum wrong (a fault only it meets): the
    culprit is still sought by bisection, at the classic's 4 bytes. A fault model stands in for the
    subgroups' collectives: a group of two or more holding rank 2 comes out wrong."""
    clean = {"op": "all_reduce", "skipped": None, "sizes": [], "culprits": [], "unlocalised": False}
    monkeypatch.setattr(allreduce_check, "_classic", lambda ctx: {"got": 5.0, "expected": 6.0})
    monkeypatch.setattr(sweep, "measure_op", lambda *args: dict(clean))
    sizes_run = set()

    def run_on_groups(ctx, op, size_bytes, dtype_name, groups):
        sizes_run.add((op.name, size_bytes, dtype_name))
        return [len(g) > 1 and 2 in g for g in groups]

    monkeypatch.setattr(sweep, "run_on_groups", run_on_groups)
    data = allreduce_check.measure(_OneRankOfFour(), AllreduceOptions(min_bytes=1024, max_bytes=4096))
    assert data["culprits"] == [2] and data["unlocalised"] is False
    assert sizes_run == {("all_reduce", 4, "float32")}
