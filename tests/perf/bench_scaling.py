"""Benchmark: how time to verdict grows with world size (CPU ranks over gloo).

For each world size, `ddpcheck allreduce --nproc N` with a fixed small sweep is run
REPS times (sizes interleaved, so noise hits all alike); the median wall time from
command to verdict and its ratio to the smallest world are printed, with the
ratio a linear growth would give. Every rank imports torch, so on a machine with
few cores the cost per rank is roughly constant: growth should be at most linear.

    python tests/perf/bench_scaling.py [--sizes 2,4,8,16] [--reps 3]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sizes", default="2,4,8,16", help="world sizes, comma-separated")
    parser.add_argument("--reps", type=int, default=3)
    args = parser.parse_args()
    worlds = [int(x) for x in args.sizes.split(",")]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    seconds: dict[int, list[float]] = {n: [] for n in worlds}
    for _ in range(args.reps):
        for n in worlds:
            cmd = [sys.executable, "-m", "ddpcheck", "allreduce", "--nproc", str(n), "--sizes", "1K:64K"]
            cmd += ["--iters", "5", "--timeout", "300", "--quiet"]
            began = time.perf_counter()
            proc = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False)
            seconds[n].append(time.perf_counter() - began)
            if proc.returncode != 0:
                raise SystemExit(f"{' '.join(cmd)} exited {proc.returncode}:\n{proc.stdout}{proc.stderr}")
    base_n = worlds[0]
    base = statistics.median(seconds[base_n])
    cores = os.cpu_count()
    print(f"# ddpcheck allreduce --nproc N --sizes 1K:64K --iters 5, {cores} cores, medians of {args.reps}")
    print(f"{'ranks':>5}  {'seconds':>8}  {'ratio':>6}  {'linear':>6}  {'s/rank':>7}")
    for n in worlds:
        med = statistics.median(seconds[n])
        print(f"{n:>5}  {med:>8.2f}  {med / base:>6.2f}  {n / base_n:>6.2f}  {med / n:>7.2f}")


if __name__ == "__main__":
    main()
