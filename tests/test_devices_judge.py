"""`ddpcheck devices`' judge, rule by rule (pure: synthetic ranks, milliseconds each).

Which rank each check names, the thresholds at their boundaries (below a fraction of the
median of the *other* ranks, not of all of them, and not of their mean), the majority of
the seeded products' digests, which pass and which figure a row keeps, and each detail
sentence word for word.
"""

from __future__ import annotations

from typing import Any

import pytest

from ddpcheck.checks.devices import DevicesOptions
from ddpcheck.checks.devices import judge as devices
from ddpcheck.checks.reference import EXACT_UP_TO
from ddpcheck.report.model import Check, Status
from ddpcheck.report.units import significant
from tests.test_devices import rank_data

CPU_OPTS = DevicesOptions(size=64, iters=2, threshold=0.7, memory_threshold=0.4)
GPU_OPTS = DevicesOptions(size=128, iters=2, threshold=0.8, memory_threshold=0.8)


def ident(rank: int, host: str = "n1", device: str = "cpu", name: str | None = None) -> dict[str, Any]:
    """One rank's identity as the launcher reports it; local ranks contiguous per host."""
    return {
        "rank": rank,
        "local_rank": rank,
        "host": host,
        "device": device,
        "device_name": name,
        "pid": 100 + rank,
    }


def cpu_rank(tflops: float = 1.0, copy: float = 10.0, digest: str = "aa", model: str = "m") -> dict[str, Any]:
    """A CPU rank's measure(): three passes, the middle one its best (0.9x, 1x, 0.95x)."""
    return rank_data(tflops, copy, digest, model)


def gpu_rank(
    bf16: float = 500.0,
    tf32: float = 250.0,
    h2d: float = 50.0,
    d2h: float = 45.0,
    d2d: float = 2000.0,
    health: dict[str, Any] | None = None,
    digests: tuple[str, str] = ("aa", "bb"),
) -> dict[str, Any]:
    """A GPU rank's measure(): two passes, the second one its best on every figure."""
    passes = [
        {
            "gemm": {"bfloat16": bf16 * f, "tf32": tf32 * f},
            "copy": {"h2d": h2d * f, "d2h": d2h * f, "d2d": d2d * f},
        }
        for f in (0.5, 1.0)
    ]
    return {
        "model": "GPU-X",
        "checksums": {
            "bfloat16": {"sha256": digests[0], "sum": 3.0},
            "tf32": {"sha256": digests[1], "sum": 4.0},
        },
        "passes": passes,
        "health": health,
        "topology": None,
    }


def cpu_ids(n: int) -> list[dict[str, Any]]:
    return [ident(r) for r in range(n)]


def gpu_ids(n: int, name: str = "GPU-X") -> list[dict[str, Any]]:
    return [ident(r, device=f"cuda:{r}", name=name) for r in range(n)]


def checks_of(data: list[dict[str, Any]], identities: list[dict[str, Any]], opts: DevicesOptions) -> dict:
    report = devices.judge(data, identities, opts)
    return {c.name: c for c in report.checks}


# ---------------------------------------------------------------- judge: the report's shape
def test_cpu_ranks_get_the_four_checks_and_two_skips_worded() -> None:
    """CPU ranks: rank map, compute, memory, results; health and topology skipped, each saying why."""
    report = devices.judge([cpu_rank(), cpu_rank()], cpu_ids(2), CPU_OPTS)
    assert report.command == "devices"
    assert [c.name for c in report.checks] == [
        "rank map",
        "compute",
        "memory",
        "results agree",
        "health",
        "topology",
    ]
    health, topology = report.checks[4:]
    assert health.status == Status.SKIP and health.detail == "CPU ranks: no GPU to read health from (NVML)"
    assert topology.status == Status.SKIP
    assert topology.detail == "CPU ranks: no GPU whose NUMA node to match"
    assert [t.name for t in report.tables] == ["devices", "ranks"]


def test_gpu_ranks_are_judged_on_health_and_topology_and_the_devices_table_comes_first() -> None:
    """CUDA ranks: health and topology judged (not skipped), the health table after the devices table."""
    report = devices.judge([gpu_rank(), gpu_rank()], gpu_ids(2), GPU_OPTS)
    names = [c.name for c in report.checks]
    assert names == ["rank map", "compute", "memory", "results agree", "health", "topology"]
    by_name = {c.name: c for c in report.checks}
    assert by_name["health"].detail == "could not read GPU health: no GPU facts"
    assert by_name["topology"].status == Status.PASS
    assert [t.name for t in report.tables] == ["devices", "health", "ranks"]
    assert report.tables[0].rows[0]["tf32_tflops"] == 250.0


