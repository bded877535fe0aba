"""Hangs, crashes, stops and interrupts become findings that name the rank; nothing is left behind."""

from __future__ import annotations

import array
import contextlib
import fcntl
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import termios
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import psutil
import pytest

from ddpcheck.failure import stacks
from ddpcheck.failure.explain import crash_culprits, judge_stall
from ddpcheck.failure.liveness import Stall
from ddpcheck.failure.statuses import SeenStatus
from ddpcheck.launcher import monitor
from ddpcheck.rank import interrupt, rundir
from tests.conftest import (
    assert_nothing_left,
    process_ended,
    removed_in_time,
    removers_of,
    start_run,
    wait_for_workers,
    worker_processes,
)
from tests.support.hung_tool import all_end, started_children, wait_for_a_start, write_hung_tool
from tests.support.netns import free_port

QUICK = ("--sizes", "1K", "--iters", "1")


# ------------------------------------------------------------------ pure diagnosis
def status(
    rank: int, stage: str, seq: int, *, age: float = 0.3, state: str = "sleeping", **extra
) -> SeenStatus:
    """A rank's status as the watchdog annotates it (process state, heartbeat age)."""
    return {
        "rank": rank,
        "local_rank": rank,
        "host": "h",
        "pid": 1000 + rank,
        "stage": stage,
        "seq": seq,
        "heartbeat_age_s": age,
        "proc_state": state,
        "error": None,
        **extra,
    }


def stall_of(statuses: dict, world_size: int | None = None) -> Stall:
    return Stall(statuses, waited_s=20.0, world_size=world_size or len(statuses))


def test_stall_names_the_rank_that_never_joined() -> None:
    statuses = {0: status(0, "join: waiting", 4), 1: status(1, "join", 3), 2: status(2, "join: waiting", 4)}
    check = judge_stall(stall_of(statuses))
    assert check.ranks == [1]
    assert "rank 1 (host h, pid 1001) never joined the process group" in check.detail
    assert "ranks 0, 2 waited 20 s" in check.detail


def test_stall_tells_frozen_from_waiting() -> None:
    statuses = {0: status(0, "measure: x", 4), 1: status(1, "measure: x", 4, age=20.0)}
    check = judge_stall(stall_of(statuses))
    assert check.ranks == [1] and "frozen" in check.detail
    statuses[1] = status(1, "measure: x", 4, state="stopped")
    stopped = judge_stall(stall_of(statuses))
    assert stopped.ranks == [1] and "stopped (SIGSTOP)" in stopped.detail


def test_a_rank_held_back_by_a_stopped_one_waits_and_is_not_named() -> None:
    """Rank 1 stopped inside the join's barrier after it had answered rank 0, not rank 2: rank 0
    went on to measure, rank 2 stayed. Rank 2 is behind only because it waits for rank 1 (CI
    once named ranks 0 and 1 so; stopped as it entered the barrier, 7 runs in 20 named two ranks:
    tests/perf/bench_own_naming.py)."""
    statuses = {
        0: status(0, "measure: classic all_reduce", 5),
        1: status(1, "join: waiting for every rank", 4, state="stopped"),
        2: status(2, "join: waiting for every rank", 4),
    }
    check = judge_stall(stall_of(statuses))
    assert check.ranks == [1] and check.detail.startswith("rank 1 (host h, pid 1001) is stopped (SIGSTOP)")
    assert "ranks 0, 2 waited 20 s at 'join: waiting for every rank', 'measure: classic all_reduce'" in (
        check.detail
    )
    assert "behind" not in check.detail


def test_stall_with_every_rank_waiting_names_them_all() -> None:
    statuses = {r: status(r, "measure: x", 4) for r in range(3)}
    check = judge_stall(stall_of(statuses))
    assert check.ranks == [0, 1, 2] and "every rank is alive and stuck" in check.detail
    starting = judge_stall(stall_of({r: status(r, "launched", 0) for r in range(2)}))
    assert "before joining the process group" in starting.detail and "collective" not in starting.detail


def test_stall_names_ranks_that_never_started() -> None:
    check = judge_stall(stall_of({0: status(0, "join", 2)}, world_size=2))
    assert "rank(s) 1 never started" in check.detail and 1 in check.ranks


def test_a_rank_hung_on_another_node_is_named_not_the_local_waiters() -> None:
    statuses = {
        0: status(0, "measure: classic", 5),
        1: status(1, "measure", 4, remote=True, host="h2"),  # published by node 1's launcher
    }
    check = judge_stall(stall_of(statuses))
    assert check.ranks == [1] and check.hosts == ["h2"]
    assert "rank 0 waited 20 s" in check.detail


def test_stall_after_the_others_finished_names_the_one_left() -> None:
    statuses = {0: status(0, "done", 7, state="exited"), 1: status(1, "done", 7)}
    check = judge_stall(stall_of(statuses))
    assert check.ranks == [1] and "rank 0 finished" in check.detail


def test_crash_root_cause_is_not_the_peers_that_lost_it() -> None:
    statuses = {
        0: status(0, "measure", 3, error="RuntimeError: Connection closed by peer [127.0.0.1]:1234"),
        1: status(1, "measure", 3, error="RuntimeError: injected crash"),
        2: status(2, "measure", 3),
    }
    exits = {0: {"exitcode": 1}, 1: {"exitcode": 1}, 2: {"exitcode": -15, "signal": "SIGTERM"}}
    assert crash_culprits(statuses, exits) == [1]
    killed = {0: status(0, "measure", 3), 1: status(1, "measure", 3)}
    assert crash_culprits(killed, {1: {"exitcode": -9, "signal": "SIGKILL"}, 0: {"signal": "SIGTERM"}}) == [1]
    # Ranks that ddpcheck itself killed after a crash are never the culprits.
    by_us = {"exitcode": -9, "signal": "SIGKILL", "killed_by_ddpcheck": True}
    crashed = {0: status(0, "measure", 3, error="RuntimeError: injected crash"), 1: status(1, "measure", 3)}
    assert crash_culprits(crashed, {0: {"exitcode": 1}, 1: by_us}) == [0]


