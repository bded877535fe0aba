"""`ddpcheck attach`: real gloo jobs started without ddpcheck (torchrun, mpirun, srun), found and judged live.

Each job is tests/support/attach_job.py in its own session and TMPDIR; it prints "ready" once every
rank has stepped, then plants its fault. attach must name the rank, leave the job running, and
leave nothing behind; the test's cleanup ends the job.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from tests.conftest import Run, assert_usage_error
from tests.support.attached import JOB, gone_within, job_processes, py_spies, rank_pid
from tests.support.load import busy_cores
from tests.support.netns import free_port

pytestmark = pytest.mark.integration

VERDICT_S = 10.0  # the bound for 8 ranks on one node; these jobs have 3
PLAIN = [sys.executable, JOB]
MPIRUN = ["mpirun", "--allow-run-as-root", "--oversubscribe", "-np", "3"]
MPIRUN += [a for name in ("PYTHONPATH", "TMPDIR", "OMP_NUM_THREADS", "ATTACH_JOB_MODE", "MASTER_ADDR",
                          "MASTER_PORT") for a in ("-x", name)] + PLAIN  # fmt: skip
needs_mpirun = pytest.mark.skipif(shutil.which("mpirun") is None, reason="mpirun is not installed")


@contextlib.contextmanager
def started(
    launcher: list[str], scratch: Path, mode: str, env: dict[str, str] | None = None
) -> Iterator[subprocess.Popen]:
    """The job (`launcher`: its whole command line) in its mode once ready; ended and proved gone after."""
    log = scratch.parent / "job.log"
    full = {**os.environ, **(env or {}), "TMPDIR": str(scratch), "OMP_NUM_THREADS": "1",
            "ATTACH_JOB_MODE": mode, "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port())}  # fmt: skip
    with open(log, "w") as out:
        proc = subprocess.Popen(
            launcher, env=full, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
    try:
        deadline = time.monotonic() + 120
        while "ready" not in log.read_text():
            assert proc.poll() is None, log.read_text()
            assert time.monotonic() < deadline, log.read_text()
            time.sleep(0.2)
        time.sleep(1.0)  # the fault planted, every rank where it stays
        yield proc
    finally:
        for p in job_processes(scratch):
            with contextlib.suppress(psutil.Error):
                p.send_signal(signal.SIGCONT)
        with contextlib.suppress(OSError):
            os.killpg(proc.pid, signal.SIGKILL)
        for p in job_processes(scratch):
            with contextlib.suppress(psutil.Error):
                p.kill()
        proc.wait(timeout=30)
        assert gone_within(scratch, 10) == []


def check(run, name: str) -> dict:
    return next(c for c in run.report["checks"] if c["name"] == name)


def assert_named(run, name: str, rank: int, *words: str) -> None:
    assert run.code == 3, run.stdout + run.stderr
    found = check(run, name)
    assert found["status"] == "ERROR" and found["ranks"] == [rank], found
    for word in words:
        assert word in found["detail"], found["detail"]
    assert run.seconds < VERDICT_S, run.seconds
    assert check(run, "NCCL RAS")["status"] == "SKIP"  # gloo: no NCCL, no RAS service


# ------------------------------------------------------------------------------------------ torchrun
def torchrun() -> list[str]:
    return [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "3", "--master-port",
            str(free_port()), JOB]  # fmt: skip


def test_torchrun_rank_hung_in_user_code_is_named_and_the_job_goes_on(ddpcheck, scratch) -> None:
    with started(torchrun(), scratch, "hang") as job:
        run = ddpcheck("attach", str(job.pid))
        assert_named(run, "hang", 1, "load_batch", "attach_job.py:", "waiting in all_reduce")
        rows = {r["rank"]: r for r in run.report["tables"]["ranks"]}
        assert sorted(rows) == [0, 1, 2] and rows[1]["pid"] == rank_pid(scratch, 1)
        assert job.poll() is None and len(job_processes(scratch)) == 4  # torchrun and its 3 ranks go on
        assert py_spies(scratch) == []
        # attach wrote nothing: TMPDIR holds only torchrun's own folder
        assert [p.name for p in scratch.iterdir() if not p.name.startswith("torchelastic_")] == []


def test_torchrun_from_any_rank_pid_the_whole_job_is_found(ddpcheck, scratch) -> None:
    with started(torchrun(), scratch, "hang"):
        run = ddpcheck("attach", str(rank_pid(scratch, 2)))
        assert_named(run, "hang", 1, "load_batch")
        assert run.report["world"]["size"] == 3


def test_torchrun_collective_mismatch_is_named(ddpcheck, scratch) -> None:
    with started(torchrun(), scratch, "mismatch") as job:
        run = ddpcheck("attach", str(job.pid))
        assert_named(run, "collective mismatch", 1, "broadcast", "all_reduce")


def test_torchrun_stopped_rank_is_named(ddpcheck, scratch) -> None:
    with started(torchrun(), scratch, "healthy") as job:
        os.kill(rank_pid(scratch, 2), signal.SIGSTOP)
        time.sleep(1.0)
        run = ddpcheck("attach", str(job.pid))
        assert_named(run, "hang", 2, "is stopped")
        assert psutil.Process(rank_pid(scratch, 2)).status() == psutil.STATUS_STOPPED  # left as it was


def test_a_healthy_job_is_named_healthy_also_on_a_busy_machine(ddpcheck, scratch) -> None:
    with started(torchrun(), scratch, "healthy") as job:
        run = ddpcheck("attach", str(job.pid))
        assert run.code == 0, run.stdout + run.stderr
        assert check(run, "job")["status"] == "PASS" and "making progress" in check(run, "job")["detail"]
        with busy_cores(apart=True):
            busy = ddpcheck("attach", str(job.pid))
        assert busy.code == 0, busy.stdout + busy.stderr
        assert job.poll() is None


def assert_ended_by_kill(run, job: subprocess.Popen, scratch: Path, rank: int) -> None:
    """--kill: the verdict first, then every process of the job gone (launcher included), no py-spy left."""
    assert run.code == 3 and check(run, "hang")["ranks"] == [rank], run.stdout + run.stderr
    (note,) = [note for note in run.report["notes"] if note.startswith("--kill: ended the job")]
    # SIGTERM is enough for each launcher: a process that ended but is not yet reaped (a zombie: the job
    # is this test's child) once made attach wait out the 5 s grace and count it as SIGKILLed.
    assert "SIGKILL" not in note, note
    assert job.wait(timeout=15) is not None
    assert gone_within(scratch, 5) == []
    assert py_spies(scratch) == []


def test_kill_ends_the_job_after_the_verdict(ddpcheck, scratch) -> None:
    with started(torchrun(), scratch, "hang") as job:
        run = ddpcheck("attach", str(job.pid), "--kill")
        assert_ended_by_kill(run, job, scratch, 1)


def test_kill_ends_a_plain_python_job(ddpcheck, scratch) -> None:
    with started(PLAIN, scratch, "hang", env={"ATTACH_JOB_RANK": "0"}) as job:
        run = ddpcheck("attach", str(job.pid), "--kill")
        assert_ended_by_kill(run, job, scratch, 0)
        assert list(scratch.iterdir()) == []


# ------------------------------------------------------------------------------------------ mpirun
@needs_mpirun
def test_mpirun_rank_hung_in_user_code_is_named(ddpcheck, scratch) -> None:
    with started(MPIRUN, scratch, "hang") as job:
        run = ddpcheck("attach", str(job.pid))
        assert_named(run, "hang", 1, "load_batch")


@needs_mpirun
def test_mpirun_kill_ends_the_job(ddpcheck, scratch) -> None:
    with started(MPIRUN, scratch, "hang") as job:
        run = ddpcheck("attach", str(job.pid), "--kill")
        assert_ended_by_kill(run, job, scratch, 1)
        assert list(scratch.iterdir()) == []  # mpirun removed its session directory


# ------------------------------------------------------------------------------------------ srun
def _slurm_job_id(scratch: Path) -> str:
    return psutil.Process(rank_pid(scratch, 0)).environ()["SLURM_JOB_ID"]


def test_srun_by_its_pid_and_one_attach_per_node(slurm, ddpcheck, scratch, tmp_path) -> None:
    with started(["srun", "-n", "3", *PLAIN], scratch, "hang", env=slurm) as job:
        run = ddpcheck("attach", str(job.pid), env=slurm)
        assert_named(run, "hang", 1, "load_batch")
        shared = tmp_path / "shared"
        argv = ["srun", "--overlap", "--jobid", _slurm_job_id(scratch), "--ntasks-per-node", "1",
                sys.executable, "-m", "ddpcheck", "attach", "--all", "--dir", str(shared)]  # fmt: skip
        env = {**os.environ, **slurm, "TMPDIR": str(scratch), "COLUMNS": "200"}
        per_node = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120)
        assert per_node.returncode == 3, per_node.stdout + per_node.stderr
        assert "hang: rank 1" in per_node.stdout, per_node.stdout
        assert len(list(shared.glob("*/*.json"))) == 1  # one node, one evidence file, in the step's folder


def _left_of_slurm_job(job_id: str, slurm: dict[str, str]) -> list[str]:
    """What Slurm still holds of job `job_id`: its step daemons ('slurmstepd: [J.0]'), its queue entry."""
    left = []
    for proc in psutil.process_iter(["name", "cmdline"]):
        words = " ".join(proc.info["cmdline"] or [])
        if (proc.info["name"] or "").startswith("slurmstepd") and f"[{job_id}." in words:
            left.append(f"slurmstepd {proc.pid}")
    queued = ["squeue", "-h", "-j", job_id, "-o", "%T"]
    state = subprocess.run(queued, env={**os.environ, **slurm}, capture_output=True, text=True).stdout.strip()
    return left + ([f"squeue: {state}"] if state else [])


def test_srun_kill_ends_the_step_and_its_allocation(slurm, ddpcheck, scratch) -> None:
    with started(["srun", "-n", "3", *PLAIN], scratch, "hang", env=slurm) as job:
        job_id = _slurm_job_id(scratch)
        run = ddpcheck("attach", str(job.pid), "--kill", env=slurm)
        assert_ended_by_kill(run, job, scratch, 1)  # srun itself exits once its tasks are gone
        deadline = time.monotonic() + 10
        while _left_of_slurm_job(job_id, slurm) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert _left_of_slurm_job(job_id, slurm) == []


# ------------------------------------------------------------------------------------------ no job
def test_a_pid_that_is_no_job_is_one_line_and_exit_2(ddpcheck, scratch) -> None:
    sleeper = subprocess.Popen(["sleep", "60"])
    try:
        run = ddpcheck("attach", str(sleeper.pid))
        assert_usage_error(run, scratch)
        assert "is no job" in run.stderr
    finally:
        sleeper.kill()
        sleeper.wait()
    gone = ddpcheck("attach", str(sleeper.pid))
    assert_usage_error(gone, scratch)
    assert "no such process" in gone.stderr


BAD_USAGE = [(), ("1", "--all"), ("--all", "--interval", "0"), ("--all", "--nodes", "3")]


@pytest.mark.parametrize("args", BAD_USAGE)
def test_bad_usage_is_one_line_and_exit_2(ddpcheck, scratch, args) -> None:
    assert_usage_error(ddpcheck("attach", *args), scratch)


def test_a_job_that_ends_while_read_is_one_line_and_exit_2(ddpcheck, scratch) -> None:
    """The job is ended once attach reads its stack (its py-spy runs), not at a fixed time: a job
    that outlived attach's start by 2 s was gone before a slow start found it ("no such process")."""
    job = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"], start_new_session=True)
    runs: list[Run] = []
    reading = threading.Thread(
        target=lambda: runs.append(ddpcheck("attach", str(job.pid), "--interval", "4"))
    )
    try:
        reading.start()
        while reading.is_alive() and not py_spies(scratch):
            time.sleep(0.01)
    finally:
        job.kill()
        job.wait()
        reading.join()
    (run,) = runs
    assert_usage_error(run, scratch)
    assert "ended while attach read it" in run.stderr


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("setpriv") is None, reason="needs root and setpriv")
def test_without_the_rights_to_read_it_is_one_line_and_exit_2(scratch, tmp_path) -> None:
    job = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True)
    try:
        # nobody, keeping only the right to read files (python lives under root's home): not ptrace's.
        argv = ["setpriv", "--reuid", "65534", "--regid", "65534", "--clear-groups", "--inh-caps",
                "+dac_read_search", "--ambient-caps", "+dac_read_search", sys.executable, "-m", "ddpcheck",
                "attach", str(job.pid)]  # fmt: skip
        env = {**os.environ, "TMPDIR": str(scratch), "HOME": str(tmp_path)}
        run = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60, cwd=tmp_path)
        assert run.returncode == 2, run.stdout + run.stderr
        lines = run.stderr.strip().splitlines()
        assert len(lines) == 1 and "no rights to read it" in lines[0], run.stderr
        assert job.poll() is None
    finally:
        job.kill()
        job.wait()
    assert list(scratch.iterdir()) == []
