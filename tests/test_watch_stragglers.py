"""`ddpcheck watch` names the rank that slows a real job (tests/support/slow_job.py: gloo, CPU, 3 ranks).

Each job runs about 10 s under torchrun with --sample-every 1: the slowed rank (30% or 100% more
work per step, or only from step N) is named on stderr while the job runs and in the report's
`stragglers` check (WARN, exit 0); a healthy job names nobody, also beside a CPU-heavy process.
Every process of the job must be gone afterwards.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import psutil
import pytest

from tests.support.load import busy_cores

pytestmark = pytest.mark.integration

SLOW_JOB = str(Path(__file__).resolve().parent / "support" / "slow_job.py")
TORCHRUN = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "3"]
SECONDS = 10  # each job's steps, after its start-up
STRAGGLER_LINE = "is slowing the job"
VERDICT_LINE = re.compile(r"^ddpcheck watch: ranks? \d[\d, ]* .*(is|are|no longer) slow")


@dataclass
class Ran:
    code: int
    out: str
    err: str
    report: dict

    @property
    def stragglers(self) -> dict:
        found = [c for c in self.report["checks"] if c["name"] == "stragglers"]
        assert found, (self.report["checks"], self.report["notes"], self.err[-2000:])
        return found[0]

    def lines(self) -> list[str]:
        return [line for line in self.err.splitlines() if VERDICT_LINE.match(line)]


def _job_processes(tmp_path: Path) -> list[int]:
    """Every process still alive that runs in this test's watch environment (TMPDIR is tmp_path)."""
    left = []
    for proc in psutil.process_iter(["pid", "cmdline"]):
        try:
            if SLOW_JOB in " ".join(proc.info["cmdline"] or ()) and str(tmp_path) in proc.environ().get(
                "DDPCHECK_WATCH_DIR", ""
            ):
                left.append(proc.pid)
        except psutil.Error:
            continue
    return left


def watch(tmp_path: Path, job: list[str] | None = None, **planted: str) -> Ran:
    report = tmp_path / "report.json"
    env = {
        **os.environ,
        "OMP_NUM_THREADS": "1",
        "COLUMNS": "200",
        "TMPDIR": str(tmp_path),
        "SLOW_JOB_SECONDS": str(SECONDS),
        **planted,
    }
    argv = [sys.executable, "-m", "ddpcheck", "watch", "--sample-every", "1", "--json", str(report), "--"]
    done = subprocess.run([*argv, *(job or [*TORCHRUN, SLOW_JOB])], env=env, capture_output=True, text=True,
                          timeout=180)  # fmt: skip
    assert report.exists(), done.stderr[-3000:]
    assert _job_processes(tmp_path) == []  # nothing of the job left behind
    return Ran(done.returncode, done.stdout, done.stderr, json.loads(report.read_text()))


def assert_named(run: Ran, rank: int) -> None:
    assert run.code == 0, run.err[-3000:]  # a straggler is a warning: the job's own exit code stands
    check = run.stragglers
    assert check["status"] == "WARN" and check["ranks"] == [rank], check
    (first, *_) = run.lines()
    assert first.startswith(f"ddpcheck watch: rank {rank} ") and STRAGGLER_LINE in first, run.lines()
    assert all(f"rank {rank} " in line for line in run.lines()), run.lines()  # nobody else, ever
    rows = {row["rank"]: row for row in run.report["tables"]["stragglers"]}
    assert [r for r, row in rows.items() if row["named"]] == [rank]
    assert "stragglers" in run.out and "WARN" in run.out  # a warning shows the whole report


def assert_nobody_named(run: Ran) -> None:
    assert run.code == 0, run.err[-3000:]
    assert run.stragglers["status"] == "PASS", run.stragglers
    assert run.lines() == []
    assert not any(row["named"] for row in run.report["tables"]["stragglers"])


def test_a_rank_30_percent_slower_is_named(tmp_path) -> None:
    assert_named(watch(tmp_path, SLOW_JOB_RANK="1", SLOW_JOB_FACTOR="1.3"), 1)


def test_a_rank_twice_as_slow_is_named_with_its_peers_waiting_half_the_time(tmp_path) -> None:
    run = watch(tmp_path, SLOW_JOB_RANK="2", SLOW_JOB_FACTOR="2.0")
    assert_named(run, 2)
    row = next(r for r in run.report["tables"]["stragglers"] if r["rank"] == 2)
    assert 0.3 <= row["wait_share"] <= 0.6, row  # half of each step, less the jitter and the transfer


def test_a_rank_slowed_from_step_n_is_named_only_after_it_slowed(tmp_path) -> None:
    run = watch(tmp_path, SLOW_JOB_RANK="0", SLOW_JOB_FACTOR="2.0", SLOW_JOB_FROM="40")
    assert_named(run, 0)
    (heat,) = [row for row in run.report["tables"]["straggler_lag"] if row["rank"] == 0]
    lags = [v for v in heat["lag_s"] if v is not None]
    early, late = lags[: len(lags) // 8], lags[-len(lags) // 2 :]
    assert max(early) < min(late), heat  # its first steps (before step 40) lag less than any since


def test_a_healthy_job_names_nobody(tmp_path) -> None:
    assert_nobody_named(watch(tmp_path))


def test_a_healthy_ddp_job_beside_a_cpu_heavy_process_names_nobody(tmp_path) -> None:
    with busy_cores(1):
        assert_nobody_named(watch(tmp_path, SLOW_JOB_DDP="1"))


def test_a_slowed_rank_beside_a_cpu_heavy_process_is_named(tmp_path) -> None:
    with busy_cores(1):
        assert_named(watch(tmp_path, SLOW_JOB_RANK="1", SLOW_JOB_FACTOR="1.3", SLOW_JOB_DDP="1"), 1)


def test_a_plain_python_job_that_starts_its_own_ranks_is_sampled(tmp_path) -> None:
    run = watch(
        tmp_path, [sys.executable, SLOW_JOB, "--nproc", "3"], SLOW_JOB_RANK="2", SLOW_JOB_FACTOR="2.0"
    )
    assert_named(run, 2)
