"""SIGTERM or SIGINT to `python -m pytest` ends the run within seconds, cleanly, with what its tests started.

A real run of the suite's kind: two xdist workers (the project's conftest), one with a real
ddpcheck run whose rank hangs, one waiting on a child process; then the signal to the
controller alone (tests/support/interrupt.py says why each used to fail).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from tests.conftest import process_ended

ROOT = Path(__file__).resolve().parent.parent

SLOW_TESTS = """\
import subprocess

import pytest


def test_a_rank_hangs(ddpcheck):
    ddpcheck("allreduce", "--nproc", "2", "--inject", "hang@1", "--timeout", "300")


@pytest.mark.integration
def test_a_child_runs():
    subprocess.run(["sleep", "301"])
"""
EXIT_WITHIN_S = 30


def _cmdlines(processes: list[psutil.Process]) -> list[str]:
    found = []
    for process in processes:
        try:
            found.append(" ".join(process.cmdline()))
        except psutil.Error:
            continue
    return found


def _under(pid: int) -> list[psutil.Process]:
    try:
        return psutil.Process(pid).children(recursive=True)
    except psutil.Error:
        return []


def _ignore_sigint() -> None:
    # As a script's `cmd &` starts it: SIGINT ignored, which Python keeps.
    signal.signal(signal.SIGINT, signal.SIG_IGN)


@pytest.mark.integration
@pytest.mark.parametrize(
    ("signum", "workers"),
    [(signal.SIGTERM, 2), (signal.SIGINT, 2), (signal.SIGTERM, 0)],
    ids=["SIGTERM", "SIGINT", "SIGTERM-n0"],
)
def test_a_signal_to_pytest_ends_the_run_and_everything_it_started(
    tmp_path: Path, signum: int, workers: int
) -> None:
    (tmp_path / "test_slow.py").write_text(SLOW_TESTS)
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    argv = [sys.executable, "-m", "pytest", "-c", str(ROOT / "pyproject.toml"), "--rootdir", str(tmp_path)]
    argv += ["-p", "tests.conftest", "-p", "no:cacheprovider", "--basetemp", str(tmp_path / "base")]
    argv += ["-n", str(workers), "--dist", "load", str(tmp_path / "test_slow.py")]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TMPDIR": str(scratch), "OMP_NUM_THREADS": "1"}
    with open(tmp_path / "out", "w") as out:
        proc = subprocess.Popen(
            argv, cwd=tmp_path, env=env, stdout=out, stderr=subprocess.STDOUT,
            start_new_session=True, preexec_fn=_ignore_sigint,
        )  # fmt: skip
    started: list[psutil.Process] = []
    try:
        # The tests under way: the hanging run's two ranks up, and with two workers the child too.
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            started = _under(proc.pid)
            lines = _cmdlines(started)
            ranks = sum("ddpcheck.rank.harness" in line for line in lines)
            if ranks == 2 and ("sleep 301" in lines or workers == 0):
                break
            time.sleep(0.2)
        else:
            raise AssertionError(f"the slow tests did not start: {_cmdlines(started)}")
        time.sleep(1)
        started = _under(proc.pid)
        signalled = time.monotonic()
        os.kill(proc.pid, signum)
        proc.wait(timeout=EXIT_WITHIN_S)
        took = time.monotonic() - signalled
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        for process in started:
            if not process_ended(process.pid):
                process.kill()
    output = (tmp_path / "out").read_text()
    assert proc.returncode == pytest.ExitCode.INTERRUPTED, output
    assert took < EXIT_WITHIN_S
    print(f"{signal.Signals(signum).name}, -n {workers}: ended in {took:.1f} s")
    assert "OSError" not in output and "Traceback" not in output, output
    left = [p for p in started if not process_ended(p.pid)]
    assert not left, _cmdlines(left)
    assert not list(scratch.glob("ddpcheck-*")) and not list((tmp_path / "base").glob("**/ddpcheck-*")), (
        "a run directory outlived its run"
    )
