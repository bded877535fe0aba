"""`ddpcheck profile`'s judge, rule by rule (pure: synthetic timings, milliseconds each).

The derived phases of a step, the steady-state medians (warm-up left out, median not mean),
each rank against the median of the *other* ranks, the straggler and stability thresholds at
their boundaries, the figures and where the peak comes from, which ranks' steps the report
keeps, and each detail sentence and table word for word.
"""

from __future__ import annotations

import itertools
import statistics
from typing import Any

import pytest

from ddpcheck.checks.profile import ProfileOptions
from ddpcheck.checks.profile import judge as profile
from ddpcheck.report.model import Check, Status
from ddpcheck.report.units import significant

OPTS = ProfileOptions(hidden=64, batch=8, steps=4, warmup=1)
MS = 1e-3


def ident(rank: int, host: str = "h0", device: str = "cpu", name: str | None = "cpu") -> dict[str, Any]:
    return {
        "rank": rank,
        "local_rank": rank,
        "host": host,
        "pid": 100 + rank,
        "device": device,
        "device_name": name,
    }


def step(forward: float, backward: float, compute: float, update: float) -> dict[str, float]:
    """One timed step, in milliseconds: forward, backward with sync, backward under no_sync, update."""
    return {
        "forward": forward * MS,
        "backward": backward * MS,
        "backward_compute": compute * MS,
        "update": update * MS,
    }


def rank_data(
    steps: list[dict[str, float]],
    allreduce_ms: float = 1.0,
    peak_mib: float = 100.0,
    kind: str = "rss",
    precision: str = "highest",
    grad_bytes: int = 3 * 2**20,
) -> dict[str, Any]:
    """One rank's measure() result."""
    return {
        "steps": steps,
        "grad_bytes": grad_bytes,
        "allreduce_s": allreduce_ms * MS,
        "peak_memory_bytes": int(peak_mib * 2**20),
        "memory_kind": kind,
        "matmul_precision": precision,
    }


def steady(compute_ms: float = 3.0, exposed_ms: float = 0.5, n: int = 4) -> list[dict[str, float]]:
    """n steps: 1 ms forward, compute - 1.5 ms of backward compute, 0.5 ms update; a 40x warm-up first."""
    back = compute_ms - 1.5
    first = step(40.0, 40 * back + exposed_ms, 40 * back, 20.0)
    return [first] + [step(1.0, back + exposed_ms, back, 0.5) for _ in range(n - 1)]


def ids(n: int) -> list[dict[str, Any]]:
    return [ident(r) for r in range(n)]


# ---------------------------------------------------------------- step_times, rank_medians, variation
def test_a_step_derives_exposed_communication_wall_step_and_own_compute() -> None:
    """exposed = backward - backward compute; step = forward + backward + update; compute = own work."""
    (derived,) = profile.step_times(
        [{"forward": 1.0, "backward": 8.0, "backward_compute": 2.0, "update": 32.0}]
    )
    assert derived == {
        "forward": 1.0,
        "backward": 8.0,
        "backward_compute": 2.0,
        "update": 32.0,
        "exposed_comm": 6.0,
        "step": 41.0,
        "compute": 35.0,
    }


def test_a_ranks_medians_leave_the_warm_up_out_and_are_medians_not_means() -> None:
    """Warm-up steps are dropped (exactly `warmup` of them); the middle value, not the mean, remains."""
    steps = [
        step(100.0, 3, 2, 1),
        step(50.0, 3, 2, 1),
        step(1.0, 3, 2, 1),
        step(2.0, 3, 2, 1),
        step(9.0, 3, 2, 1),
    ]
    (two,) = profile.rank_medians([rank_data(steps)], warmup=2)
    assert two["forward"] == 2.0 * MS  # of 1, 2, 9: the mean would be 4
    assert set(two) == set(profile.SUMMARY_PHASES)
    assert two["exposed_comm"] == pytest.approx(1.0 * MS) and two["compute"] == pytest.approx(5.0 * MS)
    (one,) = profile.rank_medians([rank_data(steps)], warmup=1)
    assert one["forward"] == pytest.approx(5.5 * MS)  # of 50, 1, 2, 9


def test_variation_is_the_population_std_over_the_mean_of_steady_compute() -> None:
    """cv = pstdev / mean of compute over the steps after warm-up."""
    steps = [step(90, 1, 1, 1), step(1, 1, 0, 0), step(3, 1, 0, 0)]  # compute 92 (warm-up), then 1 and 3
    assert profile.variation([rank_data(steps)], warmup=1) == [pytest.approx(0.5)]  # pstdev 1, mean 2
    three = [step(1, 1, 0, 0), step(2, 1, 0, 0), step(6, 1, 0, 0)]
    (cv,) = profile.variation([rank_data(three)], warmup=0)
    assert cv == pytest.approx(statistics.pstdev([1, 2, 6]) / 3)


