"""failure/replicas.py: the rank whose parameters left its replicas', and the rank that made the first NaN."""

from __future__ import annotations

import struct
from dataclasses import asdict

from ddpcheck.failure import replicas
from ddpcheck.failure.replicas import Fingerprint, NonFinite, fingerprint_from_record, judge, to_record
from ddpcheck.report.model import Status

NAMES = ["fc1.weight", "fc1.bias", "fc2.weight"]


def bits(value: float) -> int:
    return struct.unpack("<i", struct.pack("<f", value))[0]


def record(rank: int, step: int, sums: list[float], group: list[int] | None = None) -> dict:
    return {
        "rank": rank,
        "step": step,
        "modules": [
            {
                "module": "Net",
                "group": group if group is not None else [0, 1, 2],
                "names": NAMES,
                "exact": [bits(v) for v in sums],
                "sums": sums,
            }
        ],
    }


HEALTHY = [1.5, -0.25, 3.0]
FLIPPED = [1.5, -0.25, 3.0000002]


def prints(
    odd: dict[int, tuple[int, list[float]]] | None = None, ranks: int = 3, steps: int = 5
) -> list[Fingerprint]:
    """Every rank at steps 10, 20, ...; `odd` {rank: (from step, its sums)}."""
    found = []
    for step in range(10, 10 * steps + 1, 10):
        for rank in range(ranks):
            since, sums = (odd or {}).get(rank, (10**9, HEALTHY))
            found.append(
                fingerprint_from_record(
                    record(rank, step, sums if step >= since else HEALTHY, list(range(ranks)))
                )
            )
    return found


def test_replicas_that_agree_pass() -> None:
    judgement = judge(prints())
    assert judgement.agree and judgement.ranks == [0, 1, 2] and judgement.steps == [10, 20, 30, 40, 50]
    (check,) = replicas.checks(judgement, every=10)
    assert check.name == "replicas agree" and check.status is Status.PASS
    assert "3 ranks" in check.detail and "5 steps" in check.detail and "step 50" in check.detail


def test_the_odd_rank_is_named_with_its_step_parameter_and_difference() -> None:
    judgement = judge(prints({1: (30, FLIPPED)}))
    found = judgement.divergence
    assert found is not None
    assert (found.step, found.odd, found.majority, found.parameter) == (30, (1,), (0, 2), "fc2.weight")
    assert found.difference is not None and abs(found.difference - 2.4e-7) < 1e-7
    (check,) = replicas.checks(judgement, every=10)
    assert check.status is Status.FAIL and check.ranks == [1]
    assert check.detail.startswith(
        "rank 1 differs from its replicas (ranks 0, 2) at step 30: fc2.weight first"
    )
    line = replicas.line(judgement)
    assert line is not None and line.startswith("ddpcheck watch: rank 1 differs")


def test_a_single_bit_changes_the_exact_fingerprint_even_when_the_sums_agree() -> None:
    odd = [1.5, -0.25, 3.0]
    found = [fingerprint_from_record(record(r, 10, HEALTHY)) for r in (0, 2)]
    flipped = record(1, 10, odd)
    flipped["modules"][0]["exact"][0] ^= 1  # the lowest bit: the float64 sum would round it away
    judgement = judge([*found, fingerprint_from_record(flipped)])
    assert judgement.divergence is not None and judgement.divergence.odd == (1,)
    assert judgement.divergence.parameter == "fc1.weight" and judgement.divergence.difference == 0.0


def test_two_ranks_that_differ_name_both_without_a_majority() -> None:
    judgement = judge(prints({1: (20, FLIPPED)}, ranks=2))
    found = judgement.divergence
    assert found is not None and found.odd == (0, 1) and found.majority == () and found.step == 20
    assert "no majority" in replicas.checks(judgement, every=10)[0].detail


def test_replica_groups_are_compared_apart() -> None:
    """Two groups (0, 1) and (2, 3) that hold different weights legitimately: no divergence."""
    found = [
        fingerprint_from_record(record(r, 10, HEALTHY if r < 2 else FLIPPED, [0, 1] if r < 2 else [2, 3]))
        for r in range(4)
    ]
    assert judge(found).agree
    found.append(fingerprint_from_record(record(4, 10, HEALTHY, [2, 3, 4])))
    assert judge(found).agree  # a group seen on one rank only: nothing to compare with


def test_a_step_kept_as_digests_names_the_parameter_from_a_later_whole_step() -> None:
    whole = prints({2: (20, FLIPPED)})
    slim = [fingerprint_from_record(to_record(p, whole=p.step != 20)) for p in whole]
    found = judge(slim).divergence
    assert found is not None and (found.step, found.odd, found.parameter) == (20, (2,), "fc2.weight")


def test_a_missing_rank_at_a_step_does_not_stop_the_comparison() -> None:
    found = [p for p in prints({0: (40, FLIPPED)}) if not (p.rank == 2 and p.step == 40)]
    divergence = judge(found).divergence
    assert (
        divergence is not None and divergence.step == 40 and divergence.odd == (0, 1)
    )  # two left: no majority