def test_only_rank_0_of_a_launch_says_the_interrupted_line() -> None:
    first = interrupt._first_rank
    assert first({}) and first({"RANK": "0", "WORLD_SIZE": "3"}) and first({"OMPI_COMM_WORLD_RANK": "0"})
    assert not first({"RANK": "2"}) and not first({"PMI_RANK": "1"})
    # An srun step's task 1 is quiet; a batch script (SLURM_PROCID without a step) is no rank.
    assert not first({"SLURM_STEP_ID": "0", "SLURM_PROCID": "1"}) and first({"SLURM_PROCID": "1"})


def test_a_signal_while_ranks_run_is_noted_and_the_handlers_come_back(monkeypatch) -> None:
    monkeypatch.setattr(interrupt._State, "stopped", threading.Event())
    before = signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)
    with interrupt.deferred() as stop:
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGINT):
            signal.raise_signal(sig)  # handled before the next line: noted, nothing raised
        assert stop.is_set() and interrupt.interrupted()
    assert (signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)) == before


def test_a_sigterm_ignored_once_the_account_is_complete_stays_ignored(monkeypatch) -> None:
    """A watcher of task 1 that published its evidence ignores srun's SIGTERM; the `deferred` it runs
    in must not bring SIGTERM's default back as it ends (the process would die of it then)."""
    monkeypatch.setattr(interrupt._State, "sigterm_ignored", False)
    monkeypatch.setattr(interrupt._State, "stopped", threading.Event())
    before = signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)
    try:
        with interrupt.deferred(raise_once=True):
            interrupt.ignore_sigterm()
            signal.raise_signal(signal.SIGTERM)  # neither raised nor noted
            assert not interrupt.interrupted()
        assert signal.getsignal(signal.SIGTERM) is signal.SIG_IGN
        assert signal.getsignal(signal.SIGINT) is before[0]
    finally:
        signal.signal(signal.SIGTERM, before[1])


def test_raise_once_gives_one_keyboard_interrupt_and_ignores_the_next(monkeypatch) -> None:
    monkeypatch.setattr(interrupt._State, "stopped", threading.Event())
    with interrupt.deferred(raise_once=True, sigterm=False):
        with pytest.raises(KeyboardInterrupt):
            signal.raise_signal(signal.SIGINT)
        signal.raise_signal(signal.SIGINT)  # a second Ctrl-C during the teardown: ignored
        assert interrupt.interrupted()


# Its rank's interpreter may take longer than `after_s` to reach ddpcheck's first line on a busy host
# (then nothing could tell its launcher is gone: docs/failures.md): `after_s` counts from the rank's
# announcement in its job directory, which comes before Typer and torch load.
ORPHANING_LAUNCHER = """
import glob, os, subprocess, sys, tempfile, time
rank = subprocess.Popen([sys.executable, "-m", "ddpcheck", "allreduce", "--timeout", "120"])
open(sys.argv[1], "w").write(str(rank.pid))
began = time.monotonic()
while not glob.glob(os.path.join(tempfile.gettempdir(), "*", f"rank-*-{rank.pid}.json")):
    if time.monotonic() - began > 60:
        sys.exit("the rank never announced itself")
    time.sleep(0.01)
time.sleep(float(sys.argv[2]))
os._exit(0)  # as mpirun does on a second Ctrl-C: gone, its rank left running
"""


@pytest.mark.integration
@pytest.mark.parametrize("after_s", [0.3, 4.0])  # after it announced itself: importing torch; joining
def test_a_rank_whose_launcher_died_leaves_and_leaves_nothing(tmp_path, after_s) -> None:
    """mpirun ended by a second Ctrl-C leaves its ranks behind: each leaves within a look or two,
    its run directory removed (the soak saw ranks alive 5 s after mpirun, and a run directory
    left in 1 run of 24 Ctrl-C'd twice)."""
    scratch, pid_file = tmp_path / "tmp", tmp_path / "pid"
    scratch.mkdir()
    port = str(free_port())  # nobody listens there: rank 1 waits for rank 0's store
    env = {**os.environ, "TMPDIR": str(scratch), "OMP_NUM_THREADS": "1", "MASTER_ADDR": "127.0.0.1",
           "MASTER_PORT": port, "OMPI_COMM_WORLD_RANK": "1", "OMPI_COMM_WORLD_SIZE": "3",
           "OMPI_COMM_WORLD_LOCAL_RANK": "1", "OMPI_COMM_WORLD_LOCAL_SIZE": "3"}  # fmt: skip
    launcher = subprocess.run(
        [sys.executable, "-c", ORPHANING_LAUNCHER, str(pid_file), str(after_s)], env=env, timeout=60
    )
    assert launcher.returncode == 0
    orphan, gone_at = int(pid_file.read_text()), time.monotonic()
    try:
        while not process_ended(orphan) and time.monotonic() - gone_at < 30:
            time.sleep(0.05)
        assert process_ended(orphan), "the rank outlived its launcher by 30 s"
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(orphan, signal.SIGKILL)
    assert list(scratch.iterdir()) == []