def test_gpu_health_and_topology_findings_name_the_rank_and_its_host() -> None:
    """On GPUs the health and topology judges get every rank's facts and identity: host named."""
    sick = {"ecc_volatile_uncorrected": 2}
    astray = {
        "affinity": [0, 1],
        "node_cpus": [4, 5],
        "cpus": 8,
        "pci_bus_id": "0000:3b:00.0",
        "numa_node": 1,
    }
    data = [gpu_rank(), gpu_rank(health=sick)]
    data[0]["topology"] = astray
    identities = [ident(0, host="g0", device="cuda:0", name="GPU-X"), ident(1, host="g1", device="cuda:1")]
    checks = checks_of(data, identities, GPU_OPTS)
    assert checks["health"].status == Status.FAIL and checks["health"].hosts == ["g1"]
    assert checks["health"].detail.startswith("rank 1 on host g1, ")
    assert checks["topology"].status == Status.WARN and checks["topology"].hosts == ["g0"]
    assert checks["topology"].detail.startswith("rank 0 on host g0 runs on CPUs 0-1")


def test_the_judge_wants_both_thresholds_chosen() -> None:
    """Options for_device() has not completed (a threshold left None) are refused, not half used."""
    for opts in (DevicesOptions(threshold=0.7), DevicesOptions(memory_threshold=0.4)):
        with pytest.raises(AssertionError):
            devices.judge([cpu_rank(), cpu_rank()], cpu_ids(2), opts)


def test_one_cuda_rank_among_others_makes_it_a_gpu_run() -> None:
    """Any rank on a CUDA device (not all of them) makes the judge read GPU figures."""
    identities = [ident(0, device="cuda:0", name="GPU-X"), ident(1, device="gpu?", name="GPU-X")]
    report = devices.judge([gpu_rank(), gpu_rank()], identities, GPU_OPTS)
    assert "tf32_tflops" in report.tables[0].rows[1]


def test_a_rank_a_failed_check_names_gets_fail_in_the_table_a_warned_one_pass() -> None:
    """The devices table's status: FAIL for a rank any failed check names; a WARN names it PASS."""
    # Rank 3 slow (compute FAIL); all four on an H100 at 100 TFLOP/s bf16, far below its
    # dense peak: a WARN that names every rank, which the FAIL outranks for compute only.
    data = [gpu_rank(bf16=100.0, h2d=20.0) for _ in range(3)] + [gpu_rank(bf16=10.0, h2d=20.0)]
    checks = checks_of(data, gpu_ids(4, "NVIDIA H100 80GB HBM3"), GPU_OPTS)
    assert checks["compute"].status == Status.FAIL and checks["compute"].ranks == [3]
    # H2D at 20 GB/s, below 60% of an H100's 55, on every rank: memory WARNs and names all of them.
    assert checks["memory"].status == Status.WARN and checks["memory"].ranks == [0, 1, 2, 3]
    report = devices.judge(data, gpu_ids(4, "NVIDIA H100 80GB HBM3"), GPU_OPTS)
    assert [row["status"] for row in report.tables[0].rows] == ["PASS", "PASS", "PASS", "FAIL"]


def test_the_budget_account_is_rank_0s_and_adds_its_check_and_table() -> None:
    """--budget's account is read from rank 0's data: its check and table join the report."""
    data = [cpu_rank(), cpu_rank()]
    account = {"budget_s": 10.0, "passes_asked": 5, "passes_run": 3, "iters_asked": 12, "iters_run": 12}
    data[0]["budget"] = account
    report = devices.judge(data, cpu_ids(2), CPU_OPTS)
    assert report.checks[-1].name == "budget" and "3 of 5 passes" in report.checks[-1].detail
    assert [t.name for t in report.tables] == ["devices", "ranks", "budget"]
    plain = devices.judge([cpu_rank(), cpu_rank()], cpu_ids(2), CPU_OPTS)
    assert "budget" not in [c.name for c in plain.checks]


# ---------------------------------------------------------------- device_rows and significant
def test_a_cpu_row_keeps_each_figures_best_pass_and_its_identity() -> None:
    """One row per rank: identity, model, the best pass of products and memcpy, rank's own digest."""
    data = [cpu_rank(), cpu_rank(2.0, 20.0, digest="cc", model="other")]
    identities = [ident(0), ident(1, host="n2", name="a CPU")]
    rows = devices.device_rows(data, identities, "cpu")
    assert rows[1] == {
        "rank": 1,
        "host": "n2",
        "device": "cpu",
        "device_name": "a CPU",
        "model": "other",
        "gemm_dtype": "float32",
        "gemm_tflops": 2.0,
        "gemm_tflops_passes": [1.8, 2.0, 1.9],
        "copy_gbps": 20.0,
        "copy_gbps_passes": [18.0, 20.0, 19.0],
        "checksum": "cc",
    }


def test_a_gpu_row_names_bf16_products_and_each_copy_and_reads_health() -> None:
    """GPU rows: bf16 is the primary product, tf32 its own key; D2D is copy_gbps; clocks from NVML."""
    health = {"sm_clock_mhz": 1410, "throttle": ["power cap", "thermal (software)"]}
    (row,) = devices.device_rows([gpu_rank(health=health)], gpu_ids(1), "cuda")
    assert row == {
        "rank": 0,
        "host": "n1",
        "device": "cuda:0",
        "device_name": "GPU-X",
        "model": "GPU-X",
        "gemm_dtype": "bfloat16",
        "gemm_tflops": 500.0,
        "gemm_tflops_passes": [250.0, 500.0],
        "tf32_tflops": 250.0,
        "tf32_tflops_passes": [125.0, 250.0],
        "h2d_gbps": 50.0,
        "h2d_gbps_passes": [25.0, 50.0],
        "d2h_gbps": 45.0,
        "d2h_gbps_passes": [22.5, 45.0],
        "copy_gbps": 2000.0,
        "copy_gbps_passes": [1000.0, 2000.0],
        "checksum": "aa",
        "sm_clock_mhz": 1410,
        "throttle": "power cap, thermal (software)",
    }


