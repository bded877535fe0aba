"""The train judge's rules, pinned one by one on synthetic ranks (pure, milliseconds).

Which group of ranks is taken as right, which rank each check names, the boundaries of the
gradient and big-batch tolerances, the steps the gradients are compared at, and each detail
sentence word for word where users read it. tests/test_train.py feeds the same judge ranks
shaped by faults (and runs real ranks); tests/test_boundaries.py pins the loss descent's last
step against the first and the gradient tolerance at 0.9x, 1x and 1.1x.
"""

from __future__ import annotations

import math
from typing import Any

import pytest

from ddpcheck.checks.train import TrainOptions
from ddpcheck.checks.train.judge import (
    GRAD_RTOL,
    REF_RTOL,
    REF_ULPS,
    first_nonfinite_loss,
    judge,
    reference_tolerance,
    split_groups,
    weight_split,
)
from ddpcheck.report.model import Status
from tests.test_boundaries import _losses
from tests.test_train import OPTS, by_name, identities, world

BAD_BATCH = " (a bad batch, an overflow, or a faulty device on that rank)"
BAD_ALL_REDUCE = (
    ": the all-reduce did not reach every rank alike (a skipped hook, find_unused_parameters, or a bad link)"
)
OUTSIDE_OPTIMIZER = (
    " (a rank skipped a step, changed its weights outside the optimizer, or ran a different optimizer)"
)
SUSPECT = "; suspect gradient synchronisation before the learning rate"


def verdict(data: list[dict[str, Any]], name: str, hosts: int = 1, opts: TrainOptions = OPTS):
    """The check called `name` of the train report over these ranks."""
    return by_name(judge(data, identities(len(data), hosts), opts))[name]


def table(data: list[dict[str, Any]], name: str, hosts: int = 1):
    return next(t for t in judge(data, identities(len(data), hosts), OPTS).tables if t.name == name)


def at(data: list[dict[str, Any]], step: int, key: str, values: dict[int, Any]) -> list[dict[str, Any]]:
    """Set one field of one step on the given ranks ({rank: value})."""
    for rank, value in values.items():
        data[rank]["steps"][step][key] = value
    return data


# ------------------------------------------------------------------ the report
def test_the_report_is_train_s_with_its_tables_in_order() -> None:
    report = judge(world(2), identities(2), OPTS)
    assert report.command == "train"
    assert [t.name for t in report.tables] == ["loss", "parity", "ranks"]


# ------------------------------------------------------------------ which group is right
def test_the_first_non_finite_loss_names_every_rank_that_had_it_then() -> None:
    """Infinity counts as well as NaN; a later NaN on another rank is not part of the first step."""
    data = at(world(4), 1, "loss", {0: math.nan, 2: math.inf, 3: -math.inf})
    data = at(data, 3, "loss", {1: math.nan})
    assert first_nonfinite_loss(data) == (1, [0, 2, 3])
    assert first_nonfinite_loss(world(4)) is None


def test_the_largest_group_of_equal_fingerprints_is_right() -> None:
    assert split_groups(["a", "a", "b", "a"]) == ([0, 1, 3], [2])
    assert split_groups(["a", "b", "a", "c", "a"]) == ([0, 2, 4], [1, 3])
    assert split_groups(["a", "a", "a"]) is None


def test_a_tie_goes_to_the_group_nearer_the_reference_with_nan_farthest() -> None:
    """Closeness is the group's farthest member: one far rank makes its group the odd one."""
    assert split_groups(["a", "b"], [0.5, 0.1]) == ([1], [0])
    assert split_groups(["a", "b"], [math.nan, 1.0]) == ([1], [0])
    assert split_groups(["a", "a", "b", "b"], [0.1, 0.9, 0.5, 0.5]) == ([2, 3], [0, 1])


@pytest.mark.parametrize("closeness", [None, [0.2, 0.2, 0.2, 0.2]])
def test_a_tie_nothing_else_breaks_goes_to_the_group_holding_rank_0(closeness: list[float] | None) -> None:
    assert split_groups(["a", "b"], closeness and closeness[:2]) == ([0], [1])
    assert split_groups(["a", "b", "b", "a"], closeness) == ([0, 3], [1, 2])


def test_weights_split_at_construction_are_step_minus_1() -> None:
    assert weight_split(world(2, r1={"bad_broadcast": True})) == (-1, [0], [1])
    assert weight_split(world(4, r2={"diverge_from": 3})) == (3, [0, 1, 3], [2])
    assert weight_split(world(4)) is None


