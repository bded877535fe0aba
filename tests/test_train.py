"""`ddpcheck train`: the pure judge on synthetic ranks, its helpers, and real runs of 2 and 4 gloo ranks."""

from __future__ import annotations

import math

import pytest
import torch

from ddpcheck.checks.model import DATA, INIT, build_linear, derive_seed, make_batch, mse
from ddpcheck.checks.train import TrainOptions
from ddpcheck.checks.train import check as train
from ddpcheck.checks.train import judge as verdicts
from ddpcheck.checks.train.check import Batches, fingerprint, max_abs_diff, mean_local_gradients
from ddpcheck.checks.train.faults import DIVERGE_NUDGE, fault_step
from ddpcheck.checks.train.judge import judge
from ddpcheck.errors import UsageError
from ddpcheck.report.model import Status, Verdict
from tests.conftest import assert_nothing_left, assert_usage_error, needs_gpu

OPTS = TrainOptions(steps=5, hidden=64, batch=4)
PARAMS = ["weight", "bias"]
CHECKS = [
    "rank map",
    "initial broadcast",
    "gradient synchronisation",
    "loss descent",
    "weight equality",
    "same as one big batch",
]


def identities(n: int, hosts: int = 1) -> list[dict]:
    per_host = n // hosts
    return [
        {"rank": r, "local_rank": r % per_host, "host": f"h{r // per_host}", "pid": 100 + r, "device": "cpu"}
        for r in range(n)
    ]


def rank_data(
    rank: int,
    n: int,
    steps: int = 5,
    *,
    diverge_from: int | None = None,
    nan_at: int | None = None,
    nan_rank: int | None = None,
    grad_split_at: int | None = None,
    grad_scaled: bool = False,
    bad_broadcast: bool = False,
    loss_rises: bool = False,
) -> dict:
    """What measure() returns on one rank, shaped by the fault the test wants to see."""
    nan = math.nan
    record_steps = []
    for s in range(steps):
        diverged = diverge_from is not None and s >= diverge_from
        poisoned = nan_at is not None and s >= nan_at
        loss = 1.3 + 0.1 * s if loss_rises else 1.3 - 0.1 * s + 0.01 * rank
        if nan_at is not None and (s > nan_at or (s == nan_at and rank == nan_rank)):
            loss = nan
        record = {
            "loss": loss,
            "reference_loss": 1.3 - 0.1 * s,
            "grad_fingerprint": [[s, 7]] * 2 if grad_split_at != s else [[s, 8]] * 2,
            "grad_dev": [nan, nan] if poisoned else ([1e-3, 1e-3] if grad_scaled else [1e-10, 0.0]),
            "grad_scale": [1e-3, 1e-3],
            "weight_fingerprint": [[s, 99]] * 2 if diverged else [[s, 1]] * 2,
            "weight_finite": not poisoned,
            "reference_dev": [nan, nan] if poisoned else ([DIVERGE_NUDGE, 0.0] if diverged else [1e-7, 1e-8]),
        }
        if diverge_from is not None and s in (diverge_from, steps - 1):
            record["weight_diff_from_rank0"] = [DIVERGE_NUDGE if diverged else 0.0, 0.0]
        record_steps.append(record)
    after = [[9, 9]] * 2 if bad_broadcast else [[0, 0]] * 2
    return {
        "params": PARAMS,
        "init": {
            "before": {"fingerprint": [[rank, rank]] * 2, "diff_from_rank0": [0.06 * (rank > 0), 0.0]},
            "after": {"fingerprint": after, "diff_from_rank0": [0.05 if bad_broadcast else 0.0, 0.0]},
        },
        "steps": record_steps,
        "update_scale": [5e-3, 5e-3],
        "weight_scale": [0.12, 0.12],
    }


def world(n: int, steps: int = 5, **faults_by_rank: dict) -> list[dict]:
    return [rank_data(r, n, steps, **faults_by_rank.get(f"r{r}", {})) for r in range(n)]


def by_name(report) -> dict:
    return {c.name: c for c in report.checks}


# ------------------------------------------------------------------ the judge
def test_judge_passes_clean_ranks() -> None:
    report = judge(world(4), identities(4), OPTS)
    assert [c.name for c in report.checks] == CHECKS
    assert all(c.status == Status.PASS for c in report.checks), [c.detail for c in report.checks]
    assert report.verdict == Verdict.PASS
    assert "bit for bit" in by_name(report)["weight equality"].detail
    assert {t.name for t in report.tables} == {"loss", "parity", "ranks"}