@pytest.mark.parametrize("health", [{"sm_clock_mhz": 900, "throttle": []}, {"sm_clock_mhz": 900}])
def test_no_throttle_reason_is_none_not_an_empty_string(health: dict[str, Any]) -> None:
    """An empty or missing throttle list reads None in the row."""
    (row,) = devices.device_rows([gpu_rank(health=health)], gpu_ids(1), "cuda")
    assert row["throttle"] is None and row["sm_clock_mhz"] == 900


def test_rows_keep_four_significant_digits() -> None:
    """Figures are rounded to 4 significant digits, not 5 (nor 3)."""
    (row,) = devices.device_rows([cpu_rank(1.234567, 98.76543)], cpu_ids(1), "cpu")
    assert row["gemm_tflops"] == 1.235 and row["copy_gbps"] == 98.77
    assert significant(0.000123456) == 0.0001235


# ---------------------------------------------------------------- slow_ranks
def test_a_lone_rank_has_no_peers_and_is_never_slow() -> None:
    """One rank: no reference to fall below (and no crash)."""
    assert devices.slow_ranks({0: 1.0}, 0.7) == {}


def test_each_rank_is_held_to_the_median_of_the_others_and_that_median_is_returned() -> None:
    """The reference returned is the median of the other ranks, not of all of them."""
    # Others of rank 3: 1.0, 2.0, 3.0 -> 2.0; of all four the median would be 1.5.
    assert devices.slow_ranks({0: 1.0, 1: 2.0, 2: 3.0, 3: 0.1}, 0.7) == {3: 2.0}


def test_exactly_at_the_threshold_is_not_slow() -> None:
    """Below threshold x the others' median is slow; at it, not."""
    assert devices.slow_ranks({0: 1.0, 1: 1.0, 2: 1.0, 3: 0.5}, 0.5) == {}
    assert devices.slow_ranks({0: 1.0, 1: 1.0, 2: 1.0, 3: 0.4999}, 0.5) == {3: 1.0}


def test_at_exact_up_to_ranks_each_is_still_compared_with_the_others_alone() -> None:
    """At EXACT_UP_TO ranks, half slow: each slow rank against the others (median 1.0) is slow; a
    median over all of them (0.8) would hide every one. One rank more, one reference serves all."""
    half = EXACT_UP_TO // 2
    values = {r: (1.0 if r < half else 0.6) for r in range(EXACT_UP_TO)}
    assert devices.slow_ranks(values, 0.7) == {r: 1.0 for r in range(half, EXACT_UP_TO)}
    values[EXACT_UP_TO] = 1.0  # now the median of all is 1.0: the shared reference names the same
    assert devices.slow_ranks(values, 0.7) == {r: 1.0 for r in range(half, EXACT_UP_TO)}


def test_beyond_exact_up_to_the_shared_median_is_the_reference() -> None:
    """Past EXACT_UP_TO ranks one reference over all of them: its median is what a slow rank gets."""
    values = {r: 2.0 for r in range(EXACT_UP_TO + 1)}
    values[5] = 0.5
    assert devices.slow_ranks(values, 0.7) == {5: 2.0}
    noisy = {r: 2.0 + (r % 2) for r in range(EXACT_UP_TO + 1)}  # 2.0 and 3.0: median 2.0, sigma 0
    noisy[7] = 1.3
    assert devices.slow_ranks(noisy, 0.7) == {7: 2.0}


# ---------------------------------------------------------------- round_ratios: each round's peers
def test_each_round_holds_a_rank_to_the_median_of_its_peers_in_that_round() -> None:
    """Round by round, over the *others'* median (not all ranks', not their mean)."""
    passes = {0: [1.0, 4.0], 1: [2.0, 4.0], 2: [4.0, 1.0], 3: [8.0, 4.0]}
    ratios = devices.round_ratios(passes)
    assert ratios[0] == [1.0 / 4.0, 1.0]  # round 1: others 2, 4, 8; round 2: others 4, 1, 4
    assert ratios[2] == [4.0 / 2.0, 1.0 / 4.0]  # round 1: others 1, 2, 8
    assert ratios[3] == [8.0 / 2.0, 1.0]


def test_past_exact_up_to_each_round_has_one_median_of_all() -> None:
    passes = {r: [2.0, 1.0 + r % 2] for r in range(EXACT_UP_TO + 1)}  # round 2: 1.0 and 2.0, median 1.0
    ratios = devices.round_ratios(passes)
    assert ratios[0] == [1.0, 1.0] and ratios[1] == [1.0, 2.0]


