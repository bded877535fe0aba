"""`ddpcheck profile`: the pure judge on synthetic timings, and real runs of gloo ranks."""

from __future__ import annotations

import math
import time

import pytest
import torch

from ddpcheck.checks.profile import ProfileOptions
from ddpcheck.checks.profile.check import Marks
from ddpcheck.checks.profile.judge import SUMMARY_PHASES, flops, judge, known_peak, straggler_ratios
from ddpcheck.errors import UsageError
from ddpcheck.report.model import Status, Verdict
from tests.conftest import assert_nothing_left, assert_usage_error, needs_gpu

OPTS = ProfileOptions(hidden=64, batch=8, steps=6, warmup=1)
GRAD_BYTES = 4 * (64 * 64 + 64)
CHECKS = ["rank map", "stragglers", "timing stability", "communication", "compute", "memory"]


def identities(n: int, device_name: str = "cpu") -> list[dict]:
    gpu = device_name != "cpu"
    return [
        {
            "rank": r,
            "local_rank": r,
            "host": "h0",
            "pid": 100 + r,
            "device": f"cuda:{r}" if gpu else "cpu",
            "device_name": device_name,
            "device_uuid": f"GPU-{r}" if gpu else None,
        }
        for r in range(n)
    ]


def timings(
    steps: int = 6,
    *,
    scale: float = 1.0,
    exposed: float = 0.5e-3,
    jitter: list[float] | None = None,
    allreduce_s: float = 1e-3,
) -> dict:
    """One rank's measure() result: 1 ms forward, 2 ms backward compute, 0.5 ms update, a slow first step."""
    rows = []
    for s in range(steps):
        factor = scale * (jitter[s] if jitter else 1.0) * (40.0 if s == 0 else 1.0)
        compute = 2e-3 * factor
        rows.append(
            {
                "forward": 1e-3 * factor,
                "backward": compute + exposed,
                "backward_compute": compute,
                "update": 5e-4 * factor,
            }
        )
    return {
        "steps": rows,
        "grad_bytes": GRAD_BYTES,
        "allreduce_s": allreduce_s,
        "peak_memory_bytes": 300 * 2**20,
        "memory_kind": "rss",
        "matmul_precision": "highest",
    }


def by_name(report) -> dict:
    return {c.name: c for c in report.checks}


def table(report, name: str) -> list[dict]:
    return next(t for t in report.tables if t.name == name).rows


# ------------------------------------------------------------------ the judge
def test_judge_passes_even_ranks() -> None:
    report = judge([timings() for _ in range(4)], identities(4), OPTS)
    assert [c.name for c in report.checks] == CHECKS
    assert all(c.status == Status.PASS for c in report.checks), [c.detail for c in report.checks]
    assert report.verdict == Verdict.PASS
    assert {t.name for t in report.tables} >= {
        "rank0",
        "summary",
        "per_rank",
        "breakdown",
        "steps",
        "figures",
    }


def test_a_straggler_is_named_with_its_ratio() -> None:
    data = [timings(scale=2.0 if r == 2 else 1.0) for r in range(4)]
    report = judge(data, identities(4), OPTS)
    stragglers = by_name(report)["stragglers"]
    assert stragglers.status == Status.WARN and stragglers.ranks == [2] and stragglers.hosts == ["h0"]
    assert (
        "rank 2 on host h0" in stragglers.detail
        and "2.00x the median of the other ranks" in stragglers.detail
    )
    assert report.verdict == Verdict.PASS  # a warning, not a failure
    per_rank = table(report, "per_rank")
    assert [r["status"] for r in per_rank] == ["PASS", "PASS", "WARN", "PASS"]


def test_with_two_ranks_a_modest_straggler_is_still_seen() -> None:
    # Against the median of all ranks (1.15 ms) a 1.3x rank would look only 1.13x slow.
    data = [timings(), timings(scale=1.3)]
    stragglers = by_name(judge(data, identities(2), OPTS))["stragglers"]
    assert stragglers.status == Status.WARN and stragglers.ranks == [1]
    assert straggler_ratios([{"compute": 1.0}, {"compute": 1.3}]) == pytest.approx([1 / 1.3, 1.3])


@pytest.mark.parametrize(
    ("scale", "threshold", "warned"), [(1.1, 1.2, False), (1.1, 1.05, True), (1.2, 1.2, True)]
)
def test_the_straggler_threshold_is_honoured(scale: float, threshold: float, warned: bool) -> None:
    opts = ProfileOptions(hidden=64, batch=8, steps=6, warmup=1, straggler_threshold=threshold)
    data = [timings(), timings(), timings(scale=scale)]
    stragglers = by_name(judge(data, identities(3), opts))["stragglers"]
    assert (stragglers.status == Status.WARN) is warned
    assert stragglers.ranks == ([2] if warned else [])


def test_warm_up_steps_stay_out_of_the_summary() -> None:
    report = judge([timings(), timings()], identities(2), OPTS)
    summary = {r["phase"]: r for r in table(report, "summary")}
    assert summary["forward"]["median_ms"] == 1.0  # the 40 ms first step is left out
    assert summary["compute"]["median_ms"] == 3.5
    assert summary["exposed_comm"]["median_ms"] == 0.5
    assert summary["step"]["median_ms"] == 4.0
    rank0 = table(report, "rank0")
    assert [r["note"] for r in rank0] == ["warm-up"] + [""] * 5
    assert rank0[0]["forward_ms"] == 40.0


