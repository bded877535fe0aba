"""--budget: the sweep, the links' rounds and the devices' passes sized to the time left (pure), its bad
input, its bounds, and real runs."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ddpcheck.checks.devices import fit as devices_fit
from ddpcheck.checks.links import fit as links_fit
from ddpcheck.checks.links.fit import StepCost, StepFit, fit_step
from ddpcheck.checks.sweep.fit import MIN_ITERS, Fit, budget_findings, fit_sweep
from ddpcheck.checks.sweep.sweep import time_within
from ddpcheck.errors import UsageError
from ddpcheck.launcher.budget_options import MIN_LEFT_S, BudgetOptions, bounded_timeout, refuse_if_spent
from ddpcheck.rank.budget import EXIT_S, TAIL_S, Budget
from ddpcheck.report.model import Status
from tests.conftest import assert_nothing_left, assert_usage_error

K = 1024


def projected(sizes: list[int], check_s: float, call_s: float, fit: Fit) -> float:
    """What fit_sweep's choice costs by its own model: this size's timing, then each later size whole."""
    later = sum(
        size / sizes[0] * (check_s + (fit.warmup + fit.iters) * call_s) for size in sizes[1 : fit.sizes]
    )
    return (fit.warmup + fit.iters) * call_s + later


# ---------------------------------------------------------------- the sizing, pure
def test_what_fits_runs_as_asked() -> None:
    assert fit_sweep([K, 2 * K, 4 * K], 0.01, 0.001, 2, 10, 60.0) == Fit(3, 2, 10)


def test_iterations_are_cut_before_sizes() -> None:
    # As asked: 0.102 + 2 x 0.112 + 4 x 0.112 = 0.774 s, over 0.5. Warm-up 1: 0.067 s + 0.007 s
    # per iteration for the three sizes, so 61 iterations (0.494 s), not 62 (0.501 s).
    fit = fit_sweep([K, 2 * K, 4 * K], 0.01, 0.001, 2, 100, 0.5)
    assert fit == Fit(3, 1, 61)
    assert projected([K, 2 * K, 4 * K], 0.01, 0.001, fit) <= 0.5
    assert projected([K, 2 * K, 4 * K], 0.01, 0.001, Fit(3, 1, 62)) > 0.5


def test_sizes_go_when_even_the_fewest_iterations_do_not_fit() -> None:
    # MIN_ITERS (3) and warm-up 1 over all three sizes: 0.088 s; over the first two: 0.032 s.
    assert fit_sweep([K, 2 * K, 4 * K], 0.01, 0.001, 2, 100, 0.05) == Fit(2, 1, MIN_ITERS)


def test_a_size_whose_data_was_checked_always_gets_a_figure() -> None:
    assert fit_sweep([K, 2 * K], 0.01, 0.001, 2, 100, 0.0) == Fit(1, 0, 1)
    assert fit_sweep([K, 2 * K], 0.01, 0.001, 2, 100, -5.0) == Fit(1, 0, 1)
    assert fit_sweep([K, 2 * K], 0.01, 0.001, 2, 100, 0.0025) == Fit(1, 0, 2)


def test_fewer_iterations_than_the_floor_are_never_raised() -> None:
    assert fit_sweep([K, 2 * K], 0.01, 0.001, 0, 1, 0.0105) == Fit(1, 0, 1)
    assert fit_sweep([K], 0.01, 0.001, 5, 2, 60.0) == Fit(1, 5, 2)


@settings(max_examples=60, deadline=None)
@given(
    sizes=st.lists(st.integers(1, 2**30), min_size=1, max_size=12).map(sorted),
    check_s=st.floats(0, 10),
    call_s=st.floats(1e-7, 10),
    warmup=st.integers(0, 50),
    iters=st.integers(1, 100_000),
    left=st.floats(-10, 1000),
)
def test_the_fit_never_asks_more_than_given_and_fits_unless_nothing_can(
    sizes: list[int], check_s: float, call_s: float, warmup: int, iters: int, left: float
) -> None:
    fit = fit_sweep(sizes, check_s, call_s, warmup, iters, left)
    assert 1 <= fit.sizes <= len(sizes)
    assert 0 <= fit.warmup <= warmup and 1 <= fit.iters <= iters
    last_resort = fit.sizes == 1 and fit.warmup == 0 and fit.iters <= MIN_ITERS
    assert last_resort or projected(sizes, check_s, call_s, fit) <= left * (1 + 1e-9)


# ---------------------------------------------------------------- links: the rounds, pure
COST = StepCost(exchange_s=0.01, trip_s=0.001, fixed_s=0.002)


def step_cost(steps: int, cost: StepCost, fit: StepFit, warmup: int) -> float:
    """What fit_step's choice costs by its own model: this round (warmed up), then each later one whole."""
    one = fit.iters * cost.exchange_s + fit.trips * cost.trip_s + cost.fixed_s
    return one + (steps - 1) * (one + fit.warmup * cost.exchange_s)