def test_one_steady_step_or_no_compute_varies_by_nothing() -> None:
    """A single steady step, or steps of zero compute, have a cv of 0 (no division by zero)."""
    assert profile.variation([rank_data([step(5, 1, 0, 0), step(1, 1, 0, 0)])], warmup=1) == [0.0]
    assert profile.variation([rank_data([step(0, 0, 0, 0), step(0, 0, 0, 0)])], warmup=0) == [0.0]


# ---------------------------------------------------------------- straggler_ratios and _median_without
def test_each_ratio_is_over_the_median_of_the_others() -> None:
    """Rank 3's 3.0 against the others' median 1.0 (not all ranks' 1.25, nor the others' mean 1.17)."""
    ratios = profile.straggler_ratios([{"compute": v} for v in (1.0, 1.0, 1.5, 3.0)])
    assert ratios == [1.0 / 1.5, 1.0 / 1.5, 1.5 / 1.0, 3.0 / 1.0]


def test_a_lone_rank_and_a_rank_whose_others_took_no_time_are_at_1() -> None:
    """One rank: 1.0. Others' median of zero: 1.0, not a division by zero (a zero own time is 0.0)."""
    assert profile.straggler_ratios([{"compute": 2.0}]) == [1.0]
    assert profile.straggler_ratios([{"compute": 0.0}, {"compute": 0.0}, {"compute": 4.0}]) == [0.0, 0.0, 1.0]


def test_the_median_without_one_value_is_statistics_median_of_the_rest() -> None:
    """Every value left out of every small list, duplicates included: statistics.median of the rest."""
    lists = [v for size in range(2, 6) for v in itertools.product((1.0, 2.0, 4.0, 8.0), repeat=size)]
    lists += [v for size in (6, 7) for v in itertools.product((1.0, 2.0, 4.0), repeat=size)]
    for values in lists:
        ordered = sorted(values)
        for i, value in enumerate(values):
            rest = list(values[:i] + values[i + 1 :])
            assert profile._median_without(ordered, value) == statistics.median(rest), (values, value)


# ---------------------------------------------------------------- known_peak
def test_the_peak_is_found_by_fragment_in_any_case_most_specific_first() -> None:
    """The device name matched case-insensitively; an H100 PCIe is not an H100 SXM; no name, no peak."""
    assert profile.known_peak("nvidia h100 pcie") == 51.0
    assert profile.known_peak("NVIDIA H100 NVL") == 60.0
    assert profile.known_peak("Tesla t4") == 8.1
    assert profile.known_peak("Radeon") is None
    assert profile.known_peak("") is None and profile.known_peak(None) is None


# ---------------------------------------------------------------- _ms and significant
def test_milliseconds_keep_three_decimals_and_figures_four_significant_digits() -> None:
    """_ms: seconds to ms, 3 decimals; significant: 4 significant digits."""
    assert profile._ms(0.00123456) == 1.235
    assert significant(123456.0) == 123500.0 and significant(0.000987654) == 0.0009877


# ---------------------------------------------------------------- figures_of
def test_the_figures_word_for_word() -> None:
    """Bytes, the slowest rank's all-reduce, the median rank's exposed time and TFLOP/s, no peak on CPU."""
    # Compute 3 ms (1 forward, 1.5 backward, 0.5 update) and 0.5 ms exposed on every rank.
    data = [rank_data(steady(), allreduce_ms=a) for a in (1.0, 2.0, 1.5)]
    medians = profile.rank_medians(data, OPTS.warmup)
    figures = profile.figures_of(data, ids(3), OPTS, medians)
    forward = 2 * 8 * 64**2
    bus = 3 * 2**20 * (2 * (3 - 1) / 3)  # 2(n-1)/n of the gradients' bytes
    assert figures == {
        "world_size": 3,
        "hidden": 64,
        "batch": 8,
        "grad_bytes": 3 * 2**20,
        "bus_bytes_per_step": int(bus),
        "allreduce_ms": 2.0,
        "busbw_gbps": significant(bus / 2e-3 / 1e9),
        "exposed_comm_ms": 0.5,
        "hidden_comm_pct": 75.0,
        "forward_gflop": forward / 1e9,
        "backward_gflop": 2 * forward / 1e9,
        "forward_tflops": significant(forward / 1e-3 / 1e12),
        "backward_tflops": significant(2 * forward / 1.5e-3 / 1e12),
        "step_tflops": significant(3 * forward / 3e-3 / 1e12),
        "peak_tflops": None,
        "peak_source": None,
        "peak_fraction": None,
    }