def test_an_unsteady_rank_is_named() -> None:
    data = [timings() for _ in range(3)] + [timings(jitter=[1, 1, 3, 1, 3, 1])]
    stability = by_name(judge(data, identities(4), OPTS))["timing stability"]
    assert stability.status == Status.WARN and stability.ranks == [3]
    assert "rank 3 on host h0 varies by" in stability.detail


def test_figures_follow_nccl_tests_and_the_flop_formulas() -> None:
    report = judge([timings() for _ in range(4)], identities(4), OPTS)
    figures = table(report, "figures")[0]
    bus = GRAD_BYTES * 2 * 3 / 4
    assert figures["bus_bytes_per_step"] == int(bus)
    assert figures["busbw_gbps"] == pytest.approx(bus / 1e-3 / 1e9, rel=1e-3)
    assert figures["hidden_comm_pct"] == 50.0  # 0.5 ms exposed of a 1 ms all-reduce
    assert flops(OPTS) == {"forward": 2 * 8 * 64**2, "backward": 4 * 8 * 64**2, "step": 6 * 8 * 64**2}
    assert figures["forward_tflops"] == pytest.approx(2 * 8 * 64**2 / 1e-3 / 1e12, rel=1e-3)
    assert figures["backward_tflops"] == pytest.approx(4 * 8 * 64**2 / 2e-3 / 1e12, rel=1e-3)
    assert figures["peak_fraction"] is None  # CPU ranks: no peak known
    assert "hidden behind backward compute" in by_name(report)["communication"].detail


def test_exposed_time_beyond_the_all_reduce_is_called_waiting() -> None:
    report = judge([timings(exposed=5e-3) for _ in range(2)], identities(2), OPTS)
    assert "waiting for slower ranks" in by_name(report)["communication"].detail


def test_fraction_of_peak_on_a_known_gpu_and_with_peak_tflops() -> None:
    report = judge([timings()], identities(1, "NVIDIA H200"), OPTS)
    figures = table(report, "figures")[0]
    assert figures["peak_tflops"] == 67.0 and figures["peak_source"] == "NVIDIA H200 FP32"
    assert "of the 67 TFLOP/s peak" in by_name(report)["compute"].detail
    opts = ProfileOptions(hidden=64, batch=8, steps=6, warmup=1, peak_tflops=0.001)
    figures = table(judge([timings()], identities(1), opts), "figures")[0]
    assert figures["peak_source"] == "--peak-tflops"
    assert figures["peak_fraction"] == pytest.approx(figures["step_tflops"] / 0.001, rel=1e-3)
    assert known_peak("NVIDIA H100 PCIe") == 51.0 and known_peak("NVIDIA H100 80GB HBM3") == 67.0
    assert known_peak("Some New GPU") is None


def test_one_rank_has_no_traffic_and_no_straggler() -> None:
    report = judge([timings()], identities(1), OPTS)
    checks = by_name(report)
    assert checks["stragglers"].status == Status.PASS and "one rank" in checks["stragglers"].detail
    assert "nothing to send" in checks["communication"].detail
    assert table(report, "figures")[0]["busbw_gbps"] == 0.0


def test_tables_for_json() -> None:
    report = judge([timings() for _ in range(3)], identities(3), OPTS)
    steps = table(report, "steps")
    assert len(steps) == 3 * 6 and sum(r["warmup"] for r in steps) == 3
    assert set(steps[0]) >= {
        "rank",
        "host",
        "step",
        "forward_ms",
        "backward_ms",
        "exposed_comm_ms",
        "update_ms",
    }
    assert [r["phase"] for r in table(report, "summary")] == list(SUMMARY_PHASES)
    breakdown = table(report, "breakdown")
    assert [r["part"] for r in breakdown] == ["forward", "backward_compute", "exposed_comm", "update"]
    assert sum(r["share_pct"] for r in breakdown) == pytest.approx(100, abs=0.2)
    # JSON-only tables have no terminal columns; the chart has its own renderer.
    assert next(t for t in report.tables if t.name == "steps").columns == {}


def test_negative_exposed_time_is_noise_and_charted_as_zero() -> None:
    report = judge([timings(exposed=-1e-4) for _ in range(2)], identities(2), OPTS)
    breakdown = {r["part"]: r for r in table(report, "breakdown")}
    assert breakdown["exposed_comm"]["ms"] == 0.0


def test_marks_time_cpu_intervals() -> None:
    marks = Marks(torch.device("cpu"))
    marks.mark()
    time.sleep(0.2)
    marks.mark()
    marks.mark()
    first, second = marks.pending()()
    # Each from the mark before it, not from the first: the second is far below the first (a
    # moment's preemption between two marks is no failure; measured from the first it is 0.2 s).
    assert 0.19 < first < 1.0 and 0 <= second < 0.1
    assert marks.points == []


