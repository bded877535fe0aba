"""`ddpcheck watch` names the rank that slows jobs shaped like training loops (issue 50), and says why.

tests/support/straggler_shapes.py, 3 ranks, about 4 s of 50-ms steps: two collectives a step,
DDP's gradient accumulation (no_sync), a rank stopped part of the time (SIGSTOP by its own
stopper), a rank computing more than its peers, the whole job slowing partway; under python
--nproc and torchrun, and under a real srun and mpirun with one watcher per task. The helpers are
tests/test_watch_stragglers.py's (slow_job.py's tests); a file of its own because pytest's workers
take whole files, and these 13 jobs take some 20 to 50 s each on two cores.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest

from tests.support.load import busy_cores
from tests.test_watch_stragglers import (
    MPIRUN,
    SHAPES_JOB,
    SRUN,
    TORCHRUN,
    Ran,
    assert_named,
    assert_nobody_named,
    per_task,
    watch,
)

pytestmark = pytest.mark.integration

# ------------------------------------------------------------------ shaped like training loops (issue 50)
# tests/support/straggler_shapes.py, 3 ranks, about 4 s of 50-ms steps: named by the wait a rank
# causes (its peers' wait share over the floor), whatever the shape of the step.
SHAPED_SECONDS = "4"
STALL = {"SLOW_JOB_SHAPE": "stall", "SLOW_JOB_STALL": "0.4", "SLOW_JOB_STALL_PERIOD_S": "0.5"}


def shaped(tmp_path: Path, launcher: str = "python", **planted: str) -> Ran:
    job = [sys.executable, SHAPES_JOB, "--nproc", "3"] if launcher == "python" else [*TORCHRUN, SHAPES_JOB]
    return watch(tmp_path, job, SLOW_JOB_SECONDS=SHAPED_SECONDS, **planted)


def test_two_collectives_a_step_the_rank_slow_before_the_first_is_named(tmp_path) -> None:
    """all_reduce(grads) then all_reduce(flag), rank 2 working 1.5x before the first (issue 50): late at
    the gradient sync, on time at the flag but for the load's noise; the old rule (late at 60% of the
    collectives) missed it in 5 of 8 such runs (docs/stragglers.md). Its peers wait about a third of
    the window for it, at the gradient sync."""
    run = shaped(tmp_path, SLOW_JOB_SHAPE="two", SLOW_JOB_RANK="2", SLOW_JOB_FACTOR="1.5")
    assert_named(run, 2)
    row = next(r for r in run.report["tables"]["stragglers"] if r["rank"] == 2)
    assert row["wait_share"] >= 0.2, row  # 0.5 / 1.5 of each step, less the jitter
    assert "at all_reduce" in run.stragglers["detail"]
    assert_sleeping_in_load_batch(run, 2)


def assert_sleeping_in_load_batch(run: Ran, rank: int) -> None:
    """Why: its sampled stacks in the sleep of its data loading, its process asleep there."""
    (why,) = run.report["tables"]["straggler_why"]
    assert (why["rank"], why["activity"]) == (rank, "sleeping"), why
    assert why["where"].startswith("load_batch (straggler_shapes.py:"), why
    assert "; it was in load_batch (straggler_shapes.py:" in run.stragglers["detail"]
    assert "its process sleeping (CPU " in run.stragglers["detail"]


def assert_stopped(run: Ran, rank: int) -> None:
    """Why: seen stopped (state T) at some 40% of the watcher's looks, its CPU far under its wall time."""
    (why,) = run.report["tables"]["straggler_why"]
    assert (why["rank"], why["activity"]) == (rank, "stopped") and 0.2 <= why["stopped_share"] <= 0.6, why
    assert why["peers_stopped_share"] == 0 and why["cpu_share"] < 0.5, why
    assert "it was stopped " in run.stragglers["detail"] or "its process stopped " in run.stragglers["detail"]
    assert "not runnable" in run.stragglers["detail"]


def test_ddp_with_gradient_accumulation_the_slowed_rank_is_named_under_torchrun(tmp_path) -> None:
    """DDP under no_sync(): one gradient all_reduce every 4 micro-steps, rank 1's micro-steps 1.5x."""
    run = shaped(tmp_path, "torchrun", SLOW_JOB_SHAPE="accum", SLOW_JOB_RANK="1", SLOW_JOB_FACTOR="1.5")
    assert_named(run, 1)


def test_a_rank_stopped_from_outside_part_of_the_time_is_named(tmp_path) -> None:
    """SIGSTOP 40% of every 0.5 s on rank 0, from outside it (cgroup or thermal throttling; its stopper,
    a process it started): its peers wait for it at the collectives that fall in its stops, not at
    the others."""
    run = shaped(tmp_path, SLOW_JOB_RANK="0", **STALL)
    assert_named(run, 0)
    assert_stopped(run, 0)