def test_links_rounds_that_fit_run_as_asked() -> None:
    assert fit_step(4, COST, 3, 20, 20, 60.0) == StepFit(iters=20, trips=20, warmup=3, fits=True)


def test_links_warm_up_and_iterations_are_cut_never_a_round() -> None:
    # As asked: 4 rounds of (3 + 20) x 10 ms... = 0.978 s, over 0.5. Warm-up 1: a round with n
    # iterations (and n round trips) costs 0.011 n + 0.002 s (+ 0.01 s of warm-up after the
    # first): 10 iterations (0.478 s) fit, 11 (0.522 s) do not.
    fit = fit_step(4, COST, 3, 20, 20, 0.5)
    assert fit == StepFit(iters=10, trips=10, warmup=1, fits=True)
    assert step_cost(4, COST, fit, 3) <= 0.5 < step_cost(4, COST, StepFit(11, 11, 1, True), 3)


def test_links_when_one_exchange_a_round_does_not_fit_it_says_so() -> None:
    # The rounds still run (every link measured once); the caller runs no further pass.
    assert fit_step(4, COST, 3, 20, 20, 0.05) == StepFit(iters=1, trips=1, warmup=1, fits=False)
    assert fit_step(4, COST, 0, 20, 20, -1.0) == StepFit(iters=1, trips=1, warmup=0, fits=False)


@settings(max_examples=60, deadline=None)
@given(
    steps=st.integers(1, 500),
    exchange_s=st.floats(1e-7, 1),
    trip_s=st.floats(0, 1),
    fixed_s=st.floats(0, 1),
    warmup=st.integers(0, 50),
    iters=st.integers(1, 100_000),
    trips=st.integers(1, 100_000),
    left=st.floats(-10, 1000),
)
def test_links_fit_never_asks_more_than_given_and_fits_unless_it_says_not(
    steps: int,
    exchange_s: float,
    trip_s: float,
    fixed_s: float,
    warmup: int,
    iters: int,
    trips: int,
    left: float,
) -> None:
    cost = StepCost(exchange_s, trip_s, fixed_s)
    fit = fit_step(steps, cost, warmup, iters, trips, left)
    assert 1 <= fit.iters <= iters and 1 <= fit.trips <= trips and 0 <= fit.warmup <= warmup
    if fit.fits:
        # Round trips in proportion to the iterations, rounded up.
        one = fit.iters * exchange_s + fit.trips * trip_s + fixed_s
        assert one + (steps - 1) * (one + fit.warmup * exchange_s) <= left * (1 + 1e-9) + 1e-12
    else:
        assert (fit.iters, fit.trips, fit.warmup) == (1, 1, min(warmup, 1))


# ---------------------------------------------------------------- devices: the passes, pure
def test_devices_iterations_are_cut_so_that_every_pass_fits() -> None:
    # 5 passes x 2 turns x 2 figures = 20 figures in 10 s: 0.5 s each, 50 products of 10 ms.
    assert devices_fit.fit_iters(0.01, 2, 2, 0.15, 200, 5, 10.0) == 50
    assert devices_fit.fit_iters(0.01, 2, 2, 0.15, 12, 5, 10.0) == 12  # as asked: it fits
    assert devices_fit.fit_iters(0.01, 2, 2, 0.15, 200, 5, 0.0) == 1  # at least one
    # A CPU figure lasts at least its floor: 20 figures of 0.15 s do not fit in 2 s, however few
    # the products; fewer would not shorten it, so as asked (the passes are cut after the first).
    assert devices_fit.fit_iters(0.001, 2, 2, 0.15, 12, 5, 2.0) == 12