# ------------------------------------------------------------------ naming many ranks
@pytest.mark.parametrize(("nan_ranks", "more"), [(8, ""), (9, " and 1 more")])
def test_a_detail_names_eight_ranks_then_counts_the_rest(nan_ranks: int, more: str) -> None:
    data = at(world(10), 2, "loss", {r: math.nan for r in range(1, nan_ranks + 1)})
    loss = verdict(data, "loss descent", hosts=2)
    named = ", ".join(f"rank {r} on host h{r // 5}" for r in range(1, 9))
    assert (
        loss.detail
        == f"the loss turned non-finite ({', '.join(['nan'] * 8)}) at step 2 on {named}{more}{BAD_BATCH}"
    )
    assert loss.ranks == list(range(1, nan_ranks + 1)) and loss.hosts == ["h0", "h1"]


# ------------------------------------------------------------------ initial broadcast
def test_one_rank_that_missed_the_broadcast_is_named_with_its_worst_tensor() -> None:
    data = world(4, r3={"bad_broadcast": True})
    data[3]["init"]["after"]["diff_from_rank0"] = [0.05, 0.123456]
    check = verdict(data, "initial broadcast")
    assert (check.status, check.ranks) == (Status.FAIL, [3])
    assert check.detail == (
        "after DDP's construction 1 of 4 ranks does not hold rank 0's weights: rank 3 on host h0: "
        "max |difference| 0.123 in bias (was the model changed after wrapping, or built differently there?)"
    )


def test_ranks_that_missed_the_broadcast_show_eight_differences_with_nan_as_the_largest() -> None:
    data = world(10, **{f"r{r}": {"bad_broadcast": True} for r in range(1, 10)})
    data[1]["init"]["after"]["diff_from_rank0"] = [0.05, math.nan]
    check = verdict(data, "initial broadcast")
    assert check.ranks == list(range(1, 10))
    assert check.detail.startswith(
        "after DDP's construction 9 of 10 ranks do not hold rank 0's weights: "
        "rank 1 on host h0: max |difference| nan in bias; "
        "rank 2 on host h0: max |difference| 0.05 in weight; "
    )
    assert check.detail.count("max |difference|") == 8 and "rank 9" not in check.detail


def test_one_rank_has_nothing_to_broadcast() -> None:
    check = verdict(world(1), "initial broadcast")
    assert (check.status, check.detail) == (
        Status.PASS,
        "one rank: nothing to broadcast; its weights are rank 0's",
    )


def test_ranks_that_already_held_rank_0_s_weights_are_said_to() -> None:
    data = world(4)
    for rank in data:
        rank["init"]["before"]["fingerprint"] = data[0]["init"]["after"]["fingerprint"]
    check = verdict(data, "initial broadcast")
    assert check.status == Status.PASS
    assert check.detail == "all 4 ranks hold rank 0's weights bit for bit (they already did before wrapping)"


def test_ranks_that_started_from_their_own_weights_show_the_largest_start_difference() -> None:
    data = world(2)
    data[1]["init"]["before"]["diff_from_rank0"] = [0.02, 0.0712]
    check = verdict(data, "initial broadcast")
    assert check.status == Status.PASS
    assert check.detail == (
        "every other rank started from its own initialisation (up to 0.0712 from rank 0's); "
        "after DDP's construction both ranks hold rank 0's weights bit for bit"
    )


def test_some_ranks_that_started_from_their_own_weights_are_counted() -> None:
    data = world(4)
    data[2]["init"]["before"]["fingerprint"] = data[0]["init"]["after"]["fingerprint"]
    data[3]["init"]["before"]["diff_from_rank0"] = [0.5, 0.0]
    data[2]["init"]["before"]["diff_from_rank0"] = [0.9, 0.0]  # not counted: it held rank 0's already
    check = verdict(data, "initial broadcast")
    assert check.detail == (
        "2 of the 3 other ranks started from their own initialisation (up to 0.5 from rank 0's); "
        "after DDP's construction all 4 ranks hold rank 0's weights bit for bit"
    )


def test_every_other_rank_of_many_that_started_from_its_own_weights_is_its_own() -> None:
    data = world(4)
    for rank in (1, 2, 3):
        data[rank]["init"]["before"]["diff_from_rank0"] = [0.25, 0.0]
    assert verdict(data, "initial broadcast").detail.startswith(
        "every other rank started from its own initialisation (up to 0.25 from rank 0's)"
    )


def test_one_of_several_ranks_that_started_from_its_own_weights_is_its_own() -> None:
    data = world(3)
    data[2]["init"]["before"]["fingerprint"] = data[0]["init"]["after"]["fingerprint"]
    data[1]["init"]["before"]["diff_from_rank0"] = [0.25, 0.0]
    assert verdict(data, "initial broadcast").detail.startswith(
        "1 of the 2 other ranks started from its own initialisation (up to 0.25 from rank 0's)"
    )


