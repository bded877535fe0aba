"""A rank struck at a random moment of its life is named, under every launcher, and the run is bounded.

Before these, every strike came once all ranks had reached the sweep; under torchrun, srun and
mpirun a rank stopped or killed in `import torch`, in the rendezvous or in `init_process_group`
was named by nobody (issue 39). Here, per launcher: one healthy run measures the span, then rank 2
is stopped and killed at seeded moments drawn uniformly over it. Each must be named (rank 2
alone, by a `ddpcheck` line or the report), every process gone within --timeout + 20 s, nothing
left in TMPDIR. tests/perf/bench_strikes.py draws 20 per launcher, idle and on a busy machine.
A moment after the run's end strikes nothing: the next seeded moment is drawn.
"""

from __future__ import annotations

import shutil
import signal
from pathlib import Path

import pytest

from tests.support.strikes import Outcome, healthy_length, judge, moments, strike

pytestmark = pytest.mark.integration

SEED = 39
ONCE_DONE_TRIES = 3


def _strike_twice(launcher: str, scratch: Path, env: dict[str, str] | None = None) -> None:
    span = healthy_length(launcher, scratch, env, runs=1)
    for signum in (signal.SIGSTOP, signal.SIGKILL):
        for i, moment in enumerate(moments(SEED + signum, 4, span)):
            own = scratch / f"{signum.name}-{i}"  # its own TMPDIR: what it leaves is its own
            own.mkdir()
            outcome = strike(launcher, moment, signum, own, env)
            if outcome.struck:
                break
        else:
            pytest.fail(f"4 moments over {span:.1f} s, none found rank 2 alive")
        named, why = judge(outcome)
        assert named, f"{launcher} {signum.name} at {moment:.2f} s (seed {SEED + signum}): {why}"


def _struck_once_done(
    launcher: str, signum: signal.Signals, scratch: Path, env: dict[str, str] | None
) -> Outcome:
    """Rank 2 struck the moment its file says 'done'. Its stage 'done' and its leaving are milliseconds
    apart: on a busy machine the striker may see it only once it has left (1 run in a whole suite
    under CI's load), and that run passed untouched; as a moment after the run's end, the next try
    strikes. Each try in its own TMPDIR: what it leaves is its own."""
    for attempt in range(ONCE_DONE_TRIES):
        own = scratch / f"{signum.name}-done-{attempt}"
        own.mkdir()
        outcome = strike(launcher, 0.0, signum, own, env, at_stage="done")
        if outcome.struck:
            return outcome
        assert outcome.returncode == 0 and not outcome.leftovers, outcome  # missed: a healthy run
    pytest.fail(f"{ONCE_DONE_TRIES} runs, none found rank 2 at 'done' before it left")


def test_own_launcher(scratch: Path) -> None:
    _strike_twice("own", scratch)


def test_torchrun(scratch: Path) -> None:
    _strike_twice("torchrun", scratch)


def test_srun(slurm: dict[str, str], scratch: Path) -> None:
    _strike_twice("srun", scratch, slurm)


@pytest.mark.skipif(shutil.which("mpirun") is None, reason="mpirun (Debian's openmpi-bin) is not installed")
def test_mpirun(scratch: Path) -> None:
    _strike_twice("mpirun", scratch)


@pytest.mark.parametrize("launcher", ["torchrun", "srun"])
def test_a_rank_stopped_once_done_is_ended_and_named(launcher: str, scratch: Path, request) -> None:
    """Stopped after the run's last collective: nobody waits for it, nobody gives up on it; the remover
    of the last of its peers here ends it and says so, or its launcher would wait for it forever."""
    env = request.getfixturevalue("slurm") if launcher == "srun" else None
    outcome = _struck_once_done(launcher, signal.SIGSTOP, scratch, env)
    named, why = judge(outcome)
    assert named, why
    assert any("at stage 'done'" in line and "ended it (SIGKILL)" in line for line in outcome.lines())


@pytest.mark.parametrize("launcher", ["torchrun", "srun", "mpirun"])
def test_a_rank_killed_once_done_is_named_by_its_remover(launcher: str, scratch: Path, request) -> None:
    """Killed after its part of the run, before it left: the report passed, and mpirun returned 137 with
    no ddpcheck line (1 busy strike of 20, at 5.99 s). Its own remover names it, at once."""
    if launcher == "mpirun" and shutil.which("mpirun") is None:
        pytest.skip("mpirun (Debian's openmpi-bin) is not installed")
    env = request.getfixturevalue("slurm") if launcher == "srun" else None
    outcome = _struck_once_done(launcher, signal.SIGKILL, scratch, env)
    named, why = judge(outcome)
    assert named, why
    said = [line for line in outcome.lines() if "is lost" in line]
    assert len(said) == 1 and "at stage 'done' before it could leave" in said[0], outcome.lines()
