"""Benchmark: ddpcheck collectives against bare loops and against one launch per collective, in one run.

1. Bus bandwidth at 16 MiB of all_gather and all_to_all on N ranks: the harness's timing
   (time_collective over the collective's own definition, what the sweep calls) against a
   bare loop of the same torch call (barrier, perf_counter around ITERS calls, slowest
   rank), in blocks that alternate inside one torchrun job. Target: >= 0.95x each.
2. Command to verdict: the default `ddpcheck collectives --nproc N` (seven collectives in
   one launch) against the same seven in seven launches (`--ops` one at a time), the two
   alternating. The seven launches pay six start-ups more; the one launch must save at
   least five of them. A start-up is measured as the cheapest launch there is
   (`--ops all_reduce --sizes 1K --iters 1 --warmup 0`).

    python tests/perf/bench_collectives.py [--nproc 4] [--reps 3] [--blocks 11]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
from pathlib import Path

from bench_allreduce import timed  # the same command timer (this script runs from tests/perf/)

SAME_RUN = """
import statistics, time, torch, torch.distributed as dist
from ddpcheck.rank.context import NullStatus, RankContext
from ddpcheck.checks.sweep.faults import SweepFaults
from ddpcheck.checks.sweep.sweep import time_collective
from ddpcheck.checks.sweep.ops import OPS
from ddpcheck.checks.sweep.ops.base import Team
dist.init_process_group("gloo")
n, rank, iters, warmup = dist.get_world_size(), dist.get_rank(), {iters}, {warmup}
rank0 = dist.get_rank()
ctx = RankContext(
    rank=rank0, local_rank=rank0, world_size=dist.get_world_size(), backend="gloo",
    device=torch.device("cpu"), host="bench", faults=SweepFaults([], rank0), status=NullStatus(),
)
team = Team(tuple(range(n)), rank)

def slowest(seconds):
    t = torch.tensor([seconds], dtype=torch.float64)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return t.item()

for name, bare_call in (
    ("all_gather", lambda b: dist.all_gather_into_tensor(b["output"], b["input"])),
    ("all_to_all", lambda b: dist.all_to_all_single(b["output"], b["input"])),
):
    op = OPS[name]
    count = op.count({size}, 4, n)
    bufs = op.buffers(count, torch.float32, ctx.device, n)
    op.clear(bufs)

    def bare():
        for _ in range(warmup):
            bare_call(bufs)
        dist.barrier()
        t = time.perf_counter()
        for _ in range(iters):
            bare_call(bufs)
        return (time.perf_counter() - t) / iters

    ours, theirs = [], []
    for _ in range({blocks}):
        theirs.append(slowest(bare()))
        ours.append(slowest(time_collective(ctx, lambda: op.run(bufs, team, 0), warmup, iters)))
    if rank == 0:
        busbw = lambda s: count * 4 / s / 1e9 * op.bus_factor(n)
        print("SAME_RUN", name, busbw(statistics.median(ours)), busbw(statistics.median(theirs)))
dist.destroy_process_group()
"""

SIZE = 16 * 1024 * 1024
ITERS, WARMUP = 10, 2
OPS = ("all_reduce", "all_gather", "reduce_scatter", "broadcast", "reduce", "all_to_all", "sendrecv")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--nproc", type=int, default=4)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument(
        "--blocks", type=int, default=11, help="alternating blocks in the same-run comparison"
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
    ddpcheck = [sys.executable, "-m", "ddpcheck", "collectives", "--nproc", str(args.nproc), "-q"]

    with tempfile.TemporaryDirectory() as scratch:
        same_run = Path(scratch, "same_run.py")
        same_run.write_text(SAME_RUN.format(size=SIZE, iters=ITERS, warmup=WARMUP, blocks=args.blocks))
        _, out = timed([*torchrun, str(same_run)], env)
        same = {
            line.split()[1]: tuple(map(float, line.split()[2:]))
            for line in out.splitlines()
            if line.startswith("SAME_RUN")
        }

    one, seven, startup = [], [], []
    for _ in range(args.reps):
        one.append(timed(ddpcheck, env)[0])
        seven.append(sum(timed([*ddpcheck, "--ops", op], env)[0] for op in OPS))
        startup.append(
            timed([*ddpcheck, "--ops", "all_reduce", "--sizes", "1K", "--iters", "1", "--warmup", "0"], env)[
                0
            ]
        )

    med = statistics.median
    print(f"# {args.nproc} CPU ranks over gloo; medians")
    print(f"busbw at 16 MiB, same run, {args.blocks} alternating blocks of {ITERS} iterations:")
    for name, (ours, theirs) in same.items():
        print(
            f"  {name}: harness {ours:.3f} GB/s, bare loop {theirs:.3f} GB/s, "
            f"ratio {ours / theirs:.2f}x (target >= 0.95x)"
        )
    saved = (med(seven) - med(one)) / med(startup)
    print(f"command to verdict ({args.reps} alternating repetitions):")
    print(f"  ddpcheck collectives --nproc {args.nproc} (one launch): {med(one):.2f} s")
    print(f"  the same seven, one launch each:              {med(seven):.2f} s")
    print(f"  one start-up (the cheapest launch):           {med(startup):.2f} s")
    print(f"  start-ups saved by one launch: {saved:.1f} of 6 (target >= 5)")


if __name__ == "__main__":
    main()