def test_weights_that_differ_from_step_3_name_that_rank_and_the_step() -> None:
    data = world(4, r2={"diverge_from": 3})
    report = judge(data, identities(4, hosts=2), OPTS)
    checks = by_name(report)
    weights = checks["weight equality"]
    assert weights.status == Status.FAIL and weights.ranks == [2] and weights.hosts == ["h1"]
    assert "rank 2 on host h1" in weights.detail and "from step 3" in weights.detail
    assert "max |difference| from rank 0 0.001 in weight" in weights.detail
    # The gradients were right until the weights parted; later steps are not held against them.
    assert checks["gradient synchronisation"].status == Status.PASS
    assert "steps 0..3" in checks["gradient synchronisation"].detail
    assert checks["loss descent"].status == Status.PASS
    # The big-batch comparison fails as a consequence and names the same rank, not every rank.
    big = checks["same as one big batch"]
    assert big.status == Status.FAIL and big.ranks == [2]
    assert "weight equality" in big.detail
    assert report.verdict == Verdict.FAIL


def test_a_nan_on_rank_1_names_rank_1_and_the_step() -> None:
    data = world(4, **{f"r{r}": {"nan_at": 2, "nan_rank": 1} for r in range(4)})
    report = judge(data, identities(4), OPTS)
    checks = by_name(report)
    loss = checks["loss descent"]
    assert loss.status == Status.FAIL and loss.ranks == [1]
    assert "at step 2 on rank 1 on host h0" in loss.detail and "nan" in loss.detail
    assert "from step 3 on every rank" in loss.detail
    assert checks["gradient synchronisation"].status == Status.PASS  # compared before the NaN only
    assert "steps 0..1" in checks["gradient synchronisation"].detail
    assert checks["weight equality"].status == Status.PASS  # equal, if non-finite
    assert "non-finite from step 2" in checks["weight equality"].detail
    assert checks["same as one big batch"].ranks == [1]
    assert {r for c in report.failing() for r in c.ranks} == {1}
    rows = next(t for t in report.tables if t.name == "loss").rows
    assert rows[2]["loss_rank1"] == "nan" and rows[2]["loss_rank0"] == pytest.approx(1.1)


@pytest.mark.parametrize("culprit", [0, 1])
def test_two_ranks_that_disagree_are_told_apart_by_the_reference(culprit: int) -> None:
    data = world(2, **{f"r{culprit}": {"diverge_from": 1}})
    report = judge(data, identities(2), OPTS)
    weights = by_name(report)["weight equality"]
    assert weights.ranks == [culprit]
    if culprit == 0:
        assert "differs from the other rank" in weights.detail


def test_a_rank_that_did_not_receive_the_broadcast_is_named() -> None:
    report = judge(world(4, r3={"bad_broadcast": True}), identities(4), OPTS)
    checks = by_name(report)
    assert checks["initial broadcast"].status == Status.FAIL
    assert checks["initial broadcast"].ranks == [3]
    assert "rank 3 on host h0: max |difference| 0.05 in weight" in checks["initial broadcast"].detail
    assert checks["weight equality"].ranks == [3]
    assert "did not start from rank 0's weights" in checks["weight equality"].detail


def test_gradients_that_differ_between_ranks_name_the_odd_rank() -> None:
    report = judge(world(4, r1={"grad_split_at": 1}), identities(4), OPTS)
    grads = by_name(report)["gradient synchronisation"]
    assert grads.status == Status.FAIL and grads.ranks == [1]
    assert "at step 0" not in grads.detail and "step 1" in grads.detail


def test_gradients_that_agree_but_are_not_the_mean_fail_on_every_rank() -> None:
    data = world(3, **{f"r{r}": {"grad_scaled": True} for r in range(3)})
    grads = by_name(judge(data, identities(3), OPTS))["gradient synchronisation"]
    assert grads.status == Status.FAIL and grads.ranks == [0, 1, 2]
    assert "at step 0" in grads.detail and "sums instead of averaging" in grads.detail


def test_a_loss_that_does_not_fall_fails_without_blaming_a_rank() -> None:
    data = world(2, **{f"r{r}": {"loss_rises": True} for r in range(2)})
    loss = by_name(judge(data, identities(2), OPTS))["loss descent"]
    assert loss.status == Status.FAIL and loss.ranks == []
    assert "gradient synchronisation before the learning rate" in loss.detail


def test_one_step_and_one_rank_pass() -> None:
    report = judge(world(1, steps=1), identities(1), TrainOptions(steps=1))
    assert report.verdict == Verdict.PASS
    assert "nothing to compare" in by_name(report)["loss descent"].detail
    assert "one rank" in by_name(report)["initial broadcast"].detail