def test_a_run_directory_whose_rank_was_killed_outright_is_swept_next_time(tmp_path, monkeypatch) -> None:
    """srun ends a step with SIGKILL on a second Ctrl-C: no rank is left to remove its run directory
    (the soak saw one left); the next inline run on the host removes it, and only it."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    gone = next(pid for pid in range(4_000_000, 3_000_000, -1) if not psutil.pid_exists(pid))
    dead = tmp_path / f"{rundir.INLINE_PREFIX}{gone}-abc"
    alive = tmp_path / f"{rundir.INLINE_PREFIX}{os.getppid()}-def"  # pytest's parent: still running
    other = tmp_path / "ddpcheck-inline-notapid-x"
    for path in (dead, alive, other):
        (path / "status").mkdir(parents=True)
    mine = rundir.create_inline(rundir.new_inline_path())
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([alive.name, other.name, mine.name])


EARLY_SIGTERM = """
import os, signal, sys, time
from pathlib import Path
from ddpcheck.rank import interrupt
interrupt.install()
interrupt.leave_on_sigterm()  # as rank/inline_run does, before its SIGTERM thread starts
interrupt.remove_on_leave(Path(sys.argv[1]))
os.kill(os.getpid(), signal.SIGTERM)
time.sleep(10)
"""


@pytest.mark.integration
def test_a_launchers_sigterm_before_the_run_answers_it_leaves_nothing(tmp_path) -> None:
    """mpirun's SIGTERM (a Ctrl-C, or another rank failed) can come before the run's own answer to it
    is in place: the rank leaves at once, its run directory removed, exit 128 + SIGTERM."""
    run_dir = tmp_path / "ddpcheck-inline-x"
    run_dir.mkdir()
    env = {**os.environ, "OMPI_COMM_WORLD_RANK": "1", "OMPI_COMM_WORLD_SIZE": "3"}
    proc = subprocess.run([sys.executable, "-c", EARLY_SIGTERM, str(run_dir)], env=env, timeout=30)
    assert proc.returncode == 128 + signal.SIGTERM and not run_dir.exists()


SIGNAL_AS_IT_IS_MADE = """
import os, signal, sys, tempfile
from ddpcheck.rank import inline_run, interrupt
tempfile.tempdir = sys.argv[1]
interrupt.install()
interrupt.leave_on_sigterm()
made = os.mkdir
def mkdir(path, *args, **kwargs):  # the launcher's signal lands the moment the directory exists
    made(path, *args, **kwargs)
    os.kill(os.getpid(), getattr(signal, sys.argv[2]))
os.mkdir = mkdir
inline_run.make_inline_run_dir()
"""


@pytest.mark.integration
@pytest.mark.parametrize(("name", "code"), [("SIGTERM", 128 + signal.SIGTERM), ("SIGINT", 130)])
def test_a_signal_the_moment_the_run_directory_is_made_leaves_nothing(tmp_path, name: str, code: int) -> None:
    """Its removal is arranged before it exists. Made first (tempfile.mkdtemp) and registered
    after, a signal between the two left it: Python runs the handler at the next bytecode."""
    env = {**os.environ, "OMPI_COMM_WORLD_RANK": "1", "OMPI_COMM_WORLD_SIZE": "3"}
    proc = subprocess.run(
        [sys.executable, "-c", SIGNAL_AS_IT_IS_MADE, str(tmp_path), name], env=env, timeout=30
    )
    assert proc.returncode == code and list(tmp_path.iterdir()) == []


CTRL_C_IN_THE_TEMP_PROBE = """
import os, signal, tempfile
from ddpcheck.rank import interrupt
interrupt.install()
write = os.write
def probe_write(fd, data):  # tempfile's probe of the temp directory writes b'blat' to its file
    if data == b"blat":
        os.kill(os.getpid(), signal.SIGINT)
    return write(fd, data)
os.write = probe_write
tempfile.gettempdir()  # the first ask, as a rank's run directory's path does
"""


@pytest.mark.integration
def test_a_ctrl_c_as_python_first_probes_the_temp_directory_leaves_nothing(tmp_path) -> None:
    """Python's first tempfile.gettempdir() makes, writes and removes a file there: a Ctrl-C that
    leaves at once (os._exit) in between left that file (soak: `devices` under mpirun, a file
    '9jnx17rx'). The probe is made before Ctrl-C leaves at once, so none comes inside it."""
    env = {**os.environ, "TMPDIR": str(tmp_path)}
    proc = subprocess.run([sys.executable, "-c", CTRL_C_IN_THE_TEMP_PROBE], env=env, timeout=30)
    assert proc.returncode == 0 and list(tmp_path.iterdir()) == []


def env_ctrl_c_as_it_loads(module: str) -> subprocess.CompletedProcess[str]:
    """`python -m ddpcheck env`, sent one SIGINT the moment `module` (a condition on `name`, the
    module being looked for) starts to load."""
    script = f"""
import os, runpy, signal, sys
class CtrlC:
    sent = False
    def find_spec(self, name, path=None, target=None):
        if ({module}) and not self.sent:
            self.sent = True
            os.kill(os.getpid(), signal.SIGINT)
        return None
