"""`ddpcheck collectives`: the definitions, who sent a wrong block, and real runs of 2, 3 and 4 gloo ranks."""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from ddpcheck.checks.collectives import COLLECTIVES, CollectivesOptions
from ddpcheck.checks.collectives.check import judge
from ddpcheck.checks.sweep import sweep
from ddpcheck.checks.sweep.judge import attribute
from ddpcheck.checks.sweep.ops import OPS
from ddpcheck.checks.sweep.ops.roots import ROOTS_PER_SIZE, roots_for
from ddpcheck.checks.sweep.pattern import Pattern, block_values
from ddpcheck.report.units import human_bytes
from tests.conftest import assert_nothing_left, assert_usage_error, needs_gpu

SIZES = (1024, 2048)


def identities(n: int, hosts: int = 1) -> list[dict[str, Any]]:
    per_host = max(1, n // hosts)
    return [
        {"rank": r, "local_rank": r % per_host, "host": f"h{r // per_host}", "pid": 100 + r, "device": "cpu"}
        for r in range(n)
    ]


def op_data(name: str, n: int, wrong: dict[tuple[int, int], int] | None = None) -> list[dict[str, Any]]:
    """Every rank's account of one collective; `wrong` maps (sender, receiver) to wrong elements."""
    op = OPS[name]
    per_rank = []
    for receiver in range(n):
        rows = []
        for i, size in enumerate(SIZES):
            count = op.count(size, 4, n)
            wrong_from = {s: c for (s, k), c in (wrong or {}).items() if k == receiver}
            rows.append(
                {
                    "size_bytes": count * 4,
                    "count": count,
                    "seconds": 1e-3,
                    "wrong": sum(wrong_from.values()),
                    "wrong_from": wrong_from,
                    "variants": op.variants(n, i),
                }
            )
        per_rank.append({"op": name, "skipped": None, "sizes": rows, "culprits": [], "unlocalised": False})
    return per_rank


def observed_pairs(name: str, n: int) -> set[tuple[int, int]]:
    op = OPS[name]
    return {
        (s, k)
        for i in range(len(SIZES))
        for v in op.variants(n, i)
        for s in op.senders(n, v)
        for k in op.observers(s, n, v)
    }


BLOCKED = ("all_gather", "reduce_scatter", "all_to_all")  # buffers of one block per rank
MOVERS = [name for name in COLLECTIVES if not OPS[name].reduces]


# ------------------------------------------------------------------ definitions
def test_every_collective_runs_in_the_order_the_command_promises() -> None:
    order = ("all_reduce", "all_gather", "reduce_scatter", "broadcast", "reduce", "all_to_all", "sendrecv")
    assert order == COLLECTIVES
    assert all(OPS[name].name == name for name in order)


@pytest.mark.parametrize(
    ("name", "factor_at_4"),
    [
        ("all_reduce", 1.5),
        ("all_gather", 0.75),
        ("reduce_scatter", 0.75),
        ("all_to_all", 0.75),
        ("broadcast", 1.0),
        ("reduce", 1.0),
        ("sendrecv", 1.0),
    ],
)
def test_bus_factors_follow_nccl_tests(name: str, factor_at_4: float) -> None:
    assert OPS[name].bus_factor(4) == factor_at_4


def test_sizes_split_into_whole_blocks_per_rank() -> None:
    # nccl-tests' convention: the size is the whole buffer (all_gather: the output).
    assert OPS["all_gather"].count(1024, 4, 3) == 255
    assert OPS["reduce_scatter"].count(4, 4, 4) == 4  # at least one element per rank
    assert OPS["all_reduce"].count(1024, 4, 3) == 256
    assert human_bytes(1020) == "1020B" and human_bytes(4096) == "4K"


def test_every_root_is_checked_on_small_worlds_and_all_in_turn_on_large_ones() -> None:
    assert roots_for(4, 0) == [0, 1, 2, 3]
    seen = {r for i in range(10) for r in roots_for(64, i)}
    assert all(0 in roots_for(64, i) and len(roots_for(64, i)) == ROOTS_PER_SIZE for i in range(10))
    assert len(seen) == 64  # a sweep of 10 sizes visits every root of 64


def test_blocks_differ_by_sender_and_receiver_and_stay_exact_in_bfloat16() -> None:
    # A receiver tells every sender's block apart, even 251 ranks apart (a world of 1,000);
    # a sender's blocks differ for every receiver.
    assert len({tuple(block_values(s, 3)) for s in range(1000)}) == 1000
    assert len({tuple(block_values(7, d)) for d in range(200)}) == 200
    assert max(max(block_values(s, d)) for s in (0, 250, 251, 999) for d in (0, 15, 999)) < 256


def test_reduce_scatter_expects_each_rank_its_own_shifted_block() -> None:
    pattern = Pattern.for_world(3, "float32")
    whole = pattern.expected()
    assert pattern.expected(offset=5) == whole[5:] + whole[:5]


# ------------------------------------------------------------------ attribution (pure)
@pytest.mark.parametrize("name", MOVERS)
@pytest.mark.parametrize("n", [3, 4])
@pytest.mark.parametrize("own_copy", [True, False], ids=["bad-at-the-source", "bad-on-the-wire"])
def test_a_bad_sender_is_named(name: str, n: int, own_copy: bool) -> None:
    # Bad at the source (a GPU's memory, an injected corruption), its own copy is wrong too;
    # bad on the wire (its NIC), only what crossed a link is.
    bad = n - 1
    wrong = {(s, k): 7 for s, k in observed_pairs(name, n) if s == bad and (own_copy or k != s)}
    found = attribute(name, op_data(name, n, wrong))
    assert (found.senders, found.receivers, found.links) == ([bad], [], [])


@pytest.mark.parametrize("name", ["all_gather", "all_to_all", "broadcast"])  # those with a local copy
def test_a_rank_whose_own_copy_alone_is_wrong_is_a_bad_sender_even_with_two_ranks(name: str) -> None:
    assert (1, 1) in observed_pairs(name, 2)
    assert attribute(name, op_data(name, 2, {(1, 1): 3})).senders == [1]


@pytest.mark.parametrize("name", ["all_gather", "all_to_all", "sendrecv", "broadcast"])
@pytest.mark.parametrize("n", [3, 4])
def test_a_bad_receiver_is_named(name: str, n: int) -> None:
    # What crossed a link to rank 1 is wrong; its own block, which never left it, is right.
    wrong = {(s, k): 3 for s, k in observed_pairs(name, n) if k == 1 and s != 1}
    found = attribute(name, op_data(name, n, wrong))
    assert (found.senders, found.receivers, found.links) == ([], [1], [])


@pytest.mark.parametrize("name", ["all_gather", "all_to_all", "sendrecv"])
def test_a_bad_link_is_named_by_both_ends(name: str) -> None:
    found = attribute(name, op_data(name, 4, {(2, 3): 5}))
    assert (found.senders, found.receivers, found.links) == ([], [], [(2, 3)])
    report = judge(
        [{"ops": [d]} for d in op_data(name, 4, {(2, 3): 5})], identities(4, hosts=2), options(name)
    )
    check = next(c for c in report.checks if c.name == name)
    assert check.status.value == "FAIL" and check.ranks == [2, 3] and check.links == [[2, 3]]
    assert "rank 2 on host h1 -> rank 3 on host h1" in check.detail


def test_two_ranks_cannot_tell_a_bad_sender_from_a_bad_receiver_in_a_ring() -> None:
    report = judge(
        [{"ops": [d]} for d in op_data("sendrecv", 2, {(1, 0): 4})], identities(2), options("sendrecv")
    )
    check = report.checks[1]
    assert check.ranks == [0, 1] and check.links == [[1, 0]]
    assert "cannot tell a bad sender from a bad receiver" in check.detail


def test_everything_wrong_everywhere_blames_the_collective_not_a_rank() -> None:
    wrong = {pair: 1 for pair in observed_pairs("all_gather", 3)}
    report = judge(
        [{"ops": [d]} for d in op_data("all_gather", 3, wrong)], identities(3), options("all_gather")
    )
    assert "the collective itself fails" in report.checks[1].detail


def options(*ops: str, **kw: Any) -> CollectivesOptions:
    return CollectivesOptions(ops=list(ops), min_bytes=1024, max_bytes=2048, iters=2, warmup=1, **kw)


def test_judge_passes_clean_data_and_keeps_one_bandwidth_table_for_json() -> None:
    names = list(COLLECTIVES)
    data = [{"ops": [op_data(name, 3)[r] for name in names]} for r in range(3)]
    report = judge(data, identities(3), options(*names))
    assert report.verdict.value == "pass"
    assert [c.name for c in report.checks] == ["rank map", *names]
    table = report.table("bandwidth")
    assert table.group_by == "op" and next(t for t, _ in table.groups()).startswith("all_reduce bandwidth")
    assert {(r["op"], r["size_bytes"]) for r in table.rows} >= {("all_reduce", 1024), ("sendrecv", 2048)}
    assert [r["op"] for r in report.table("summary").rows] == names


def test_judge_skips_what_could_not_run_and_fails_a_slow_peak() -> None:
    skipped = {"op": "sendrecv", "skipped": "needs at least 2 ranks", "sizes": [], "culprits": []}
    data = [{"ops": [op_data("all_gather", 2)[r], skipped]} for r in range(2)]
    report = judge(data, identities(2), options("all_gather", "sendrecv", min_busbw=5.0))
    gather, ring = report.checks[1], report.checks[2]
    assert gather.status.value == "FAIL" and "below --min-busbw 5" in gather.detail
    assert ring.status.value == "SKIP" and "needs at least 2 ranks" in ring.detail


def test_judge_names_the_localised_rank_of_a_reduction() -> None:
    data = op_data("reduce_scatter", 4, {(0, r): 3 for r in range(4)})
    data[0].update(culprits=[2])
    report = judge([{"ops": [d]} for d in data], identities(4, hosts=2), options("reduce_scatter"))
    check = report.checks[1]
    assert check.status.value == "FAIL" and check.ranks == [2] and check.hosts == ["h1"]
    assert "rank 2 on host h1 makes the sum wrong" in check.detail


class _Refusing:
    """A stand-in collective whose backend refuses it, or fails for another reason."""

    name, min_ranks = "fake", 1

    def __init__(self, error: Exception) -> None:
        self.error = error

    def count(self, size: int, item: int, n: int) -> int:
        return 1

    def buffers(self, *args: Any) -> dict[str, Any]:
        return {}

    def timed_variant(self) -> int:
        return 0

    def run(self, *args: Any) -> None:
        raise self.error


def test_a_collective_the_backend_refuses_is_skipped_with_the_reason_and_other_errors_propagate() -> None:
    ctx = type("Ctx", (), {"world_size": 2, "rank": 0, "backend": "gloo", "device": "cpu"})()
    refused = RuntimeError("ProcessGroupGloo::reduce_scatter: dtype bfloat16 is not supported")
    reason = sweep.unsupported(ctx, _Refusing(refused), "bfloat16")
    assert reason and "gloo backend cannot run it with bfloat16" in reason and "not supported" in reason
    with pytest.raises(RuntimeError, match="Connection reset"):
        sweep.unsupported(ctx, _Refusing(RuntimeError("Connection reset by peer")), "float32")


# ------------------------------------------------------------------ real runs
def run_collectives(ddpcheck, world: int, *extra: str):
    return ddpcheck(
        "collectives", "--nproc", str(world), "--sizes", "1K:4K", "--iters", "2", "--timeout", "60", *extra
    )


# Real launches cost seconds each: two worlds pass, two corrupted runs name their rank; the worlds and
# culprits the judge can meet are covered without processes (the bisection and judge tests above).
@pytest.mark.parametrize("world", [2, 3])
def test_real_ranks_pass_every_collective(ddpcheck, scratch, world: int) -> None:
    verbose = world != 2  # the per-collective tables only with -v: one run without it
    run = run_collectives(ddpcheck, world, *(["-v"] if verbose else []))
    assert run.code == 0, run.stdout + run.stderr
    assert [c["name"] for c in run.report["checks"]] == [
        "rank map",
        *COLLECTIVES,
        "nodes agree",
        "expected bandwidth",
    ]
    # CPU ranks have no expected plateau: that check says so as a SKIP.
    assert all(
        c["status"] == ("SKIP" if c["name"] == "expected bandwidth" else "PASS") for c in run.report["checks"]
    )
    rows = run.table("bandwidth")
    assert [r["op"] for r in rows] == [op for op in COLLECTIVES for _ in range(3)]
    for row in rows:
        assert {"op", "size_bytes", "count", "dtype", "time_us", "algbw_gbps", "busbw_gbps", "wrong"} <= set(
            row
        )
        assert row["wrong"] == 0 and row["time_us"] > 0
        assert (
            row["size_bytes"] == row["count"] * 4
            and row["count"] % (world if row["op"] in BLOCKED else 1) == 0
        )
    for op in COLLECTIVES:
        assert (f"{op} bandwidth (float32, {world} ranks" in run.stdout) is verbose
        if verbose and max(r["busbw_gbps"] for r in rows if r["op"] == op) > 0:  # tiny ones round to 0 GB/s
            assert f"{op} busbw by message size" in run.stdout
    assert ("every collective's bandwidth by message size: with --verbose (-v)" in run.stdout) is not verbose
    assert "Peak bus bandwidth of every collective" in run.stdout
    assert run.stderr == ""
    assert_nothing_left(scratch, run)


@pytest.mark.parametrize(("world", "culprit"), [(3, 1), (4, 0)])
def test_a_corrupt_rank_is_named_exactly_by_every_collective(
    ddpcheck, scratch, world: int, culprit: int
) -> None:
    run = run_collectives(ddpcheck, world, "--inject", f"corrupt@{culprit}", "--quiet")
    assert run.code == 1, run.stdout + run.stderr
    for op in COLLECTIVES:
        check = run.check(op)
        assert check["status"] == "FAIL" and check["ranks"] == [culprit], (op, check)
        assert f"rank {culprit} on host" in check["detail"]
        assert "links" not in check
    assert_nothing_left(scratch, run)


def test_two_ranks_name_the_corrupt_rank_and_say_what_a_ring_of_two_cannot_tell(ddpcheck, scratch) -> None:
    run = run_collectives(ddpcheck, 2, "--inject", "corrupt@1", "--dtype", "bfloat16", "--quiet")
    assert run.code == 1, run.stdout + run.stderr
    for op in COLLECTIVES:
        if op != "sendrecv":
            assert run.check(op)["ranks"] == [1], op
    ring = run.check("sendrecv")
    assert ring["links"] == [[1, 0]] and "cannot tell" in ring["detail"]
    assert all(r["dtype"] == "bfloat16" for r in run.table("bandwidth"))


def test_a_subset_and_a_bandwidth_floor(ddpcheck, scratch) -> None:
    run = run_collectives(ddpcheck, 2, "--ops", "all_gather,sendrecv", "--min-busbw", "1000", "--quiet")
    assert run.code == 1, run.stdout + run.stderr
    assert [c["name"] for c in run.report["checks"]] == [
        "rank map",
        "all_gather",
        "sendrecv",
        "nodes agree",
        "expected bandwidth",
    ]
    for op in ("all_gather", "sendrecv"):
        assert "below --min-busbw 1000 GB/s" in run.check(op)["detail"]
    assert all(r["wrong"] == 0 for r in run.table("bandwidth"))


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["--ops", "all_gather,allgather"],
            "unknown collective 'allgather' in --ops: did you mean all_gather? choose from all_reduce",
        ),
        (["--ops", ","], "--ops is empty"),
        (["--ops", "sendrecv,sendrecv"], "names a collective twice"),
        (["--dtype", "int8"], "unknown dtype 'int8'"),
        (["--sizes", "0:1K"], "--sizes must start above 0 bytes"),
        (["--inject", "diverge@0"], "--inject diverge applies to train, not collectives"),
        (["--min-busbw", "nan"], "--min-busbw must be a number >= 0 GB/s"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(ddpcheck, scratch, args: list[str], message: str) -> None:
    run = ddpcheck("collectives", "--nproc", "2", *args)
    assert_usage_error(run, scratch)
    assert message in run.stderr


def test_a_world_too_small_for_every_chosen_collective_is_bad_input(ddpcheck, scratch) -> None:
    run = ddpcheck("collectives", "--nproc", "1", "--ops", "sendrecv")
    assert_usage_error(run, scratch)
    assert "needs at least 2 ranks, got 1" in run.stderr


@needs_gpu
def test_gpu_ranks_run_every_collective_over_nccl(ddpcheck, scratch) -> None:
    import torch

    gpus = min(torch.cuda.device_count(), 4)
    run = ddpcheck("collectives", "--gpus", str(gpus), "--sizes", "1M:4M", "--inject", f"corrupt@{gpus - 1}")
    assert run.code == 1, run.stdout + run.stderr
    assert run.report["world"]["backend"] == "nccl"
    for op in COLLECTIVES:
        check = run.check(op)
        if gpus == 1 and op == "sendrecv":
            assert check["status"] == "SKIP"
        else:
            assert check["status"] == "FAIL" and check["ranks"] == [gpus - 1], check
    assert all(r["time_us"] > 0 for r in run.table("bandwidth"))


# ------------------------------------------------------------------ bisection (pure, with fault models)
def corrupt_ranks(*bad: int):
    """Ranks that contribute wrong data: any group holding one comes out wrong, even alone."""
    return lambda groups: [bool(set(g) & set(bad)) for g in groups]


def bad_nic(rank: int):
    """A rank whose traffic is corrupted: wrong only when data moves, i.e. beside another rank."""
    return lambda groups: [rank in g and len(g) > 1 for g in groups]


def bad_link(a: int, b: int):
    return lambda groups: [a in g and b in g for g in groups]


@pytest.mark.parametrize("n", range(1, 10))
def test_bisection_names_every_corrupt_rank_exactly(n: int) -> None:
    for culprit in range(n):
        assert sweep.bisect(n, corrupt_ranks(culprit)) == [culprit]
    if n >= 6:
        assert sweep.bisect(n, corrupt_ranks(1, n - 2)) == [1, n - 2]


@pytest.mark.parametrize("n", range(3, 10))
def test_bisection_does_not_trust_a_rank_that_was_right_only_alone(n: int) -> None:
    # A bad NIC never shows on a rank alone: it must be tried beside a proven rank.
    for culprit in range(n):
        assert sweep.bisect(n, bad_nic(culprit)) == [culprit]


def test_bisection_says_when_nothing_can_be_localised() -> None:
    assert sweep.bisect(2, bad_nic(1)) is None  # two ranks, one link: no one else to try
    assert sweep.bisect(4, bad_link(0, 3)) is None  # a link between the halves shows only whole


def test_bisection_names_a_bad_link_inside_a_half_by_both_ends() -> None:
    assert sweep.bisect(4, bad_link(0, 1)) == [0, 1]
    assert sweep.bisect(8, bad_link(4, 5)) == [4, 5]


@pytest.mark.parametrize("n", range(2, 9))
def test_bisection_names_several_corrupt_ranks_and_always_ends(n: int) -> None:
    # Two corrupt ranks in different halves once left no free partner and looped forever.
    for bad in [c for k in (2, 3) for c in itertools.combinations(range(n), k)]:
        assert sweep.bisect(n, corrupt_ranks(*bad)) == list(bad)