def test_the_rank_that_made_the_first_nan_is_named_not_those_that_received_it() -> None:
    nans = [
        NonFinite(0, 13, "gradient", ("fc1.weight",), 3),
        NonFinite(2, 12, "gradient", ("fc2.bias",), 1),
        NonFinite(1, 13, "gradient", ("fc1.weight",), 3),
    ]
    judgement = judge(prints(), nans)
    assert [n.rank for n in judgement.first_nan] == [2] and [n.rank for n in judgement.later_nan] == [0, 1]
    agree, nan = replicas.checks(judgement, every=10)
    assert agree.status is Status.PASS
    assert nan.name == "first nan" and nan.status is Status.FAIL and nan.ranks == [2]
    assert nan.detail.startswith("rank 2 made the first NaN/Inf at step 12 (gradient of fc2.bias)")
    assert "ranks 0, 1 received it later" in nan.detail


def test_the_table_has_a_row_per_rank() -> None:
    found = prints({1: (30, FLIPPED)})
    judgement = judge(found, [NonFinite(1, 35, "gradient", ("fc1.weight",), 1)])
    rows = {row["rank"]: row for row in replicas.table(judgement, found).rows}
    assert [rows[r]["agrees"] for r in (0, 1, 2)] == [True, False, True]
    assert rows[1]["diverged_at_step"] == 30 and rows[1]["parameter"] == "fc2.weight"
    assert rows[1]["first_nan_step"] == 35 and rows[1]["made_nan"] and rows[0]["first_nan_step"] is None
    assert rows[0]["fingerprints"] == 5 and rows[0]["last_step"] == 50


def test_records_round_trip() -> None:
    (first, *_) = prints()
    assert fingerprint_from_record(to_record(first, whole=True)) == first
    nan = NonFinite(1, 5, "gradient", ("w",), 1)
    assert replicas.nonfinite_from_record(asdict(nan)) == nan


def test_one_flipped_bit_anywhere_changes_the_exact_fingerprint() -> None:
    """fingerprints.py's own sum: every bit of a few tensors of each kind flipped in turn (a view at an
    odd offset, an odd length, half precision, integers, booleans) changes it."""
    import torch

    from ddpcheck.checks.watch.fingerprints import _fingerprints

    base = torch.randn(64)
    tensors = [
        base[1:12],
        torch.randn(9).half(),
        torch.arange(5),
        torch.tensor([True, False, True]),
        torch.randn(3, 3),
    ]
    exact, sums = _fingerprints(tensors)
    assert len(exact) == len(sums) == len(tensors) and all(isinstance(v, int) for v in exact)
    for index, tensor in enumerate(tensors):
        flat = tensor.contiguous().reshape(-1).view(torch.uint8)
        for byte in range(flat.numel()):
            for bit in range(8):
                changed = flat.clone()
                changed[byte] ^= 1 << bit
                if tensor.dtype == torch.bool and changed[byte] > 1:
                    continue  # not a boolean any more
                again = changed.view(tensor.dtype).reshape(tensor.shape)
                assert _fingerprints([again])[0][0] != exact[index], (index, byte, bit)
    # An empty tensor (a buffer with no element) sums to nothing, exactly and as a number.
    empty = [torch.empty(0), base[3:3], torch.empty(0, 4, dtype=torch.int32), torch.empty(0).half()]
    assert _fingerprints(empty) == ([0, 0, 0, 0], [0.0, 0.0, 0.0, 0.0])


def test_parameters_that_turned_nan_unseen_by_the_gradient_check_are_said_without_blaming_a_rank() -> None:
    nan = float("nan")
    found = [p for p in prints() if p.step < 30]
    found += [fingerprint_from_record(record(r, 30, [1.5, nan, 3.0])) for r in range(3)]
    judgement = judge(found)
    assert judgement.agree and judgement.unseen_nan == (30, (0, 1, 2))
    agree, check = replicas.checks(judgement, every=10)
    assert agree.status is Status.PASS and check.name == "first nan" and check.status is Status.FAIL
    assert check.ranks == [] and check.detail.startswith(
        "the parameters of ranks 0-2 hold NaN/Inf at step 30"
    )
    assert judge(found, [NonFinite(1, 29, "gradient", ("fc1.bias",), 1)]).unseen_nan is None


