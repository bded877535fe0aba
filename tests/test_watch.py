"""`ddpcheck watch`: the user's own job (tests/support/train_job.py) under torchrun, with faults planted.

Each fault must be named exactly (rank, function, file:line), and every process of the job gone
within --hang-after + 30 s of the fault. Bad input is exit 2 with one line.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import psutil
import pytest

from ddpcheck.failure.process_records import PROCESSES
from ddpcheck.failure.rank_env import RANK_VARIABLES
from tests.conftest import assert_usage_error

# Every test here runs a real job under watch (torchrun, srun, mpirun or plain python).
pytestmark = pytest.mark.integration

TRAIN_JOB = str(Path(__file__).resolve().parent / "support" / "train_job.py")
HANG_AFTER = 5  # seconds: a hang is named this long after the last progress
BOUND_S = HANG_AFTER + 30
# A job the test strikes must outlive the strike: on an idle machine 200 steps took about a second
# and ended before the test found rank 2's pid (seen in CI). The strike ends it long before.
STRIKE_STEPS = 3000
TORCHRUN = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "3"]
TORCHRUN += ["--shutdown-timeout", "5", TRAIN_JOB]


def line_of(text: str) -> int:
    """The line of train_job.py that holds `text` (so that the tests follow edits of the job)."""
    lines = Path(TRAIN_JOB).read_text().splitlines()
    return next(i for i, line in enumerate(lines, 1) if text in line)


@dataclass
class Watched:
    code: int
    out: str
    err: str
    report: dict | None
    pids: set[int] = field(default_factory=set)
    fault_at: float = 0.0
    ended_at: float = 0.0

    def check(self) -> dict:
        assert self.report is not None, self.err[-3000:]
        (failing,) = [c for c in self.report["checks"] if c["status"] == "ERROR"]
        return failing


def rank_pid(root: int, rank: int) -> int | None:
    try:
        children = psutil.Process(root).children(recursive=True)
    except psutil.Error:
        return None
    for proc in children:
        try:  # any process may end while we look (a py-spy of watch's, say): look at the others
            if proc.environ().get("RANK") == str(rank) and "train_job" in " ".join(proc.cmdline()):
                return proc.pid
        except psutil.Error:
            continue
    return None


def watch(tmp_path: Path, job: list[str], fault: str = "", strike: signal.Signals | None = None,
          steps: int = 4, extra: tuple[str, ...] = (), interrupt: bool = False,
          more_env: dict[str, str] | None = None) -> Watched:  # fmt: skip
    """Run `ddpcheck watch` over the job; with `strike`, send it to rank 2 once rank 2 printed a step
    (with `interrupt`, SIGINT to the watcher itself, as Ctrl-C would)."""
    report = tmp_path / "report.json"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "COLUMNS": "200", "TMPDIR": str(tmp_path),
           "TRAIN_JOB_FAULT": fault, "TRAIN_JOB_STEPS": str(steps), **(more_env or {})}  # fmt: skip
    argv = [sys.executable, "-m", "ddpcheck", "watch", "--hang-after", str(HANG_AFTER), "--json", str(report)]
    pipe = subprocess.PIPE
    proc = subprocess.Popen([*argv, *extra, "--", *job], env=env, stdout=pipe, stderr=pipe, text=True,
                            start_new_session=True)  # fmt: skip
    out: list[str] = []
    last_line = [time.monotonic()]
    started = threading.Event()

    def read() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            out.append(line)
            last_line[0] = time.monotonic()
            # Anywhere in the line, any step after the first: where the job's stdout is unbuffered
            # (PYTHONUNBUFFERED), print's text and newline are two writes, and the ranks, which print
            # together after each all_reduce, interleave theirs (seen in CI: no line began with it).
            if re.search(r"rank 2 step [1-9]\d* ", line):
                started.set()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    err_reader: list[str] = []
    err_thread = threading.Thread(target=lambda: err_reader.extend(proc.stderr or []), daemon=True)
    err_thread.start()
    pids: set[int] = set()
    fault_at = 0.0
    try:
        while proc.poll() is None:
            with contextlib.suppress(psutil.Error):
                pids.update(p.pid for p in psutil.Process(proc.pid).children(recursive=True))
            if interrupt and started.is_set() and not fault_at:
                proc.send_signal(signal.SIGINT)
                fault_at = time.monotonic()
            if strike is not None and started.is_set() and not fault_at:
                pid = rank_pid(proc.pid, 2)
                if pid is not None:
                    os.kill(pid, strike)
                    fault_at = time.monotonic()
            time.sleep(0.1)
            assert time.monotonic() - last_line[0] < 120, "no progress of the test's own for 120 s"
        ended = time.monotonic()
        assert fault_at or (strike is None and not interrupt), (
            "the job ended before the signal was sent:\n" + "".join(out)[-1500:] + "".join(err_reader)[-1500:]
        )
        reader.join(10)
        err_thread.join(10)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    loaded = json.loads(report.read_text()) if report.exists() else None
    return Watched(
        proc.returncode, "".join(out), "".join(err_reader), loaded, pids, fault_at or last_line[0], ended
    )


def assert_all_gone(run: Watched) -> None:
    left = [pid for pid in run.pids if psutil.pid_exists(pid) and psutil.Process(pid).status() != "zombie"]
    assert left == [], left
    assert run.ended_at - run.fault_at <= BOUND_S, run.ended_at - run.fault_at


def test_a_healthy_job_passes_with_one_line_and_its_output_untouched(tmp_path) -> None:
    run = watch(tmp_path, TORCHRUN, steps=3)
    assert run.code == 0, run.err[-3000:]
    for rank in range(3):
        assert f"rank {rank} step 2 loss" in run.out
    (line,) = [line for line in run.out.splitlines() if "ddpcheck watch" in line]
    assert re.search(r"PASS\s+ddpcheck watch \(3 ranks\): 1 pass in [\d.]+ s", line), run.err
    assert run.out.splitlines()[-1] == line  # one line, no tables, after the job's output
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith("ddpcheck-watch")] == []
    assert_all_gone(run)


def test_a_rank_asleep_in_its_data_loading_is_named_and_the_job_ended(tmp_path) -> None:
    run = watch(tmp_path, TORCHRUN, fault="sleep@2:step2", steps=6)
    assert run.code == 3, run.err[-3000:]
    check = run.check()
    assert (check["name"], check["ranks"]) == ("hang", [2]), check
    assert f"is in load_batch ({os.path.relpath(TRAIN_JOB)}:{line_of('time.sleep(3600)')})" in check["detail"]
    assert "ranks 0, 1 were waiting in backward" in check["detail"]
    # The flight recorder's dumps are in the watch directory, for `ddpcheck postmortem`.
    watch_dir = Path(run.report["log_dir"])
    assert sorted(p.name for p in watch_dir.glob("nccl_trace_rank_*")) == [
        f"nccl_trace_rank_{r}" for r in range(3)
    ]
    assert_all_gone(run)


def test_a_rank_that_raises_is_named_with_its_traceback(tmp_path) -> None:
    run = watch(tmp_path, TORCHRUN, fault="raise@1:step2", steps=6)
    assert run.code == 3, run.err[-3000:]
    check = run.check()
    assert (check["name"], check["ranks"]) == ("crash", [1]), check
    where = f"in train_step ({os.path.relpath(TRAIN_JOB)}:{line_of('planted failure at step')})"
    assert f"failed first: ValueError: planted failure at step 2, {where}" in check["detail"]
    assert run.report["tables"]["traceback"][0]["function"] == "train_step"
    assert_all_gone(run)


STUCK_ENDING = """
import atexit, time


