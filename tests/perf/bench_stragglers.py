"""How well and at what cost `ddpcheck watch` names the rank that slows a job (docs/watch.md).

Three figures, each on tests/support/slow_job.py (gloo, CPU, 3 ranks, 50 ms of work per step ± 10%):

- named: N runs with rank 1 slowed 30% and N healthy runs (alternating), under watch with
  --sample-every 1, per launcher: a plain `python` (the job starts its own ranks), torchrun, and
  one watcher per task under a real srun (slurmctld/slurmd started here, tests/support/slurm.py)
  and mpirun: how often the slowed rank is named (and it alone), how often a healthy job names
  anybody, and how many runs were judged at all;
- cost: a healthy job of a fixed number of steps under torchrun and watch, without sampling
  (--sample-every 0) and with (--sample-every S), side by side, the order swapped every rep; for
  each rep the ratio with / without of the job's own time (rank 0's steps, start-up excluded) and
  of watch's wall time (start-up included); their medians, spread and a bootstrap 95% interval;
- pause: the longest gap a rank's busy main thread sees while its agent answers one sample
  request (its recorder full: TORCH_FR_BUFFER_SIZE collectives), against no dump at all.

    python tests/perf/bench_stragglers.py --runs 20 --cost-reps 12
    python tests/perf/bench_stragglers.py --phases naming --launchers srun,mpirun --runs 20
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.support.netns import free_port
from tests.support.slurm import SlurmUnavailable, slurm_daemons
from tests.test_watch_stragglers import MPIRUN, PLAIN_JOB, SLOW_JOB, SRUN, TORCHRUN

HERE = Path(__file__).resolve().parents[2]

STEP_S = 0.05  # slow_job.py's work per step
JOBS = {
    "python": ((), [sys.executable, SLOW_JOB, "--nproc", "3"]),
    "torchrun": ((), [*TORCHRUN, SLOW_JOB]),
    "srun": (SRUN, PLAIN_JOB),
    "mpirun": (MPIRUN, PLAIN_JOB),
}
# One rank, its flight recorder filled, then a busy loop timed while the agent dumps (or not).
PAUSE = """
import os, statistics, sys, threading, time
import torch, torch.distributed as dist
sys.path.insert(0, {root!r})
from ddpcheck.checks.watch import agent
dist.init_process_group("gloo", init_method="tcp://127.0.0.1:{port}", rank=0, world_size=1)
t = torch.ones(1024)
for _ in range(int(os.environ.get("TORCH_FR_BUFFER_SIZE", "2000"))):
    dist.all_reduce(t)
def longest_gap(seconds, during=None):
    worker = threading.Thread(target=during) if during else None
    gaps, last = [], time.perf_counter()
    end = last + seconds
    if worker: worker.start()
    while last < end:
        now = time.perf_counter(); gaps.append(now - last); last = now
    if worker: worker.join()
    return max(gaps) * 1e3
dumps = []
def dump():
    began = time.perf_counter()
    agent._write_dump({path!r}, stacks=(False,))
    dumps.append((time.perf_counter() - began) * 1e3)
reference = [longest_gap(0.5) for _ in range(10)]
paused = [longest_gap(0.5, dump) for _ in range(10)]
print(max(reference), max(paused), statistics.median(dumps), os.path.getsize({path!r}))
dist.destroy_process_group()
"""
DONE = re.compile(r"rank 0 done: \d+ steps in ([\d.]+) s")


def watched(
    launcher: str, tmp: str, sample_every: float, env: dict[str, str], **planted: str
) -> tuple[int, dict, float, str]:
    """(exit code, report, wall seconds, the job's stdout) of one run of the job under watch."""
    prefix, job = JOBS[launcher]
    report = os.path.join(tmp, "report.json")
    full = {
        **os.environ,
        **env,
        "OMP_NUM_THREADS": "1",
        "COLUMNS": "200",  # mpirun passes it on (-x): set
        "TMPDIR": tmp,
        "SLOW_JOB_RANK": "-1",
        "SLOW_JOB_FACTOR": "1.3",
        "SLOW_JOB_SECONDS": "0",
        **planted,
    }
    if prefix:  # one watcher per task: the job's rendezvous is the caller's to give, as without watch
        full.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()), PYTHONPATH=str(HERE))
    argv = [*prefix, sys.executable, "-m", "ddpcheck", "watch", "--sample-every", f"{sample_every:g}"]
    began = time.perf_counter()
    done = subprocess.run([*argv, "--json", report, "--", *job], env=full, capture_output=True, text=True)
    wall = time.perf_counter() - began
    loaded = json.loads(Path(report).read_text()) if os.path.exists(report) else {}
    return done.returncode, loaded, wall, done.stdout