sys.meta_path.insert(0, CtrlC())
sys.argv = ["ddpcheck", "env"]
runpy.run_module("ddpcheck", run_name="__main__", alter_sys=True)
"""
    return subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)


@pytest.mark.integration
def test_a_ctrl_c_while_ddpcheck_loads_its_first_modules_leaves_cleanly() -> None:
    """Before `interrupt` answers Ctrl-C, loading it takes a moment (0.01 s idle, far more on a busy
    host): the soak saw torchrun pass a Ctrl-C to two ranks then, each with a KeyboardInterrupt
    traceback through ddpcheck's entry point. The entry point notes such a signal first, and
    leaves the clean way once the handler is in: exit 130, the line, no traceback."""
    proc = env_ctrl_c_as_it_loads('name == "ddpcheck.errors"')  # `interrupt`'s first of ddpcheck's
    assert (proc.returncode, proc.stderr) == (130, f"{interrupt.LINE}\n")


@pytest.mark.integration
def test_a_ctrl_c_as_env_imports_torch_is_not_swallowed() -> None:
    """`env` took a Ctrl-C as a KeyboardInterrupt raised wherever it was: inside torch's native
    import of numpy, which swallows any error, the run went on to exit 0 without a word, or failed
    later on a half-loaded numpy (exit 3): 12 of 200 Ctrl-Cs in `env`'s first 3 s, see
    docs/failures.md. A command that starts nothing leaves at once."""
    proc = env_ctrl_c_as_it_loads('name == "numpy" and "torch" in sys.modules')  # torch's native part
    assert (proc.returncode, proc.stderr) == (130, f"{interrupt.LINE}\n")


@pytest.mark.integration
def test_a_ctrl_c_while_env_waits_on_a_hung_nvidia_smi_kills_it(tmp_path) -> None:
    """env runs nvidia-smi in a session of its own (a timeout kills its whole group), so a
    terminal's Ctrl-C does not reach it: leaving at once left a hung one running."""
    pids = tmp_path / "pids"
    smi = write_hung_tool(tmp_path / "bin" / "nvidia-smi", pids)
    env = {**os.environ, "PATH": f"{smi.parent}{os.pathsep}{os.environ['PATH']}"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "ddpcheck", "env"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # its process group is what a terminal's foreground job is
    )
    wait_for_a_start(pids)
    os.killpg(proc.pid, signal.SIGINT)
    _, err = proc.communicate(timeout=30)
    assert (proc.returncode, err) == (130, f"{interrupt.LINE}\n")
    children = started_children(pids)
    assert children
    assert all_end(children)


CTRL_C_AS_A_TOOL_STARTS = """
import os, signal, subprocess, sys
from pathlib import Path
from tests.support.hung_tool import wait_for_a_start
class PopenThenCtrlC(subprocess.Popen):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        wait_for_a_start(Path(sys.argv[2]))
        os.kill(os.getpid(), signal.SIGINT)  # the handler runs before the caller's next line
subprocess.Popen = PopenThenCtrlC
from ddpcheck.checks.env import bounded
from ddpcheck.rank import interrupt
interrupt.install()
bounded.spawn(sys.argv[1], [])
"""


@pytest.mark.integration
def test_a_ctrl_c_the_moment_env_has_started_a_tool_kills_it(tmp_path) -> None:
    """A Ctrl-C between a tool's start and its listing for leaving killed nothing: the tool, in a
    session of its own, ran on (CI: env's second nvidia-smi, left hung). It now leaves once listed."""
    pids = tmp_path / "pids"
    tool = write_hung_tool(tmp_path / "bin" / "nvidia-smi", pids)
    proc = subprocess.run(
        [sys.executable, "-c", CTRL_C_AS_A_TOOL_STARTS, str(tool), str(pids)],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=Path(__file__).resolve().parent.parent,
    )
    assert (proc.returncode, proc.stderr) == (130, f"{interrupt.LINE}\n")
    children = started_children(pids)
    assert children
    assert all_end(children)


SECOND_CTRL_C_WHILE_LEAVING = """
import os, signal, sys, time
from pathlib import Path
from ddpcheck.rank import interrupt, remover
interrupt.install()
interrupt.remove_on_leave(Path(sys.argv[1]))
remove_now = remover.remove_now
def slow_removal(path):
    os.kill(os.getpid(), signal.SIGINT)  # the second Ctrl-C, while the first one's leave removes
    time.sleep(0.2)
    remove_now(path)
remover.remove_now = slow_removal
os.kill(os.getpid(), signal.SIGINT)
time.sleep(30)
"""


@pytest.mark.integration
def test_a_second_ctrl_c_while_leaving_does_not_stop_the_leave(tmp_path) -> None:
    """The handler's second leave() waited, in the main thread, for the first one it interrupted:
    the process hung there for good, its run directory half removed."""
    run_dir = tmp_path / "ddpcheck-run"
    run_dir.mkdir()
    proc = subprocess.run(
        [sys.executable, "-c", SECOND_CTRL_C_WHILE_LEAVING, str(run_dir)],
        capture_output=True,
        text=True,
        timeout=20,
    )
    assert (proc.returncode, proc.stderr) == (130, f"{interrupt.LINE}\n")
    assert not run_dir.exists()


KILLED_OUTRIGHT = """
import os, signal, sys, tempfile
import psutil
from ddpcheck.rank import inline_run
tempfile.tempdir = sys.argv[1]
run_dir = inline_run.make_inline_run_dir()
(run_dir / "status").mkdir()
(run_dir / "status" / "rank-0.json").write_text("{}")
for child in psutil.Process().children(recursive=True):  # as Slurm's proctrack/linuxproc kills a task
    child.kill()
os.kill(os.getpid(), signal.SIGKILL)
"""