# ------------------------------------------------------------------ gradients: identical on every rank
def test_one_rank_whose_gradients_differ_is_named_with_its_difference_from_rank_0() -> None:
    data = world(4, r1={"grad_split_at": 1})
    data[1]["steps"][1]["grad_diff_from_rank0"] = [0.001, 0.25]
    check = verdict(data, "gradient synchronisation")
    assert (check.status, check.ranks) == (Status.FAIL, [1])
    assert check.detail == (
        "after backward() at step 1, rank 1 on host h0 holds gradients that differ from the other 3 ranks; "
        f"max |difference| from rank 0 0.25 in bias.grad{BAD_ALL_REDUCE}"
    )


def test_when_rank_0_is_odd_the_first_agreeing_rank_holds_the_difference() -> None:
    """Rank 0's own difference from itself is zero: the evidence is the first agreeing rank's."""
    data = world(5, r0={"grad_split_at": 2}, r3={"grad_split_at": 2})
    at(data, 2, "grad_diff_from_rank0", {0: [0.0, 0.0], 1: [0.5, 0.125], 2: [0.7, 0.0], 3: [0.0, 0.0]})
    check = verdict(data, "gradient synchronisation")
    assert check.ranks == [0, 3]
    assert check.detail == (
        "after backward() at step 2, rank 0 on host h0, rank 3 on host h0 hold gradients that differ from "
        f"the other 3 ranks; max |difference| from rank 0 0.5 in weight.grad{BAD_ALL_REDUCE}"
    )


def test_gradients_that_differ_without_a_recorded_difference_say_so_plainly() -> None:
    check = verdict(world(2, r1={"grad_split_at": 0}), "gradient synchronisation")
    assert check.detail == (
        f"after backward() at step 0, rank 1 on host h0 holds gradients that differ from the other 1 rank"
        f"{BAD_ALL_REDUCE}"
    )


# ------------------------------------------------------------------ gradients: the mean of local gradients
def test_gradients_that_match_the_mean_pass_with_the_largest_difference_of_the_tolerance() -> None:
    data = at(world(4), 3, "grad_dev", {2: [0.0, 0.5 * GRAD_RTOL * 1e-3]})
    check = verdict(data, "gradient synchronisation")
    assert check.status == Status.PASS
    assert check.detail == (
        "after backward() the gradients are identical on all 4 ranks at all 5 steps, and equal the mean "
        "of every rank's local gradient, computed here without DDP, at steps 0..4 (largest difference "
        "0.5 of the tolerance 1e-05 x max |mean gradient|)"
    )


def test_of_two_ranks_whose_gradients_differ_the_one_farther_from_the_mean_is_named() -> None:
    """Two ranks tie one against one: the mean of local gradients decides, not rank 0's seniority."""
    data = world(2, r0={"grad_split_at": 1})
    data = at(data, 1, "grad_dev", {0: [0.0, 3e-6], 1: [1e-10, 0.0]})
    assert verdict(data, "gradient synchronisation").ranks == [0]


def test_gradients_off_the_mean_on_some_ranks_only_blame_those_ranks() -> None:
    data = world(3)
    data[2]["steps"][1]["grad_scale"] = [1e-3, 4e-3]
    data[2]["steps"][1]["grad_dev"] = [1e-8, 1.2345e-7]
    check = verdict(data, "gradient synchronisation", hosts=3)
    assert check.ranks == [2] and check.hosts == ["h2"]
    assert check.detail == (
        "at step 1 the synchronised gradient is not the mean of the ranks' local gradients "
        "(tolerance 1e-05 x scale): rank 2 on host h2: max |difference| 1.23e-07 in bias.grad (scale 0.004); "
        "these ranks' averaged gradients are wrong while others' are right"
    )


def test_a_tensor_with_no_gradient_at_all_counts_as_no_difference() -> None:
    """A gradient of scale 0 is within tolerance when exactly equal; it does not count towards the largest."""
    data = world(2)
    for rank in data:
        for step in rank["steps"]:
            step["grad_scale"] = [0.0, 1e-3]
            step["grad_dev"] = [0.0, 0.25 * GRAD_RTOL * 1e-3]
    check = verdict(data, "gradient synchronisation")
    assert check.status == Status.PASS
    assert "(largest difference 0.25 of the tolerance" in check.detail


