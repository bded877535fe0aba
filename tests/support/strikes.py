"""Strike one rank at a random moment of its life under a launcher: did the others name it, in time?

A run is `allreduce --sizes 1K:4M --iters 20 --timeout 10` on 3 CPU ranks under one launcher (the
own `--nproc 3`, torchrun, `srun -K`, mpirun). Every process of the run carries a tag in its
environment, so rank 2's process is found from its first instant, before ddpcheck or torch are
imported, and every process of the run can be counted when it ends. Rank 2 is stopped (SIGSTOP)
or killed (SIGKILL) `moment_s` after the launcher starts; a moment before its process exists
strikes it the instant it appears. The outcome says what ddpcheck said and when the last process
was gone; `judge()` calls it named or not.

Used by tests/test_strikes.py (a few seeded strikes per launcher) and tests/perf/bench_strikes.py
(20 per launcher, idle and beside one spinning process per core: docs/failures.md's table).
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import re
import signal
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import psutil

TIMEOUT = 10
BOUND_S = TIMEOUT + 20  # the bound: from the strike to the last process gone
SWEEP = ["allreduce", "--sizes", "1K:4M", "--iters", "20", "--timeout", str(TIMEOUT)]
TAG = "DDPCHECK_STRIKE_TAG"
CHECKOUT = str(Path(__file__).resolve().parents[2])  # mpirun's ranks import this code, wherever installed
# Where each launcher puts a rank's number (the own launcher's ranks: RANK, as torchrun's).
RANK_VARIABLE = {"own": "RANK", "torchrun": "RANK", "srun": "SLURM_PROCID", "mpirun": "OMPI_COMM_WORLD_RANK"}
DDPCHECK = [sys.executable, "-m", "ddpcheck", *SWEEP]
COMMANDS = {
    "own": [*DDPCHECK, "--nproc", "3"],
    "torchrun": [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "3",
                 "--shutdown-timeout", "5", "-m", "ddpcheck", *SWEEP],
    "srun": ["srun", "-K", "-n", "3", *DDPCHECK],
    "mpirun": ["mpirun", "--allow-run-as-root", "--oversubscribe", "-np", "3",
               *[a for name in ("PYTHONPATH", "TMPDIR", "OMP_NUM_THREADS", "COLUMNS", TAG)
                 for a in ("-x", name)],
               *DDPCHECK],
}  # fmt: skip
CULPRIT_WORDS = r"is (?:stopped|lost|frozen|behind)|was stopped:|never (?:joined|started|arrived)"


@dataclass
class Outcome:
    launcher: str
    moment_s: float
    signum: int
    struck: bool  # False: the run had ended before the moment came (not a strike)
    pid: int | None = None
    returncode: int | None = None
    out: str = ""
    err: str = ""
    report: dict | None = None
    gone_s: float | None = None  # from the strike to the last process of the run gone
    left: list[str] = field(default_factory=list)  # processes of the run still there after the bound
    leftovers: list[str] = field(default_factory=list)  # what the run left in its TMPDIR (see _leftovers)

    def lines(self) -> list[str]:
        return [line for line in (self.err + self.out).splitlines() if line.startswith("ddpcheck")]


def tagged(tag: str) -> list[psutil.Process]:
    """Every process of the run (the launcher's helpers too), by the tag in its environment."""
    found = []
    for proc in psutil.process_iter(["pid", "name"]):
        try:
            if proc.pid == os.getpid():
                continue
            if proc.environ().get(TAG) == tag:
                found.append(proc)
        except (psutil.Error, OSError):
            continue
    return found


def _rank_process(tag: str, launcher: str, rank: int) -> psutil.Process | None:
    for proc in tagged(tag):
        try:
            env, argv = proc.environ(), proc.cmdline()
            # The rank's python itself, not a helper shell of it that inherited its environment.
            if not argv:
                continue  # a process in its exit has no command line (an IndexError once, busy)
            is_rank = "python" in Path(argv[0]).name and any(a.startswith("ddpcheck") for a in argv)
            if env.get(RANK_VARIABLE[launcher]) == str(rank) and is_rank:
                return proc
        except (psutil.Error, OSError):
            continue
    return None


def _pythonpath() -> str:
    return os.pathsep.join(filter(None, [CHECKOUT, os.environ.get("PYTHONPATH")]))


def strike(launcher: str, moment_s: float, signum: int, scratch: Path, env: dict[str, str] | None = None,
           rank: int = 2, at_stage: str | None = None) -> Outcome:  # fmt: skip
    """Run under `launcher`, strike `rank` with `signum` `moment_s` after the start, wait (bounded).

    With `at_stage`, strike it instead the moment its file in the job's directory (rank/arrival.py)
    names that stage (an inline launcher's rank only)."""
    tag = uuid.uuid4().hex
    report = scratch / f"report-{tag}.json"
    full_env = {**os.environ, "TMPDIR": str(scratch), "OMP_NUM_THREADS": "1", "COLUMNS": "200", TAG: tag,
                "PYTHONPATH": _pythonpath(),
                **(env or {})}  # fmt: skip
    began = time.monotonic()
    proc = subprocess.Popen(
        [*COMMANDS[launcher], "--json", str(report)],
        env=full_env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    outcome = Outcome(launcher, moment_s, signum, struck=False)
    try:
        target = None
        while proc.poll() is None and time.monotonic() - began < 60:
            target = target or _rank_process(tag, launcher, rank)
            if at_stage is not None:
                if target is not None and _stage_of(scratch, rank, target.pid) == at_stage:
                    break
            elif target is not None and time.monotonic() - began >= moment_s:
                break
            time.sleep(0.005)
        # A rank that has left (its verdict out, exiting) is past any moment of its life a peer could see.
        if target is not None and proc.poll() is None and _stage_of(scratch, rank, target.pid) != "left":
            with contextlib.suppress(ProcessLookupError):  # it ended a moment ago: not a strike
                os.kill(target.pid, signum)
                outcome.struck, outcome.pid = _took(target, signum), target.pid
        struck_at = time.monotonic()
        try:
            outcome.out, outcome.err = proc.communicate(timeout=BOUND_S + 15)
        except subprocess.TimeoutExpired:
            outcome.err = "(the launcher had not returned after the bound)"
        deadline = struck_at + BOUND_S + 15
        while tagged(tag) and time.monotonic() < deadline:
            time.sleep(0.1)
        outcome.gone_s = time.monotonic() - struck_at
        outcome.left = [f"{p.pid} {' '.join(p.cmdline())[:120]}" for p in tagged(tag) if _alive(p)]
    finally:
        for p in tagged(tag):
            _kill(p)
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        outcome.returncode = proc.returncode
    if report.exists():
        outcome.report = json.loads(report.read_text())
        report.unlink()
    outcome.leftovers = _leftovers(scratch, outcome.report)
    return outcome


def _leftovers(scratch: Path, report: dict | None) -> list[str]:
    """What the run left in its TMPDIR, but what is meant to stay: the rank logs the own launcher
    keeps after a failure (the report says where), torchrun's and Open MPI's own directories."""
    kept = Path((report or {}).get("log_dir") or "/nonexistent").name
    theirs = ("torchelastic_", "ompi.")
    left = sorted(p for p in scratch.iterdir() if p.name != kept and not p.name.startswith(theirs))
    return [f"{p.name}/{sorted(c.name for c in p.iterdir())[:5]}" if p.is_dir() else p.name for p in left]


def _took(target: psutil.Process, signum: int) -> bool:
    """Whether the signal struck a living rank: a process already exiting is not stopped by SIGSTOP."""
    if signum != signal.SIGSTOP:
        return True
    deadline = time.monotonic() + 1.0
    while time.monotonic() < deadline:
        try:
            if target.status() == psutil.STATUS_STOPPED:
                return True
        except psutil.Error:
            return False
        time.sleep(0.01)
    return False


def _stage_of(scratch: Path, rank: int, pid: int) -> str | None:
    for path in scratch.glob(f"ddpcheck-job-*/rank-{rank}-{pid}.json"):
        with contextlib.suppress(OSError, ValueError):
            return json.loads(path.read_text())["stage"]
    return None


def _alive(proc: psutil.Process) -> bool:
    try:
        return proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _kill(proc: psutil.Process) -> None:
    with contextlib.suppress(psutil.Error):
        proc.kill()


def judge(outcome: Outcome, rank: int = 2) -> tuple[bool, str]:
    """(named and bounded, why not): a ddpcheck line or the report names `rank` alone as the culprit,
    the last process was gone within BOUND_S of the strike, and nothing was left in TMPDIR."""
    if outcome.gone_s is None or outcome.gone_s > BOUND_S or outcome.left:
        return False, f"not bounded: {outcome.gone_s} s, left {outcome.left}"
    if outcome.leftovers:
        return False, f"left in TMPDIR: {outcome.leftovers}"
    # The job directory's remover (rank/arrival.py) writes to the rank's stderr: ddpcheck lines only.
    shell_said = [line for line in outcome.err.splitlines() if line.startswith("ddpcheck-job-remover")]
    if shell_said:
        return False, f"the remover's shell wrote to the user's terminal: {shell_said[0]}"
    ranks = r"((?:\d+, )*\d+)"
    pattern = rf"\branks? {ranks}(?: \([^)]*\))? (?:{CULPRIT_WORDS})|rank\(s\) {ranks} (?:{CULPRIT_WORDS})"
    named = [
        r
        for line in outcome.lines()
        for m in re.findall(pattern, line)
        for g in m
        if g
        for r in g.split(", ")
    ]
    failing = [c for c in (outcome.report or {}).get("checks", []) if c["status"] in ("ERROR", "FAIL")]
    blamed = {int(r) for r in named} | {r for c in failing for r in c.get("ranks", [])}
    if blamed != {rank}:
        return False, f"blamed {sorted(blamed)}: " + " | ".join(outcome.lines())[-600:]
    return True, ""


def healthy_length(launcher: str, scratch: Path, env: dict[str, str] | None = None, runs: int = 2) -> float:
    """The longest of `runs` healthy runs' wall times, launcher start to return: the strikes' span."""
    longest = 0.0
    for _ in range(runs):
        began = time.monotonic()
        done = subprocess.run(
            COMMANDS[launcher],
            env={
                **os.environ,
                "TMPDIR": str(scratch),
                "OMP_NUM_THREADS": "1",
                "PYTHONPATH": _pythonpath(),
                **(env or {}),
            },
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, done.stderr[-2000:]
        longest = max(longest, time.monotonic() - began)
    return longest


def moments(seed: int, count: int, span_s: float) -> list[float]:
    """`count` moments drawn uniformly over [0, span_s), seeded: a failing strike can be rerun."""
    draw = random.Random(seed)
    return [draw.uniform(0.0, span_s) for _ in range(count)]
