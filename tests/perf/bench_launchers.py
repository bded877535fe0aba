"""Benchmark: under torchrun, srun and mpirun, how soon every process is gone after a fault,
and what the inline heartbeat costs a healthy run.

1. Seconds from the fault (SIGSTOP or SIGKILL sent to rank 2 mid-sweep, world 3,
   --timeout 8) to the last process gone, the launcher included, with the recipes of docs/multinode.md
   (torchrun --shutdown-timeout 5, srun --kill-on-bad-exit=1, plain mpirun). Target:
   <= --timeout + 20 s. srun runs under slurmctld/slurmd started here (tests/test_launchers.py).
2. The heartbeat's cost: `ddpcheck allreduce` under torchrun with and without it
   (DDPCHECK_INLINE_HEARTBEAT=0), alternating in one run; the ratio of the sweep's busbw
   (median over message sizes, per run) and of the command's wall time (time to verdict,
   torchrun's start-up included). Target: <= 1.02x. (Rank 0's own elapsed time is no measure:
   it starts before the join, so it carries the ranks' start-up skew.)

    python tests/perf/bench_launchers.py [--reps 2] [--cost-reps 5] [--cost-only]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.support.slurm import SlurmUnavailable, slurm_daemons
from tests.test_launchers import MPIRUN, SRUN, TIMEOUT, TORCHRUN, _pythonpath, strike

HEALTHY = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "3"]
HEALTHY += ["-m", "ddpcheck", "allreduce", "--sizes", "64K:4M", "--iters", "20", "--quiet"]


def time_to_gone(reps: int) -> None:
    launchers = {"torchrun": (TORCHRUN, {}), "mpirun": (MPIRUN, {"PYTHONPATH": _pythonpath()})}
    try:
        with slurm_daemons() as slurm_env:
            launchers["srun"] = (SRUN, slurm_env)
            _strikes(launchers, reps)
    except SlurmUnavailable as exc:
        print(f"srun skipped: {exc}")
        _strikes(launchers, reps)


def _strikes(launchers: dict, reps: int) -> None:
    for name, (argv, env) in launchers.items():
        for fault in (signal.SIGSTOP, signal.SIGKILL):
            seconds = []
            for _ in range(reps):
                with tempfile.TemporaryDirectory(prefix="bench-launchers-") as tmp:
                    scratch = Path(tmp) / "tmp"
                    scratch.mkdir()
                    seconds.append(strike(argv, scratch, Path(tmp), fault, env=env).fault_to_gone_s)
            print(
                f"{name:9s} {fault.name:8s} fault -> last process gone: "
                f"{', '.join(f'{s:.1f}' for s in seconds)} s (bound {TIMEOUT + 20} s)",
                flush=True,
            )


def heartbeat_cost(reps: int) -> None:
    results: dict[str, list[tuple[float, float]]] = {"on": [], "off": []}
    for _ in range(reps):
        for side in ("on", "off"):
            with tempfile.TemporaryDirectory(prefix="bench-heartbeat-") as tmp:
                report = Path(tmp) / "r.json"
                env = {**os.environ, "OMP_NUM_THREADS": "1", "TMPDIR": tmp}
                env["DDPCHECK_INLINE_HEARTBEAT"] = "1" if side == "on" else "0"
                began = time.monotonic()
                subprocess.run([*HEALTHY, "--json", str(report)], env=env, check=True, capture_output=True)
                wall = time.monotonic() - began
                data = json.loads(report.read_text())
                busbw = statistics.median(row["busbw_gbps"] for row in data["tables"]["bandwidth"])
                results[side].append((busbw, wall))
    on_bw = statistics.median(b for b, _ in results["on"])
    off_bw = statistics.median(b for b, _ in results["off"])
    on_s = statistics.median(s for _, s in results["on"])
    off_s = statistics.median(s for _, s in results["off"])
    print(f"heartbeat on : busbw {on_bw:.3f} GB/s, command {on_s:.2f} s  ({reps} runs, medians)")
    print(f"heartbeat off: busbw {off_bw:.3f} GB/s, command {off_s:.2f} s")
    print(f"cost: busbw off/on {off_bw / on_bw:.3f}x, time on/off {on_s / off_s:.3f}x (target <= 1.02x)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=2)
    parser.add_argument("--cost-reps", type=int, default=5)
    parser.add_argument("--cost-only", action="store_true")
    args = parser.parse_args()
    started = time.monotonic()
    heartbeat_cost(args.cost_reps)
    if not args.cost_only:
        time_to_gone(args.reps)
    print(f"took {time.monotonic() - started:.0f} s")


if __name__ == "__main__":
    main()