def _turns(columns: dict[str, list[list[float]]]) -> list[dict[str, Any]]:
    """Rows with every pass's figure (one list per rank) and, as device_rows keeps it, the best."""
    ranks = len(next(iter(columns.values())))
    return [
        {"rank": r, "device_name": None}
        | {key: max(passes[r]) for key, passes in columns.items()}
        | {f"{key}_passes": passes[r] for key, passes in columns.items()}
        for r in range(ranks)
    ]


def test_a_rank_whose_turns_all_came_after_the_host_got_busier_is_not_named() -> None:
    """Ranks 0 and 1 measured their first pass before another job started; rank 2 never had a quiet
    turn. By best pass it is at 0.5x; against the peers of each round, as fast as they are."""
    rows = _turns({"a": [[2.0, 1.0, 1.0, 1.0, 1.0], [2.0, 1.0, 1.0, 1.0, 1.0], [1.0] * 5]})
    check = devices._peer_check("x", [("a", "A", "u")], rows, cpu_ids(3), 0.7, _no_expectation)
    assert check.status == Status.PASS, check
    assert devices.slow_ranks({r["rank"]: r["a"] for r in rows}, 0.7) == {2: 2.0}  # what alone named it


@pytest.mark.parametrize(("slow_rounds", "named"), [(5, True), (3, True), (2, False)])
def test_a_rank_is_named_when_slow_in_most_rounds_not_in_a_few(slow_rounds: int, named: bool) -> None:
    """By its best pass rank 2 is at 0.5x its peers' always (their quiet first round, 2.0, against
    its 1.0); it is named only when it was also below 0.7x of them in most of the 5 rounds."""
    peers = [2.0] + [1.0] * 4
    own = [1.0] + [0.3] * (slow_rounds - 1) + [1.0] * (5 - slow_rounds)
    rows = _turns({"a": [peers, peers, own, peers]})
    check = devices._peer_check("x", [("a", "A", "u")], rows, cpu_ids(4), 0.7, _no_expectation)
    assert (check.ranks == [2]) is named, check
    if named:
        assert check.detail.endswith(
            f"0.50x its peers' median 2 u (below 0.7x; in {slow_rounds} of 5 rounds)"
        )


def test_round_ratios_at_exactly_exact_up_to_ranks_leave_each_rank_out() -> None:
    """Half at 1.0, half at 2.0: left out, a 1.0 rank's peers' median is 2.0 (shared, it would be 1.5)."""
    half = EXACT_UP_TO // 2
    passes = {r: [1.0 if r < half else 2.0] for r in range(EXACT_UP_TO)}
    assert devices.round_ratios(passes)[0] == [0.5]


def test_round_ratios_of_one_rank_and_of_peers_at_zero_are_one() -> None:
    """No peers: nothing to be slower than. Peers that measured 0: no ratio to take, not a slow rank."""
    assert devices.round_ratios({0: [1.0, 2.0]}) == {0: [1.0, 1.0]}
    assert devices.round_ratios({0: [0.0], 1: [0.0], 2: [1.0]})[2] == [1.0]
    assert devices.judge_compute(_turns({"gemm_tflops": [[1.0, 2.0]]}), cpu_ids(1), 0.7, "cpu").status == (
        Status.PASS
    )


def test_a_rank_whose_median_round_is_exactly_the_threshold_is_not_named() -> None:
    """Below means below: a median round at 0.7x of its peers passes under 0.7 (its best pass is 0.5x)."""
    peers = [2.0, 1.0, 1.0, 1.0, 1.0]
    rows = _turns({"a": [peers, peers, [1.0, 0.7, 0.7, 0.7, 1.0], peers]})
    check = devices._peer_check("x", [("a", "A", "u")], rows, cpu_ids(4), 0.7, _no_expectation)
    assert check.status == Status.PASS, check


def test_a_round_exactly_at_the_threshold_is_not_counted_below() -> None:
    peers = [2.0, 1.0, 1.0, 1.0, 1.0]
    rows = _turns({"a": [peers, peers, [1.0, 0.3, 0.3, 0.7, 1.0], peers]})
    check = devices._peer_check("x", [("a", "A", "u")], rows, cpu_ids(4), 0.7, _no_expectation)
    assert check.ranks == [2] and check.detail.endswith("(below 0.7x; in 3 of 5 rounds)"), check.detail


def test_two_rounds_are_counted_and_one_is_not_mentioned() -> None:
    two = _turns({"a": [[1.0, 1.0], [1.0, 1.0], [0.3, 0.3], [1.0, 1.0]]})
    check = devices._peer_check("x", [("a", "A", "u")], two, cpu_ids(4), 0.7, _no_expectation)
    assert check.detail.endswith("(below 0.7x; in 2 of 2 rounds)"), check.detail
    one = _turns({"a": [[1.0], [1.0], [0.3], [1.0]]})
    check = devices._peer_check("x", [("a", "A", "u")], one, cpu_ids(4), 0.7, _no_expectation)
    assert check.detail.endswith("(below 0.7x)"), check.detail


