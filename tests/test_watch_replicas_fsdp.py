"""`ddpcheck watch` compares FSDP's replicas of a shard, in real FSDP jobs (tests/support/diverge_job.py
with DIVERGE_JOB_FSDP; the DDP job's tests are tests/test_watch_replicas.py, whose helpers these use).

HSDP over a 3x2 mesh (6 ranks) names the one flipped replica of a shard alone, with the step and
parameter (its two peers are a majority), and a healthy 2x2 job names nobody; fully sharded, the
report says once that there is nothing to compare; FSDP1's HYBRID_SHARD on 2x2 names the flipped
shard's two replicas (no majority of two: both), which the judge's own tests cover for FSDP2 too
(tests/test_replicas.py). A file of its own: pytest's workers take whole files, and these jobs of
4 to 6 ranks take some 30 to 80 s each on two cores.
"""

from __future__ import annotations

import sys

import pytest

from tests.test_watch_replicas import JOB, TORCHRUN, watch

pytestmark = pytest.mark.integration

TORCHRUN_4 = [*TORCHRUN[:-1], "4"]


def test_hsdp_three_replicas_of_a_shard_name_the_flipped_rank_alone(tmp_path) -> None:
    """A 3x2 mesh on 6 ranks: rank 4 holds shard 0 with ranks 0 and 2, a majority: rank 4 alone is named."""
    run = watch(
        tmp_path,
        5,
        [sys.executable, JOB, "--nproc", "6"],
        DIVERGE_JOB_FSDP="3x2",
        DIVERGE_JOB_STEPS="10",
        DIVERGE_JOB_FLIP="4:5",
    )
    assert run.code == 1, run.err[-3000:]
    check = run.check("replicas agree")
    assert check["status"] == "FAIL" and check["ranks"] == [4], check
    assert check["detail"].startswith(
        "rank 4 differs from the other replicas of its shard (ranks 0, 2) at step 5: fc2.weight first, sum "
    ), check
    rows = {row["rank"]: row for row in run.report["tables"]["replicas"]}
    assert [r for r, row in rows.items() if not row["agrees"]] == [4]


def test_hsdp_a_healthy_job_names_nobody_under_torchrun(tmp_path) -> None:
    run = watch(tmp_path, 5, [*TORCHRUN_4, JOB], DIVERGE_JOB_FSDP="2x2", DIVERGE_JOB_STEPS="20")
    assert run.code == 0, run.err[-3000:]
    check = run.check("replicas agree")
    assert check["status"] == "PASS", check
    assert check["detail"].startswith(
        "4 ranks' parameter shards identical within their 2 replica groups at 4 steps "
        "(every 5, up to step 20)"
    ), check
    assert run.lines() == [] and all(row["agrees"] for row in run.report["tables"]["replicas"])


def test_a_fully_sharded_fsdp_job_has_no_replicas_said_once_and_no_alarm(tmp_path) -> None:
    run = watch(tmp_path, 5, [*TORCHRUN_4, JOB], DIVERGE_JOB_FSDP="4", DIVERGE_JOB_STEPS="10")
    assert run.code == 0, run.err[-3000:]
    notes = [note for note in run.report["notes"] if "replicas" in note]
    assert notes == ["replicas: FSDP module Net is fully sharded (mesh (4,)): no replicas to compare"], notes
    assert not [c for c in run.report["checks"] if c["name"] in ("replicas agree", "first nan")]
    assert "replicas" not in run.report["tables"] and run.lines() == []


def test_fsdp1_hybrid_shard_a_flipped_shard_names_its_replicas_under_torchrun(tmp_path) -> None:
    """FSDP1 (FullyShardedDataParallel, HYBRID_SHARD on a 2x2 mesh, one unit): rank 1's shard of the
    flat parameter flipped at step 5 names ranks 1, 3 with the flat parameter and what it holds."""
    job = [*TORCHRUN_4, JOB]
    run = watch(tmp_path, 5, job, DIVERGE_JOB_FSDP="v1:2x2", DIVERGE_JOB_STEPS="10", DIVERGE_JOB_FLIP="1:5")
    assert run.code == 1, run.err[-3000:]
    check = run.check("replicas agree")
    assert check["status"] == "FAIL" and check["ranks"] == [1, 3], check
    assert check["detail"].startswith(
        "ranks 1, 3, the replicas of one shard, differ (no majority to say which is right) at step 5: "
        "_flat_param (fc1.weight, fc1.bias, norm.weight, ...) first"
    ), check