def test_devices_passes_after_the_first_are_cut_to_fit() -> None:
    assert devices_fit.fit_passes(2.0, 4, 9.0) == 4
    assert devices_fit.fit_passes(2.0, 4, 5.0) == 2
    assert devices_fit.fit_passes(2.0, 4, 1.0) == 0
    assert devices_fit.fit_passes(2.0, 4, -3.0) == 0


def test_links_and_devices_reports_say_what_was_cut() -> None:
    account = {
        "budget_s": 20.0,
        "passes_asked": 3,
        "passes_run": 2,
        "iters_asked": 17,
        "iters_least": 4,
        "iters_most": 9,
        "warmup_asked": 3,
        "warmup_least": 1,
    }
    check, table = links_fit.budget_findings(account)
    assert check.status == Status.PASS and check.name == "budget" and table.rows == [account]
    assert check.detail == (
        "budget 20 s: every link, 2 of 3 passes, 4-9 timed exchanges of 17 a link a pass, "
        "warm-up 1 of 3 (cut to fit)"
    )
    whole = {**account, "passes_asked": 1, "passes_run": 1, "iters_least": 17, "iters_most": 17}
    check, _ = links_fit.budget_findings({**whole, "warmup_least": 3})
    assert check.detail == "budget 20 s: every link, 17 timed exchanges a link"
    assert links_fit.budget_findings(None) is None
    devices = {"budget_s": 15.0, "passes_asked": 5, "passes_run": 3, "iters_asked": 200, "iters_run": 40}
    check, table = devices_fit.budget_findings(devices)
    assert check.detail == "budget 15 s: 3 of 5 passes, 40 iters of 200 a figure (cut to fit)"
    assert table.rows == [devices]
    check, _ = devices_fit.budget_findings({**devices, "passes_run": 5, "iters_run": 200})
    assert check.detail == "budget 15 s: 5 passes, 200 iters a figure"
    assert devices_fit.budget_findings(None) is None


# ---------------------------------------------------------------- what the report says
def _account(op: str, ran: list[tuple[int, int, int]], asked: list[int], iters: int = 10) -> dict:
    return {
        "op": op,
        "skipped": None,
        "sizes": [{"size_bytes": s, "iters": i, "warmup": w} for s, i, w in ran],
        "budget": {"budget_s": 20.0, "sizes_asked": asked, "iters_asked": iters, "warmup_asked": 2},
    }


def test_the_report_says_what_was_cut_and_what_was_not() -> None:
    asked = [K, 2 * K, 4 * K, 8 * K]
    cut = _account("all_reduce", [(K, 10, 2), (2 * K, 5, 1)], asked)
    whole = _account("broadcast", [(s, 10, 2) for s in asked], asked)
    skipped = {**_account("all_to_all", [], asked), "skipped": "the gloo backend cannot run it"}
    check, table = budget_findings([cut, whole, skipped])
    assert check.status == Status.PASS and check.name == "budget"
    assert check.detail == (
        "budget 20 s: all_reduce sizes 1K-2K of 1K-8K, 5-10 iters of 10; "
        "broadcast every size (1K-8K), 10 iters (cut to fit)"
    )
    assert table.columns == {}  # the JSON's: the terminal has the check's line
    assert [(r["op"], r["sizes_run"], r["iters_least"]) for r in table.rows] == [
        ("all_reduce", 2, 5),
        ("broadcast", 4, 10),
        ("all_to_all", 0, None),
    ]
    check, _ = budget_findings([whole])
    assert check.detail == "budget 20 s: broadcast every size (1K-8K), 10 iters"
    assert budget_findings([{"op": "all_reduce", "sizes": []}]) is None  # no --budget, no check