@atexit.register
def wait_for_peers():  # an exit handler that never returns (the peer it waits for has gone)
    time.sleep(600)


raise ValueError("planted failure before the end")
"""


def test_a_rank_that_raised_and_is_stuck_ending_is_a_crash_not_a_hang(tmp_path) -> None:
    """Its exception is what went wrong: a process stuck in an exit handler after an uncaught
    exception is named for the exception (under srun it was named as hung, 1 run of 28)."""
    report = tmp_path / "report.json"
    argv = [sys.executable, "-m", "ddpcheck", "watch", "--hang-after", "2", "--json", str(report)]
    done = subprocess.run([*argv, "--", sys.executable, "-c", STUCK_ENDING], capture_output=True, text=True,
                          timeout=120, env={**os.environ, "TMPDIR": str(tmp_path)})  # fmt: skip
    assert done.returncode == 3, done.stderr[-3000:]
    (check,) = [c for c in json.loads(report.read_text())["checks"] if c["status"] == "ERROR"]
    assert (check["name"], check["ranks"]) == ("crash", [0]), check
    assert "failed first: ValueError: planted failure before the end" in check["detail"], check
    assert _left_jobs(tmp_path, "planted failure before the end") == []


def test_a_rank_with_a_differently_sized_collective_is_named_as_a_mismatch(tmp_path) -> None:
    run = watch(tmp_path, TORCHRUN, fault="mismatch@1:step2", steps=6)
    assert run.code == 3, run.err[-3000:]
    check = run.check()
    assert (check["name"], check["ranks"]) == ("collective mismatch", [1]), check
    assert (
        f"all_reduce at train_step ({os.path.relpath(TRAIN_JOB)}:{line_of('dist.all_reduce(logged)')})"
        in (check["detail"])
    )
    assert_all_gone(run)


def test_a_rank_killed_from_outside_is_named_and_its_peers_not_blamed(tmp_path) -> None:
    run = watch(tmp_path, TORCHRUN, strike=signal.SIGKILL, steps=STRIKE_STEPS)
    assert run.code == 3, run.err[-3000:]
    check = run.check()
    assert (check["name"], check["ranks"]) == ("crash", [2]), check
    assert "killed by SIGKILL" in check["detail"]
    assert_all_gone(run)


def test_a_rank_stopped_from_outside_is_named(tmp_path) -> None:
    run = watch(tmp_path, TORCHRUN, strike=signal.SIGSTOP, steps=STRIKE_STEPS)
    assert run.code == 3, run.err[-3000:]
    check = run.check()
    assert (check["name"], check["ranks"]) == ("hang", [2]), check
    assert "is stopped (state T" in check["detail"]
    assert_all_gone(run)


def test_ctrl_c_ends_the_whole_job_with_one_line_and_exit_130(tmp_path) -> None:
    run = watch(tmp_path, TORCHRUN, interrupt=True, steps=STRIKE_STEPS)
    assert run.code == 130, run.err[-3000:]
    assert [line for line in run.err.splitlines() if line.startswith("ddpcheck: ")] == [
        "ddpcheck: interrupted; every rank was stopped"
    ], run.err[-3000:]
    assert "ddpcheck/" not in run.err  # no traceback of its own (torchrun's, on SIGTERM, is the job's)
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith("ddpcheck-watch")] == []
    assert_all_gone(run)


SLEEPER = "import time\nprint('ready', flush=True)\ntime.sleep(600)"


def test_a_sigterm_to_watch_ends_the_job_and_leaves_nothing(tmp_path) -> None:
    """A scheduler's time limit (`timeout`, Slurm's SIGTERM) is taken as a Ctrl-C is: the job ended,
    one line, exit 130, the fresh watch directory removed. Before, watch died of the signal and
    left its directory (`nccl/`, `processes/`) in TMPDIR."""
    env = {**os.environ, "TMPDIR": str(tmp_path)}
    argv = [sys.executable, "-m", "ddpcheck", "watch", "--hang-after", "60", "--"]
    argv += [sys.executable, "-c", SLEEPER]
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline() == "ready\n"
        job = psutil.Process(proc.pid).children(recursive=True)
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, err
    assert [line for line in err.splitlines() if line.startswith("ddpcheck: ")] == [
        "ddpcheck: interrupted; every rank was stopped"
    ], err
    assert job and psutil.wait_procs(job, timeout=5)[1] == []
    assert list(tmp_path.iterdir()) == []


RAISES = "def load():\n    raise ValueError('bad batch')\nload()"


@pytest.mark.parametrize(("code", "words"), [
    (RAISES, "failed first: ValueError: bad batch, in load (<string>:2)"),
    ("import os, signal\nos.kill(os.getpid(), signal.SIGKILL)", "failed first: killed by SIGKILL"),
])  # fmt: skip
def test_a_plain_python_job_is_rank_0_and_its_end_is_read_exactly(ddpcheck, tmp_path, code, words) -> None:
    report = tmp_path / "plain.json"
    run = ddpcheck("watch", "--json", str(report), "--", sys.executable, "-c", code)
    assert run.code == 3, run.stderr
    (check,) = [c for c in json.loads(report.read_text())["checks"] if c["status"] == "ERROR"]
    assert (check["name"], check["ranks"]) == ("crash", [0]) and words in check["detail"], check


@pytest.mark.parametrize("args", [
    [],
    ["--", "no-such-command-here"],
    ["--hang-after", "0", "--", sys.executable, "-c", "pass"],
    ["--dir", "FILE", "--", sys.executable, "-c", "pass"],
])  # fmt: skip
def test_bad_input_is_one_line_and_exit_2(ddpcheck, scratch, tmp_path, args) -> None:
    a_file = tmp_path / "a-file"
    a_file.write_text("")
    run = ddpcheck("watch", *[str(a_file) if a == "FILE" else a for a in args])
    assert_usage_error(run, scratch)


# ------------------------------------------------------------------ one watcher per task: srun and mpirun
def _free_port() -> str:
    from tests.support.netns import free_port

    return str(free_port())


PLAIN_JOB = [sys.executable, TRAIN_JOB]
MPIRUN = ["mpirun", "--allow-run-as-root", "--oversubscribe", "-np", "3"]
MPIRUN += [arg for name in ("PYTHONPATH", "TMPDIR", "OMP_NUM_THREADS", "TRAIN_JOB_FAULT", "TRAIN_JOB_STEPS",
                            "MASTER_ADDR", "MASTER_PORT") for arg in ("-x", name)]  # fmt: skip


def watch_per_task(tmp_path: Path, launcher: list[str], fault: str, env: dict[str, str]) -> Watched:
    """`LAUNCHER ddpcheck watch -- python train_job.py`: one watcher per task; task 0 writes the report."""
    report = tmp_path / "report.json"
    full = {**os.environ, **env, "OMP_NUM_THREADS": "1", "COLUMNS": "200", "TMPDIR": str(tmp_path),
            "TRAIN_JOB_FAULT": fault, "TRAIN_JOB_STEPS": "6", "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": _free_port()}  # fmt: skip
    argv = [*launcher, sys.executable, "-m", "ddpcheck", "watch", "--hang-after", str(HANG_AFTER)]
    argv += ["--json", str(report), "--", *PLAIN_JOB]
    began = time.monotonic()
    proc = subprocess.run(argv, env=full, capture_output=True, text=True, timeout=240)
    loaded = json.loads(report.read_text()) if report.exists() else None
    return Watched(proc.returncode, proc.stdout, proc.stderr, loaded, set(), began, time.monotonic())


def _left_jobs(tmp_path: Path, job: str = TRAIN_JOB) -> list[int]:
    """This test's job processes still running (its TMPDIR tells them from any other run's)."""
    left = []
    for proc in psutil.process_iter(["cmdline"]):
        with contextlib.suppress(psutil.Error):
            if job in " ".join(proc.info["cmdline"] or []) and proc.environ().get("TMPDIR") == str(tmp_path):
                left.append(proc.pid)
    return left


PER_TASK_FAULTS = [
    ("sleep@2:step2", "hang", "is in load_batch"),
    ("raise@1:step2", "crash", "failed first: ValueError: planted failure at step 2"),
]


@pytest.mark.parametrize(("fault", "name", "words"), PER_TASK_FAULTS)
def test_srun_one_watcher_per_task_names_the_rank(slurm, tmp_path, fault, name, words) -> None:
    run = watch_per_task(tmp_path, ["srun", "-K", "-n", "3"], fault, slurm)
    assert run.report is not None, run.out[-2000:] + run.err[-3000:]
    check = run.check()
    culprit = int(fault.split("@")[1][0])
    assert (check["name"], check["ranks"]) == (name, [culprit]), check
    assert words in check["detail"]
    assert run.report["world"]["size"] == 3
    assert _left_jobs(tmp_path) == []


@pytest.mark.skipif(shutil.which("mpirun") is None, reason="mpirun (Debian's openmpi-bin) is not installed")
@pytest.mark.parametrize(("fault", "name", "words"), PER_TASK_FAULTS)
def test_mpirun_one_watcher_per_task_names_the_rank(tmp_path, fault, name, words) -> None:
    env = {"PYTHONPATH": os.pathsep.join([str(Path(__file__).resolve().parents[1]),
                                          *filter(None, [os.environ.get("PYTHONPATH")])])}  # fmt: skip
    run = watch_per_task(tmp_path, MPIRUN, fault, env)
    assert run.report is not None, run.out[-2000:] + run.err[-3000:]
    check = run.check()
    culprit = int(fault.split("@")[1][0])
    assert (check["name"], check["ranks"]) == (name, [culprit]), check
    assert words in check["detail"]
    assert _left_jobs(tmp_path) == []


@pytest.mark.skipif(shutil.which("mpirun") is None, reason="mpirun (Debian's openmpi-bin) is not installed")
def test_watch_around_mpirun_names_the_rank_that_raises(tmp_path) -> None:
    """`ddpcheck watch -- mpirun -np 3 python train.py`: mpirun's ranks are found under it."""
    env = {
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": _free_port(),
        "PYTHONPATH": os.environ.get("PYTHONPATH", ""),
    }
    run = watch(tmp_path, [*MPIRUN, *PLAIN_JOB], fault="raise@1:step2", steps=6, more_env=env)
    assert run.code == 3, run.err[-3000:]
    check = run.check()
    assert (check["name"], check["ranks"]) == ("crash", [1]), check
    assert "failed first: ValueError: planted failure at step 2" in check["detail"]
    assert_all_gone(run)


