"""How reliably `ddpcheck watch` passes healthy jobs and names each planted fault, over many runs.

Loops healthy runs and each fault (a rank asleep in its data loading, a rank that raises, a
differently sized collective, a rank killed by SIGKILL, a rank stopped by SIGSTOP) N times under
torchrun, 3 ranks; with --load, a busy-loop process per core runs beside them. Prints, per case,
how many runs passed (healthy) or named the right rank with the right check.

    python tests/perf/bench_watch_reliability.py --runs 5 [--load]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import psutil

HERE = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(HERE))

from tests.test_watch import TORCHRUN, Watched, watch  # noqa: E402

# case -> (TRAIN_JOB_FAULT, signal sent to rank 2, steps, the check expected, the rank it names)
CASES: dict[str, tuple[str, signal.Signals | None, int, str, int | None]] = {
    "healthy": ("", None, 4, "job", None),
    "asleep in data loading": ("sleep@2:step2", None, 6, "hang", 2),
    "raises": ("raise@1:step2", None, 6, "crash", 1),
    "differently sized collective": ("mismatch@1:step2", None, 6, "collective mismatch", 1),
    "SIGKILL from outside": ("", signal.SIGKILL, 3000, "crash", 2),
    "SIGSTOP from outside": ("", signal.SIGSTOP, 3000, "hang", 2),
}


@contextlib.contextmanager
def load(on: bool) -> Iterator[None]:
    spinners = []
    if on:
        for _ in range(os.cpu_count() or 1):
            spinners.append(subprocess.Popen([sys.executable, "-c", "while True: pass"]))
    try:
        yield
    finally:
        for spinner in spinners:
            spinner.kill()
            spinner.wait()


def judged(case: str, run: Watched) -> bool:
    _, _, _, name, rank = CASES[case]
    if rank is None:
        return run.code == 0
    if run.code != 3 or run.report is None:
        return False
    failing = [c for c in run.report["checks"] if c["status"] == "ERROR"]
    gone = all(not psutil.pid_exists(p) or psutil.Process(p).status() == "zombie" for p in run.pids)
    return [(c["name"], c["ranks"]) for c in failing] == [(name, [rank])] and gone


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--load", action="store_true", help="a busy-loop process per core beside the job")
    parser.add_argument("--cases", default=",".join(CASES), help=f"comma list of: {', '.join(CASES)}")
    args = parser.parse_args()
    chosen = args.cases.split(",")
    if unknown := sorted(set(chosen) - set(CASES)):
        parser.error(f"no such case: {', '.join(unknown)}")
    os.environ["PYTHONPATH"] = os.pathsep.join([str(HERE), *filter(None, [os.environ.get("PYTHONPATH")])])
    counts = dict.fromkeys(chosen, 0)
    began = time.monotonic()
    with load(args.load):
        for attempt in range(args.runs):
            for case in chosen:
                fault, strike, steps, _, _ = CASES[case]
                with tempfile.TemporaryDirectory() as scratch:
                    run = watch(Path(scratch), TORCHRUN, fault=fault, strike=strike, steps=steps)
                ok = judged(case, run)
                counts[case] += ok
                print(f"run {attempt + 1} {case}: {'ok' if ok else 'MISSED'} ({run.code})", flush=True)
    loaded = " under load" if args.load else ""
    print(f"{args.runs} runs of each case{loaded}, {time.monotonic() - began:.0f} s:")
    for case, count in counts.items():
        print(f"  {case:<30} {'passed' if case == 'healthy' else 'named'} {count} of {args.runs}")


if __name__ == "__main__":
    main()
