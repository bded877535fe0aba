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
import contextlib
import json
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
from tests.support.attached import JOB, rank_pid
from tests.support.netns import free_port

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
    with tempfile.TemporaryDirectory() as scratch:
        log = Path(scratch) / "job.log"
        env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(HERE), "TMPDIR": scratch,
               "ATTACH_JOB_MODE": "hang", "ATTACH_JOB_GAPS": scratch}  # fmt: skip
        with open(log, "w") as out:
            job = subprocess.Popen(
                [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--master-port",
                 str(free_port()), JOB],
                env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
            )  # fmt: skip
        try:
            deadline = time.monotonic() + 300
            while "ready" not in log.read_text():
                if job.poll() is not None or time.monotonic() > deadline:
                    print(log.read_text())
                    return 1
                time.sleep(0.2)
            time.sleep(2.0)
            pid = rank_pid(Path(scratch), 0)
            figures: dict[str, list[tuple[float, float]]] = {way: [] for way in WAYS}
            shown = False
            for _ in range(args.reps):
                for way, options in WAYS.items():
                    began = time.monotonic()
                    if options is None:
                        time.sleep(0.5)
                    else:
                        argv = ["py-spy", "dump", "--pid", str(pid), "--json", *options]
                        run = subprocess.run(argv, capture_output=True, text=True, timeout=60)
                        if run.returncode != 0:
                            print(f"{way}: py-spy failed: {run.stderr.strip()}")
                            return 1
                        if way == "native" and not shown:
                            shown = True
                            show(run.stdout)
                    ended = time.monotonic()
                    time.sleep(0.2)  # the ticking thread writes the gap once it runs again
                    figures[way].append((ended - began, pause_during(Path(scratch) / "gaps0", began, ended)))
        finally:
            ranks = [p for p in psutil.process_iter() if _environ(p).get("TMPDIR") == scratch]
            os.killpg(job.pid, signal.SIGKILL)
            for rank in ranks:
                with contextlib.suppress(psutil.Error):
                    rank.kill()
            job.wait()
            psutil.wait_procs(ranks, timeout=10)
    print(f"{'way':12} {'dump median':>12} {'dump worst':>11} {'pause median':>13} {'pause worst':>12}")
    for way, runs in figures.items():
        times, pauses = [t for t, _ in runs], [p for _, p in runs]
        print(f"{way:12} {statistics.median(times):11.3f}s {max(times):10.3f}s "
              f"{statistics.median(pauses):11.1f}ms {max(pauses):10.1f}ms")  # fmt: skip
    return 0


def _environ(proc: psutil.Process) -> dict[str, str]:
    try:
        return proc.environ()
    except psutil.Error:
        return {}


if __name__ == "__main__":
    sys.exit(main())