@pytest.mark.parametrize("ended_by", ["the job's end", "a SIGTERM to the relay"])
def test_keep_reports_the_hang_and_leaves_the_job_running_with_its_output_passed_through(
    tmp_path, ended_by
) -> None:
    """The process that passes the job's output on (a fork of watch's) ends with the job; a signal
    of its own ends it too, without watch's "interrupted" line (it had watch's handlers)."""
    marker = f"kept-{os.getpid()}-{time.monotonic_ns()}"
    code = f"import time\nprint('{marker} started', flush=True)\ntime.sleep(60)\nprint('{marker} done')"
    report = tmp_path / "keep.json"
    argv = [sys.executable, "-m", "ddpcheck", "watch", "--keep", "--hang-after", "2", "--json", str(report)]
    # Files, not pipes: the process that goes on passing the job's output holds them open.
    out, err = tmp_path / "out", tmp_path / "err"
    with out.open("w") as stdout, err.open("w") as stderr:
        done = subprocess.run([*argv, "--", sys.executable, "-c", code], stdout=stdout, stderr=stderr,
                              timeout=60, env={**os.environ, "TMPDIR": str(tmp_path)})  # fmt: skip
    said = out.read_text() + err.read_text()
    assert done.returncode == 3 and f"{marker} started" in said, said
    assert "--keep: the job was left running" in said
    (check,) = [c for c in json.loads(report.read_text())["checks"] if c["status"] == "ERROR"]
    assert (check["name"], check["ranks"]) == ("hang", [0]), check
    kept = [p for p in psutil.process_iter(["cmdline"]) if marker in " ".join(p.info["cmdline"] or [])]
    job = [p for p in kept if "ddpcheck" not in " ".join(p.info["cmdline"])]
    assert len(job) == 1 and job[0].pid == json.loads(report.read_text())["ranks"][0]["pid"], kept
    assert job[0].status() != psutil.STATUS_ZOMBIE  # still running after watch has exited
    if ended_by == "a SIGTERM to the relay":
        (relay,) = [p for p in kept if p not in job]
        relay.terminate()
        assert psutil.wait_procs([relay], timeout=10)[1] == []
    job[0].kill()  # the job's end ends what passes its output through, too
    _, alive = psutil.wait_procs(kept, timeout=10)
    assert alive == [], alive
    assert "interrupted" not in err.read_text()


