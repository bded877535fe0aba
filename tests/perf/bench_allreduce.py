"""Benchmark: ddpcheck allreduce against the bare scripts it replaces, side by side in one run.

1. Time from command to verdict: `ddpcheck allreduce --nproc N` against the classic
   script (ones * rank, all_reduce, print) under `torchrun --nproc_per_node N`.
   Target: <= 1.5x.
2. Bus bandwidth at 16 MiB: ddpcheck's timing (the function its sweep calls) against
   a bare all_reduce loop (barrier, perf_counter around ITERS calls, slowest rank),
   in blocks inside one torchrun job, so both see the same machine; the order rotates
   every block and the bare loop runs twice (an A/A control: the noise floor of the ratio).
   Target: >= 0.95x per-block median. Also, end to end and noisier: `ddpcheck allreduce --sizes 16M`'s
   reported busbw against the bare loop in its own torchrun job.

Runs alternate between the two sides so that noise on this shared machine hits
both alike; medians are quoted.

    python tests/perf/bench_allreduce.py [--nproc 4] [--reps 5]
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

CLASSIC = """
import torch, torch.distributed as dist
dist.init_process_group("gloo")
rank = dist.get_rank()
x = torch.ones(1) * rank
dist.all_reduce(x)
print(f"Rank {rank}: {x.item()}")
dist.destroy_process_group()
"""

BARE_LOOP = """
import time, torch, torch.distributed as dist
dist.init_process_group("gloo")
n, iters, warmup = dist.get_world_size(), {iters}, {warmup}
x = torch.zeros({size} // 4)
for _ in range(warmup):
    dist.all_reduce(x)
dist.barrier()
t = time.perf_counter()
for _ in range(iters):
    dist.all_reduce(x)
seconds = torch.tensor([(time.perf_counter() - t) / iters], dtype=torch.float64)
dist.all_reduce(seconds, op=dist.ReduceOp.MAX)
if dist.get_rank() == 0:
    print("BUSBW", {size} / seconds.item() / 1e9 * 2 * (n - 1) / n)
dist.destroy_process_group()
"""

SAME_RUN = """
import statistics, time, torch, torch.distributed as dist
from ddpcheck.rank.context import NullStatus, RankContext
from ddpcheck.checks.sweep.faults import SweepFaults
from ddpcheck.checks.sweep.sweep import time_collective
dist.init_process_group("gloo")
n, iters, warmup = dist.get_world_size(), {iters}, {warmup}
rank0 = dist.get_rank()
ctx = RankContext(
    rank=rank0, local_rank=rank0, world_size=dist.get_world_size(), backend="gloo",
    device=torch.device("cpu"), host="bench", faults=SweepFaults([], rank0), status=NullStatus(),
)
x = torch.zeros({size} // 4)

def bare():
    for _ in range(warmup):
        dist.all_reduce(x)
    dist.barrier()
    t = time.perf_counter()
    for _ in range(iters):
        dist.all_reduce(x)
    return (time.perf_counter() - t) / iters

def harness():
    return time_collective(ctx, lambda: dist.all_reduce(x), warmup, iters)

def slowest(seconds):
    t = torch.tensor([seconds], dtype=torch.float64)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return t.item()

# Three sides, the order rotated every block so that none always runs first: the harness, the
# bare loop, and the bare loop again (an A/A control: how far two identical sides drift apart).
sides = {{"harness": harness, "bare": bare, "bare again": bare}}
times = {{name: [] for name in sides}}
names = list(sides)
for block in range({blocks}):
    for name in names[block % 3 :] + names[: block % 3]:
        times[name].append(slowest(sides[name]()))
if dist.get_rank() == 0:
    def busbw(seconds):
        return {size} / seconds / 1e9 * 2 * (n - 1) / n
    # Per block, speed relative to the bare loop of the same block (time ratio inverted).
    ratios = {{
        name: [b / s for s, b in zip(times[name], times["bare"])] for name in ("harness", "bare again")
    }}
    q = {{name: statistics.quantiles(r, n=4) for name, r in ratios.items()}}
    print("SAME_RUN", busbw(statistics.median(times["harness"])), busbw(statistics.median(times["bare"])),
          statistics.median(ratios["harness"]), q["harness"][0], q["harness"][2],
          statistics.median(ratios["bare again"]), q["bare again"][0], q["bare again"][2])
dist.destroy_process_group()
"""

SIZE = 16 * 1024 * 1024
ITERS, WARMUP = 20, 2


def timed(cmd: list[str], env: dict[str, str]) -> tuple[float, str]:
    began = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False)
    seconds = time.perf_counter() - began
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed ({proc.returncode}):\n{proc.stderr[-2000:]}")
    return seconds, proc.stdout


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--nproc", type=int, default=4)
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument(
        "--blocks", type=int, default=24, help="blocks in the same-run comparison (each runs all three sides)"
    )
    args = parser.parse_args()
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    torchrun = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        f"--nproc_per_node={args.nproc}",
    ]
    ddpcheck = [sys.executable, "-m", "ddpcheck", "allreduce", "--nproc", str(args.nproc)]

    with tempfile.TemporaryDirectory() as scratch:
        classic, loop = Path(scratch, "classic.py"), Path(scratch, "loop.py")
        same_run = Path(scratch, "same_run.py")
        classic.write_text(CLASSIC)
        loop.write_text(BARE_LOOP.format(size=SIZE, iters=ITERS, warmup=WARMUP))
        same_run.write_text(SAME_RUN.format(size=SIZE, iters=ITERS, warmup=WARMUP, blocks=args.blocks))
        _, out = timed([*torchrun, str(same_run)], env)
        line = next(line for line in out.splitlines() if line.startswith("SAME_RUN"))
        ours, bare, ratio, ratio_q1, ratio_q3, control, control_q1, control_q3 = map(float, line.split()[1:])
        verdict_ddp, verdict_bare, bw_ddp, bw_bare = [], [], [], []
        for _ in range(args.reps):
            verdict_ddp.append(timed([*ddpcheck, "-q"], env)[0])
            verdict_bare.append(timed([*torchrun, str(classic)], env)[0])
            _, out = timed(
                [*ddpcheck, "--sizes", "16M", "--iters", str(ITERS), "--warmup", str(WARMUP), "--json", "-"],
                env,
            )
            bw_ddp.append(json.loads(out)["tables"]["bandwidth"][0]["busbw_gbps"])
            _, out = timed([*torchrun, str(loop)], env)
            bw_bare.append(
                float(next(line for line in out.splitlines() if line.startswith("BUSBW")).split()[1])
            )

    med = statistics.median
    print(f"# {args.reps} alternating repetitions, {args.nproc} CPU ranks over gloo, medians")
    print(f"time to verdict: ddpcheck allreduce --nproc {args.nproc}  {med(verdict_ddp):.2f} s")
    print(f"time to verdict: torchrun classic script         {med(verdict_bare):.2f} s")
    print(f"  ratio ddpcheck / bare: {med(verdict_ddp) / med(verdict_bare):.2f}x (target <= 1.5x)")
    print(f"busbw at 16 MiB, same run, {args.blocks} blocks of {ITERS} iterations, order rotated, medians:")
    print(f"  ddpcheck's timing {ours:.3f} GB/s, bare loop {bare:.3f} GB/s")
    print(
        f"  ratio ddpcheck / bare, per block: {ratio:.2f}x (IQR {ratio_q1:.2f}-{ratio_q3:.2f}; "
        "target >= 0.95x)"
    )
    print(f"  A/A control, bare again / bare: {control:.2f}x (IQR {control_q1:.2f}-{control_q3:.2f})")
    print(f"busbw at 16 MiB, end to end, separate jobs ({args.reps} each), medians:")
    print(
        f"busbw at 16 MiB: ddpcheck  {med(bw_ddp):.3f} GB/s   (runs: {', '.join(f'{x:.3f}' for x in bw_ddp)})"
    )
    runs = ", ".join(f"{x:.3f}" for x in bw_bare)
    print(f"busbw at 16 MiB: bare loop {med(bw_bare):.3f} GB/s   (runs: {runs})")
    print(f"  ratio ddpcheck / bare: {med(bw_ddp) / med(bw_bare):.2f}x (noisy: separate jobs)")


if __name__ == "__main__":
    main()