def test_a_rank_cleared_by_its_rounds_does_not_stop_the_next_one_being_named() -> None:
    """Rank 1 only had no quiet turn (cleared by its rounds); rank 3 is slow in every round: named."""
    peers = [2.0, 1.0, 1.0, 1.0, 1.0]
    rows = _turns({"a": [peers, [1.0] * 5, peers, [1.0, 0.3, 0.3, 0.3, 0.3], peers]})
    check = devices._peer_check("x", [("a", "A", "u")], rows, cpu_ids(5), 0.7, _no_expectation)
    assert check.ranks == [3], check


# ---------------------------------------------------------------- _peer_check
def _rows(values: dict[str, list[float | None]], names: list[str | None] | None = None) -> list[dict]:
    """Rows of one pass each: every figure and, as device_rows keeps it, its one pass."""
    n = len(next(iter(values.values())))
    rows = []
    for r in range(n):
        row: dict[str, Any] = {"rank": r, "device_name": (names or [None] * n)[r]}
        row |= {key: column[r] for key, column in values.items()}
        row |= {f"{key}_passes": [column[r]] for key, column in values.items()}
        rows.append(row)
    return rows


def _no_expectation(key: str, device_name: str, value: float) -> str | None:
    return None


def test_a_slow_rank_fails_with_its_figure_its_ratio_and_its_peers_median_word_for_word() -> None:
    """The FAIL detail: where, label, value, ratio to the others' median, that median, the threshold."""
    rows = _rows({"a": [2.0, 2.0, 0.5, 2.0]})
    identities = [ident(0), ident(1), ident(2, host="n3"), ident(3)]
    check = devices._peer_check("x", [("a", "A things", "u/s")], rows, identities, 0.7, _no_expectation)
    assert check == Check(
        "x",
        Status.FAIL,
        "rank 2 on host n3: A things 0.5 u/s, 0.25x its peers' median 2 u/s (below 0.7x)",
        [2],
        ["n3"],
    )


def test_a_pass_gives_each_figures_range_and_the_threshold() -> None:
    """The PASS detail: how many ranks, within which fraction, each figure's min-max."""
    rows = _rows({"a": [1.0, 1.25], "b": [30.0, 40.0]})
    figures = [("a", "A", "u"), ("b", "B", "v")]
    check = devices._peer_check("x", figures, rows, cpu_ids(2), 0.75, _no_expectation)
    assert check == Check("x", Status.PASS, "2 ranks within 0.75x of their peers: A 1-1.25 u; B 30-40 v")


def test_a_figure_no_rank_has_is_skipped_and_the_next_still_judged() -> None:
    """A figure missing (or not a number) on every rank is left out; the figures after it still count."""
    rows = _rows({"a": [None, None, None], "b": [5.0, 5.0, 1.0]})
    figures = [("a", "A", "u"), ("b", "B", "v")]
    check = devices._peer_check("x", figures, rows, cpu_ids(3), 0.7, _no_expectation)
    assert check.status == Status.FAIL and check.ranks == [2]
    assert check.detail.startswith("rank 2 on host n1: B 1 v, 0.20x")


def test_ranks_of_several_figures_are_named_in_order_and_findings_in_figure_order() -> None:
    """Each figure's slow ranks in turn; the check's ranks sorted, hosts in that order."""
    rows = _rows({"a": [1.0, 1.0, 1.0, 0.1], "b": [0.1, 1.0, 1.0, 1.0]})
    identities = [ident(0, host="h0"), ident(1), ident(2), ident(3, host="h3")]
    check = devices._peer_check(
        "x", [("a", "A", "u"), ("b", "B", "u")], rows, identities, 0.7, _no_expectation
    )
    assert check.ranks == [0, 3] and check.hosts == ["h0", "h3"]
    assert check.detail.index("rank 3 on host h3: A") < check.detail.index("rank 0 on host h0: B")


def test_a_warning_names_its_ranks_and_a_failure_outranks_it() -> None:
    """Below the hardware's expectation: WARN naming those ranks; any slow rank makes it a FAIL instead."""
    seen: list[tuple[str, str, float]] = []

    def expect(key: str, device_name: str, value: float) -> str | None:
        seen.append((key, device_name, value))
        return f"{key} {value:g} LOW" if value < 3.0 else None

    rows = _rows({"a": [2.0, 4.0, 2.0]}, names=["G", None, "G"])
    identities = [ident(0, host="h0"), ident(1), ident(2, host="h2")]
    check = devices._peer_check("x", [("a", "A", "u")], rows, identities, 0.4, expect)
    assert check == Check(
        "x", Status.WARN, "rank 0 on host h0: a 2 LOW; rank 2 on host h2: a 2 LOW", [0, 2], ["h0", "h2"]
    )
    assert seen == [("a", "G", 2.0), ("a", "", 4.0), ("a", "G", 2.0)]  # no device name: ""
    slow = _rows({"a": [4.0, 4.0, 4.0, 0.5]})
    failed = devices._peer_check("x", [("a", "A", "u")], slow, cpu_ids(4), 0.7, expect)
    assert failed.status == Status.FAIL and failed.ranks == [3] and "LOW" not in failed.detail