FORKS_A_RANK_SLOWLY = """
import subprocess, sys, time
env = {"RANK": "1", "PATH": "/usr/bin:/bin"}
# preexec_fn runs in the child after fork, before exec: for that second it still shows this
# process's environment, as every rank does for a moment when its launcher starts it.
subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"], env=env,
                 preexec_fn=lambda: time.sleep(1.5)).wait()
"""


class GuessingTree:
    """A job's process tree whose first scan reads no rank from the job's one process (its environment
    read as empty while it was being exec'd), so rank 0 is guessed, and whose next scans read rank 2."""

    host = "vm"

    def __init__(self, pid: int) -> None:
        self.pid, self.scans = pid, 0

    def ranks(self) -> dict:
        from ddpcheck.failure.processes import RankProcess

        self.scans += 1
        rank = 0 if self.scans == 1 else 2
        return {rank: RankProcess(rank, self.pid, self.host)}

    def guessed(self, pid: int) -> bool:
        return pid == self.pid and self.scans == 1


def test_a_task_whose_rank_could_not_be_read_at_first_is_one_rank_not_two(tmp_path: Path) -> None:
    """srun, one watcher per task: task 2's job process was also taken for rank 0, and a hang of
    rank 2 was reported as 'ranks 0, 2' in a world of 4 (3 runs of 16 under load)."""
    from ddpcheck.checks.watch import WatchOptions
    from ddpcheck.checks.watch.watcher import Watched, Watcher
    from ddpcheck.failure.processes import RankProcess

    for known_at_start in (True, False):  # a task's own rank is known from its environment at start
        watcher = Watcher(WatchOptions(command=["python", "train.py"]), tmp_path)
        watcher.tree = GuessingTree(4242)  # type: ignore[assignment]
        if known_at_start:
            watcher.ranks[2] = Watched(RankProcess(2, 4242, "vm"))
        watcher._scan()  # reads no rank: rank 0 is guessed
        watcher._scan()  # reads rank 2
        watcher._scan()
        assert {rank: w.process.pid for rank, w in watcher.ranks.items()} == {2: 4242}