def test_exposed_time_beyond_the_all_reduce_hides_nothing_and_negative_exposed_is_zero() -> None:
    """More exposed than the all-reduce: 0% hidden. Negative exposed (noise): 0 ms, 100% hidden."""
    data = [rank_data(steady(exposed_ms=3.0)) for _ in range(2)]
    figures = profile.figures_of(data, ids(2), OPTS, profile.rank_medians(data, 1))
    assert figures["hidden_comm_pct"] == 0.0 and figures["exposed_comm_ms"] == 3.0
    data = [rank_data(steady(exposed_ms=-0.25)) for _ in range(2)]
    figures = profile.figures_of(data, ids(2), OPTS, profile.rank_medians(data, 1))
    assert figures["exposed_comm_ms"] == 0.0 and figures["hidden_comm_pct"] == 100.0


def test_a_third_hidden_is_rounded_to_one_decimal() -> None:
    """hidden_comm_pct is rounded to one decimal: 2/3 hidden reads 66.7."""
    data = [rank_data(steady(exposed_ms=0.5), allreduce_ms=1.5) for _ in range(2)]
    figures = profile.figures_of(data, ids(2), OPTS, profile.rank_medians(data, 1))
    assert figures["hidden_comm_pct"] == 66.7


def test_two_ranks_have_a_bus_bandwidth() -> None:
    """Two ranks (the fewest that send anything): busbw is bus bytes over the all-reduce's time."""
    data = [rank_data(steady(), allreduce_ms=2.0) for _ in range(2)]
    figures = profile.figures_of(data, ids(2), OPTS, profile.rank_medians(data, 1))
    assert figures["busbw_gbps"] == significant(3 * 2**20 / 2e-3 / 1e9)  # 2(n-1)/n = 1


def test_one_rank_or_an_instant_all_reduce_has_no_bandwidth_nor_hidden_share() -> None:
    """n = 1, or an all-reduce of 0 s: busbw 0 and hidden share None."""
    lone = [rank_data(steady())]
    figures = profile.figures_of(lone, ids(1), OPTS, profile.rank_medians(lone, 1))
    assert figures["busbw_gbps"] == 0.0 and figures["hidden_comm_pct"] is None
    instant = [rank_data(steady(), allreduce_ms=0.0) for _ in range(2)]
    figures = profile.figures_of(instant, ids(2), OPTS, profile.rank_medians(instant, 1))
    assert figures["busbw_gbps"] == 0.0 and figures["hidden_comm_pct"] is None


def test_no_time_at_all_gives_zero_rates_not_a_division_by_zero() -> None:
    """Phases of 0 s: every TFLOP/s figure is 0."""
    data = [rank_data([step(0, 0, 0, 0)] * 3) for _ in range(2)]
    figures = profile.figures_of(data, ids(2), OPTS, profile.rank_medians(data, 1))
    assert (figures["forward_tflops"], figures["backward_tflops"], figures["step_tflops"]) == (0.0, 0.0, 0.0)


def _peak(identities: list[dict[str, Any]], precision: str = "highest", opts: ProfileOptions = OPTS) -> tuple:
    data = [rank_data(steady(), precision=precision) for _ in identities]
    figures = profile.figures_of(data, identities, opts, profile.rank_medians(data, 1))
    return figures["peak_tflops"], figures["peak_source"], figures["peak_fraction"]


def test_a_known_gpus_peak_only_for_fp32_products_on_a_gpu() -> None:
    """Rank 0's GPU at the 'highest' precision: its FP32 peak; TF32 ('high'), CPU ranks or no device: none."""
    peak, source, fraction = _peak([ident(0, device="cuda:0", name="NVIDIA A100-SXM4-40GB")])
    assert (peak, source) == (19.5, "NVIDIA A100-SXM4-40GB FP32")
    assert fraction == significant(3 * 2 * 8 * 64**2 / 3e-3 / 1e12 / 19.5)
    assert _peak([ident(0, device="cuda:0", name="NVIDIA A100")], precision="high") == (None, None, None)
    assert _peak([ident(0, device="cpu", name="NVIDIA A100")]) == (None, None, None)
    nameless = {k: v for k, v in ident(0, name="NVIDIA A100").items() if k != "device"}
    assert _peak([nameless]) == (None, None, None)
    assert _peak([ident(0, device="cuda:0", name="Radeon")]) == (None, None, None)