def test_gradients_off_the_mean_on_every_rank_name_each_with_its_worst_tensor_and_its_scale() -> None:
    data = world(10)
    for r, rank in enumerate(data):
        rank["steps"][0]["grad_scale"] = [1e-3, 2e-3]
        rank["steps"][0]["grad_dev"] = [1e-3, 0.5 + r]
    check = verdict(data, "gradient synchronisation")
    assert check.ranks == list(range(10))
    parts = "; ".join(
        f"rank {r} on host h0: max |difference| {0.5 + r:.3g} in bias.grad (scale 0.002)" for r in range(8)
    )
    assert check.detail == (
        "at step 0 the synchronised gradient is not the mean of the ranks' local gradients "
        f"(tolerance 1e-05 x scale): {parts}; every rank agrees but not with the mean: "
        "the reduction sums instead of averaging, or a rank's contribution is missing or scaled"
    )


def test_gradients_are_compared_with_the_mean_up_to_the_step_the_weights_part() -> None:
    """At the step where the weights part they were still equal going in; from the next, not."""
    off = 2 * GRAD_RTOL * 1e-3
    caught = verdict(
        at(world(4, r2={"diverge_from": 2}), 2, "grad_dev", {1: [off, 0.0]}), "gradient synchronisation"
    )
    assert (caught.status, caught.ranks) == (Status.FAIL, [1])
    assert caught.detail.startswith("at step 2 the synchronised gradient is not the mean")
    passed = verdict(
        at(world(4, r2={"diverge_from": 2}), 3, "grad_dev", {1: [off, 0.0]}), "gradient synchronisation"
    )
    assert passed.status == Status.PASS
    assert passed.detail.endswith(
        "at steps 0..2 (largest difference 0.01 of the tolerance 1e-05 x max |mean gradient|); "
        "from step 3 not compared with the mean: the weights of rank 2 on host h0 already differed "
        "(see weight equality)"
    )


def test_a_loss_non_finite_only_at_the_last_step_still_says_why_that_step_was_not_compared() -> None:
    check = verdict(at(world(2), 4, "loss", {1: math.nan}), "gradient synchronisation")
    assert check.detail.endswith(
        "at steps 0..3 (largest difference 0.01 of the tolerance 1e-05 x max |mean gradient|); "
        "from step 4 not compared with the mean: the loss of rank 1 on host h0 was non-finite "
        "(see loss descent)"
    )


def test_gradients_are_compared_with_the_mean_up_to_the_step_before_a_non_finite_loss() -> None:
    off = 2 * GRAD_RTOL * 1e-3
    data = at(world(2), 2, "loss", {1: math.nan})
    caught = verdict(at(data, 1, "grad_dev", {0: [off, 0.0]}), "gradient synchronisation")
    assert (caught.status, caught.ranks) == (Status.FAIL, [0])
    data = at(world(2), 2, "loss", {1: math.nan})
    passed = verdict(at(data, 2, "grad_dev", {0: [off, 0.0]}), "gradient synchronisation")
    assert passed.status == Status.PASS
    assert passed.detail.endswith(
        "at steps 0..1 (largest difference 0.01 of the tolerance 1e-05 x max |mean gradient|); "
        "from step 2 not compared with the mean: the loss of rank 1 on host h0 was non-finite "
        "(see loss descent)"
    )


@pytest.mark.parametrize(("nan_at", "compared"), [(1, ", and equal the mean"), (0, "")])
def test_a_loss_non_finite_from_step_0_leaves_nothing_to_compare_with_the_mean(
    nan_at: int, compared: str
) -> None:
    check = verdict(at(world(2), nan_at, "loss", {1: math.nan}), "gradient synchronisation")
    assert check.status == Status.PASS
    head = "after backward() the gradients are identical on both ranks at all 5 steps"
    assert check.detail.startswith(head + compared)
    if nan_at == 1:
        assert "at steps 0..0 (largest difference 0.01 of the tolerance" in check.detail
    else:
        assert check.detail == (
            f"{head}; from step 0 not compared with the mean: the loss of rank 1 on host h0 was non-finite "
            "(see loss descent)"
        )


@pytest.mark.parametrize(("nan_at", "reason"), [(3, "the loss of rank 1"), (4, "the weights of rank 2")])
def test_the_first_of_a_parting_and_a_non_finite_loss_is_given_as_the_reason(
    nan_at: int, reason: str
) -> None:
    """Weights part after step 2; a NaN at step 3 stops the comparison at step 2 too, one at step 4 later."""
    data = at(world(4, r2={"diverge_from": 2}), nan_at, "loss", {1: math.nan})
    check = verdict(data, "gradient synchronisation")
    assert check.status == Status.PASS
    assert (
        "at steps 0..2 (largest difference 0.01 of the tolerance 1e-05 x max |mean gradient|); "
        f"from step 3 not compared with the mean: {reason} on host h0" in check.detail
    )


