"""Shared helpers: run the real `ddpcheck` command and prove it left nothing behind."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil
import pytest

from tests.support import interrupt, purity
from tests.support.slurm import slurm  # noqa: F401  (a real Slurm: the fixture, for every test file)

# Pure tests and integration tests (tests/support/purity.py): the mark by a rule, and a guard
# that fails a pure test which starts a process.
purity.install_guard()
pytest_runtest_setup = purity.guard_phase
pytest_runtest_call = purity.guard_phase


@pytest.hookimpl(trylast=True)  # after xdist has registered its controller (tests/support/interrupt.py)
def pytest_configure(config: pytest.Config) -> None:
    interrupt.install(config)


def pytest_unconfigure(config: pytest.Config) -> None:
    interrupt.end_what_the_tests_started()


# The files that take longest, first (measured: docs/testing.md). With a file whole per worker
# (`--dist loadfile`), the file that starts last sets the end: by name, test_watch.py (about
# 170 s) came last, and one worker ran it alone while the other had nothing left.
LONGEST_FIRST = (
    "test_watch_stragglers.py",
    "test_watch_straggler_shapes.py",
    "test_watch.py",
    "test_watch_frameworks.py",
    "test_watch_replicas.py",
    "test_watch_replicas_fsdp.py",
    "test_examples.py",
    "test_failures.py",
    "test_strikes.py",
    "test_multinode.py",
    "test_attach.py",
    "test_launchers.py",
    "test_preflight.py",
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    purity.mark_integration(items)
    # A stable sort: each file's tests, and every other file, keep their order.
    items.sort(
        key=lambda item: next((i for i, name in enumerate(LONGEST_FIRST) if item.path.name == name), 99)
    )


def needs_gpu(test: Any) -> Any:
    """CUDA-only tests: selected by `-m gpu` (tests/gpu/run.sh), skipped where no GPU is visible."""
    import torch

    skip = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
    return pytest.mark.gpu(skip(test))


@dataclass
class Run:
    code: int
    stdout: str
    stderr: str
    report: dict[str, Any] | None
    seconds: float

    def check(self, name: str) -> dict[str, Any]:
        assert self.report is not None, self.stderr
        return next(c for c in self.report["checks"] if c["name"] == name)

    def failing(self) -> list[dict[str, Any]]:
        assert self.report is not None, self.stderr
        return [c for c in self.report["checks"] if c["status"] in ("FAIL", "ERROR")]

    def table(self, name: str) -> list[dict[str, Any]]:
        assert self.report is not None, self.stderr
        return self.report["tables"][name]


def process_ended(pid: int) -> bool:
    """Gone, or a zombie: it ran its last (one killed and reparented waits for init to reap it)."""
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.Error:
        return True


def removers_of(scratch: Path) -> list[psutil.Process]:
    """The processes that remove a run directory under `scratch` once its rank, or launcher, is gone,
    and an inline job's directory once its last rank on the host is (rank/arrival.py)."""
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        cmdline = proc.info["cmdline"] or []
        remover = "ddpcheck-remover" in cmdline or "ddpcheck-job-remover" in cmdline
        if remover and any(arg.startswith(str(scratch)) for arg in cmdline):
            found.append(proc)
    return found


def removed_in_time(scratch: Path, keep: tuple[str, ...] = (), within_s: float = 5.0) -> list[str]:
    """What is left in `scratch` once every remover of it has ended (or `within_s` passed).

    A rank killed outright (mpirun's SIGKILL of a job it tears down), or a launcher, has its
    directory removed by a process of its own a moment after it is gone, not before its launcher
    exits: on a loaded machine that moment was later than the check right after the run (CI, once).
    """
    deadline = time.monotonic() + within_s
    while removers_of(scratch) and time.monotonic() < deadline:
        time.sleep(0.05)
    return [p.name for p in scratch.iterdir() if not p.name.startswith(keep)]  # startswith(()): False