def test_peak_tflops_given_wins_over_the_known_gpu() -> None:
    """--peak-tflops: its value and source, even on a GPU whose peak is known."""
    opts = ProfileOptions(hidden=64, batch=8, steps=4, warmup=1, peak_tflops=2.0)
    peak, source, fraction = _peak([ident(0, device="cuda:0", name="NVIDIA H200")], opts=opts)
    assert (peak, source) == (2.0, "--peak-tflops") and fraction == significant(
        3 * 2 * 8 * 64**2 / 3e-3 / 1e12 / 2
    )


# ---------------------------------------------------------------- judge_stragglers
def _medians(compute_ms: list[float], exposed_ms: list[float] | None = None) -> list[dict[str, float]]:
    exposed = exposed_ms or [0.0] * len(compute_ms)
    return [{"compute": c * MS, "exposed_comm": e * MS} for c, e in zip(compute_ms, exposed, strict=True)]


def test_one_rank_has_nothing_to_compare() -> None:
    """A lone rank: PASS, 'one rank: nothing to compare'."""
    check = profile.judge_stragglers(_medians([3.0]), [1.0], ids(1), 1.2)
    assert check == Check("stragglers", Status.PASS, "one rank: nothing to compare")


def test_a_ratio_at_the_threshold_is_a_straggler_just_below_is_not() -> None:
    """ratio >= threshold warns (1.2 of 1.2); 1.19 passes, with the range of ratios, word for word."""
    identities = [ident(0), ident(1, host="h1")]
    check = profile.judge_stragglers(_medians([3.0, 3.6], [2.0, 0.5]), [0.83, 1.2], identities, 1.2)
    assert check == Check(
        "stragglers",
        Status.WARN,
        "rank 1 on host h1: compute 3.6 ms per step, 1.20x the median of the other ranks (threshold 1.2x). "
        "Every other rank waits for it in backward's all-reduce: their exposed communication "
        "(2 ms median) is mostly that wait",
        [1],
        ["h1"],
    )
    passed = profile.judge_stragglers(_medians([3.0, 3.57]), [0.84, 1.19], identities, 1.2)
    assert passed == Check(
        "stragglers",
        Status.PASS,
        "every rank's compute per step is within 1.2x of the others' median (from 0.84x to 1.19x)",
    )


def test_two_stragglers_are_each_spelled_out() -> None:
    """Each straggler's part, in rank order, joined by '; ', then the threshold once."""
    check = profile.judge_stragglers(_medians([1.0, 2.0, 2.5]), [0.5, 1.6, 2.0], ids(3), 1.5)
    assert check.detail.startswith(
        "rank 1 on host h0: compute 2 ms per step, 1.60x the median of the other ranks; "
        "rank 2 on host h0: compute 2.5 ms per step, 2.00x the median of the other ranks (threshold 1.5x). "
    )


def test_the_others_wait_is_their_median_exposed_time() -> None:
    """The waiting ranks' exposed communication: their median (2), not their mean (5), nor the straggler's."""
    medians = _medians([3.0, 3.0, 3.0, 6.0], [1.0, 2.0, 12.0, 100.0])
    check = profile.judge_stragglers(medians, [1.0, 1.0, 1.0, 2.0], ids(4), 1.5)
    assert check.detail.endswith("their exposed communication (2 ms median) is mostly that wait")


def test_when_every_rank_is_a_straggler_nobody_is_said_to_wait() -> None:
    """No rank left below the threshold: the waiting sentence is left out."""
    check = profile.judge_stragglers(_medians([3.0, 3.0]), [1.5, 1.5], ids(2), 1.2)
    assert check.ranks == [0, 1] and check.detail.endswith("(threshold 1.2x)")


def test_eight_stragglers_are_spelled_out_the_rest_only_named() -> None:
    """Nine stragglers: all nine in the check's ranks, the first eight in its detail."""
    ratios = [1.0] * 3 + [2.0] * 9
    check = profile.judge_stragglers(_medians([1.0] * 12), ratios, ids(12), 1.2)
    assert check.ranks == list(range(3, 12)) and check.detail.count("x the median of the other ranks") == 8
    assert "rank 10 on host" in check.detail and "rank 11 on host" not in check.detail


