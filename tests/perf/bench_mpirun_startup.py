"""Loop: does every `mpirun` start-up of the inline mode reach its verdict, idle and busy?

tests/test_launchers.py's mpirun strike was seen once in CI with its three ranks never reaching
the sweep within the bound; this starts `mpirun -np 3 ddpcheck allreduce` (a short healthy
sweep) N times, with and without one spinning process per core beside it, and counts the runs
that passed, those that failed (their output printed) and those that did not end in 60 s.

    python tests/perf/bench_mpirun_startup.py [--runs 15] [--load idle|busy|both]
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.support.load import busy_cores

MPIRUN = ["mpirun", "--allow-run-as-root", "--oversubscribe", "-np", "3"]
MPIRUN += [arg for name in ("PYTHONPATH", "TMPDIR", "OMP_NUM_THREADS") for arg in ("-x", name)]
MPIRUN += [sys.executable, "-m", "ddpcheck", "allreduce", "--sizes", "1K:64K", "--iters", "5", "--quiet"]
BOUND_S = 60


def start_once() -> tuple[str, float, str]:
    """('passed' | 'failed' | 'did not end', seconds, the output's tail)."""
    with tempfile.TemporaryDirectory() as scratch:
        env = {**os.environ, "TMPDIR": scratch, "OMP_NUM_THREADS": "1"}
        env.setdefault("PYTHONPATH", str(Path(__file__).resolve().parents[2]))
        began = time.monotonic()
        proc = subprocess.Popen(MPIRUN, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                text=True, start_new_session=True)  # fmt: skip
        try:
            out, _ = proc.communicate(timeout=BOUND_S)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            out, _ = proc.communicate()
            return "did not end", time.monotonic() - began, out[-1500:]
        took = time.monotonic() - began
        return ("passed" if proc.returncode == 0 else f"failed ({proc.returncode})"), took, out[-1500:]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument("--load", choices=("idle", "busy", "both"), default="both")
    args = parser.parse_args()
    for load in ["idle", "busy"] if args.load == "both" else [args.load]:
        tally: Counter[str] = Counter()
        with busy_cores(None if load == "busy" else 0):
            for run in range(args.runs):
                kind, took, out = start_once()
                tally[kind] += 1
                said = "" if kind == "passed" else f":\n{out}"
                print(f"{load} run {run + 1}: {kind} ({took:.1f} s){said}", flush=True)
        print(f"== {load}: {dict(tally)} of {args.runs}", flush=True)


if __name__ == "__main__":
    main()