def test_a_row_without_the_figure_is_not_asked_about_it() -> None:
    """The hardware expectation is only asked about the rows that carry the figure."""
    asked: list[int] = []

    def expect(key: str, device_name: str, value: float) -> str | None:
        asked.append(int(value))
        return None

    rows = [{"rank": 0, "a": 3.0, "a_passes": [3.0]}, {"rank": 1}, {"rank": 2, "a": 4.0, "a_passes": [4.0]}]
    check = devices._peer_check("x", [("a", "A", "u")], rows, cpu_ids(3), 0.7, expect)
    assert asked == [3, 4] and check.detail == "3 ranks within 0.7x of their peers: A 3-4 u"


# ---------------------------------------------------------------- _listed
@pytest.mark.parametrize("count", [devices.FINDINGS_SHOWN - 1, devices.FINDINGS_SHOWN])
def test_up_to_findings_shown_are_all_spelled_out(count: int) -> None:
    """Up to FINDINGS_SHOWN findings: every one, joined by '; ', nothing counted."""
    findings = [f"f{i}" for i in range(count)]
    assert devices._listed(findings) == "; ".join(findings)


def test_beyond_findings_shown_the_rest_are_counted() -> None:
    """One finding over FINDINGS_SHOWN: the first ones spelled out, then 'and 1 more'."""
    findings = [f"f{i}" for i in range(devices.FINDINGS_SHOWN + 1)]
    shown = "; ".join(findings[: devices.FINDINGS_SHOWN])
    assert devices._listed(findings) == shown + "; and 1 more (the devices table in --json has every rank)"


# ---------------------------------------------------------------- judge_compute and judge_memory
def test_cpu_compute_and_memory_pass_details_word_for_word() -> None:
    """CPU ranks: float32 products in TFLOP/s, memcpy copies in GB/s, each with its own threshold."""
    rows = devices.device_rows([cpu_rank(1.0, 10.0), cpu_rank(1.25, 12.0)], cpu_ids(2), "cpu")
    compute = devices.judge_compute(rows, cpu_ids(2), 0.7, "cpu")
    memory = devices.judge_memory(rows, cpu_ids(2), 0.4, "cpu")
    assert compute == Check(
        "compute", Status.PASS, "2 ranks within 0.7x of their peers: float32 products 1-1.25 TFLOP/s"
    )
    assert memory == Check(
        "memory", Status.PASS, "2 ranks within 0.4x of their peers: memcpy copies 10-12 GB/s"
    )


def test_gpu_compute_and_memory_pass_details_word_for_word() -> None:
    """GPU ranks: bf16 and tf32 products; host to device, device to host and device to device copies."""
    rows = devices.device_rows([gpu_rank(), gpu_rank(bf16=600.0, d2d=1900.0)], gpu_ids(2), "cuda")
    compute = devices.judge_compute(rows, gpu_ids(2), 0.8, "cuda")
    memory = devices.judge_memory(rows, gpu_ids(2), 0.8, "cuda")
    assert compute.detail == (
        "2 ranks within 0.8x of their peers: bfloat16 products 500-600 TFLOP/s; tf32 products 250-250 TFLOP/s"
    )
    assert memory.detail == (
        "2 ranks within 0.8x of their peers: host to device copies 50-50 GB/s; "
        "device to host copies 45-45 GB/s; device to device copies 1.9e+03-2e+03 GB/s"
    )


def test_a_slow_tf32_rank_is_named_under_compute_and_a_slow_d2h_under_memory() -> None:
    """Each GPU figure is judged: tf32 products under compute, device to host copies under memory."""
    data = [gpu_rank(), gpu_rank(tf32=100.0), gpu_rank(d2h=10.0), gpu_rank()]
    checks = checks_of(data, gpu_ids(4), GPU_OPTS)
    assert checks["compute"].ranks == [1] and "rank 1 on host n1: tf32 products 100 TFLOP/s" in (
        checks["compute"].detail
    )
    assert checks["memory"].ranks == [2] and "rank 2 on host n1: device to host copies 10 GB/s" in (
        checks["memory"].detail
    )


def test_compute_and_memory_use_their_own_thresholds() -> None:
    """--threshold judges products, --memory-threshold copies: a copy at 0.5x passes under 0.4."""
    data = [cpu_rank(), cpu_rank(copy=5.0), cpu_rank(tflops=0.5), cpu_rank()]
    checks = checks_of(data, cpu_ids(4), CPU_OPTS)
    assert checks["memory"].status == Status.PASS and checks["compute"].ranks == [2]
    assert "(below 0.7x; in 3 of 3 rounds)" in checks["compute"].detail


def test_a_copy_just_below_the_memory_threshold_is_named() -> None:
    """0.39x of the others' median copy rate fails under --memory-threshold 0.4; 0.41x does not."""
    below = checks_of([cpu_rank(), cpu_rank(copy=3.9), cpu_rank(), cpu_rank()], cpu_ids(4), CPU_OPTS)
    above = checks_of([cpu_rank(), cpu_rank(copy=4.1), cpu_rank(), cpu_rank()], cpu_ids(4), CPU_OPTS)
    assert (
        below["memory"].ranks == [1]
        and "0.39x its peers' median 10 GB/s (below 0.4x; in 3 of 3 rounds)" in below["memory"].detail
    )
    assert above["memory"].status == Status.PASS