# ---------------------------------------------------------------- the bounds, on the launcher side
class OneRank:
    """What time_within needs of a RankContext, for one rank on the CPU: it agrees with itself."""

    def __init__(self) -> None:
        self.agreements = 0

    def tick(self) -> None: ...

    def sync(self) -> None: ...

    def barrier(self) -> None: ...

    def time_calls(self, call, iters: int) -> float:
        began = time.perf_counter()
        for _ in range(iters):
            call()
        return time.perf_counter() - began

    def agree_max(self, values: list[int]) -> list[int]:
        self.agreements += 1
        return values


def test_a_timed_loop_slower_than_planned_stops_at_the_measuring_end() -> None:
    """The iterations planned from a probe are a plan: on a contended host each call can cost far
    more than the probe said (a 30 s budget's last size was still timing 15 s into its stage when
    the launcher ended the run). 10,000 calls of 1 ms planned, 0.6 s of measuring left: the loop
    stops near the end, and its figure is the calls it timed."""
    ctx = OneRank()
    budget = Budget(30.0, time.time() + 0.6 + TAIL_S)
    began = time.perf_counter()
    per_call, timed = time_within(ctx, lambda: time.sleep(0.001), 1, 10_000, budget)
    took = time.perf_counter() - began
    assert 1 <= timed < 10_000 and took < 0.6 + 0.5, (timed, took)
    assert per_call >= 0.001 and ctx.agreements < timed  # chunks of calls, not an agreement a call


def test_a_timed_loop_that_fits_runs_every_iteration_asked() -> None:
    ctx = OneRank()
    per_call, timed = time_within(ctx, lambda: None, 2, 500, Budget(30.0, time.time() + 30))
    assert timed == 500 and per_call >= 0


def test_timeout_is_bounded_by_what_the_budget_has_left() -> None:
    now = 1000.0
    budget = Budget(20.0, now + 17.0)
    assert bounded_timeout(60.0, budget, now) == 17.0
    assert bounded_timeout(5.0, budget, now) == 5.0
    assert bounded_timeout(60.0, None, now) == 60.0


def test_a_budget_already_spent_on_starting_is_refused_with_what_to_give() -> None:
    now = 1000.0
    refuse_if_spent(Budget(10.0, now + MIN_LEFT_S), now)  # just enough
    with pytest.raises(UsageError, match=r"--budget 10: 7\.0 s went on starting ddpcheck and torch"):
        refuse_if_spent(Budget(10.0, now + 3.0), now)


def test_measuring_stops_before_the_tail_and_collectives_share_what_is_left() -> None:
    now = 1000.0
    budget = Budget(30.0, now + 30.0)
    assert budget.measure_left(now) == 30.0 - TAIL_S
    third = budget.share(3, now)
    assert third.measure_left(now) == pytest.approx((30.0 - TAIL_S) / 3)
    assert third.seconds == 30.0  # the report quotes the budget given


def test_the_launcher_ends_the_run_at_the_budget_unless_rank_0_already_reported(tmp_path: Path) -> None:
    from ddpcheck.launcher.monitor import Monitor
    from ddpcheck.launcher.plan import LaunchPlan
    from ddpcheck.rank import rundir
    from ddpcheck.report.model import Report

    def watchdog(end_in_s: float) -> Monitor:
        plan = LaunchPlan(nproc=2, backend="gloo", device="cpu", budget=Budget(20.0, time.time() + end_in_s))
        return Monitor(tmp_path, plan, None)

    assert not watchdog(EXIT_S + 60)._budget_spent()
    assert watchdog(EXIT_S - 0.5)._budget_spent()
    rundir.write_rank0_report(tmp_path, Report(command="allreduce"))
    assert not watchdog(EXIT_S - 0.5)._budget_spent()  # only the teardown is late: the verdict stands