def test_reference_tolerance_scales_with_the_update() -> None:
    data = rank_data(0, 1)
    assert verdicts.reference_tolerance(data, 0) == pytest.approx(
        verdicts.REF_RTOL * 5e-3 + verdicts.REF_ULPS * 2**-23 * 0.12
    )


# ------------------------------------------------------------------ helpers that run on every rank
def test_fingerprint_is_bit_exact() -> None:
    t = torch.randn(1000)
    assert fingerprint(t) == fingerprint(t.clone())
    bumped = t.clone()
    bumped[500] = torch.nextafter(bumped[500], torch.tensor(math.inf))
    assert fingerprint(bumped) != fingerprint(t)
    assert fingerprint(torch.tensor([0.0])) != fingerprint(torch.tensor([-0.0]))
    assert fingerprint(t.flip(0)) != fingerprint(t)  # positions count, not only the multiset
    nan_a = torch.tensor([1.0, math.nan])
    nan_b = torch.tensor([1.0, -math.nan])
    assert fingerprint(nan_a) == fingerprint(nan_b)  # any NaN is the loss check's business
    assert all(-(2**63) <= v < 2**63 for v in fingerprint(torch.full((4096,), 3e38)))


def test_fingerprint_works_in_chunks(monkeypatch) -> None:
    t = torch.randn(3000)
    whole = fingerprint(t)
    monkeypatch.setattr(train, "FINGERPRINT_CHUNK", 700)
    assert fingerprint(t) == whole


def test_max_abs_diff_reports_nan() -> None:
    assert max_abs_diff(torch.tensor([1.0, 2.0]), torch.tensor([1.0, 2.5])) == 0.5
    assert math.isnan(max_abs_diff(torch.tensor([math.nan]), torch.tensor([0.0])))


def test_every_rank_can_rebuild_every_rank_s_data_and_rank_0_s_weights() -> None:
    a = build_linear(32, derive_seed(0, 0, INIT), "cpu")
    b = build_linear(32, derive_seed(0, 0, INIT), "cpu")
    c = build_linear(32, derive_seed(0, 1, INIT), "cpu")
    assert torch.equal(a.weight, b.weight) and not torch.equal(a.weight, c.weight)
    x0, _ = make_batch(32, 4, derive_seed(0, 0, DATA), "cpu")
    x1, _ = make_batch(32, 4, derive_seed(0, 1, DATA), "cpu")
    assert not torch.equal(x0, x1)
    batches = Batches(TrainOptions(hidden=32, batch=4), 3, "cpu")
    assert torch.equal(batches.of(0)[0], x0) and torch.equal(batches.of(1)[0], x1)
    assert batches.inputs.shape == (12, 32)


def test_mean_local_gradients_is_the_global_batch_gradient() -> None:
    batches = Batches(TrainOptions(hidden=16, batch=3), 4, "cpu")
    module = build_linear(16, 1, "cpu")
    mean = mean_local_gradients(module, batches)
    assert module.weight.grad is None  # the real parameters are untouched
    loss = mse(module(batches.inputs), batches.targets)
    loss.backward()
    for got, want in zip(mean, (module.weight.grad, module.bias.grad), strict=True):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-7)


def test_faults_strike_in_the_middle() -> None:
    assert [fault_step(s) for s in (1, 2, 5, 10)] == [0, 1, 2, 5]


# ------------------------------------------------------------------ bad input
BAD = {
    "zero steps": ["--steps", "0"],
    "zero hidden": ["--hidden", "0"],
    "zero batch": ["--batch", "0"],
    "negative lr": ["--lr", "-0.1"],
    "zero lr": ["--lr", "0"],
    "nan lr": ["--lr", "nan"],
    "unknown optimizer": ["--optimizer", "adagrad"],
    "negative seed": ["--seed", "-1"],
    "zero bucket": ["--bucket-cap-mb", "0"],
    "fault of profile": ["--inject", "corrupt@1"],
    "rank outside": ["--nproc", "2", "--inject", "nan@2"],
}


@pytest.mark.parametrize("args", BAD.values(), ids=BAD.keys())
def test_bad_input_is_one_line_and_exit_2(ddpcheck, scratch, args: list[str]) -> None:
    run = ddpcheck("train", *args)
    assert_usage_error(run, scratch)


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("steps", 0, "--steps"),
        ("hidden", -3, "--hidden"),
        ("batch", 0, "--batch"),
        ("lr", -1.0, "--lr"),
        ("optimizer", "lamb", "unknown optimizer"),
    ],
)
def test_options_validate(field: str, value: object, message: str) -> None:
    with pytest.raises(UsageError, match=message):
        TrainOptions(**{field: value}).validate()