# ------------------------------------------------------------------ loss descent
def test_a_loss_non_finite_on_one_rank_then_on_every_rank_names_that_rank_and_both_steps() -> None:
    data = world(4, **{f"r{r}": {"nan_at": 2, "nan_rank": 1} for r in range(4)})
    check = verdict(data, "loss descent")
    assert check.detail == (
        "the loss turned non-finite (nan) at step 2 on rank 1 on host h0; from step 3 on every rank: the "
        f"gradient all-reduce spread it{BAD_BATCH}"
    )


def test_the_spread_is_dated_at_the_first_step_every_rank_is_non_finite() -> None:
    data = at(world(3), 2, "loss", {1: math.inf})
    data = at(data, 3, "loss", {1: math.nan, 2: math.nan})
    data = at(data, 4, "loss", {0: math.nan, 1: math.nan, 2: math.nan})
    check = verdict(data, "loss descent")
    assert (check.status, check.ranks) == (Status.FAIL, [1])
    assert check.detail == (
        "the loss turned non-finite (inf) at step 2 on rank 1 on host h0; from step 4 on every rank: the "
        f"gradient all-reduce spread it{BAD_BATCH}"
    )


def test_every_rank_non_finite_at_once_dates_the_spread_from_the_next_step() -> None:
    data = at(world(2), 3, "loss", {0: math.nan, 1: math.inf})
    data = at(data, 4, "loss", {0: math.nan, 1: math.nan})
    check = verdict(data, "loss descent")
    assert check.ranks == [0, 1]
    assert check.detail == (
        "the loss turned non-finite (nan, inf) at step 3 on rank 0 on host h0, rank 1 on host h0; "
        f"from step 4 on every rank: the gradient all-reduce spread it{BAD_BATCH}"
    )


def test_one_step_has_no_descent_to_judge() -> None:
    check = verdict(_losses(world(2, steps=1), [1.23456]), "loss descent", opts=TrainOptions(steps=1))
    assert (check.status, check.detail) == (
        Status.PASS,
        "finite on every rank (1.2346); one step: nothing to compare",
    )


def test_a_falling_mean_loss_passes_with_its_first_and_last_value() -> None:
    check = verdict(world(2), "loss descent")
    assert check.status == Status.PASS
    assert (
        check.detail
        == "finite on every rank at every step; the mean loss fell from 1.3050 at step 0 to 0.9050 at step 4"
    )


def test_a_loss_that_ends_below_step_1_but_above_step_0_did_not_fall() -> None:
    check = verdict(_losses(world(2), [1.3, 1.5, 1.45, 1.42, 1.4]), "loss descent")
    assert check.status == Status.FAIL


def test_the_ranks_whose_last_loss_is_not_below_their_first_are_named() -> None:
    """Rank 1 ends where it began (named); rank 0 ends below its start after rising in between (not)."""
    data = world(3)
    for rank, losses in enumerate(
        [[1.0, 1.1, 0.8, 1.5, 0.9], [1.0, 1.2, 1.1, 0.9, 1.0], [1.0, 1.5, 1.6, 1.7, 1.3]]
    ):
        for step, loss in zip(data[rank]["steps"], losses, strict=True):
            step["loss"] = loss
    check = verdict(data, "loss descent")
    assert (check.status, check.ranks) == (Status.FAIL, [1, 2])
    assert check.detail == (
        "the mean loss did not fall: 1.0000 at step 0, 1.0667 at step 4 (it rose on rank 1 on host h0, "
        f"rank 2 on host h0){SUSPECT}"
    )


def test_a_loss_that_rose_on_every_rank_names_none() -> None:
    check = verdict(world(2, **{f"r{r}": {"loss_rises": True} for r in range(2)}), "loss descent")
    assert check.detail == f"the mean loss did not fall: 1.3000 at step 0, 1.7000 at step 4{SUSPECT}"


# ------------------------------------------------------------------ weight equality
@pytest.mark.parametrize(
    ("ranks", "steps", "text"),
    [
        (4, 5, "after all 5 steps, all 4 ranks hold the same weights, bit for bit"),
        (1, 1, "after the one step, the one rank holds the same weights, bit for bit"),
    ],
)
def test_equal_weights_pass_bit_for_bit(ranks: int, steps: int, text: str) -> None:
    check = verdict(world(ranks, steps=steps), "weight equality", opts=TrainOptions(steps=steps))
    assert (check.status, check.detail) == (Status.PASS, text)