def test_a_rank_computing_more_than_its_peers_is_named_as_busy(tmp_path) -> None:
    """Rank 1's work a busy loop 1.5x its peers' sleep: named, and runnable (running, or waiting for one
    of the host's shared cores) most of its time, its peers not."""
    run = shaped(
        tmp_path, SLOW_JOB_SHAPE="one", SLOW_JOB_RANK="1", SLOW_JOB_FACTOR="1.5", SLOW_JOB_WORK="compute"
    )
    assert_named(run, 1)
    (why,) = run.report["tables"]["straggler_why"]
    assert why["activity"] in ("busy computing", "waiting for a CPU"), why
    assert why["cpu_share"] + why["queued_share"] >= 0.6 > why["peers_cpu_share"], why
    assert "runnable " in run.stragglers["detail"]
    assert why["where"].startswith("compute (straggler_shapes.py:"), why


def test_a_whole_job_that_slows_partway_is_reported_as_slower_than_its_past(tmp_path) -> None:
    """Every rank's step twice as long from step 30 (of about 60): nobody slows the others, the job
    slowed, and the report says from when and by how much."""
    run = shaped(tmp_path, SLOW_JOB_SHAPE="one", SLOW_JOB_ALL="1", SLOW_JOB_FACTOR="2.0", SLOW_JOB_FROM="30")
    assert run.code == 0, run.err[-3000:]
    check = run.stragglers
    assert check["status"] == "WARN" and check["ranks"] == [], check
    assert check["detail"].startswith("the whole job slowed "), check
    assert "every rank alike, no rank slows the others" in check["detail"]
    (row,) = run.report["tables"]["straggler_slowdown"]
    assert 1.5 <= row["factor"] <= 2.3 and 25 <= row["since_seq"] <= 36, row
    assert not any(r["named"] for r in run.report["tables"]["stragglers"])
    assert [line for line in run.err.splitlines() if "the whole job slowed" in line], run.err[-2000:]


def test_a_healthy_two_collective_ddp_job_beside_a_cpu_heavy_process_names_nobody(tmp_path) -> None:
    with busy_cores(1):
        assert_nobody_named(shaped(tmp_path, SLOW_JOB_SHAPE="two", SLOW_JOB_DDP="1"))


# ------------------------------------------------------------------ shaped, one watcher per task (issue 50)
# The shapes under a real srun and mpirun: each task's watcher samples its own rank (its stack and its
# /proc) and task 0 judges and says why. The stall's stopper is the rank's own child there too.
@pytest.fixture(params=["srun", "mpirun"])
def tasks(request) -> tuple[tuple[str, ...], dict[str, str]]:
    """(the launcher's argv, its environment): srun with the `slurm` fixture's cluster, or mpirun."""
    if request.param == "srun":
        return SRUN, request.getfixturevalue("slurm")
    if shutil.which("mpirun") is None:
        pytest.skip("mpirun (openmpi-bin) is not installed")
    return MPIRUN, {}


def per_task_shaped(tmp_path: Path, tasks: tuple, slowed: int, **planted: str) -> Ran:
    job = [sys.executable, SHAPES_JOB]  # one rank per task
    return per_task(tmp_path, *tasks, slowed, job, SLOW_JOB_SECONDS=SHAPED_SECONDS, **planted)


def test_per_task_two_collectives_the_slowed_rank_is_named_sleeping_in_load_batch(tasks, tmp_path) -> None:
    """Issue 50's step (gradient sync, then a flag), rank 1 1.5x before the first: named by task 0's
    watcher, with the stacks and /proc looks that task 1's watcher took of it."""
    run = per_task_shaped(tmp_path, tasks, 1, SLOW_JOB_SHAPE="two", SLOW_JOB_FACTOR="1.5")
    assert_named(run, 1)
    assert "at all_reduce" in run.stragglers["detail"]
    assert_sleeping_in_load_batch(run, 1)


def test_per_task_ddp_accumulation_beside_a_busy_core_the_slowed_rank_is_named(tasks, tmp_path) -> None:
    """DDP under no_sync(), one gradient all_reduce every 4 micro-steps, rank 2's 1.5x; one spinner beside
    the 3 tasks and their 3 watchers on this machine's cores."""
    with busy_cores(1):
        run = per_task_shaped(tmp_path, tasks, 2, SLOW_JOB_SHAPE="accum", SLOW_JOB_FACTOR="1.5")
    assert_named(run, 2)
    assert_sleeping_in_load_batch(run, 2)


def test_per_task_a_rank_stopped_part_of_the_time_is_named_as_stopped(tasks, tmp_path) -> None:
    """Task 0's rank SIGSTOPped 40% of every 0.5 s by its own stopper: named, and said stopped from task
    0's own /proc looks, its peers' (other tasks' watchers') never stopped."""
    run = per_task_shaped(tmp_path, tasks, 0, **STALL)
    assert_named(run, 0)
    assert_stopped(run, 0)
