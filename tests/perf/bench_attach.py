"""Time to verdict of `ddpcheck attach`: a real gloo job of N ranks under torchrun, hung or healthy.

Starts tests/support/attach_job.py (one rank sleeping in user code while its peers wait in
all_reduce, or every rank stepping), waits until it is ready, then times `ddpcheck attach PID`
from the command's start to its exit, --reps times, and prints each run, the median and the
worst, with the verdict it gave. The figures in docs/attach.md come from it.

    python tests/perf/bench_attach.py --nproc 8 --reps 5 --mode hang
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from tests.support.netns import free_port

HERE = Path(__file__).resolve().parents[2]
JOB = str(HERE / "tests" / "support" / "attach_job.py")
EXPECTED = {"hang": 3, "mismatch": 3, "healthy": 0}


def _environ(proc: psutil.Process) -> dict[str, str]:
    try:
        return proc.environ()
    except psutil.Error:
        return {}


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--nproc", type=int, default=8)
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--mode", choices=sorted(EXPECTED), default="hang")
    args = parser.parse_args()
    env = {**os.environ, "OMP_NUM_THREADS": "1", "ATTACH_JOB_MODE": args.mode, "PYTHONPATH": str(HERE)}
    with tempfile.TemporaryDirectory() as scratch:
        log = Path(scratch) / "job.log"
        with open(log, "w") as out:
            job = subprocess.Popen(
                [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(args.nproc),
                 "--master-port", str(free_port()), JOB],
                env={**env, "TMPDIR": scratch}, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
            )  # fmt: skip
        try:
            deadline = time.monotonic() + 300
            while "ready" not in log.read_text():
                if job.poll() is not None or time.monotonic() > deadline:
                    print(log.read_text())
                    return 1
                time.sleep(0.2)
            time.sleep(1.0)
            times, wrong = [], 0
            for rep in range(args.reps):
                began = time.monotonic()
                argv = [sys.executable, "-m", "ddpcheck", "attach", str(job.pid), "-q"]
                run = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120)
                seconds = time.monotonic() - began
                times.append(seconds)
                wrong += run.returncode != EXPECTED[args.mode]
                last = (run.stdout.strip().splitlines() or [""])[-1]
                print(f"run {rep + 1}: {seconds:.2f} s, exit {run.returncode}: {last[:100]}")
        finally:
            # torchrun starts each rank in a session of its own: its group's SIGKILL leaves them running.
            ranks = [p for p in psutil.process_iter() if _environ(p).get("TMPDIR") == scratch]
            os.killpg(job.pid, signal.SIGKILL)
            for rank in ranks:
                with contextlib.suppress(psutil.Error):
                    rank.kill()
            job.wait()
            psutil.wait_procs(ranks, timeout=10)
    median, worst = statistics.median(times), max(times)
    print(f"{args.nproc} ranks, {args.mode}: median {median:.2f} s, worst {worst:.2f} s, {wrong} wrong")
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