# ---------------------------------------------------------------- the command line
def test_a_budget_out_of_range_is_one_line_and_exit_2(ddpcheck, scratch) -> None:
    run = ddpcheck("allreduce", "--budget", "0")
    assert_usage_error(run, scratch)
    assert "--budget must be in (0, 86400] seconds, got 0" in run.stderr
    for value in (-5.0, 86_401.0):  # the same validate(), without another process
        with pytest.raises(UsageError, match="--budget must be in"):
            BudgetOptions(budget=value).validate()
    BudgetOptions(budget=5.0).validate()
    BudgetOptions().validate()


def test_a_budget_that_runs_out_before_any_rank_starts_is_one_line_and_exit_2(ddpcheck, scratch) -> None:
    """Starting Python and torch alone takes more than a second: the budget ends it, not the import."""
    run = ddpcheck("allreduce", "--nproc", "2", "--budget", "1")
    assert_usage_error(run, scratch)
    assert "--budget 1: it ran out while ddpcheck and torch were still starting" in run.stderr


def test_budget_is_only_for_the_commands_that_size_their_work_by_it() -> None:
    from ddpcheck.cli import _declared
    from ddpcheck.commands import COMMANDS

    takers = {name for name, c in COMMANDS.items() if "budget" in {p.name for p in _declared(c)}}
    assert takers == {"allreduce", "collectives", "links", "devices"}


def test_a_budgeted_sweep_passes_and_says_what_it_cut(ddpcheck, scratch) -> None:
    """100,000 iterations of 7 sizes take minutes: the budget cuts them, never the data check.

    The wall time is measured in tests/perf/bench_budget.py, not asserted here (a busy host).
    """
    run = ddpcheck("allreduce", "--nproc", "2", "--budget", "30", "--sizes", "1K:64K", "--iters", "100000")
    assert run.code == 0, run.stdout + run.stderr
    checks = {c["name"]: c for c in run.report["checks"]}
    assert checks["data integrity"]["status"] == "PASS"
    assert checks["budget"]["status"] == "PASS" and "(cut to fit)" in checks["budget"]["detail"]
    (row,) = run.report["tables"]["budget"]
    assert row["iters_asked"] == 100_000 and 1 <= row["iters_least"] < 100_000
    assert 1 <= row["sizes_run"] == len(run.report["tables"]["bandwidth"]) <= 7
    assert f"{row['iters_least']}" in checks["budget"]["detail"]
    assert_nothing_left(scratch, run)


def test_budgeted_links_measure_every_link_and_say_what_they_cut(ddpcheck, scratch) -> None:
    """100,000 exchanges of 8 MiB a link take many minutes: the budget cuts every pass's (and the passes),
    never a round. (Of 64 KiB, a pass's third fitted whole on an idle machine: the test must not
    depend on the machine's speed.)"""
    run = ddpcheck("links", "--nproc", "2", "--budget", "30", "--size", "8M", "--iters", "100000")
    assert run.code == 0, run.stdout + run.stderr
    checks = {c["name"]: c for c in run.report["checks"]}
    assert checks["link data"]["detail"] == "every byte of 2 transfers arrived intact"
    assert checks["budget"]["status"] == "PASS" and "(cut to fit)" in checks["budget"]["detail"]
    (row,) = run.report["tables"]["budget"]
    assert row["iters_asked"] == 33_334 and 1 <= row["iters_least"] <= row["iters_most"] < 33_334
    assert 1 <= row["passes_run"] <= row["passes_asked"] == 3
    assert f"{row['iters_least']}" in checks["budget"]["detail"]
    assert_nothing_left(scratch, run)


def test_budgeted_devices_that_fit_run_as_asked_and_say_so(ddpcheck, scratch) -> None:
    """The cutting is the pure tests'; here the real ranks agree, measure as asked and account for it."""
    run = ddpcheck("devices", "--nproc", "2", "--budget", "90", "--size", "64", "--iters", "2")
    assert run.code == 0, run.stdout + run.stderr
    checks = {c["name"]: c for c in run.report["checks"]}
    assert checks["budget"]["detail"] == "budget 90 s: 5 passes, 2 iters a figure"
    assert run.report["tables"]["budget"] == [
        {"budget_s": 90.0, "passes_asked": 5, "passes_run": 5, "iters_asked": 2, "iters_run": 2}
    ]
    assert_nothing_left(scratch, run)