def worker_processes(scratch: Path | None = None) -> list[psutil.Process]:
    """Every ddpcheck rank on this machine; with `scratch`, only those of runs given that TMPDIR."""
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        cmdline = " ".join(proc.info["cmdline"] or [])
        if "ddpcheck.rank.harness" not in cmdline:
            continue
        try:
            if scratch is None or proc.environ().get("TMPDIR") == str(scratch):
                found.append(proc)
        except psutil.Error:
            continue  # it ended while we looked
    return found


def start_run(
    scratch: Path,
    *args: str,
    command: str = "allreduce",
    prefix: tuple[str, ...] | list[str] = ("-m", "ddpcheck"),
) -> subprocess.Popen:
    """`python -m ddpcheck COMMAND ARGS` in the background: TMPDIR `scratch`, a session of its own."""
    env = {**os.environ, "TMPDIR": str(scratch), "OMP_NUM_THREADS": "1"}
    return subprocess.Popen(
        [sys.executable, *prefix, command, *args],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )


def wait_for_workers(scratch: Path, count: int) -> list[psutil.Process]:
    """The `count` ranks of the run given TMPDIR `scratch`, once each has written its status."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        workers = worker_processes(scratch)
        if len(workers) == count and len(list(scratch.glob("ddpcheck-*/status/rank-*.json"))) == count:
            return workers
        time.sleep(0.1)
    raise AssertionError("workers did not start")


@pytest.fixture
def scratch(tmp_path: Path) -> Path:
    """A private TMPDIR: whatever a run leaves there is visible to the test."""
    directory = tmp_path / "tmp"
    directory.mkdir()
    return directory


@pytest.fixture
def ddpcheck(scratch: Path, tmp_path: Path):
    """Run `python -m ddpcheck ARGS`; return a Run with the parsed --json report."""

    def run(*args: str, timeout: float = 240, env: dict[str, str] | None = None) -> Run:
        report_path = tmp_path / f"report-{time.monotonic_ns()}.json"
        full_env = {**os.environ, "TMPDIR": str(scratch), "OMP_NUM_THREADS": "1", "COLUMNS": "200"}
        full_env.update(env or {})
        argv = [sys.executable, "-m", "ddpcheck", *args]
        if args and not args[0].startswith("-") and "--json" not in args:
            argv += ["--json", str(report_path)]
        began = time.monotonic()
        proc = subprocess.run(argv, capture_output=True, text=True, env=full_env, timeout=timeout)
        seconds = time.monotonic() - began
        report = json.loads(report_path.read_text()) if report_path.exists() else None
        return Run(proc.returncode, proc.stdout, proc.stderr, report, seconds)

    return run


def assert_nothing_left(scratch: Path, run: Run | None = None) -> None:
    """No rank survives; the only thing in TMPDIR is a log directory the report announced."""
    deadline = time.monotonic() + 5
    while worker_processes(scratch) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not worker_processes(scratch), [p.info["cmdline"] for p in worker_processes(scratch)]
    # After the removers (rundir.remove_once_this_process_is_gone) have acted: a kept log
    # directory must outlive its remover, anything else must not.
    leftovers = sorted(removed_in_time(scratch))
    announced = (run.report or {}).get("log_dir") if run else None
    if announced:
        assert Path(announced).is_dir(), f"the kept logs {announced} are gone"
        leftovers = [name for name in leftovers if str(scratch / name) != announced]
    assert leftovers == [], leftovers


def assert_usage_error(run: Run, scratch: Path) -> None:
    """Bad input: exit 2, one line on stderr, no traceback, and nothing launched."""
    assert run.code == 2, run.stdout + run.stderr
    lines = run.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("ddpcheck: error: "), run.stderr
    assert "Traceback" not in run.stdout + run.stderr
    assert list(scratch.iterdir()) == []  # no run directory: nothing was launched
    assert not worker_processes(scratch)