def test_a_job_started_with_its_rank_is_that_rank_even_while_its_environment_reads_empty(monkeypatch) -> None:
    """The environment watch gave the job's first process is its own: while /proc shows it empty
    (mid-exec), the process is its task's rank, not a guessed rank 0 beside it (a world of 4)."""
    from ddpcheck.failure.processes import ProcessTree

    monkeypatch.setattr(psutil.Process, "environ", lambda self: {})  # every read: mid-exec
    given = {"PATH": "/usr/bin", "SLURM_PROCID": "2"}
    tree = ProcessTree(os.getpid(), given)
    assert {rank: p.pid for rank, p in tree.ranks().items()} == {2: os.getpid()}
    assert not tree.guessed(os.getpid())
    # Without it, rank 0 is guessed: what the watcher's scan has to undo (test above).
    assert list(ProcessTree(os.getpid()).ranks()) == [0] and ProcessTree(os.getpid()).guessed(os.getpid())


SPAWNS_RANK_0 = """
import multiprocessing as mp, os, sys, time
if __name__ == "__main__":
    os.environ["RANK"] = "0"  # set before the start, as a plain python launcher does
    rank = mp.get_context("spawn").Process(target=time.sleep, args=(60,))
    rank.start()  # the spawn method starts the resource tracker first, with RANK=0 in its environment
    print(rank.pid, flush=True)
    rank.join()
"""