def named(report: dict) -> list[int] | None:
    """The ranks the stragglers check names ([] when PASS), None when there is no such check."""
    check = next((c for c in report.get("checks", []) if c["name"] == "stragglers"), None)
    if check is None:
        return None
    return list(check.get("ranks") or []) if check["status"] == "WARN" else []


@contextlib.contextmanager
def launcher_env(launcher: str) -> Iterator[dict[str, str] | None]:
    """What the launcher needs here (srun: a Slurm started for the benchmark); None: not here."""
    if launcher == "srun":
        try:
            with slurm_daemons() as env:
                yield env
        except SlurmUnavailable as exc:
            print(f"srun      skipped: {exc}", flush=True)
            yield None
        return
    if launcher == "mpirun" and shutil.which("mpirun") is None:
        print("mpirun    skipped: not installed", flush=True)
        yield None
        return
    yield {}


def naming(launchers: list[str], runs: int, seconds: float, sample_every: float) -> None:
    for launcher in launchers:
        with launcher_env(launcher) as env:
            if env is None:
                continue
            right = wrong = unjudged = 0
            healthy_named = healthy_judged = 0
            walls: list[float] = []
            began = time.monotonic()
            for _ in range(runs):  # slowed and healthy alternate: any drift of the machine hits both
                with tempfile.TemporaryDirectory() as tmp:
                    _, report, wall, _ = watched(
                        launcher, tmp, sample_every, env, SLOW_JOB_RANK="1", SLOW_JOB_SECONDS=f"{seconds:g}"
                    )
                    found = named(report)
                    right += found == [1]
                    wrong += found not in ([1], None) and bool(found)
                    unjudged += found is None
                    walls.append(wall)
                with tempfile.TemporaryDirectory() as tmp:
                    _, report, wall, _ = watched(
                        launcher, tmp, sample_every, env, SLOW_JOB_SECONDS=f"{seconds:g}"
                    )
                    healthy_judged += named(report) is not None
                    healthy_named += bool(named(report))
                    walls.append(wall)
            print(
                f"{launcher:9s} slowed 30%: rank 1 named in {right} of {runs} ({wrong} named another rank, "
                f"{unjudged} not judged); healthy: somebody named in {healthy_named} of {runs} "
                f"({healthy_judged} judged); a run {statistics.median(walls):.1f} s (median), "
                f"{time.monotonic() - began:.0f} s in all",
                flush=True,
            )


def _spread(ratios: list[float], seed: int = 41) -> str:
    """Median, min-max, quartiles and a bootstrap 95% interval of the median of per-rep ratios."""
    rng = random.Random(seed)
    boots = sorted(statistics.median(rng.choices(ratios, k=len(ratios))) for _ in range(2000))
    q1, _, q3 = statistics.quantiles(ratios, n=4) if len(ratios) > 1 else (ratios[0],) * 3
    return (
        f"median {statistics.median(ratios):.3f}, quartiles {q1:.3f}-{q3:.3f}, "
        f"min-max {min(ratios):.3f}-{max(ratios):.3f}, bootstrap 95% of the median "
        f"{boots[int(0.025 * len(boots))]:.3f}-{boots[int(0.975 * len(boots)) - 1]:.3f}"
    )