# ---------------------------------------------------------------- judge_stability
def test_a_cv_at_the_limit_is_steady_just_above_is_not() -> None:
    """cv > CV_WARN warns (0.26, 0.9); at 0.25 it does not; the PASS gives the largest cv."""
    steady_check = profile.judge_stability([0.1, profile.CV_WARN, 0.2], ids(3))
    assert steady_check == Check(
        "timing stability",
        Status.PASS,
        "every rank's compute time varies by at most 25% (std/mean) across steps",
    )
    identities = [ident(0), ident(1, host="h1"), ident(2, host="h2")]
    check = profile.judge_stability([0.1, 0.26, 0.9], identities)
    assert check == Check(
        "timing stability",
        Status.WARN,
        "rank 1 on host h1 varies by 26%, rank 2 on host h2 varies by 90% (std/mean of compute time "
        "across steps, above 25%): throttling, a noisy neighbour or host contention",
        [1, 2],
        ["h1", "h2"],
    )


def test_eight_unsteady_ranks_are_spelled_out() -> None:
    """Nine unsteady ranks: all named in the check, eight in its detail."""
    check = profile.judge_stability([0.0] + [0.5] * 9, ids(10))
    assert check.ranks == list(range(1, 10)) and check.detail.count("varies by 50%") == 8


# ---------------------------------------------------------------- judge_communication
def _comm(exposed_ms: float, allreduce_ms: float, hidden: float | None) -> dict[str, Any]:
    return {
        "grad_bytes": 3 * 2**20,
        "bus_bytes_per_step": 4.5 * 2**20,
        "allreduce_ms": allreduce_ms,
        "busbw_gbps": 12.5,
        "exposed_comm_ms": exposed_ms,
        "hidden_comm_pct": hidden,
    }


def test_one_rank_sends_nothing() -> None:
    """n = 1: the gradients' size, nothing to send."""
    check = profile.judge_communication(_comm(0.0, 0.0, None), 1)
    assert check == Check("communication", Status.PASS, "one rank: 3.0 MiB of gradients, nothing to send")


def test_the_communication_sentence_word_for_word() -> None:
    """Bytes sent, the all-reduce's time and busbw, the exposed time and the share hidden."""
    check = profile.judge_communication(_comm(1.0, 2.0, 50.0), 2)
    assert check == Check(
        "communication",
        Status.PASS,
        "3.0 MiB of gradients; each rank sends 4.5 MiB per step (2(n-1)/n); one all_reduce of that size "
        "takes 2 ms (busbw 12.5 GB/s); backward exposes 1 ms, so 50% of the all-reduce is hidden behind "
        "backward compute",
    )


def test_exposed_beyond_the_all_reduce_is_waiting_and_equal_is_not() -> None:
    """Exposed > all-reduce: waiting or contention. Equal: the share hidden (0%). No share: nothing more."""
    waiting = profile.judge_communication(_comm(2.5, 2.0, 0.0), 2).detail
    assert waiting.endswith(
        "backward exposes 2.5 ms (more than the all-reduce alone: the rest is waiting for slower ranks, "
        "or contention)"
    )
    equal = profile.judge_communication(_comm(2.0, 2.0, 0.0), 2).detail
    assert equal.endswith("backward exposes 2 ms, so 0% of the all-reduce is hidden behind backward compute")
    unknown = profile.judge_communication(_comm(0.0, 0.0, None), 2).detail
    assert unknown.endswith("backward exposes 0 ms")


# ---------------------------------------------------------------- judge_compute and judge_memory
def _flop_figures(fraction: float | None) -> dict[str, Any]:
    return {
        "forward_tflops": 1.5,
        "forward_gflop": 0.0655,
        "backward_tflops": 2.25,
        "backward_gflop": 0.131,
        "step_tflops": 2.0,
        "peak_fraction": fraction,
        "peak_tflops": 67.0,
        "peak_source": "NVIDIA H200 FP32",
    }


def test_the_compute_sentence_with_and_without_a_peak() -> None:
    """TFLOP/s and GFLOP of each pass and the whole step; the fraction of peak and its source if known."""
    plain = profile.judge_compute(_flop_figures(None))
    assert plain == Check(
        "compute",
        Status.PASS,
        "forward 1.5 TFLOP/s (0.0655 GFLOP), backward 2.25 TFLOP/s (0.131 GFLOP), whole step 2 TFLOP/s "
        "(matmul FLOPs over own compute time, median rank)",
    )
    peak = profile.judge_compute(_flop_figures(0.0299))
    assert peak.detail == plain.detail + "; 3.0% of the 67 TFLOP/s peak (NVIDIA H200 FP32)"


