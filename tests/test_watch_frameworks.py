"""`watch` and `attach` on jobs started the way people start them (tests/support/framework_job.py).

Lightning's Trainer starts its second rank itself with LOCAL_RANK only (its rank 0 is the process
the user started, with no rank variable at all); `accelerate launch --multi_gpu` runs torchrun's
agent inside its own process; a plain script may start its ranks and give each its rank in init_process_group
alone. Each job runs several collectives a step (DDP's gradient all_reduce, a logged loss). For
each: a straggler and then a crash in one watched run, a hang under watch, and a hang read by
attach from outside (not the plain script's: its ranks carry nothing attach can read a rank from).
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from tests.support.load import busy_cores
from tests.support.netns import free_port

JOB = str(Path(__file__).resolve().parent / "support" / "framework_job.py")
# --multi_gpu, not --cpu: with --cpu accelerate's simple launcher starts one process (two only through
# an MPI hostfile); --multi_gpu runs torchrun's agent, and the script's Accelerator(cpu=True) gloo.
ACCELERATE = [sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes", "2"]
ACCELERATE += ["--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no"]
LAUNCHES = {
    "own": [sys.executable, JOB, "own"],
    "lightning": [sys.executable, JOB, "lightning"],
    "accelerate": [*ACCELERATE, JOB, "accelerate"],
}
HANG_AFTER = 10  # seconds; a framework's start (imports, its ranks' rendezvous) is progress, not a hang
CRASH_STEP = 160  # 8 s of the slowed rank's 0.05 s sleeps before it raises: samples enough to judge


def needs(framework: str) -> pytest.MarkDecorator:
    missing = framework not in ("own", "plain") and importlib.util.find_spec(framework) is None
    return pytest.mark.skipif(missing, reason=f"{framework} is not installed (pip install {framework})")


FRAMEWORKS = [pytest.param(name, marks=needs(name)) for name in LAUNCHES]
OUTSIDE_READABLE = [pytest.param(name, marks=needs(name)) for name in ("lightning", "accelerate")]
# attach's straggler and crash: the frameworks, and a plain DDP script under torchrun or srun.
TORCHRUN = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2"]
SAMPLED_LAUNCHES = {**{name: LAUNCHES[name] for name in ("lightning", "accelerate")},
                    "plain": [*TORCHRUN, JOB, "plain"]}  # fmt: skip
SAMPLED = [pytest.param(name, marks=needs(name)) for name in SAMPLED_LAUNCHES]
ON_SRUN = [pytest.param("lightning", marks=needs("lightning")), "plain"]


def environment(tmp_path: Path, fault: str) -> dict[str, str]:
    return {**os.environ, "OMP_NUM_THREADS": "1", "COLUMNS": "200", "TMPDIR": str(tmp_path),
            "FRAMEWORK_JOB_FAULT": fault, "PYTHONUNBUFFERED": "1"}  # fmt: skip


def watch(tmp_path: Path, framework: str, fault: str) -> tuple[int, dict, str]:
    report = tmp_path / "report.json"
    argv = [sys.executable, "-m", "ddpcheck", "watch", "--hang-after", str(HANG_AFTER), "--sample-every", "1"]
    argv += ["--json", str(report), "--", *LAUNCHES[framework]]
    proc = subprocess.run(argv, env=environment(tmp_path, fault), capture_output=True, text=True, timeout=400)
    assert report.exists(), proc.stderr[-3000:]
    return proc.returncode, json.loads(report.read_text()), proc.stderr


def left_behind(tmp_path: Path) -> list[int]:
    """This test's job processes still running (its TMPDIR tells them from any other run's)."""
    left = []
    for proc in psutil.process_iter(["cmdline"]):
        with contextlib.suppress(psutil.Error):
            if JOB in " ".join(proc.info["cmdline"] or []) and proc.environ().get("TMPDIR") == str(tmp_path):
                left.append(proc.pid)
    return left


@pytest.mark.parametrize(("environ", "rank"), [
    ({"LOCAL_RANK": "1", "NODE_RANK": "0", "WORLD_SIZE": "2"}, 1),  # Lightning's second rank
    ({"LOCAL_RANK": "1"}, 1),
    ({"LOCAL_RANK": "1", "NODE_RANK": "1"}, None),  # another node: its global rank is not given
    ({}, None),
])  # fmt: skip
def test_a_frameworks_local_rank_is_its_rank_on_one_node(environ: dict[str, str], rank: int | None) -> None:
    from ddpcheck.failure.rank_env import single_node_rank

    assert single_node_rank(environ) == rank


def test_the_rank_torch_gave_a_process_wins_over_its_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """A plain script's own ranks carry no rank variable: the agent's rank record names them."""
    from ddpcheck.failure.processes import ProcessTree

    monkeypatch.setattr("ddpcheck.failure.processes.environ", lambda pid: {})
    tree = ProcessTree(os.getpid(), declared=lambda pid: 3 if pid == os.getpid() else None)
    assert {rank: p.pid for rank, p in tree.ranks().items()} == {3: os.getpid()}
    assert not tree.guessed(os.getpid())


def test_a_start_record_without_a_rank_takes_the_rank_record(tmp_path: Path) -> None:
    from ddpcheck.failure.exits import declared_rank, start_of
    from ddpcheck.failure.process_records import PROCESSES, process_file

    (tmp_path / PROCESSES).mkdir()
    start = {"rank": None, "local_rank": None, "host": "vm", "pid": 7, "ppid": 1, "argv": ["x"], "time": 1.0}
    Path(process_file(tmp_path, 7, "start")).write_text(json.dumps(start))
    assert declared_rank(tmp_path, 7) is None and start_of(tmp_path, 7).rank is None
    Path(process_file(tmp_path, 7, "rank")).write_text(json.dumps({"rank": 5, "world_size": 8, "time": 2.0}))
    assert declared_rank(tmp_path, 7) == 5 and start_of(tmp_path, 7).rank == 5


def checked(report: dict, name: str) -> dict:
    return next(c for c in report["checks"] if c["name"] == name)


def failing(report: dict) -> dict[str, dict]:
    return {c["name"]: c for c in report["checks"] if c["status"] in ("ERROR", "FAIL", "WARN")}


@pytest.mark.integration
@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_a_straggler_then_a_crash_are_named_with_both_ranks_seen(tmp_path: Path, framework: str) -> None:
    code, report, err = watch(tmp_path, framework, f"slow@1,raise@1:{CRASH_STEP}")
    found = failing(report)
    assert code == 3, err[-3000:]
    crash = next(c for c in found.values() if c["status"] == "ERROR")
    assert crash["ranks"] == [1] and f"planted failure at step {CRASH_STEP}" in crash["detail"], crash
    assert found["stragglers"]["ranks"] == [1], found["stragglers"]
    assert [row["rank"] for row in report["tables"]["ranks"]] == [0, 1], report["tables"]["ranks"]
    assert left_behind(tmp_path) == []


@pytest.mark.integration
@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_a_hang_is_named_at_the_rank_stuck_in_its_data_loading(tmp_path: Path, framework: str) -> None:
    code, report, err = watch(tmp_path, framework, "hang@1:20")
    assert code == 3, err[-3000:]
    (hang,) = [c for c in report["checks"] if c["status"] == "ERROR"]
    assert hang["ranks"] == [1] and "load_batch" in hang["detail"], hang
    assert left_behind(tmp_path) == []


@contextlib.contextmanager
def running(tmp_path: Path, argv: list[str], env: dict[str, str], ready: str) -> Iterator[subprocess.Popen]:
    """The job started without ddpcheck, yielded once a line of its output holds `ready`; ended
    after, every process of it (torchrun's agent starts its ranks in sessions of their own; srun's tasks
    are slurmstepd's), and proved gone."""
    job = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                           start_new_session=True)  # fmt: skip
    try:
        assert job.stdout is not None
        seen = []
        for line in job.stdout:
            seen.append(line)
            if ready in line:
                break
        assert job.poll() is None, "".join(seen[-30:])
        # Read on, or its output fills the pipe and rank 0 blocks in a print (a hang of the test's own).
        threading.Thread(target=seen.extend, args=(job.stdout,), daemon=True).start()
        yield job
    finally:
        with contextlib.suppress(psutil.Error):
            for proc in psutil.Process(job.pid).children(recursive=True):
                proc.kill()
        with contextlib.suppress(ProcessLookupError):
            os.killpg(job.pid, signal.SIGKILL)
        for pid in left_behind(tmp_path):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        job.wait()
    deadline = time.monotonic() + 10
    while left_behind(tmp_path) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert left_behind(tmp_path) == []


