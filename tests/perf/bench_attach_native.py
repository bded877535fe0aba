"""What py-spy's native frames cost a rank, beside the Python-only dumps attach takes: the pause the rank
sees, and the dump's time.

A 2-rank gloo job under torchrun (tests/support/attach_job.py, mode hang: rank 1 sleeps in user
code, rank 0 waits in all_reduce), each rank with a thread that writes every gap over 5 ms in its
1 ms ticks (ATTACH_JOB_GAPS). Each rep dumps rank 0 once per way (`none`: no dump, the machine's
own noise; `nonblocking`, as attach samples; `blocking`, the rank paused; `native`, paused and
unwound through its C/C++ frames) and takes the longest gap that ended during the dump as the
pause. Prints each way's median and worst dump time and pause, and the native frames of rank 0's
main thread once.

    python tests/perf/bench_attach_native.py --reps 10
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

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from tests.support.attached import rank_pid, torchrun_job

HERE = Path(__file__).resolve().parents[2]
WAYS = {"none": None, "nonblocking": ["--nonblocking"], "blocking": [], "native": ["--native"]}


def pause_during(gaps: Path, began: float, ended: float) -> float:
    """The longest gap (ms) the rank's ticking thread saw end between `began` and just after `ended`."""
    longest = 0.0
    for line in gaps.read_text().splitlines():
        at, gap = (float(word) for word in line.split())
        if began <= at <= ended + 0.05:
            longest = max(longest, gap)
    return longest


def show(text: str) -> None:
    """The first frames of the main thread in py-spy's JSON, native ones and Python's, innermost first."""
    main_thread = next(t for t in json.loads(text) if t["thread_name"] == "MainThread")
    print("rank 0's main thread, native frames and Python's (innermost first):")
    for frame in main_thread["frames"][:14]:
        print(f"  {frame['name'][:90]}  ({os.path.basename(frame['filename'])}:{frame['line']})")


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--reps", type=int, default=10)
    args = parser.parse_args()
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(HERE)}
    figures: dict[str, list[tuple[float, float]]] = {way: [] for way in WAYS}
    with tempfile.TemporaryDirectory() as scratch:
        gaps = Path(scratch) / "gaps0"
        with torchrun_job(2, Path(scratch), {**env, "ATTACH_JOB_MODE": "hang", "ATTACH_JOB_GAPS": scratch}):
            time.sleep(2.0)
            pid = rank_pid(Path(scratch), 0)
            for rep in range(args.reps):
                for way, options in WAYS.items():
                    began = time.monotonic()
                    if options is None:
                        time.sleep(0.5)
                    else:
                        argv = ["py-spy", "dump", "--pid", str(pid), "--json", *options]
                        run = subprocess.run(argv, capture_output=True, text=True, timeout=60)
                        if run.returncode != 0:
                            raise SystemExit(f"{way}: py-spy failed: {run.stderr.strip()}")
                        if way == "native" and rep == 0:
                            show(run.stdout)
                    ended = time.monotonic()
                    time.sleep(0.2)  # the ticking thread writes the gap once it runs again
                    figures[way].append((ended - began, pause_during(gaps, began, ended)))
    print(f"{'way':12} {'dump median':>12} {'dump worst':>11} {'pause median':>13} {'pause worst':>12}")
    for way, runs in figures.items():
        times, pauses = [t for t, _ in runs], [p for _, p in runs]
        print(f"{way:12} {statistics.median(times):11.3f}s {max(times):10.3f}s "
              f"{statistics.median(pauses):11.1f}ms {max(pauses):10.1f}ms")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