@pytest.mark.integration
def test_an_inline_rank_killed_outright_leaves_nothing(tmp_path) -> None:
    """Once mpirun tears a job down (a Ctrl-C), the first rank to exit makes it SIGKILL the others
    at once: a rank that had just made its run directory, or was removing it, was killed with it
    there (2 runs in 150 of the soak's Ctrl-C'd `collectives` under mpirun). Another process,
    no descendant of the rank (killed with every process it started, as Slurm kills a task),
    removes it a moment after the rank is gone, and ends."""
    proc = subprocess.run([sys.executable, "-c", KILLED_OUTRIGHT, str(tmp_path)], timeout=60)
    assert proc.returncode == -signal.SIGKILL
    assert removed_in_time(tmp_path) == [] and removers_of(tmp_path) == []


@pytest.mark.integration
def test_a_launcher_killed_outright_leaves_nothing(scratch) -> None:
    """ddpcheck itself SIGKILLed mid-run (the OOM killer's way): its ranks end (they watch their
    launcher) and its run directory is removed by a process of its own; before, it stayed."""
    proc = start_run(scratch, "--nproc", "2", *LONG)
    wait_for_workers(scratch, 2)
    assert [p.name for p in scratch.iterdir() if p.name.startswith("ddpcheck-")]  # the run directory
    proc.kill()
    proc.communicate(timeout=60)
    deadline = time.monotonic() + 30
    while (worker_processes(scratch) or list(scratch.iterdir())) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not worker_processes(scratch) and list(scratch.iterdir()) == [] and removers_of(scratch) == []


BEFORE_THE_SIGNAL_THREADS = """
import os, sys, tempfile
scratch = sys.argv[2]
from ddpcheck.rank import interrupt

class Stop:  # in place of the SIGTERM thread: the moment a signal starts being answered off this thread
    def __init__(self, *args, **kwargs):
        [run_dir] = [d for d in os.listdir(scratch) if d.startswith("ddpcheck-inline-")]
        made = os.path.isdir(os.path.join(scratch, run_dir, "inductor"))
        print("torch._dynamo" in sys.modules, made, flush=True)
        os._exit(0)

interrupt.act_from_a_thread = Stop
tempfile.tempdir = scratch
sys.argv = ["ddpcheck", sys.argv[1]]
from ddpcheck.__main__ import main
main()
"""