# ------------------------------------------------------------------ bad input
BAD = {
    "zero hidden": ["--hidden", "0"],
    "negative hidden": ["--hidden", "-4"],
    "zero steps": ["--steps", "0"],
    "zero batch": ["--batch", "0"],
    "warmup equal to steps": ["--steps", "4", "--warmup", "4"],
    "warmup above steps": ["--warmup", "20"],
    "negative warmup": ["--warmup", "-1"],
    "threshold of one": ["--straggler-threshold", "1.0"],
    "zero peak": ["--peak-tflops", "0"],
    "fault of train": ["--inject", "nan@0"],
}


@pytest.mark.parametrize("args", BAD.values(), ids=BAD.keys())
def test_bad_input_is_one_line_and_exit_2(ddpcheck, scratch, args: list[str]) -> None:
    run = ddpcheck("profile", *args)
    assert_usage_error(run, scratch)


def test_options_validate() -> None:
    ProfileOptions().validate()
    with pytest.raises(UsageError, match="--warmup must be at least 0 and below --steps"):
        ProfileOptions(steps=3, warmup=3).validate()


# ------------------------------------------------------------------ real runs
def test_two_ranks_profile(ddpcheck, scratch) -> None:
    run = ddpcheck("profile", "--nproc", "2", "--hidden", "256", "--steps", "6", "--warmup", "1")
    assert run.code == 0, run.stdout + run.stderr
    report = run.report
    assert report["verdict"] == "pass" and report["world"]["size"] == 2
    # The harness may add checks of its own (e.g. whether the nodes agree) after the command's.
    assert [c["name"] for c in report["checks"]][: len(CHECKS)] == CHECKS
    steps = run.table("steps")
    assert len(steps) == 2 * 6 and {r["rank"] for r in steps} == {0, 1}
    for row in steps:
        assert row["forward_ms"] > 0 and row["backward_ms"] > 0 and row["update_ms"] > 0
        assert row["backward_compute_ms"] > 0
        assert math.isclose(
            row["exposed_comm_ms"], row["backward_ms"] - row["backward_compute_ms"], abs_tol=2e-3
        )
    figures = run.table("figures")[0]
    assert figures["grad_bytes"] == 4 * (256 * 256 + 256)
    assert figures["bus_bytes_per_step"] == figures["grad_bytes"]  # 2(n-1)/n = 1 for two ranks
    assert figures["busbw_gbps"] > 0 and figures["forward_tflops"] > 0
    assert len(run.table("summary")) == len(SUMMARY_PHASES)
    assert all(r["peak_memory_mib"] > 10 for r in run.table("per_rank"))
    assert "Rank 0, step by step" in run.stdout and "Where a step's time goes" in run.stdout
    assert "exposed comm" in run.stdout
    assert "Traceback" not in run.stdout + run.stderr
    assert_nothing_left(scratch, run)


# Rank 0 of two (the rank that reports) and the last of four; any culprit of any world is the pure
# straggler tests' above (real launches cost seconds each here).
@pytest.mark.parametrize(("nproc", "culprit"), [(2, 0), (4, 3)])
def test_slow_rank_is_named_exactly(ddpcheck, scratch, nproc: int, culprit: int) -> None:
    # Four ranks share this machine's two cores: a healthy rank is now and then 1.2x the
    # others (seen once), which is the machine, not a straggler. The slow rank is ~20x.
    threshold = "1.2" if nproc <= 2 else "2"
    run = ddpcheck(
        "profile", "--nproc", str(nproc), "--hidden", "64", "--steps", "6", "--warmup", "1",
        "--inject", f"slow@{culprit}", "--straggler-threshold", threshold,
    )  # fmt: skip
    assert run.code == 0, run.stdout + run.stderr  # a straggler is a warning
    stragglers = run.check("stragglers")
    assert stragglers["status"] == "WARN" and stragglers["ranks"] == [culprit], stragglers
    assert f"rank {culprit} on host" in stragglers["detail"]
    slow_row = run.table("per_rank")[culprit]
    assert slow_row["compute_ms"] >= 20  # the injected sleep
    assert_nothing_left(scratch, run)


@needs_gpu
def test_gpu_profile_reports_tflops(ddpcheck, scratch) -> None:
    gpus = torch.cuda.device_count()
    run = ddpcheck("profile", "--gpus", str(gpus), "--hidden", "4096")
    assert run.code == 0, run.stdout + run.stderr
    assert run.report["world"]["device"] == "cuda"
    figures = run.table("figures")[0]
    assert figures["step_tflops"] > 0.1
    assert all(r["peak_memory_mib"] > 64 * 3 for r in run.table("per_rank"))  # weights, grads, Adam
    print(run.stdout)  # recorded in docs/profile.md
    assert_nothing_left(scratch, run)


@needs_gpu
def test_gpu_slow_rank(ddpcheck, scratch) -> None:
    gpus = torch.cuda.device_count()
    if gpus < 2:
        pytest.skip("needs two GPUs")
    run = ddpcheck("profile", "--gpus", str(gpus), "--hidden", "2048", "--inject", "slow@1")
    assert run.check("stragglers")["ranks"] == [1]