def test_a_slow_rank_that_is_throttled_says_why() -> None:
    """A throttled rank the compute check names gets its throttle reasons; a throttled healthy one not."""
    rows = _rows({"gemm_tflops": [1.0, 1.0, 0.2, 1.0]})
    for row, throttle in zip(rows, ["power cap", None, "thermal", None], strict=True):
        row["throttle"] = throttle
    check = devices.judge_compute(rows, cpu_ids(4), 0.7, "cpu")
    assert check.ranks == [2]
    assert check.detail.endswith("(below 0.7x); throttled: rank 2 (thermal)")
    rows[3] |= {"gemm_tflops": 0.2, "gemm_tflops_passes": [0.2], "throttle": "power cap"}
    both = devices.judge_compute(rows, cpu_ids(4), 0.7, "cpu")
    assert both.ranks == [2, 3] and both.detail.endswith("; throttled: rank 2 (thermal), rank 3 (power cap)")
    healthy = devices.judge_compute(rows[:2], cpu_ids(2), 0.7, "cpu")
    assert "throttled" not in healthy.detail


# ---------------------------------------------------------------- judge_results
def test_the_odd_rank_is_named_with_the_majority_and_both_sums_word_for_word() -> None:
    """The odd one out: its dtype, how many of how many agree, its sum against an agreeing rank's."""
    data = [cpu_rank(), cpu_rank(), cpu_rank(digest="bb"), cpu_rank()]
    identities = [ident(0), ident(1), ident(2, host="n9"), ident(3)]
    check = devices.judge_results(data, identities)
    assert check == Check(
        "results agree",
        Status.FAIL,
        "rank 2 on host n9: float32 product differs from the 3 of 4 ranks of m that agree "
        "(sum 2.5 against 1.5)",
        [2],
        ["n9"],
    )


def test_the_sum_compared_is_an_agreeing_ranks_not_rank_0s() -> None:
    """When rank 0 is the odd one, the sum it is compared with is the first agreeing rank's."""
    data = [cpu_rank(digest="bb"), cpu_rank(), cpu_rank()]
    check = devices.judge_results(data, cpu_ids(3))
    assert check.ranks == [0] and check.detail.endswith("(sum 2.5 against 1.5)")
    assert "the 2 of 3 ranks of m" in check.detail


def test_only_four_odd_sums_are_spelled_out() -> None:
    """Five odd ranks of eleven: every one named, the sums of the first four only."""
    data = [cpu_rank(digest="bb") if r % 2 else cpu_rank() for r in range(11)]
    check = devices.judge_results(data, cpu_ids(11))
    assert check.ranks == [1, 3, 5, 7, 9]
    assert check.detail.count("sum 2.5 against 1.5") == 4
    assert "the 6 of 11 ranks of m" in check.detail


def test_a_tie_names_every_rank_of_the_model_with_each_digest() -> None:
    """No majority: every rank of that model named, with every rank's digest, word for word."""
    data = [cpu_rank(), cpu_rank(digest="bb")]
    check = devices.judge_results(data, [ident(0), ident(1, host="n2")])
    assert check == Check(
        "results agree",
        Status.FAIL,
        "float32 products on m disagree and no majority says which is right (rank 0: aa, rank 1: bb)",
        [0, 1],
        ["n1", "n2"],
    )


def test_a_majority_over_a_split_minority_names_the_minority() -> None:
    """Two agree against two that disagree with each other: 2 beats 1, the two odd ones named."""
    data = [cpu_rank(), cpu_rank(digest="bb"), cpu_rank(), cpu_rank(digest="cc")]
    check = devices.judge_results(data, cpu_ids(4))
    assert check.ranks == [1, 3]
    assert check.detail.endswith(
        "the 2 of 4 ranks of m that agree (sum 2.5 against 1.5, sum 2.5 against 1.5)"
    )


def test_findings_of_two_models_add_up_whichever_comes_first() -> None:
    """A tie on one model and an odd rank on another: both named, in the models' order."""
    odd_first = [cpu_rank(model="A"), cpu_rank(model="A"), cpu_rank(digest="bb", model="A")]
    odd_first += [cpu_rank(model="B"), cpu_rank(digest="bb", model="B")]
    check = devices.judge_results(odd_first, cpu_ids(5))
    assert check.ranks == [2, 3, 4]
    assert check.detail.startswith("rank 2 on host n1: float32 product differs from the 2 of 3 ranks of A")
    assert "; float32 products on B disagree" in check.detail
    tie_first = odd_first[3:] + odd_first[:3]
    check = devices.judge_results(tie_first, cpu_ids(5))
    assert check.ranks == [0, 1, 4]


def test_every_dtype_of_a_gpu_is_compared() -> None:
    """Both dtypes: the tf32 product of one rank differing is found after bf16 agreed."""
    data = [gpu_rank(), gpu_rank(), gpu_rank(digests=("aa", "zz"))]
    check = devices.judge_results(data, gpu_ids(3))
    assert check.ranks == [2] and "tf32 product differs from the 2 of 3 ranks of GPU-X" in check.detail