# ------------------------------------------------------------------ real runs
def test_classic_default_run_passes_on_two_ranks(ddpcheck, scratch) -> None:
    run = ddpcheck("train", "--nproc", "2")
    assert run.code == 0, run.stdout + run.stderr
    report = run.report
    assert report["verdict"] == "pass" and report["world"]["size"] == 2
    assert report["options"]["hidden"] == 1024 and report["options"]["optimizer"] == "adam"
    # The harness may add checks of its own (e.g. whether the nodes agree) after the command's.
    assert [c["name"] for c in report["checks"]][: len(CHECKS)] == CHECKS
    losses = run.table("loss")
    assert [r["step"] for r in losses] == [0, 1, 2, 3, 4]
    assert losses[-1]["mean_loss"] < losses[0]["mean_loss"]
    assert all(r["weights"] == "equal" for r in losses)
    assert len(run.table("parity")) == 2
    assert "Training loss per step" in run.stdout and "rank 1" in run.stdout and "PASS" in run.stdout
    assert "Traceback" not in run.stdout + run.stderr
    assert_nothing_left(scratch, run)


# Real launches cost seconds each here: the default optimizer passes on two ranks (above), SGD on four;
# the worlds and culprits the judge can meet are the pure tests' above.
def test_four_ranks_pass(ddpcheck, scratch) -> None:
    sgd = ("--optimizer", "sgd", "--lr", "0.5", "--steps", "3")
    run = ddpcheck("train", "--nproc", "4", "--hidden", "64", "--batch", "8", *sgd)
    assert run.code == 0, run.stdout + run.stderr
    assert run.report["world"]["size"] == 4
    assert all(c["status"] == "PASS" for c in run.report["checks"])
    assert "bit for bit" in run.check("initial broadcast")["detail"]
    assert len(run.table("loss")[0]) >= 4 + 4  # a loss column for every rank
    assert_nothing_left(scratch, run)


@pytest.mark.parametrize(("nproc", "culprit"), [(2, 1), (4, 0)])
def test_diverged_rank_is_named_exactly(ddpcheck, scratch, nproc: int, culprit: int) -> None:
    run = ddpcheck("train", "--nproc", str(nproc), "--hidden", "64", "--inject", f"diverge@{culprit}")
    assert run.code == 1, run.stdout + run.stderr
    weights = run.check("weight equality")
    assert weights["status"] == "FAIL" and weights["ranks"] == [culprit]
    assert f"rank {culprit} on host" in weights["detail"] and "from step 2" in weights["detail"]
    assert "max |difference|" in weights["detail"]
    assert {c["name"] for c in run.failing()} == {"weight equality", "same as one big batch"}
    assert all(c["ranks"] == [culprit] for c in run.failing())
    assert run.check("gradient synchronisation")["status"] == "PASS"
    assert_nothing_left(scratch, run)


@pytest.mark.parametrize(("nproc", "culprit"), [(4, 2)])
def test_nan_rank_is_named_exactly(ddpcheck, scratch, nproc: int, culprit: int) -> None:
    run = ddpcheck("train", "--nproc", str(nproc), "--hidden", "64", "--inject", f"nan@{culprit}")
    assert run.code == 1, run.stdout + run.stderr
    loss = run.check("loss descent")
    assert loss["status"] == "FAIL" and loss["ranks"] == [culprit]
    assert f"at step 2 on rank {culprit} on host" in loss["detail"]
    assert all(c["ranks"] == [culprit] for c in run.failing())
    assert run.table("loss")[2][f"loss_rank{culprit}"] == "nan"
    assert_nothing_left(scratch, run)


@needs_gpu
def test_gpu_ranks_train_correctly(ddpcheck, scratch) -> None:
    gpus = torch.cuda.device_count()
    run = ddpcheck("train", "--gpus", str(gpus))
    assert run.code == 0, run.stdout + run.stderr
    assert run.report["world"]["device"] == "cuda"
    assert_nothing_left(scratch, run)


@needs_gpu
def test_gpu_nan_is_named(ddpcheck, scratch) -> None:
    run = ddpcheck("train", "--gpus", "1", "--inject", "nan@0")
    assert run.code == 1 and run.check("loss descent")["ranks"] == [0]
