"""`ddpcheck postmortem` on the directory a real `ddpcheck watch` kept: two gloo ranks under torchrun.

(a) both ranks stuck in their data loading, the job ended by watch on the hang: every dump
alike, so postmortem passed it (exit 0) before it read watch's records; (b) a rank that raised:
only watch's records, no dump, which postmortem refused as "nothing to read". The CLI and the
reports dir that is no job's (exit 2) too.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

from ddpcheck.report.formats.json import write as write_json
from ddpcheck.report.model import Check, Report, Status
from tests.conftest import Run, assert_usage_error

pytestmark = pytest.mark.integration

TRAIN_JOB = str(Path(__file__).resolve().parent / "support" / "train_job.py")
JOB = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2"]
JOB += ["--shutdown-timeout", "5", TRAIN_JOB]
ENDS = "the ranks ended by themselves"


def line_of(text: str) -> int:
    lines = Path(TRAIN_JOB).read_text().splitlines()
    return next(i for i, line in enumerate(lines, 1) if text in line)


def ddpcheck(*args: str, tmp_path: Path, env: dict[str, str] | None = None, timeout: float = 180):
    scratch = tmp_path / "tmp"
    scratch.mkdir(exist_ok=True)
    full = {**os.environ, "OMP_NUM_THREADS": "1", "COLUMNS": "200", "TMPDIR": str(scratch), **(env or {})}
    proc = subprocess.Popen([sys.executable, "-m", "ddpcheck", *args], env=full, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)  # fmt: skip
    try:
        out, err = proc.communicate(timeout=timeout)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    return proc.returncode, out, err


def watched(tmp_path: Path, env: dict[str, str]) -> Path:
    """The directory watch kept of the job (it must have ended the job with exit 3), every process gone."""
    kept = tmp_path / "kept"
    before = {p.pid for p in psutil.process_iter()}
    code, _, err = ddpcheck("watch", "--dir", str(kept), "--hang-after", "3", "--", *JOB,
                            tmp_path=tmp_path, env={"TRAIN_JOB_STEPS": "6", **env})  # fmt: skip
    assert code == 3, err[-3000:]
    assert [p for p in psutil.process_iter(["cmdline"]) if p.pid not in before and ours(p, tmp_path)] == []
    return kept


def ours(proc: psutil.Process, tmp_path: Path) -> bool:
    """A process of this test's job: its TMPDIR tells it from another test's train_job.py run meanwhile."""
    try:
        ran = TRAIN_JOB in " ".join(proc.info["cmdline"] or [])
        return ran and proc.environ().get("TMPDIR") == str(tmp_path / "tmp")
    except psutil.Error:
        return False


def postmortem(kept: Path, tmp_path: Path) -> tuple[int, dict]:
    out = tmp_path / "postmortem.json"
    code, stdout, stderr = ddpcheck("postmortem", str(kept), "--json", str(out), tmp_path=tmp_path)
    assert out.exists(), stdout + stderr
    return code, json.loads(out.read_text())


def test_a_hang_watch_ended_is_no_all_clear_the_stuck_ranks_are_named(tmp_path: Path) -> None:
    """(a) Both ranks asleep in their data loading (TRAIN_JOB_STEP_S: an hour per batch)."""
    kept = watched(tmp_path, {"TRAIN_JOB_STEP_S": "3600"})
    code, report = postmortem(kept, tmp_path)
    assert code == 3, report["checks"]
    checks = {c["name"]: c for c in report["checks"]}
    arrived = checks["group 0 (default_pg): every rank arrived"]
    assert arrived["status"] == "PASS"  # the dumps alone: every rank at DDP's last broadcast
    ended = checks[ENDS]
    assert (ended["status"], ended["ranks"]) == ("ERROR", [0, 1]), ended
    assert (
        "ranks 0, 1 (host " in ended["detail"] and "ended by SIGTERM while in load_batch (" in ended["detail"]
    )
    asleep = line_of("time.sleep(float(os.environ.get")  # the data loading's own sleep
    assert f"train_job.py:{asleep})" in ended["detail"], ended
    assert report["verdict"] == "error"


def test_a_crash_watch_kept_is_read_and_the_rank_that_raised_named(tmp_path: Path) -> None:
    """(b) Rank 1 raises at step 2: watch keeps only the processes' records (no dump)."""
    kept = watched(tmp_path, {"TRAIN_JOB_FAULT": "raise@1:step2"})
    assert not list(kept.glob("nccl_trace_rank_*"))
    code, report = postmortem(kept, tmp_path)
    assert code == 3, report["checks"]
    ended = next(c for c in report["checks"] if c["name"] == ENDS)
    assert (ended["status"], ended["ranks"]) == ("ERROR", [1]), ended
    assert ended["detail"].startswith("rank 1 (host ")
    assert "ValueError: planted failure at step 2, in train_step (" in ended["detail"]
    assert f"train_job.py:{line_of('planted failure at step')})" in ended["detail"]


def test_a_folder_of_reports_is_no_jobs_one_line_exit_2(tmp_path: Path) -> None:
    """(c) Two ddpcheck reports and two text files: it said 'PASS ... no rank failed' before."""
    folder = tmp_path / "reports"
    folder.mkdir()
    for name in ("allreduce", "env"):
        write_json(
            Report(command=name, checks=[Check("x", Status.PASS, "fine")]), str(folder / f"{name}.json")
        )
    (folder / "env.txt").write_text("PASS  ddpcheck env: 12 pass in 0.4 s\n")
    (folder / "notes.txt").write_text("node07 checked on Monday, all fine\n")
    code, out, err = ddpcheck("postmortem", str(folder), tmp_path=tmp_path)
    assert_usage_error(Run(code, out, err, None, 0.0), tmp_path / "tmp")
    assert "no job's traces here" in err