def test_a_tie_on_one_dtype_does_not_stop_the_next_from_being_compared() -> None:
    """Two GPU ranks differing on both dtypes: a 'no majority' finding for each dtype."""
    data = [gpu_rank(), gpu_rank(digests=("xx", "yy"))]
    check = devices.judge_results(data, gpu_ids(2))
    assert check.detail == (
        "bfloat16 products on GPU-X disagree and no majority says which is right (rank 0: aa, rank 1: xx); "
        "tf32 products on GPU-X disagree and no majority says which is right (rank 0: bb, rank 1: yy)"
    )


def test_agreement_counts_models_and_products_compared() -> None:
    """PASS: how many device models and how many products (models x dtypes) were compared."""
    data = [gpu_rank(), gpu_rank()]
    data += [gpu_rank() | {"model": "GPU-Y"}, gpu_rank() | {"model": "GPU-Y"}]
    check = devices.judge_results(data, gpu_ids(4))
    assert check == Check(
        "results agree",
        Status.PASS,
        "the same seeded products bit for bit on every rank of each model "
        "(2 device models, 4 products compared)",
    )


def test_a_lone_rank_passes_and_ranks_all_of_different_models_skip() -> None:
    """One rank: nothing differs (PASS); several ranks, each another model: nothing to compare (SKIP)."""
    lone = devices.judge_results([cpu_rank()], cpu_ids(1))
    assert lone.status == Status.PASS and "(1 device model, 1 product compared)" in lone.detail
    apart = devices.judge_results([cpu_rank(model="A"), cpu_rank(model="B")], cpu_ids(2))
    assert apart == Check(
        "results agree", Status.SKIP, "every rank's device is a different model: nothing to compare"
    )
    mixed = devices.judge_results([cpu_rank(model="A"), cpu_rank(model="A"), cpu_rank(model="B")], cpu_ids(3))
    assert mixed.status == Status.PASS and "(2 device models, 2 products compared)" in mixed.detail


# ---------------------------------------------------------------- devices_table
def test_the_cpu_table_shows_host_memcpy_wait_and_checksum() -> None:
    """CPU: rank, host, device, float32, memcpy, wait %, checksum, status; units and options in the title."""
    table = devices.devices_table([], "cpu", CPU_OPTS)
    assert table.name == "devices"
    assert table.columns == {
        "rank": "rank",
        "host": "host",
        "device": "device",
        "gemm_tflops": "float32",
        "copy_gbps": "memcpy",
        "cpu_wait_pct": "wait %",
        "checksum": "checksum",
        "status": "status",
    }
    assert table.title == (
        "Devices: TFLOP/s of products, GB/s of memcpy, % of the time waiting for a core "
        "(64x64 products, best of 5 passes)"
    )


def test_the_wait_column_is_each_ranks_mean_share_and_a_busy_host_is_a_note() -> None:
    """A rank's wait % is the mean of its passes' shares; from 25% a note says the host was busy
    (naming the rank that waited most) and the verdict stays the rates'."""

    def waiting(shares: list[float]) -> dict[str, Any]:
        data = cpu_rank()
        data["passes"] = [{**p, "cpu_wait": share} for p, share in zip(data["passes"], shares, strict=False)]
        return data

    rows = devices.device_rows([waiting([0.1, 0.2, 0.3]), waiting([0.0, 0.0, 0.03])], cpu_ids(2), "cpu")
    assert [row["cpu_wait_pct"] for row in rows] == [20, 1]
    assert devices.busy_host_note(rows) is None
    report = devices.judge([waiting([0.2, 0.3, 0.25]), waiting([0.5, 0.6, 0.4])], cpu_ids(2), CPU_OPTS)
    assert report.notes == [
        "the host was busy: ranks waited for a core while other processes ran, up to 50% of rank 1's "
        "passes; their rates leave that time out (the wait % column), so a busy host does not make "
        "a healthy rank look slow"
    ]
    assert report.verdict.name == "PASS"
    # Rows from GPUs or from older reports have no wait: no column value, no note.
    assert "cpu_wait_pct" not in devices.device_rows([cpu_rank()], cpu_ids(1), "cpu")[0]


def test_the_gpu_table_shows_both_products_three_copies_and_the_clock() -> None:
    """GPU: bf16 and tf32, H2D, D2H, D2D and SM MHz; no host or checksum (JSON only)."""
    table = devices.devices_table([{"rank": 0}], "cuda", GPU_OPTS)
    assert table.columns == {
        "rank": "rank",
        "device": "device",
        "gemm_tflops": "bfloat16",
        "tf32_tflops": "tf32",
        "h2d_gbps": "H2D",
        "d2h_gbps": "D2H",
        "copy_gbps": "D2D",
        "sm_clock_mhz": "SM MHz",
        "status": "status",
    }
    assert table.title == "Devices: TFLOP/s of products, GB/s of copies (128x128 products, best of 5 passes)"
    assert table.rows == [{"rank": 0}]