@pytest.mark.integration
def test_multiprocessings_resource_tracker_is_not_taken_for_a_rank(tmp_path: Path) -> None:
    """A plain python launcher that sets RANK before its spawn: the tracker, started first with the
    same environment, was taken for rank 0 (its pid in the report's ranks, seen under watch)."""
    from ddpcheck.failure.processes import ProcessTree

    env = {k: v for k, v in os.environ.items() if k not in RANK_VARIABLES}
    script = tmp_path / "launcher.py"
    script.write_text(SPAWNS_RANK_0)
    root = subprocess.Popen([sys.executable, str(script)], env=env, stdout=subprocess.PIPE, text=True)
    try:
        assert root.stdout is not None
        rank_pid = int(root.stdout.readline())
        helpers = [
            p for p in psutil.Process(root.pid).children() if "resource_tracker" in " ".join(p.cmdline())
        ]
        assert helpers and helpers[0].environ().get("RANK") == "0"  # the case itself, as Python makes it
        assert {rank: p.pid for rank, p in ProcessTree(root.pid).ranks().items()} == {0: rank_pid}
    finally:
        for proc in psutil.Process(root.pid).children(recursive=True):
            proc.kill()
        root.kill()
        root.wait()


@pytest.mark.parametrize(("code", "recorded"), [
    ("from multiprocessing.resource_tracker import main", False),
    ("import multiprocessing", True),
])  # fmt: skip
def test_the_agent_leaves_pythons_helpers_alone(tmp_path: Path, code: str, recorded: bool) -> None:
    """The tracker's start record would claim rank 0 for a postmortem: the agent does not start in it."""
    from ddpcheck.checks.watch.environment import job_environment

    (tmp_path / PROCESSES).mkdir()
    env = job_environment({**os.environ, "RANK": "0"}, tmp_path, nccl_info=False)
    done = subprocess.run([sys.executable, "-B", "-c", code], env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert bool(list((tmp_path / PROCESSES).glob("*.start"))) is recorded


def test_a_rank_first_seen_between_fork_and_exec_is_found_once_it_runs() -> None:
    """A rank read before its exec shows its launcher's environment, no rank in it. Kept so, the
    rank was never seen: under load, a job's rank 1 that raised went unnamed and rank 0, which only
    lost its connection to it, was named instead."""
    from ddpcheck.failure.processes import ProcessTree

    env = {k: v for k, v in os.environ.items() if k not in RANK_VARIABLES}
    root = subprocess.Popen([sys.executable, "-c", FORKS_A_RANK_SLOWLY], env=env)
    try:
        tree = ProcessTree(root.pid)
        deadline = time.monotonic() + 20
        while not psutil.Process(root.pid).children() and time.monotonic() < deadline:
            time.sleep(0.01)
        (child,) = psutil.Process(root.pid).children()
        assert "RANK" not in child.environ() and 1 not in tree.ranks()  # forked, not yet exec'd
        while "RANK" not in child.environ() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert {rank: p.pid for rank, p in tree.ranks().items()} == {1: child.pid}
    finally:
        for proc in psutil.Process(root.pid).children(recursive=True):
            proc.kill()
        root.kill()
        root.wait()
