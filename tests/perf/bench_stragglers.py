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

With --shapes, the named runs are of the shapes of tests/support/straggler_shapes.py (each one run
per slowed and healthy pair, per launcher, every shape under every launcher), and for each the figure the
rule names by (a rank's peers' wait share for it beyond the median of its peers' own) is printed: of
the slowed rank in the slowed runs (what must reach the floor), of the most waited-for rank in the
healthy ones (what must not), and how often the old rule (late at >= 60% of the window's
collectives) would have named the slowed rank. --busy N runs them beside N spinners.

    python tests/perf/bench_stragglers.py --runs 20 --cost-reps 12
    python tests/perf/bench_stragglers.py --phases simulate --seeds 200
    python tests/perf/bench_stragglers.py --phases naming --launchers srun,mpirun --runs 20
    python tests/perf/bench_stragglers.py --phases naming --launchers python --runs 10 \
        --shapes one,two,two-ddp,accum,stall,partway --seconds 8
    python tests/perf/bench_stragglers.py --phases naming --launchers srun,mpirun --runs 3 \
        --shapes one,two,accum,stall,partway --seconds 4
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
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from ddpcheck.checks.watch.looks import read_tick
from tests.support.load import busy_cores
from tests.support.netns import free_port
from tests.support.slurm import SlurmUnavailable, slurm_daemons
from tests.test_watch_stragglers import MPIRUN, PLAIN_JOB, SHAPES_JOB, SLOW_JOB, SRUN, TORCHRUN

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
wheres = []  # the stack beside each answer (agent._write_where), inside a process group as a rank's
for _ in range(200):
    began = time.perf_counter()
    agent._write_where({path!r} + ".where")
    wheres.append((time.perf_counter() - began) * 1e6)
size = os.path.getsize({path!r})
print(max(reference), max(paused), statistics.median(dumps), size, statistics.median(wheres))
dist.destroy_process_group()
"""
# A shape: its job's environment, and its slowed rank's planting (tests/support/straggler_shapes.py).
SHAPES = {
    "one": ({"SLOW_JOB_SHAPE": "one"}, {"SLOW_JOB_FACTOR": "1.3"}),
    "two": ({"SLOW_JOB_SHAPE": "two"}, {"SLOW_JOB_FACTOR": "1.5"}),
    "two-ddp": ({"SLOW_JOB_SHAPE": "two", "SLOW_JOB_DDP": "1"}, {"SLOW_JOB_FACTOR": "1.5"}),
    "accum": ({"SLOW_JOB_SHAPE": "accum"}, {"SLOW_JOB_FACTOR": "1.3"}),
    "stall": ({"SLOW_JOB_SHAPE": "stall"}, {"SLOW_JOB_STALL": "0.4", "SLOW_JOB_STALL_PERIOD_S": "0.25"}),
    "partway": ({"SLOW_JOB_SHAPE": "one"}, {"SLOW_JOB_FACTOR": "2.0", "SLOW_JOB_FROM": "40"}),
    "busy": ({"SLOW_JOB_SHAPE": "one", "SLOW_JOB_WORK": "compute"}, {"SLOW_JOB_FACTOR": "1.5"}),
    # Every rank 1.5x from step 40: nobody named, the job slower than its past (the check WARN, no rank).
    "job-slows": (
        {"SLOW_JOB_SHAPE": "one"},
        {"SLOW_JOB_ALL": "1", "SLOW_JOB_FACTOR": "1.5", "SLOW_JOB_FROM": "40"},
    ),
}
WHOLE_JOB = {"job-slows"}  # its slowed runs are right when the job, not a rank, is said to have slowed
OLD_PERSISTENCE = 0.6  # the rule before issue 50: late at >= 60% of the window's collectives
DONE = re.compile(r"rank 0 done: \d+ steps in ([\d.]+) s")


def watched(
    launcher: str, tmp: str, sample_every: float, env: dict[str, str], **planted: str
) -> tuple[int, dict, float, str, str]:
    """(exit code, report, wall seconds, the job's stdout, watch's stderr) of one run under watch."""
    prefix, job = JOBS[launcher]
    if "SLOW_JOB_SHAPE" in planted:  # the shapes' job instead of slow_job.py, with the same arguments
        job = [SHAPES_JOB if arg == SLOW_JOB else arg for arg in job]
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
    return done.returncode, loaded, wall, done.stdout, done.stderr


def named(report: dict) -> list[int] | None:
    """The ranks the stragglers check names ([] when PASS), None when there is no such check."""
    check = next((c for c in report.get("checks", []) if c["name"] == "stragglers"), None)
    if check is None:
        return None
    return list(check.get("ranks") or []) if check["status"] == "WARN" else []


def rows(report: dict) -> dict[int, dict]:
    return {row["rank"]: row for row in report.get("tables", {}).get("stragglers", [])}


def beyond(table: dict[int, dict]) -> dict[int, float]:
    """Each rank's peers' wait share for it beyond the median of its peers' own: what names it."""
    shares = {rank: row["wait_share"] for rank, row in table.items()}
    return {
        rank: share - statistics.median(v for r, v in shares.items() if r != rank)
        for rank, share in shares.items()
    }


def _figures(values: list[float]) -> str:
    if not values:
        return "none judged"
    return f"median {statistics.median(values):.1%}, min {min(values):.1%}, max {max(values):.1%}"


def shaped(launchers: list[str], shapes: list[str], runs: int, seconds: float, sample_every: float) -> None:
    """Per shape and launcher: slowed and healthy runs alternating; how often named, the wait shares."""
    for launcher in launchers:
        with launcher_env(launcher) as env:
            if env is None:
                continue
            for shape in shapes:  # stall too: the rank starts its stopper, under every launcher
                job_env, slowing = SHAPES[shape]
                right = lined = old = healthy_named = healthy_lined = healthy_slowed = 0
                slowed_shares: list[float] = []
                healthy_shares: list[float] = []
                whys: Counter[str] = Counter()  # the slowed rank's reason: its process, where
                factors: list[float] = []  # the job's slowdown, where reported
                began = time.monotonic()
                for _ in range(runs):
                    for slowed in (True, False):
                        plant = {**job_env, "SLOW_JOB_SECONDS": f"{seconds:g}", "SLOW_JOB_RANK": "-1"}
                        if slowed:
                            plant.update(slowing, SLOW_JOB_RANK="1")
                        with tempfile.TemporaryDirectory() as tmp:
                            _, report, _, _, err = watched(launcher, tmp, sample_every, env, **plant)
                        found, table = named(report), rows(report)
                        said = [line for line in err.splitlines() if "is slowing the job" in line]
                        slowdown = report.get("tables", {}).get("straggler_slowdown", [])
                        factors += [row["factor"] for row in slowdown if slowed and not row["named"]]
                        for why in report.get("tables", {}).get("straggler_why", []) if slowed else []:
                            where = (why["where"] or "-").split(" (")[0]
                            whys[f"{why['activity']} in {where}"] += why["rank"] == 1
                        if slowed and shape in WHOLE_JOB:
                            whole = [line for line in err.splitlines() if "the whole job slowed" in line]
                            right += found == [] and any(not row["named"] for row in slowdown)
                            lined += bool(whole) and not said
                        elif slowed:
                            right += found == [1]
                            lined += bool(said) and all(
                                line.startswith("ddpcheck watch: rank 1 ") for line in said
                            )
                            if 1 in table:
                                slowed_shares.append(beyond(table)[1])
                                old += table[1]["late_share"] >= OLD_PERSISTENCE - 1e-9
                        else:
                            healthy_named += bool(found) or bool(slowdown)
                            healthy_lined += bool(said)
                            healthy_slowed += bool(slowdown)
                            if table:
                                healthy_shares.append(max(beyond(table).values()))
                right_is = "the whole job said slowed" if shape in WHOLE_JOB else "rank 1 named"
                print(
                    f"{launcher:9s} {shape:8s} slowed: {right_is} in {right} of {runs} (a line saying "
                    f"so alone: {lined}; the old 60% rule: {old}), its peers' wait share beyond the typical "
                    f"{_figures(slowed_shares)}; healthy: named {healthy_named} of {runs} (a line: "
                    f"{healthy_lined}; the job said slowed: {healthy_slowed}), the most waited-for rank's "
                    f"share {_figures(healthy_shares)}; why: {dict(whys) or '-'}; the job slowed by "
                    f"{', '.join(f'{f:.2f}x' for f in factors) or '-'}; "
                    f"load {os.getloadavg()[0]:.1f}, "
                    f"{time.monotonic() - began:.0f} s",
                    flush=True,
                )


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
                    _, report, wall, _, _ = watched(
                        launcher, tmp, sample_every, env, SLOW_JOB_RANK="1", SLOW_JOB_SECONDS=f"{seconds:g}"
                    )
                    found = named(report)
                    right += found == [1]
                    wrong += found not in ([1], None) and bool(found)
                    unjudged += found is None
                    walls.append(wall)
                with tempfile.TemporaryDirectory() as tmp:
                    _, report, wall, _, _ = watched(
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


def simulated(seeds: int) -> None:
    """The rule on the tests' simulator (tests/test_stragglers.py): 8 ranks unless said, 0.1 s of work a
    collective, uniform jitter, a window of 20 collectives; per job, how often named, and the most
    waited-for rank's wait share beyond its peers' median (what names it)."""
    from tests.test_stragglers import judge, samples, simulate, two_collectives, works

    cases = {
        "healthy, jitter 10%": lambda s: simulate(works(21, 8, seed=s, jitter=0.1)),
        "healthy, jitter 20%": lambda s: simulate(works(21, 8, seed=s, jitter=0.2)),
        "healthy, jitter 30%": lambda s: simulate(works(21, 8, seed=s, jitter=0.3)),
        "healthy, jitter 30%, 2 ranks": lambda s: simulate(works(21, 2, seed=s, jitter=0.3)),
        "1.3x, jitter 10%": lambda s: simulate(works(21, 8, seed=s, slow={s % 8: 1.3})),
        "1.3x, jitter 20%": lambda s: simulate(works(21, 8, seed=s, jitter=0.2, slow={s % 8: 1.3})),
        "1.2x, jitter 10%": lambda s: simulate(works(21, 8, seed=s, slow={s % 8: 1.2})),
        "1.1x, jitter 10%": lambda s: simulate(works(21, 8, seed=s, slow={s % 8: 1.1})),
        "1.3x, transfer 30%": lambda s: simulate(works(21, 8, seed=s, slow={s % 8: 1.3}), transfer=0.03),
        "two a step, 1.3x before the first": lambda s: two_collectives(11, 8, seed=s, slow={s % 8: 1.3}),
        "two a step, healthy": lambda s: two_collectives(11, 8, seed=s),
    }
    for name, make in cases.items():
        named_in, figures = 0, []
        for seed in range(seeds):
            judged = judge(samples(make(seed)))
            named_in += bool(judged.verdicts)
            table = {f.rank: {"wait_share": f.wait_share} for g in judged.judged for f in g.figures}
            figures.append(max(beyond(table).values()))
        print(f"{name:34s} named in {named_in} of {seeds}; beyond the peers' {_figures(figures)}", flush=True)


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
                _, _, took, out, _ = watched("torchrun", tmp, every, {}, SLOW_JOB_STEPS=steps)
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
    reference, paused, dump_ms, size, where_us = out.stdout.split()
    print(f"one dump of a full recorder (2000 gloo entries, {int(size) / 1e6:.2f} MB): "
          f"{float(dump_ms):.1f} ms "
          f"(median of 10); longest gap of the rank's busy loop: {float(paused):.1f} ms while it dumps, "
          f"{float(reference):.1f} ms with no dump (reference); the main thread's stack beside it: "
          f"{float(where_us):.0f} µs (median of 200)", flush=True)  # fmt: skip
    ticks = []  # the watcher's look at a rank's /proc each tick (checks/watch/looks.py)
    for _ in range(1000):
        began = time.perf_counter()
        read_tick(os.getpid(), 0.0)
        ticks.append((time.perf_counter() - began) * 1e6)
    print(f"the watcher's /proc look at one rank (stat and schedstat): {statistics.median(ticks):.0f} µs "
          "(median of 1000), every 0.1 s", flush=True)  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--runs", type=int, default=20, help="slowed and healthy runs per launcher")
    parser.add_argument("--launchers", default="python,torchrun,srun,mpirun", help="comma-separated")
    parser.add_argument("--phases", default="pause,naming,cost", help="comma-separated")
    parser.add_argument("--cost-reps", type=int, default=12, help="reps of the cost, the order swapped each")
    parser.add_argument("--seeds", type=int, default=200, help="simulated jobs per case (--phases simulate)")
    parser.add_argument("--shapes", default="", help=f"comma-separated, of {','.join(SHAPES)}")
    parser.add_argument("--busy", type=int, default=0, help="spinning processes beside the named runs")
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
    if "simulate" in phases:
        simulated(args.seeds)
    if "pause" in phases:
        pause()
    if "naming" in phases:
        with busy_cores(args.busy) if args.busy else contextlib.nullcontext():
            if args.shapes:
                shaped(
                    args.launchers.split(","),
                    args.shapes.split(","),
                    args.runs,
                    args.seconds,
                    args.sample_every,
                )
            else:
                naming(args.launchers.split(","), args.runs, args.seconds, args.sample_every)
    if "cost" in phases:
        cost(args.cost_reps, args.cost_seconds, args.cost_every)
    print(f"load average at the end: {' '.join(f'{x:.1f}' for x in os.getloadavg())}")
    print(f"{time.monotonic() - began:.0f} s in all")


if __name__ == "__main__":
    main()