def test_the_gradient_check_names_the_non_finite_parameter_and_then_lets_go(tmp_path) -> None:
    """fingerprints.py's hooks: each keeps one sum; the step folds them (also many backwards without a
    step, as gradient accumulation does, are folded as they come, never kept without bound); the
    first Inf is written with its step and parameter, and the hooks are removed after it."""
    import json

    import torch

    from ddpcheck.checks.watch import fingerprints

    (tmp_path / fingerprints.FOLDER).mkdir()
    params = [torch.nn.Parameter(torch.zeros(n)) for n in (3, fingerprints.GRADIENT_SAMPLE * 3 + 1)]
    watcher = fingerprints.Fingerprinter(str(tmp_path), 100, ())
    watcher.rank = 1
    watcher.params = [("small", params[0]), ("large", params[1])]
    watcher.flags = torch.zeros(2)
    watcher.gradient_hooks = [p.register_hook(watcher._gradient_hook(i)) for i, p in enumerate(params)]

    def backward(poison: float | None = None) -> None:
        loss = params[0].sum() + params[1].sum()
        if poison is not None:
            loss = loss + params[1][-1] * poison  # one element of the large gradient, which the sample reads
        loss.backward()

    for _ in range(fingerprints.FOLD_AFTER * 3):
        backward()
    assert len(watcher.sums) < fingerprints.FOLD_AFTER * 2
    watcher._read_flags(1)
    assert watcher.sums == [] and watcher.flags.tolist() == [0.0, 0.0]
    assert not (tmp_path / fingerprints.FOLDER / "1.nonfinite").exists()
    backward(poison=float("inf"))
    watcher._read_flags(2)
    said = json.loads((tmp_path / fingerprints.FOLDER / "1.nonfinite").read_text())
    assert (said["step"], said["parameters"], said["count"]) == (2, ["large"], 1), said
    assert watcher.gradient_hooks == []
    backward()
    assert watcher.sums == []  # no hook left


# ------------------------------------------------------------------ HSDP: replicas of one shard
def shard_record(rank: int, step: int, sums: list[float], group: list[int]) -> dict:
    """An HSDP module's record: this rank's shard, compared within the ranks that hold the same shard."""
    found = record(rank, step, sums, group)
    found["modules"][0]["kind"] = "HSDP"
    return found


def hsdp(odd: dict[int, list[float]], replicas_of: int, shards: int = 2) -> list[Fingerprint]:
    """A mesh (replicate, shard), rank = r * shards + s: shard s's replicas are s, s + shards, ...;
    each shard holds its own weights (shard 1's differ from shard 0's by design)."""
    found = []
    for rank in range(replicas_of * shards):
        shard = rank % shards
        group = list(range(shard, replicas_of * shards, shards))
        sums = odd.get(rank, HEALTHY if shard == 0 else FLIPPED)
        found.append(fingerprint_from_record(shard_record(rank, 10, sums, group)))
    return found


def test_hsdp_shards_differ_by_design_and_their_replicas_agree() -> None:
    judgement = judge(hsdp({}, replicas_of=2))
    assert judgement.agree and judgement.kinds == {"HSDP"} and len(judgement.groups) == 2
    (check,) = replicas.checks(judgement, every=10)
    assert check.status is Status.PASS
    assert check.detail.startswith(
        "4 ranks' parameter shards identical within their 2 replica groups at 1 steps"
    )


def test_hsdp_a_replica_of_one_shard_is_named_against_its_shards_other_replicas() -> None:
    judgement = judge(hsdp({3: [1.5, -0.25, 3.5]}, replicas_of=3))  # shard 1's replicas: ranks 1, 3, 5
    found = judgement.divergence
    assert found is not None and (found.odd, found.majority, found.kind) == ((3,), (1, 5), "HSDP")
    (check,) = replicas.checks(judgement, every=10)
    assert check.ranks == [3] and check.detail.startswith(
        "rank 3 differs from the other replicas of its shard (ranks 1, 5) at step 10: fc2.weight first"
    )


def test_hsdp_two_replicas_of_a_shard_that_differ_are_both_named() -> None:
    found = judge(hsdp({1: [1.5, -0.25, 3.5]}, replicas_of=2)).divergence
    assert found is not None and found.odd == (1, 3) and found.majority == ()
    assert replicas._divergence_words(found).startswith(
        "ranks 1, 3, the replicas of one shard, differ (no majority to say which is right) at step 10"
    )


def test_hsdp_records_round_trip_with_their_kind() -> None:
    (first, *_) = hsdp({}, replicas_of=2)
    assert fingerprint_from_record(to_record(first, whole=False)).modules[0].kind == "HSDP"
    assert fingerprint_from_record(to_record(first, whole=True)) == first


def test_a_module_with_no_replica_is_one_note_carried_to_task_0_and_no_check(tmp_path) -> None:
    """checks/watch/replicas.py: the ranks' `.unreplicated` files (the same note from every rank) are
    one note; a team's task shares it with task 0; with nothing else fingerprinted, no check, no table,
    and no 'no DistributedDataParallel' note."""
    import json

    from ddpcheck.checks.watch import fingerprints
    from ddpcheck.checks.watch.replicas import Replicas
    from ddpcheck.report.model import Report

    note = "FSDP module Net is fully sharded (mesh (4,)): no replicas to compare"
    task = tmp_path / "task1"
    (task / fingerprints.FOLDER).mkdir(parents=True)
    for rank in (2, 3):
        path = task / fingerprints.FOLDER / f"{rank}{fingerprints.UNREPLICATED_SUFFIX}"
        path.write_text(json.dumps({"rank": rank, "notes": [note]}))
    theirs = Replicas(task, 5)
    theirs.read()
    ours = Replicas(tmp_path / "task0", 5)
    ours.take(json.loads(json.dumps(theirs.shared())))
    report = ours.add_to(Report("watch"))
    assert report.notes == [f"replicas: {note}"] and report.checks == [] and report.tables == []