def attach(tmp_path: Path, job: subprocess.Popen, env: dict[str, str] | None = None) -> tuple[int, dict, str]:
    report = tmp_path / "attach.json"
    argv = [sys.executable, "-m", "ddpcheck", "attach", str(job.pid), "--json", str(report)]
    done = subprocess.run(argv, env={**environment(tmp_path, ""), **(env or {})}, capture_output=True,
                          text=True, timeout=120)  # fmt: skip
    assert report.exists(), done.stdout + done.stderr
    return done.returncode, json.loads(report.read_text()), done.stdout + done.stderr


@pytest.mark.integration
@pytest.mark.parametrize("framework", OUTSIDE_READABLE)
def test_attach_names_the_hung_rank_of_a_job_started_without_ddpcheck(tmp_path: Path, framework: str) -> None:
    # rank 0 prints step 0 once both ranks train; rank 1 stops at step 20
    with running(tmp_path, LAUNCHES[framework], environment(tmp_path, "hang@1:20"), "step 0 ") as job:
        time.sleep(3)
        code, report, out = attach(tmp_path, job)
        assert code == 3, out
        (hang,) = [c for c in report["checks"] if c["status"] == "ERROR"]
        assert hang["ranks"] == [1] and "load_batch" in hang["detail"], hang
        assert job.poll() is None, "attach leaves the job running"