def test_memory_names_the_rank_with_the_highest_peak() -> None:
    """The range of peaks per rank in MiB and the rank with the highest; rank 0 says which kind."""
    data = [rank_data([], peak_mib=p) for p in (200.0, 100.0, 300.0, 250.0)]
    identities = [ident(0), ident(1), ident(2, host="h2"), ident(3)]
    check = profile.judge_memory(data, identities)
    assert check == Check(
        "memory", Status.PASS, "peak resident set (RSS) per rank: 100 to 300 MiB (highest: rank 2 on host h2)"
    )
    gpu = [rank_data([], peak_mib=p, kind="device") for p in (300.0, 100.0)]
    assert profile.judge_memory(gpu, ids(2)).detail == (
        "peak device memory allocated per rank: 100 to 300 MiB (highest: rank 0 on host h0)"
    )


# ---------------------------------------------------------------- judge: the report's shape
def test_the_report_has_its_checks_and_tables_in_order() -> None:
    """Six checks, then the tables in the order the terminal and the JSON show them."""
    report = profile.judge([rank_data(steady()) for _ in range(2)], ids(2), OPTS)
    assert report.command == "profile"
    assert [c.name for c in report.checks] == [
        "rank map",
        "stragglers",
        "timing stability",
        "communication",
        "compute",
        "memory",
    ]
    assert [t.name for t in report.tables] == [
        "rank0",
        "summary",
        "per_rank",
        "breakdown",
        "steps",
        "figures",
        "ranks",
    ]
    figures = report.table("figures")
    assert (
        figures is not None and figures.title == "Communication and compute figures" and figures.columns == {}
    )
    data = [rank_data(steady()) for _ in range(2)]
    assert figures.rows == [profile.figures_of(data, ids(2), OPTS, profile.rank_medians(data, 1))]


def test_the_judge_reads_the_straggler_threshold_and_the_warm_up_from_the_options() -> None:
    """--straggler-threshold and --warmup reach the checks: a 1.3x rank warns under 1.25, not 1.35."""
    data = [rank_data(steady()), rank_data(steady()), rank_data(steady(compute_ms=3.9))]
    low = ProfileOptions(hidden=64, batch=8, steps=4, warmup=1, straggler_threshold=1.25)
    high = ProfileOptions(hidden=64, batch=8, steps=4, warmup=1, straggler_threshold=1.35)
    assert {c.name: c for c in profile.judge(data, ids(3), low).checks}["stragglers"].ranks == [2]
    assert {c.name: c for c in profile.judge(data, ids(3), high).checks}["stragglers"].ranks == []
    # With no warm-up the 40x first step joins the steady ones: rank 2 is unsteady no more than the others.
    nowarm = ProfileOptions(hidden=64, batch=8, steps=4, warmup=0)
    stability = {c.name: c for c in profile.judge(data, ids(3), nowarm).checks}["timing stability"]
    assert stability.status == Status.WARN and stability.ranks == [0, 1, 2]


def test_the_judges_medians_leave_out_every_warm_up_step() -> None:
    """--warmup 2 of 4 steps: both slow warm-up steps are left out of the medians the summary shows."""
    opts = ProfileOptions(hidden=64, batch=8, steps=4, warmup=2)
    data = [rank_data([step(40.0, 3, 2, 1)] * 2 + [step(1.0, 3, 2, 1)] * 2) for _ in range(2)]
    summary = profile.judge(data, ids(2), opts).table("summary")
    assert summary is not None and summary.rows[0]["median_ms"] == 1.0


def test_beyond_step_ranks_the_judge_keeps_the_steps_of_the_ranks_its_checks_name() -> None:
    """STEP_RANKS + 6 ranks: the steps table keeps STEP_RANKS of them, the straggler among them."""
    n = profile.STEP_RANKS + 6
    data = [rank_data(steady(compute_ms=6.0 if r == n - 1 else 3.0)) for r in range(n)]
    report = profile.judge(data, ids(n), OPTS)
    steps = report.table("steps")
    assert steps is not None
    kept = sorted({row["rank"] for row in steps.rows})
    assert len(kept) == profile.STEP_RANKS and kept[-1] == n - 1