def cost(reps: int, seconds: float, sample_every: float) -> None:
    steps = str(int(seconds / STEP_S))  # a fixed number of steps (not of seconds): the time is the job's
    job: dict[float, list[float]] = {0.0: [], sample_every: []}
    wall: dict[float, list[float]] = {0.0: [], sample_every: []}
    for rep in range(reps):
        order = (0.0, sample_every) if rep % 2 == 0 else (sample_every, 0.0)
        for every in order:
            with tempfile.TemporaryDirectory() as tmp:
                _, _, took, out = watched("torchrun", tmp, every, {}, SLOW_JOB_STEPS=steps)
                match = DONE.search(out)
                job[every].append(float(match.group(1)) if match else float("nan"))
                wall[every].append(took)
        print(
            f"rep {rep + 1:2d} ({'off first' if order[0] == 0.0 else 'on first '}): job's own time without "
            f"sampling {job[0.0][-1]:.2f} s, with {job[sample_every][-1]:.2f} s; watch's wall "
            f"{wall[0.0][-1]:.2f} s, {wall[sample_every][-1]:.2f} s",
            flush=True,
        )
    for name, figures in (("the job's own time", job), ("watch's wall time", wall)):
        off, on = figures[0.0], figures[sample_every]
        ratios = [b / a for a, b in zip(off, on, strict=True)]
        print(
            f"{name}, {reps} reps: without sampling {statistics.median(off):.2f} s, --sample-every "
            f"{sample_every:g} {statistics.median(on):.2f} s (medians), ratio of medians "
            f"{statistics.median(on) / statistics.median(off):.3f}; per-rep ratios: {_spread(ratios)}",
            flush=True,
        )


def pause() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        code = PAUSE.format(root=str(HERE), port=free_port(), path=os.path.join(tmp, "0-1.sample"))
        env = {**os.environ, "OMP_NUM_THREADS": "1", "TORCH_FR_BUFFER_SIZE": "2000"}
        out = subprocess.run(
            [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
        )
    reference, paused, dump_ms, size = out.stdout.split()
    print(f"one dump of a full recorder (2000 gloo entries, {int(size) / 1e6:.2f} MB): "
          f"{float(dump_ms):.1f} ms "
          f"(median of 10); longest gap of the rank's busy loop: {float(paused):.1f} ms while it dumps, "
          f"{float(reference):.1f} ms with no dump (reference)", flush=True)  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--runs", type=int, default=20, help="slowed and healthy runs per launcher")
    parser.add_argument("--launchers", default="python,torchrun,srun,mpirun", help="comma-separated")
    parser.add_argument("--phases", default="pause,naming,cost", help="comma-separated")
    parser.add_argument("--cost-reps", type=int, default=12, help="reps of the cost, the order swapped each")
    parser.add_argument("--seconds", type=float, default=10.0, help="each named job's length")
    parser.add_argument("--cost-seconds", type=float, default=20.0, help="the costed job's steps x 50 ms")
    parser.add_argument(
        "--sample-every", type=float, default=1.0, help="the sampling period of the named runs"
    )
    parser.add_argument(
        "--cost-every", type=float, default=5.0, help="the sampling period costed (the default)"
    )
    args = parser.parse_args()
    os.environ["OMP_NUM_THREADS"] = "1"
    phases = args.phases.split(",")
    began = time.monotonic()
    print(f"load average at the start: {' '.join(f'{x:.1f}' for x in os.getloadavg())}", flush=True)
    if "pause" in phases:
        pause()
    if "naming" in phases:
        naming(args.launchers.split(","), args.runs, args.seconds, args.sample_every)
    if "cost" in phases:
        cost(args.cost_reps, args.cost_seconds, args.cost_every)
    print(f"load average at the end: {' '.join(f'{x:.1f}' for x in os.getloadavg())}")
    print(f"{time.monotonic() - began:.0f} s in all")


if __name__ == "__main__":
    main()