@pytest.mark.integration
@pytest.mark.parametrize("framework", SAMPLED)
def test_attach_names_nobody_in_a_healthy_job_then_the_rank_slowed_partway(
    tmp_path: Path, framework: str
) -> None:
    """Healthy (also beside a spinning process on each core), then rank 1 sleeps 50 ms in its data
    loading every step: its peers wait for it in their collectives, and attach names it, WARN, exit 0."""
    slowing = tmp_path / "slow-now"
    env = {**environment(tmp_path, "slow@1"), "FRAMEWORK_JOB_SLOW_WHEN": str(slowing)}
    env["FRAMEWORK_JOB_STEPS"] = "100000"  # on until the test ends it: 200 steps are over in seconds
    with running(tmp_path, SAMPLED_LAUNCHES[framework], env, "step 0 ") as job:
        code, report, out = attach(tmp_path, job)
        assert code == 0 and failing(report) == {}, out
        assert checked(report, "stragglers")["status"] == "PASS", out
        with busy_cores(apart=True):
            code, report, out = attach(tmp_path, job)
        assert code == 0 and failing(report) == {}, out
        slowing.touch()
        time.sleep(1)  # a step or two slowed
        code, report, out = attach(tmp_path, job)
        assert code == 0, out  # a straggler is a WARN, as watch's: the job goes on
        assert list(failing(report)) == ["stragglers"], out
        straggler = checked(report, "stragglers")
        assert straggler["status"] == "WARN" and straggler["ranks"] == [1], straggler
        assert "load_batch" in straggler["detail"] and "framework_job.py" in straggler["detail"], straggler
        assert job.poll() is None, "attach leaves the job running"


@pytest.mark.integration
@pytest.mark.parametrize("framework", ON_SRUN)
def test_attach_names_the_rank_that_died_while_its_peers_wait(slurm, tmp_path: Path, framework: str) -> None:
    """Rank 1 fails at its start (FileNotFoundError) and ends; srun (no --kill-on-bad-exit, its default)
    keeps rank 0, which waits for it in init_process_group. attach: rank 1 is gone (the world size from
    rank 0's SLURM_NTASKS), rank 0 waits for it: exit 3. (torchrun and accelerate end the job at once,
    Lightning alone within 5 s: nothing is left to read; docs/attach.md.)"""
    env = {
        **environment(tmp_path, "fail@1"),
        **slurm,
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(free_port()),
    }
    argv = ["srun", "-n", "2", "--ntasks-per-node", "2", sys.executable, JOB, framework]
    with running(tmp_path, argv, env, "FileNotFoundError") as job:
        deadline = time.monotonic() + 30
        while len(left_behind(tmp_path)) > 1 and time.monotonic() < deadline:
            time.sleep(0.2)  # rank 1's interpreter ends (its traceback is printed before)
        code, report, out = attach(tmp_path, job, env=slurm)
        assert code == 3, out
        (crash,) = [c for c in report["checks"] if c["status"] == "ERROR"]
        assert crash["name"] == "crash" and crash["ranks"] == [1], crash
        assert (
            "rank 1 is gone" in crash["detail"]
            and "rank 0 waits for it in init_process_group" in crash["detail"]
        )
        assert job.poll() is None, "attach leaves the job running"
