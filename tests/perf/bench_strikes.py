"""Benchmark: strike rank 2 at a random moment of its life, under each launcher; is it named, in time?

For each launcher (own `--nproc 3`, torchrun, `srun -K`, mpirun): first the longest of two healthy
runs of `allreduce --sizes 1K:4M --iters 20 --timeout 10` (3 ranks) is measured; then moments are
drawn uniformly over it (seeded) until `--strikes` of them found rank 2 alive, and at each rank 2 is
stopped (SIGSTOP) or killed (SIGKILL), alternately. A strike counts when ddpcheck names rank 2
alone (a `ddpcheck` line or the report's failing check) and every process of the run, the
launcher included, is gone within --timeout + 20 s (tests/support/strikes.py). With --busy, one
spinning process per core runs beside every run (tests/support/load.py). The table goes to
docs/failures.md.

    python tests/perf/bench_strikes.py [--strikes 20] [--seed 1] [--busy]
                                       [--launchers own,torchrun,srun,mpirun]
"""

from __future__ import annotations

import argparse
import contextlib
import signal
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.support.load import busy_cores
from tests.support.slurm import SlurmUnavailable, slurm_daemons
from tests.support.strikes import BOUND_S, COMMANDS, healthy_length, judge, moments, strike


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--strikes", type=int, default=20)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--busy", action="store_true", help="one spinning process per core beside every run")
    parser.add_argument("--launchers", default="own,torchrun,srun,mpirun")
    args = parser.parse_args()
    rows = []
    with contextlib.ExitStack() as stack:
        if args.busy:
            stack.enter_context(busy_cores())
        for launcher in args.launchers.split(","):
            if launcher not in COMMANDS:
                parser.error(f"unknown launcher {launcher!r}")
            env: dict[str, str] = {}
            if launcher == "srun":
                try:
                    env = stack.enter_context(slurm_daemons())
                except SlurmUnavailable as exc:
                    print(f"srun skipped: {exc}", flush=True)
                    continue
            rows.append(_launcher(launcher, env, args.strikes, args.seed))
    print(
        f"\n| launcher | load | healthy run | strikes | named and bounded (<= {BOUND_S} s) | slowest gone |"
    )
    print("| --- | --- | --- | --- | --- | --- |")
    for launcher, span, struck, named, slowest in rows:
        load = "one spinner per core" if args.busy else "idle"
        print(f"| {launcher} | {load} | {span:.1f} s | {struck} | {named} | {slowest:.1f} s |")


def _launcher(
    launcher: str, env: dict[str, str], count: int, seed: int
) -> tuple[str, float, int, int, float]:
    with tempfile.TemporaryDirectory(prefix="bench-strikes-") as scratch:
        span = healthy_length(launcher, Path(scratch), env)
    struck = named = 0
    slowest = 0.0
    # A moment after the run ended strikes nothing: draw on (seeded) until `count` strikes were made.
    for i, moment in enumerate(moments(seed, 3 * count, span)):
        if struck == count:
            break
        signum = signal.SIGSTOP if i % 2 == 0 else signal.SIGKILL
        with tempfile.TemporaryDirectory(prefix="bench-strikes-") as scratch:
            outcome = strike(launcher, moment, signum, Path(scratch), env)
        if not outcome.struck:
            print(
                f"{launcher} {signum.name}@{moment:.2f}: the run had ended first (not a strike)", flush=True
            )
            continue
        struck += 1
        ok, why = judge(outcome)
        named += ok
        slowest = max(slowest, outcome.gone_s or 0.0)
        print(
            f"{launcher} {signum.name}@{moment:.2f}: {'named' if ok else 'MISSED'} rc={outcome.returncode} "
            f"gone {outcome.gone_s:.1f} s {why}",
            flush=True,
        )
    return launcher, span, struck, named, slowest


if __name__ == "__main__":
    main()
