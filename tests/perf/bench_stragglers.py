"""How well and at what cost `ddpcheck watch` names the rank that slows a job (docs/watch.md).

Three figures, each on tests/support/slow_job.py (gloo, CPU, 3 ranks, 50 ms of work per step):

- named: N runs with rank 1 slowed 30% and N healthy runs, under watch, with a plain `python`
  (the job starts its own ranks) and with torchrun: how often the slowed rank is named (and it
  alone), how often a healthy job names anybody;
- cost: a healthy job's wall time under watch with sampling (--sample-every S) and without
  (--sample-every 0), alternating, side by side, the ratio of the medians;
- pause: the longest gap a rank's busy main thread sees while its agent answers one sample
  request (its recorder full: TORCH_FR_BUFFER_SIZE collectives), against no dump at all.

    python tests/perf/bench_stragglers.py --runs 20
    python tests/perf/bench_stragglers.py --runs 2 --cost-reps 3 --seconds 10
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parents[2]
SLOW_JOB = str(HERE / "tests" / "support" / "slow_job.py")
LAUNCHERS = {
    "python": [sys.executable, SLOW_JOB, "--nproc", "3"],
    "torchrun": [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc-per-node",
        "3",
        SLOW_JOB,
    ],
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


def watched(
    launcher: str, tmp: str, sample_every: float, seconds: float, **planted: str
) -> tuple[int, dict, float]:
    """(exit code, report, wall seconds) of one run of the job under watch."""
    report = os.path.join(tmp, "report.json")
    env = {**os.environ, "OMP_NUM_THREADS": "1", "SLOW_JOB_SECONDS": str(seconds), **planted}
    argv = [
        sys.executable,
        "-m",
        "ddpcheck",
        "watch",
        "--sample-every",
        f"{sample_every:g}",
        "--json",
        report,
    ]
    began = time.perf_counter()
    done = subprocess.run([*argv, "--", *LAUNCHERS[launcher]], env=env, capture_output=True, text=True)
    wall = time.perf_counter() - began
    return done.returncode, json.loads(Path(report).read_text()) if os.path.exists(report) else {}, wall


def named(report: dict) -> list[int] | None:
    """The ranks the stragglers check names ([] when PASS), None when there is no such check."""
    check = next((c for c in report.get("checks", []) if c["name"] == "stragglers"), None)
    if check is None:
        return None
    return list(check.get("ranks") or []) if check["status"] == "WARN" else []


def naming(runs: int, seconds: float, sample_every: float) -> None:
    for launcher in LAUNCHERS:
        right = wrong = 0
        healthy_named = healthy_judged = 0
        for _ in range(runs):
            with tempfile.TemporaryDirectory() as tmp:
                _, report, _ = watched(
                    launcher, tmp, sample_every, seconds, SLOW_JOB_RANK="1", SLOW_JOB_FACTOR="1.3"
                )
                right += named(report) == [1]
                wrong += named(report) not in ([1], None) and bool(named(report))
            with tempfile.TemporaryDirectory() as tmp:
                _, report, _ = watched(launcher, tmp, sample_every, seconds)
                healthy_judged += named(report) is not None
                healthy_named += bool(named(report))
        print(
            f"{launcher:9s} slowed 30%: rank 1 named in {right} of {runs} ({wrong} named another rank); "
            f"healthy: somebody named in {healthy_named} of {runs} ({healthy_judged} judged)",
            flush=True,
        )


def cost(reps: int, seconds: float, sample_every: float) -> None:
    walls: dict[float, list[float]] = {0.0: [], sample_every: []}
    for rep in range(reps):
        for every in (0.0, sample_every):
            with tempfile.TemporaryDirectory() as tmp:
                # A fixed number of steps (not of seconds): the wall time is what the job took.
                env = {"SLOW_JOB_STEPS": str(int(seconds / 0.05))}
                _, _, wall = watched("torchrun", tmp, every, 0, **env)
                walls[every].append(wall)
        print(f"rep {rep + 1}: without sampling {walls[0.0][-1]:.2f} s, with {walls[sample_every][-1]:.2f} s")
    off, on = statistics.median(walls[0.0]), statistics.median(walls[sample_every])
    print(f"healthy job, {reps} alternating reps (medians): without sampling {off:.2f} s, "
          f"--sample-every {sample_every:g} {on:.2f} s, ratio {on / off:.3f}")  # fmt: skip


def pause() -> None:
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with tempfile.TemporaryDirectory() as tmp:
        code = PAUSE.format(root=str(HERE), port=port, path=os.path.join(tmp, "0-1.sample"))
        env = {**os.environ, "OMP_NUM_THREADS": "1", "TORCH_FR_BUFFER_SIZE": "2000"}
        out = subprocess.run(
            [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
        )
    reference, paused, dump_ms, size = out.stdout.split()
    print(f"one dump of a full recorder (2000 gloo entries, {int(size) / 1e6:.2f} MB): "
          f"{float(dump_ms):.1f} ms "
          f"(median of 10); longest gap of the rank's busy loop: {float(paused):.1f} ms while it dumps, "
          f"{float(reference):.1f} ms with no dump (reference)")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--runs", type=int, default=20, help="slowed and healthy runs per launcher")
    parser.add_argument("--cost-reps", type=int, default=6, help="alternating reps of the cost")
    parser.add_argument("--seconds", type=float, default=10.0, help="each job's length")
    parser.add_argument(
        "--sample-every", type=float, default=1.0, help="the sampling period of the named runs"
    )
    parser.add_argument(
        "--cost-every", type=float, default=5.0, help="the sampling period costed (the default)"
    )
    args = parser.parse_args()
    os.environ["OMP_NUM_THREADS"] = "1"
    began = time.monotonic()
    pause()
    naming(args.runs, args.seconds, args.sample_every)
    cost(args.cost_reps, args.seconds, args.cost_every)
    print(f"{time.monotonic() - began:.0f} s in all")


if __name__ == "__main__":
    main()