def test_equal_weights_that_one_rank_saw_turn_non_finite_say_from_when() -> None:
    data = at(world(3), 2, "weight_finite", {1: False})
    data = at(data, 3, "weight_finite", {1: False, 2: False})
    check = verdict(data, "weight equality")
    assert check.detail == (
        "after all 5 steps, all 3 ranks hold the same weights, bit for bit "
        "(non-finite from step 2: see loss descent)"
    )


def test_a_rank_that_did_not_start_from_rank_0_s_weights_is_sent_to_the_broadcast() -> None:
    check = verdict(world(4, r3={"bad_broadcast": True}), "weight equality")
    assert (check.status, check.ranks) == (Status.FAIL, [3])
    assert check.detail == "rank 3 on host h0 did not start from rank 0's weights (see initial broadcast)"


def test_weights_that_part_at_step_0_show_the_first_and_the_last_difference() -> None:
    data = world(4, r2={"diverge_from": 0})
    data[2]["steps"][0]["weight_diff_from_rank0"] = [0.001, 0.0]
    data[2]["steps"][4]["weight_diff_from_rank0"] = [0.002, 0.004]
    check = verdict(data, "weight equality")
    assert (check.status, check.ranks) == (Status.FAIL, [2])
    assert check.detail == (
        "rank 2 on host h0 differs from rank 0 from step 0 on: max |difference| from rank 0 0.001 in weight "
        f"after step 0, 0.004 after step 4{OUTSIDE_OPTIMIZER}"
    )


def test_weights_that_part_at_the_last_step_show_one_difference() -> None:
    check = verdict(world(4, r1={"diverge_from": 4}), "weight equality")
    assert check.detail == (
        f"rank 1 on host h0 differs from rank 0 from step 4 on: max |difference| from rank 0 0.001 in weight "
        f"after step 4{OUTSIDE_OPTIMIZER}"
    )


def test_when_rank_0_parts_from_one_other_rank_that_rank_holds_the_difference() -> None:
    """Two ranks: the reference decides rank 0 is odd; its own difference from itself is empty."""
    data = world(2, r0={"diverge_from": 1})
    for record in data[0]["steps"]:
        record.pop("weight_diff_from_rank0", None)
    data[1]["steps"][1]["weight_diff_from_rank0"] = [0.0, 0.003]
    data[1]["steps"][4]["weight_diff_from_rank0"] = [0.006, 0.0]
    check = verdict(data, "weight equality")
    assert check.ranks == [0]
    assert check.detail == (
        "rank 0 on host h0 differs from the other rank from step 1 on: max |difference| from rank 0 0.003 "
        f"in bias after step 1, 0.006 after step 4{OUTSIDE_OPTIMIZER}"
    )


def test_weights_that_part_without_a_recorded_difference_say_so_plainly() -> None:
    data = world(4, r2={"diverge_from": 3})
    for record in data[2]["steps"]:
        record.pop("weight_diff_from_rank0", None)
    check = verdict(data, "weight equality")
    assert check.detail == f"rank 2 on host h0 differs from rank 0 from step 3 on{OUTSIDE_OPTIMIZER}"


def test_when_rank_0_parts_from_the_others_they_are_said_to_agree() -> None:
    check = verdict(world(4, r0={"diverge_from": 2}), "weight equality")
    assert check.ranks == [0]
    assert check.detail.startswith(
        "rank 0 on host h0 differs from the other 3 ranks, which agree, from step 2 on"
    )


def test_two_ranks_that_part_from_rank_0_differ() -> None:
    check = verdict(world(5, r1={"diverge_from": 2}, r3={"diverge_from": 2}), "weight equality", hosts=2)
    assert check.ranks == [1, 3] and check.hosts == ["h0", "h1"]
    assert check.detail.startswith("rank 1 on host h0, rank 3 on host h1 differ from rank 0 from step 2 on: ")


# ------------------------------------------------------------------ same as one big batch
def _reference(data: list[dict[str, Any]], devs: dict[int, list[float]]) -> list[dict[str, Any]]:
    """Each rank's distance from its single-process reference after the last step ({rank: per tensor})."""
    return at(data, -1, "reference_dev", devs)


def test_matching_the_big_batch_shows_the_worst_rank_and_tensor_by_their_tolerance() -> None:
    """Rank 2's bias is off by less than rank 3's weight, but by more of its own (tighter) tolerance."""
    data = world(4)
    data[2]["update_scale"] = [5e-3, 1e-3]
    data = _reference(data, {2: [2e-4, 9e-5], 3: [4e-4, 0.0]})
    check = verdict(data, "same as one big batch")
    assert check.status == Status.PASS
    tol = reference_tolerance(data[2], 1)
    assert check.detail == (
        "after 5 steps every rank's weights match one process trained on the 16-row global batch: max "
        f"|difference| 9e-05 in bias (tolerance {tol:.2g}: 0.1 of the update, 8 ulps of the weights)"
    )