@pytest.mark.integration
@pytest.mark.parametrize(("command", "imported"), [("train", True), ("profile", True), ("allreduce", False)])
def test_a_rank_that_builds_ddp_makes_its_compile_cache_before_signals_are_answered_off_its_thread(
    tmp_path, command: str, imported: bool
) -> None:
    """DDP's constructor imports torch._dynamo, which makes TORCHINDUCTOR_CACHE_DIR (in the run
    directory). Imported later, on the main thread while the SIGTERM thread had removed the run
    directory, it made it again and mpirun's SIGKILL left it (soak: `profile`, 2 ranks of a run).
    Commands without DDP do not pay the import (0.9 s)."""
    env = {**os.environ, "RANK": "1", "WORLD_SIZE": "2", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2"}
    env |= {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29999"}  # never reached: it stops before
    proc = subprocess.run(
        [sys.executable, "-c", BEFORE_THE_SIGNAL_THREADS, command, str(tmp_path)],
        env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert proc.stdout.split() == [str(imported), str(imported)], proc.stderr[-2000:]


def test_a_rank_that_begins_after_its_run_directory_was_removed_does_not_make_it_again(tmp_path) -> None:
    """A launcher's SIGTERM removes the run directory on its own thread while the main thread goes on
    into run_rank: the status writer it makes there once made the directory again (mkdir with
    parents), and the rank's exit a moment later left it."""
    from ddpcheck.rank.status_channel import StatusWriter

    run_dir = tmp_path / "ddpcheck-inline-1-x"
    identity = {"rank": 1, "local_rank": 1, "node": 0, "host": "h", "address": None, "pid": 1}
    writer = StatusWriter(run_dir, identity)
    try:
        writer.stage("join")
        assert list(tmp_path.iterdir()) == []
    finally:
        writer.close()


# ------------------------------------------------------------------ real runs with faults
@pytest.mark.parametrize(
    ("fault", "culprit", "words"),
    [
        ("hang@1", 1, "is behind: alive but stuck at stage 'measure'"),
        ("hang@2:join", 2, "never joined the process group"),
        ("hang@0:gather", 0, "stuck at stage 'gather'"),
        ("hang@1:done", 1, "stuck at stage 'done'"),
    ],
)
def test_hang_is_named_within_the_timeout(ddpcheck, scratch, fault: str, culprit: int, words: str) -> None:
    run = ddpcheck("allreduce", "--nproc", "3", *QUICK, "--timeout", "4", "--inject", fault)
    assert run.code == 3, run.stdout + run.stderr
    (hang,) = run.failing()
    assert hang["name"] == "hang" and hang["ranks"] == [culprit]
    assert words in hang["detail"]
    assert "waited" in hang["detail"] or "ranks 0, 2 finished" in hang["detail"]
    stages = {row["rank"]: row for row in run.table("stages")}
    assert set(stages) == {0, 1, 2}
    assert run.report["elapsed_s"] < 4 + 15  # the timeout, plus start-up on a loaded 2-core machine
    assert_nothing_left(scratch, run)


@pytest.mark.parametrize(
    ("fault", "culprit", "words"),
    [
        ("crash@1", 1, "raised an exception at stage 'measure': RuntimeError: injected crash"),
        ("crash@0:launched", 0, "RuntimeError: injected crash (crash@0:launched)"),
        ("crash@2:gather", 2, "at stage 'gather'"),
        ("kill@1", 1, "was killed by SIGKILL at stage 'measure'"),
        ("kill@0:join", 0, "was killed by SIGKILL at stage 'join'"),
    ],
)
def test_crash_is_named_with_its_stderr(ddpcheck, scratch, fault: str, culprit: int, words: str) -> None:
    run = ddpcheck("allreduce", "--nproc", "3", *QUICK, "--timeout", "20", "--inject", fault)
    assert run.code == 3, run.stdout + run.stderr
    (crash,) = run.failing()
    assert crash["name"] == "rank crashed" and crash["ranks"] == [culprit], crash
    assert words in crash["detail"]
    if fault.startswith("crash"):
        (tail,) = run.table("stderr")
        assert tail["rank"] == culprit and "injected crash" in tail["stderr_tail"]
        assert "last lines of stderr" in run.stdout
        assert run.report["log_dir"] and Path(run.report["log_dir"]).is_dir()
        assert f"rank logs kept in {run.report['log_dir']}" in run.stdout
    assert run.report["elapsed_s"] < 15  # torn down in seconds, not after the 20 s timeout
    assert_nothing_left(scratch, run)


def test_a_hang_keeps_its_logs_and_shows_the_stuck_ranks_stack(ddpcheck, scratch) -> None:
    run = ddpcheck("allreduce", "--nproc", "2", *QUICK, "--timeout", "4", "--inject", "hang@1")
    assert run.code == 3, run.stdout + run.stderr
    (hang,) = run.failing()
    assert hang["name"] == "hang" and hang["ranks"] == [1]
    # From the flight recorders, dumped on the watchdog's request before the kill: rank 1 hangs
    # before measure's first all_reduce, in which rank 0 waits.
    assert hang["detail"].endswith(
        "rank 1's last collective: none (no collective in this group yet); rank 0 at #1 (all_reduce)"
    )
    kept = Path(run.report["log_dir"])
    assert kept.parent == scratch and f"rank logs kept in {kept}" in run.stdout
    # Only the logs stay; no rank wrote a line, yet each rank's files are there.
    assert [p.name for p in kept.iterdir()] == ["logs"]
    assert len(list(kept.rglob("stderr.log"))) == 2
    if shutil.which("py-spy"):
        (row,) = run.table("stderr")
        assert row["rank"] == 1 and "at_stage" in row["stack"] and "run_rank" in row["stack"]
        assert "rank 1 on" in run.stdout and "Python stack (py-spy, before the kill)" in run.stdout
    assert_nothing_left(scratch, run)


@pytest.mark.integration
def test_python_stacks_skip_quietly_without_py_spy(monkeypatch) -> None:
    # Rank 1 is behind rank 0: the stall names it, and its stack is asked for.
    statuses = {0: status(0, "measure", 4), 1: status(1, "measure", 3, pid=os.getpid(), proc_state="running")}
    monkeypatch.setattr(stacks.shutil, "which", lambda name: None)
    assert monitor.stall_stacks(stall_of(statuses)) == {}
    # A stopped or exited rank cannot be read: not even tried.
    monkeypatch.setattr(stacks.shutil, "which", lambda name: "/bin/false")
    assert monitor.stall_stacks(stall_of({**statuses, 1: {**statuses[1], "proc_state": "stopped"}})) == {}
    assert monitor.stall_stacks(stall_of(statuses)) == {}  # it failed: nothing, no error


def test_a_status_the_judge_cannot_read_costs_the_stacks_not_the_kill() -> None:
    assert monitor.stall_stacks(Stall({1: {"rank": 1}}, waited_s=5.0, world_size=2)) == {}


@pytest.mark.integration
def test_python_stacks_are_bounded_by_their_timeout(monkeypatch, tmp_path) -> None:
    slow = tmp_path / "py-spy"
    slow.write_text("#!/bin/sh\nsleep 30\n")
    slow.chmod(0o755)
    monkeypatch.setattr(stacks.shutil, "which", lambda name: str(slow))
    began = time.monotonic()
    statuses = {0: status(0, "measure", 4), 1: status(1, "measure", 3, pid=os.getpid(), proc_state="running")}
    assert judge_stall(stall_of(statuses)).ranks == [1]  # the rank whose stack is asked for
    assert monitor.stall_stacks(stall_of(statuses), timeout=0.5) == {}
    assert time.monotonic() - began < 5


def test_keep_logs_keeps_empty_logs_and_drops_the_rest(tmp_path) -> None:
    run_dir = tmp_path / "run"
    (run_dir / "logs" / "x" / "attempt_0" / "0").mkdir(parents=True)
    (run_dir / "logs" / "x" / "attempt_0" / "0" / "stderr.log").write_text("")
    (run_dir / "status").mkdir()
    (run_dir / "spec.json").write_text("{}")
    assert rundir.keep_logs(run_dir) == run_dir
    assert [p.name for p in run_dir.iterdir()] == ["logs"]
    assert rundir.keep_logs(tmp_path / "never-started") is None


LONG = ("--sizes", "1K:4M", "--iters", "200")


@pytest.mark.integration
def test_stopped_rank_that_ignores_sigterm_is_named_and_killed(scratch) -> None:
    proc = start_run(scratch, "--nproc", "3", *LONG, "--timeout", "4", "--json", "-")
    workers = wait_for_workers(scratch, 3)
    victim = next(w for w in workers if w.environ().get("RANK") == "1")
    time.sleep(1)
    victim.suspend()  # SIGSTOP
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 3, err
    import json

    report = json.loads(out)
    (hang,) = [c for c in report["checks"] if c["status"] == "ERROR"]
    assert hang["ranks"] == [1] and "stopped (SIGSTOP)" in hang["detail"]
    assert not psutil.pid_exists(victim.pid) or victim.status() == psutil.STATUS_ZOMBIE
    assert_nothing_left(scratch, type("R", (), {"report": report})())


@pytest.mark.integration
def test_ctrl_c_tears_down_and_exits_130(scratch) -> None:
    proc = start_run(scratch, "--nproc", "3", *LONG)
    wait_for_workers(scratch, 3)
    time.sleep(1)
    os.killpg(proc.pid, signal.SIGINT)  # what the terminal does on Ctrl-C
    _assert_interrupted(proc, scratch)


def _assert_interrupted(proc: subprocess.Popen, scratch: Path, launcher: str = "own") -> None:
    """Exit 130 with the one line (under torchrun: torchrun's exit, at most rank 0's line), no
    traceback through ddpcheck, no std::terminate, and nothing left: no process, no file."""
    _, err = proc.communicate(timeout=60)
    lines = err.count(interrupt.LINE)
    tracebacks = [t for t in err.split("Traceback (most recent call last)")[1:] if _through_ddpcheck(t)]
    if launcher == "own":
        assert (proc.returncode, lines) == (130, 1), err
    assert lines <= 1 and not tracebacks and "terminate called" not in err, err
    deadline = time.monotonic() + 5
    while _of_run(scratch) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _of_run(scratch)
    # torchrun keeps its own log directory (torchelastic_*) in TMPDIR: not ddpcheck's to remove.
    assert [p.name for p in scratch.iterdir() if not p.name.startswith("torchelastic_")] == []


def _through_ddpcheck(traceback: str) -> bool:
    """Whether a traceback passes through ddpcheck's code (torchrun's own, of its Ctrl-C, does not)."""
    return any(
        "/ddpcheck/" in frame and "/torch/" not in frame for frame in re.findall(r'File "([^"]+)"', traceback)
    )


def _of_run(scratch: Path) -> list[psutil.Process]:
    """Every process still alive that a run given this TMPDIR started (torchrun, ranks, agents)."""
    found = []
    for proc in psutil.process_iter():
        with contextlib.suppress(psutil.Error):
            if proc.environ().get("TMPDIR") == str(scratch) and proc.status() != psutil.STATUS_ZOMBIE:
                found.append(proc)
    return found


def _moment(proc: subprocess.Popen, scratch: Path, moment: str) -> None:
    """Wait until the run reaches `moment` (see the test below); fail if it ended first."""
    seen = False
    deadline = time.monotonic() + 120
    while proc.poll() is None and time.monotonic() < deadline:
        runs = list(scratch.glob("ddpcheck-*"))
        seen = seen or bool(runs)
        if moment == "torch import":
            with contextlib.suppress(OSError):
                if "libtorch" in Path(f"/proc/{proc.pid}/maps").read_text():
                    return
        elif moment == "launch":
            if runs and not list(runs[0].glob("status/rank-*.json")):
                return
        elif moment == "report":
            # The launch is over and the report is being written: to a pipe left full, so that
            # this moment lasts until the test reads it (a small pipe, a report that overfills it).
            waiting = array.array("i", [0])
            fcntl.ioctl(proc.stdout.fileno(), termios.FIONREAD, waiting)
            if seen and not runs and waiting[0] >= PIPE_BYTES:
                return
        elif moment == "ranks run" and len(list(scratch.glob("ddpcheck-inline-*/"))) == 2:
            return  # each rank of two made its run directory: ddpcheck, not Python, handles SIGINT
        time.sleep(0.005)
    raise AssertionError(f"the run ended before the moment '{moment}': {proc.communicate()}")


F_SETPIPE_SZ = 1031  # fcntl's, Linux
PIPE_BYTES = 4096


# The moments where the launcher, before it handled Ctrl-C itself, left something behind (measured
# with tests/perf/soak.py on the old code, docs/failures.md): in torch's import, Typer turned the
# KeyboardInterrupt into a silent exit 130 (no line); just after the run directory was made, it
# stayed behind, or the agent thread was joined before it had started (exit 3, "internal error");
# while the report was written, exit 130 without the line. Each case failed on the old code in 2
# runs of 2 (links' at launch once with exit 3, once with the run directory left).
@pytest.mark.integration
@pytest.mark.parametrize(
    ("command", "moment"),
    [
        ("allreduce", "torch import"),
        ("links", "launch"),
        ("allreduce", "report"),
    ],
)
def test_ctrl_c_at_any_moment_exits_130_with_one_line(scratch, command: str, moment: str) -> None:
    quick = QUICK if command == "allreduce" else ("--size", "1K", "--iters", "1")
    if moment == "report":  # a JSON report larger than the pipe (9 sizes: about 7 KB)
        quick = ("--sizes", "1K:256K", "--iters", "1", "--json", "-")
    proc = start_run(scratch, "--nproc", "2", *quick, command=command)
    fcntl.fcntl(proc.stdout.fileno(), F_SETPIPE_SZ, PIPE_BYTES)
    _moment(proc, scratch, moment)
    os.killpg(proc.pid, signal.SIGINT)
    _assert_interrupted(proc, scratch)


@pytest.mark.integration
def test_ctrl_c_under_torchrun_ends_every_rank_cleanly(scratch) -> None:
    """torchrun passes a Ctrl-C on to its ranks as SIGINT: each leaves at once, rank 0 says so.

    On the old code, 1 run of 2 left a rank's inline run directory behind."""
    torchrun = ["-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2", "-m", "ddpcheck"]
    proc = start_run(scratch, *LONG, prefix=torchrun)
    _moment(proc, scratch, "ranks run")
    time.sleep(0.5)
    os.killpg(proc.pid, signal.SIGINT)
    _assert_interrupted(proc, scratch, launcher="torchrun")


@pytest.mark.integration
@pytest.mark.skipif(shutil.which("mpirun") is None, reason="mpirun (Debian's openmpi-bin) is not installed")
def test_ctrl_c_under_mpirun_ends_every_rank_cleanly(scratch) -> None:
    """mpirun does not pass a Ctrl-C on (each rank is a process group of its own): it resumes its
    ranks (SIGCONT), stops them a second later (SIGTERM), and SIGKILLs every other the moment one
    exits. Each rank leaves, rank 0 says so at most once, and nothing is left: a rank killed
    before it removed its run directory (2 runs in 150 of the soak) has it removed by its remover."""
    here = str(Path(__file__).resolve().parents[1])
    env = {**os.environ, "TMPDIR": str(scratch), "OMP_NUM_THREADS": "1", "PYTHONPATH": here}
    passed = [arg for name in ("TMPDIR", "OMP_NUM_THREADS", "PYTHONPATH") for arg in ("-x", name)]
    mpirun = ["mpirun", "--allow-run-as-root", "--oversubscribe", "-np", "2", *passed]
    proc = subprocess.Popen(
        [*mpirun, sys.executable, "-m", "ddpcheck", "allreduce", *LONG],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
    )  # fmt: skip
    _moment(proc, scratch, "ranks run")
    os.killpg(proc.pid, signal.SIGINT)
    _assert_interrupted(proc, scratch, launcher="mpirun")


@pytest.mark.integration
def test_ranks_do_not_outlive_a_killed_launcher(scratch) -> None:
    proc = start_run(scratch, "--nproc", "2", *LONG)
    workers = wait_for_workers(scratch, 2)
    proc.kill()
    proc.wait()
    _gone, alive = psutil.wait_procs(workers, timeout=10)
    assert not alive, alive


def test_unreachable_endpoint_is_named_within_the_timeout(ddpcheck, scratch) -> None:
    import socket

    with socket.socket() as probe:  # a port nobody listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    run = ddpcheck(
        "allreduce",
        "--nproc",
        "1",
        *QUICK,
        "--nnodes",
        "2",
        "--node-rank",
        "1",
        "--rdzv-endpoint",
        f"127.0.0.1:{port}",
        "--timeout",
        "5",
    )
    assert run.code == 3
    (launch,) = run.failing()
    assert launch["name"] == "launch" and f"127.0.0.1:{port}" in launch["detail"]
    # Bounded by --timeout, not torch's own rendezvous wait (minutes); the margin is start-up on a busy
    # machine (CI, 2 workers: 15.05 s once against a margin of 10 s). Speed is for tests/perf/.
    assert run.report["elapsed_s"] < 5 + 25
    assert_nothing_left(scratch, run)


def test_runs_side_by_side_leave_nothing(ddpcheck, scratch) -> None:
    """Six runs, two at a time: concurrent runs never collide on a port, and none leaves anything.

    Long series (100 runs of every command under each launcher) are tests/perf/soak.py's: here each
    run costs seconds of the suite's time."""

    def one(_: int) -> int:
        return ddpcheck("allreduce", "--nproc", "2", *QUICK).code

    with ThreadPoolExecutor(max_workers=2) as pool:
        codes = list(pool.map(one, range(6)))
    assert codes == [0] * 6
    assert_nothing_left(scratch)


def test_a_rank_that_ended_mid_run_without_a_word_is_the_lead() -> None:
    statuses = {
        0: status(0, "measure: classic", 5, state="exited", error="RuntimeError: Connection reset by peer"),
        1: status(1, "measure", 4, state="exited", remote=True),  # its node said no more
    }
    check = judge_stall(stall_of(statuses))
    assert check.ranks == [1] and "ended at stage 'measure' without an error" in check.detail


class _Tool:
    """A started tool as own_sessions keeps it: a pid and whether it was reaped."""

    def __init__(self) -> None:
        self.pid, self.returncode = -1, 0


def test_a_signal_while_a_tool_starts_is_acted_on_once_it_is_listed(monkeypatch) -> None:
    from ddpcheck.failure import own_sessions

    monkeypatch.setattr(own_sessions, "_listed", own_sessions.weakref.WeakSet())
    acted: list[bool] = []
    tools = [_Tool()]

    def popen() -> _Tool:
        assert own_sessions.held(lambda: acted.append(tools[0] in own_sessions._listed))
        return tools[0]

    assert own_sessions.start(popen) is tools[0]
    assert acted == [True]  # after the listing, and once
    assert not own_sessions.held(lambda: acted.append(False))  # nothing starting: act now
    tools.clear()
    assert len(own_sessions._listed) == 0  # a tool forgotten leaves the list


@pytest.mark.integration
def test_a_tool_started_for_its_output_is_killed_when_the_process_leaves(tmp_path) -> None:
    """py-spy (attach, watch), nvidia-smi (env, a rank's GPU facts): each in a session of its own."""
    from ddpcheck.failure import own_sessions, processes

    pids = tmp_path / "pids"
    tool = processes.started([str(write_hung_tool(tmp_path / "py-spy", pids))])
    wait_for_a_start(pids)
    own_sessions.kill_all()
    assert tool.wait(timeout=10) == -signal.SIGKILL
    assert all_end(started_children(pids))