# ---------------------------------------------------------------- tables
def test_the_rank0_table_marks_exactly_the_warm_up_steps() -> None:
    """Rank 0's steps in ms, the first `warmup` marked; its columns and title."""
    opts = ProfileOptions(hidden=64, batch=8, steps=4, warmup=2)
    table = profile.rank0_table(rank_data([step(4, 3, 2, 1)] * 4), opts.warmup)
    assert table.name == "rank0" and table.title == "Rank 0, step by step (ms)"
    assert table.rows[1] == {
        "step": 1,
        "forward_ms": 4.0,
        "backward_ms": 3.0,
        "update_ms": 1.0,
        "exposed_comm_ms": 1.0,
        "note": "warm-up",
    }
    assert [r["note"] for r in table.rows] == ["warm-up", "warm-up", "", ""]
    assert table.columns == {
        "step": "Step",
        "forward_ms": "forward",
        "backward_ms": "backward",
        "update_ms": "update",
        "exposed_comm_ms": "exposed comm",
        "note": "",
    }


def test_the_summary_gives_min_median_max_and_the_slowest_rank_per_phase() -> None:
    """Each phase across ranks: min, median (not mean), max, the slowest rank (not the last) and its host."""
    medians = [dict.fromkeys(profile.SUMMARY_PHASES, v * MS) for v in (2.0, 1.0, 9.0, 1.5)]
    identities = [ident(0), ident(1), ident(2, host="h2"), ident(3)]
    table = profile.summary_table(medians, identities, OPTS)
    assert table.rows[0] == {
        "phase": "forward",
        "label": "forward",
        "min_ms": 1.0,
        "median_ms": 1.75,
        "max_ms": 9.0,
        "slowest_rank": 2,
        "slowest_host": "h2",
    }
    assert [r["label"] for r in table.rows] == list(profile.SUMMARY_PHASES.values())
    assert table.columns == {
        "label": "phase",
        "min_ms": "min",
        "median_ms": "median",
        "max_ms": "max",
        "slowest_rank": "slowest rank",
        "slowest_host": "host",
    }
    assert table.name == "summary"
    assert table.title == "Across ranks (ms): each rank's median over 3 steady steps"
    one = ProfileOptions(hidden=64, batch=8, steps=3, warmup=2)
    assert profile.summary_table(medians, identities, one).title.endswith("over 1 steady step")


def test_a_per_rank_row_word_for_word_and_its_status() -> None:
    """Per rank: ms medians, ratio and cv to 3 decimals, TFLOP/s, peak MiB; WARN at the straggler
    threshold (1.2, not 1.1999) or above CV_WARN (0.2501, not 0.25 itself)."""
    medians = [{"step": 4.5 * MS, "compute": 3.0 * MS, "exposed_comm": 0.5 * MS}] * 4
    data = [rank_data([], peak_mib=10.25) for _ in range(4)]
    ratios = [1.0, 1.2, 1.1999, 1.0]
    cvs = [0.12345, 0.0, profile.CV_WARN, 0.2501]
    table = profile.per_rank_table(data, medians, ratios, cvs, ids(4), ProfileOptions(hidden=64, batch=8))
    assert table.rows[0] == {
        "rank": 0,
        "host": "h0",
        "step_ms": 4.5,
        "compute_ms": 3.0,
        "exposed_comm_ms": 0.5,
        "ratio": 1.0,
        "cv": 0.123,
        "tflops": significant(6 * 8 * 64**2 / 3e-3 / 1e12),
        "peak_memory_mib": 10.2,
        "status": "PASS",
    }
    assert [r["status"] for r in table.rows] == ["PASS", "WARN", "PASS", "WARN"]
    assert table.rows[2]["ratio"] == 1.2
    assert table.name == "per_rank" and list(table.columns) == [
        "rank",
        "step_ms",
        "compute_ms",
        "exposed_comm_ms",
        "ratio",
        "cv",
        "tflops",
        "peak_memory_mib",
        "status",
    ]
    assert list(table.columns.values()) == [
        "rank",
        "step",
        "compute",
        "comm",
        "vs med",
        "cv",
        "TFLOP/s",
        "MiB",
        "status",
    ]
    assert table.title == (
        "Per rank, ms, medians of steady steps (comm: exposed; vs med: compute / the others' "
        "median; cv: std/mean of compute; MiB: peak memory)"
    )
    idle = profile.per_rank_table(
        data[:1], [{"step": 0.0, "compute": 0.0, "exposed_comm": 0.0}], [1.0], [0.0], ids(1), OPTS
    )
    assert idle.rows[0]["tflops"] == 0.0