def test_after_one_step_the_step_is_singular() -> None:
    check = verdict(world(2, steps=1), "same as one big batch", opts=TrainOptions(steps=1, batch=3))
    assert check.detail.startswith("after 1 step every rank's weights match one process trained on the 6-row")


def test_a_tensor_that_cannot_move_does_not_hide_another_rank_s_difference() -> None:
    """A tensor with no update and no weight has tolerance 0: exactly equal, it is no rank's worst."""
    data = world(2)
    data[1]["update_scale"] = [0.0, 5e-3]
    data[1]["weight_scale"] = [0.0, 0.12]
    data = _reference(data, {0: [2.5e-4, 0.0], 1: [0.0, 0.0]})
    check = verdict(data, "same as one big batch")
    assert check.status == Status.PASS
    assert "max |difference| 0.00025 in weight (tolerance 0.0005:" in check.detail


def test_a_tensor_that_cannot_move_but_did_is_the_worst() -> None:
    data = world(2)
    data[1]["update_scale"] = [5e-3, 0.0]
    data[1]["weight_scale"] = [0.12, 0.0]
    data = _reference(data, {1: [4e-4, 1e-12]})
    check = verdict(data, "same as one big batch")
    assert (check.status, check.ranks) == (Status.FAIL, [1])
    assert "rank 1 on host h0: max |difference| 1e-12 in bias (tolerance 0);" in check.detail


@pytest.mark.parametrize(
    ("times_tolerance", "status"), [(1.0, Status.PASS), (1.001, Status.FAIL), (0.999, Status.PASS)]
)
def test_the_big_batch_is_judged_at_its_tolerance(times_tolerance: float, status: Status) -> None:
    """A looser tolerance (REF_RTOL or REF_ULPS 1000x) would pass the 1.001x difference."""
    data = world(3)
    tol = reference_tolerance(data[1], 0)
    assert tol == REF_RTOL * 5e-3 + REF_ULPS * 2**-23 * 0.12
    check = verdict(_reference(data, {1: [times_tolerance * tol, 0.0]}), "same as one big batch")
    assert check.status == status
    if status == Status.FAIL:
        assert check.ranks == [1]


def test_every_rank_off_the_big_batch_alone_blames_the_averaging() -> None:
    data = _reference(world(10), {r: [1e-3, 2e-3 + r * 1e-3] for r in range(10)})
    check = verdict(data, "same as one big batch", hosts=2)
    assert check.ranks == list(range(10))
    evidence = "; ".join(
        f"rank {r} on host h{r // 5}: max |difference| {2e-3 + r * 1e-3:.3g} in bias (tolerance 0.0005)"
        for r in range(8)
    )
    assert check.detail == (
        "after 5 steps the DDP weights differ from one process trained on the 40-row global batch: "
        f"{evidence}; every rank agrees with the others but not with large-batch training: "
        "the gradients are not averaged over the global batch (a rank's data or scaling differs)"
    )


def test_some_ranks_off_the_big_batch_alone_are_named() -> None:
    check = verdict(_reference(world(4), {2: [1e-3, 0.0]}), "same as one big batch")
    assert check.ranks == [2]
    assert check.detail == (
        "after 5 steps the DDP weights differ from one process trained on the 16-row global batch: "
        "rank 2 on host h0: max |difference| 0.001 in weight (tolerance 0.0005); "
        "these ranks' training departs from large-batch training"
    )


def test_off_the_big_batch_after_a_named_failure_names_its_ranks() -> None:
    check = verdict(world(4, r2={"diverge_from": 3}), "same as one big batch")
    assert check.ranks == [2]
    assert check.detail.endswith(
        "(tolerance 0.0005); a consequence of the weight equality failure of rank 2 on host h0"
    )


def test_a_failure_that_names_no_rank_is_not_the_cause() -> None:
    """The loss rose everywhere (a failure naming nobody): the big batch names its own ranks."""
    data = world(2, **{f"r{r}": {"loss_rises": True} for r in range(2)})
    check = verdict(_reference(data, {0: [1e-3, 0.0], 1: [1e-3, 0.0]}), "same as one big batch")
    assert check.ranks == [0, 1] and "every rank agrees with the others" in check.detail