def test_the_breakdown_shares_the_median_step_and_charts_noise_as_zero() -> None:
    """Each part's median across ranks in ms and its share of their sum; negative parts count 0."""
    medians = [
        {"forward": 1.0 * MS, "backward_compute": 2.0 * MS, "exposed_comm": -1.0 * MS, "update": 1.0 * MS},
        {"forward": 3.0 * MS, "backward_compute": 2.0 * MS, "exposed_comm": -1.0 * MS, "update": 1.0 * MS},
        {"forward": 2.0 * MS, "backward_compute": 5.0 * MS, "exposed_comm": -1.0 * MS, "update": 1.0 * MS},
    ]
    table = profile.breakdown_table(medians)
    assert table.name == "breakdown" and table.columns == {}
    assert table.title == "Where a step's time goes (median across ranks)"
    assert table.rows == [
        {"part": "forward", "label": "forward", "ms": 2.0, "share_pct": 40.0},
        {"part": "backward_compute", "label": "backward compute", "ms": 2.0, "share_pct": 40.0},
        {"part": "exposed_comm", "label": "exposed comm", "ms": 0.0, "share_pct": 0.0},
        {"part": "update", "label": "update", "ms": 1.0, "share_pct": 20.0},
    ]
    thirds = profile.breakdown_table([dict.fromkeys(profile.CHART_PARTS, MS) | {"update": 0.0}])
    assert [r["share_pct"] for r in thirds.rows] == [33.3, 33.3, 33.3, 0.0]
    idle = profile.breakdown_table([dict.fromkeys(profile.CHART_PARTS, 0.0)])
    assert [r["share_pct"] for r in idle.rows] == [0.0] * 4


# ---------------------------------------------------------------- _step_ranks and steps_table
def test_up_to_step_ranks_every_rank_keeps_its_steps() -> None:
    """At STEP_RANKS ranks or fewer, every rank's steps are kept."""
    assert profile._step_ranks([1.0] * profile.STEP_RANKS, []) == list(range(profile.STEP_RANKS))


def test_beyond_step_ranks_rank_0_the_named_then_the_slowest_fill_the_rest() -> None:
    """Past STEP_RANKS: rank 0, each rank a non-passing check names, then the slowest, STEP_RANKS in all."""
    n = profile.STEP_RANKS + 36
    ratios = [1.0] * n
    for r in range(70, 70 + 30):  # 30 slowest, the slower the higher the rank
        ratios[r] = 1.0 + r / 100
    checks = [
        Check("a", Status.WARN, "", [66, 5]),
        Check("b", Status.PASS, "", [69]),
        Check("c", Status.SKIP, "", [68]),
        Check("d", Status.FAIL, "", [67]),
    ]
    # 0, the four named (not 69: its check passed), the 30 slowest, then 29 ties in rank order.
    kept = profile._step_ranks(ratios, checks)
    assert kept == [*range(31), 66, 67, 68, *range(70, 100)]
    few = profile._step_ranks([1.0] * n, [])
    assert few == list(range(profile.STEP_RANKS))  # ties: in rank order


def test_more_named_ranks_than_step_ranks_keeps_rank_0_and_the_first_named() -> None:
    """Named ranks beyond STEP_RANKS: rank 0 and the lowest STEP_RANKS - 1 named; no slowest added."""
    n = profile.STEP_RANKS * 2 + 2
    ratios = [1.0] * n
    ratios[1] = 9.0  # the slowest, not named: left out when the named fill every place
    named = list(range(2, n))
    kept = profile._step_ranks(ratios, [Check("a", Status.WARN, "", named)])
    assert kept == [0, *range(2, profile.STEP_RANKS + 1)]


def test_the_steps_table_keeps_each_chosen_ranks_every_step() -> None:
    """Every step of the chosen ranks in ms, warm-up flagged; the title says which ranks when not all."""
    data = [rank_data([step(4, 3, 2, 1)] * 3) for _ in range(3)]
    identities = [ident(0), ident(1), ident(2, host="h2")]
    every = profile.steps_table(data, identities, 1, [0, 1, 2])
    assert every.name == "steps" and every.title == "Every rank, every step" and every.columns == {}
    assert len(every.rows) == 9
    assert every.rows[7] == {
        "rank": 2,
        "host": "h2",
        "step": 1,
        "warmup": False,
        "forward_ms": 4.0,
        "backward_ms": 3.0,
        "backward_compute_ms": 2.0,
        "exposed_comm_ms": 1.0,
        "update_ms": 1.0,
        "step_ms": 8.0,
        "compute_ms": 7.0,
    }
    assert [r["warmup"] for r in every.rows[:3]] == [True, False, False]
    some = profile.steps_table(data, identities, 1, [2])
    assert [r["rank"] for r in some.rows] == [2, 2, 2]
    assert some.name == "steps" and some.columns == {}
    assert some.title == (
        "Every step of 1 of 3 ranks: rank 0, the ranks a check names, the slowest "
        "(every rank's medians: per_rank)"
    )