def test_a_bad_rank_map_is_not_the_cause() -> None:
    ids = identities(4, hosts=2)
    ids[3]["local_rank"] = 7
    report = judge(_reference(world(4), {1: [1e-3, 0.0]}), ids, OPTS)
    assert by_name(report)["rank map"].status == Status.FAIL
    check = by_name(report)["same as one big batch"]
    assert check.ranks == [1] and check.detail.endswith(
        "these ranks' training departs from large-batch training"
    )


@pytest.mark.parametrize(("step", "key"), [(0, "grad_dev"), (-1, "reference_dev")])
def test_a_rank_with_a_figure_missing_for_a_tensor_is_an_error_not_a_verdict(step: int, key: str) -> None:
    """Every tensor's figures are zipped strictly: a short list must not drop the tensors left over.

    (Rank 0's gradient off the mean at step 1 would be a verdict if rank 1's step 0 were let through.)
    """
    data = at(world(2), step, key, {1: [0.0]})
    data = at(data, 1, "grad_dev", {0: [1.0, 0.0]}) if key == "grad_dev" else data
    with pytest.raises(ValueError, match="zip"):
        judge(data, identities(2), OPTS)


# ------------------------------------------------------------------ tables
def test_the_loss_table_has_a_row_per_step_rounded_and_marks_where_weights_differ() -> None:
    data = world(5, r2={"diverge_from": 3}, r4={"diverge_from": 4})
    at(data, 1, "loss", {0: 1.23456789})
    at(data, 1, "reference_loss", {0: 1.11111111, 1: 9.0})
    at(data, 1, "grad_dev", {3: [1.234567891234e-5, 0.0]})
    at(data, 1, "reference_dev", {4: [0.0, 2.345678912345e-4]})
    loss = table(data, "loss")
    assert loss.columns == {
        "step": "Step",
        "mean_loss": "mean",
        "reference_loss": "1 process",
        **{f"loss_rank{r}": f"rank {r}" for r in range(4)},
        "weights": "weights",
    }
    assert loss.title == (
        "Training loss per step (each rank's local loss; 1 process = the global batch in one process; "
        "ranks 4 to 4 in --json)"
    )
    assert loss.rows[1] == {
        "step": 1,
        "loss": 1.2346,
        "mean_loss": round((1.23456789 + 1.21 + 1.22 + 1.23 + 1.24) / 5, 4),
        "reference_loss": 1.1111,
        **{f"loss_rank{r}": v for r, v in enumerate([1.2346, 1.21, 1.22, 1.23, 1.24])},
        "weights": "equal",
        "max_grad_dev": 1.2346e-05,
        "max_reference_dev": 0.000234568,
    }
    assert [row["weights"] for row in loss.rows] == ["equal"] * 3 + ["rank 2 differs"] * 2


def test_the_loss_table_says_which_ranks_differ_and_fits_four_rank_columns() -> None:
    data = world(4, r1={"bad_broadcast": True}, r2={"bad_broadcast": True})
    data = at(data, 0, "loss", {3: math.nan})
    loss = table(data, "loss")
    assert [row["weights"] for row in loss.rows] == ["ranks 1, 2 differ"] * 5
    assert loss.rows[0]["loss_rank3"] == "nan" and loss.rows[0]["mean_loss"] == "nan"
    assert (
        loss.title
        == "Training loss per step (each rank's local loss; 1 process = the global batch in one process)"
    )


def test_the_parity_table_marks_each_rank_each_check_names() -> None:
    data = world(4, r3={"bad_broadcast": True}, r1={"grad_split_at": 1})
    data = at(data, 2, "loss", {2: math.nan})
    data = _reference(data, {0: [1.23456789e-4, 0.0], 3: [1e-3, 0.0]})
    data = at(data, -1, "loss", {1: 0.123456789})
    parity = table(data, "parity", hosts=2)
    assert parity.columns == {
        "rank": "rank",
        "host": "host",
        "broadcast": "broadcast",
        "gradients": "gradients",
        "loss": "loss",
        "weights": "weights",
        "big_batch": "1 process",
        "max_reference_dev": "max dev",
    }
    assert (
        parity.title
        == "Per rank: which checks name it (max dev = max |w - 1 process's w| after the last step)"
    )
    fail = {0: (), 1: ("gradients",), 2: ("loss",), 3: ("broadcast", "weights", "big_batch")}
    checks = ("broadcast", "gradients", "loss", "weights", "big_batch")
    assert parity.rows == [
        {
            "rank": r,
            "host": f"h{r // 2}",
            **{c: "FAIL" if c in fail[r] else "PASS" for c in checks},
            "max_reference_dev": [0.000123457, 1e-7, 1e-7, 0.001][r],
            "final_loss": [0.9, 0.1235, 0.92, 0.93][r],
        }
        for r in range(4)
    ]
