"""What does --baseline cost? The same run with and without it (target <= 1.02x).

Not collected by pytest (bench_*.py). Run:

    OMP_NUM_THREADS=1 python tests/perf/bench_baseline_cost.py --pairs 10

1. End to end: `ddpcheck allreduce --nproc 2` (default CPU sizes) run alternately without
   and with `--baseline` (a report of the same run saved first), ABBA so that drift and
   the neighbours' load fall on both alike; prints the median wall time of each and the
   median of the per-pair ratios.
2. In process: what --baseline adds on the launcher side (loading and validating the
   file, the pre-launch setup check, the comparison after the run), timed over many
   repetitions, as a fraction of the run's own wall time. The ranks do no extra work:
   the baseline never reaches them. On a machine shared with other work (1) wanders by
   several percent either way; (2) is the figure that says what the option itself costs.
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

from ddpcheck.report import baseline

ARGS = ["allreduce", "--nproc", "2", "--quiet"]


def run(extra: list[str], report: Path) -> float:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    began = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "ddpcheck", *ARGS, *extra, "--json", str(report)], env=env)
    seconds = time.perf_counter() - began
    if done.returncode != 0:
        raise SystemExit(f"a run failed (exit {done.returncode}): {' '.join(extra)}")
    return seconds


def in_process_cost(saved: Path, repeats: int = 200) -> float:
    """Seconds that --baseline adds on the launcher: load, validate, plan check, compare."""
    report = json.loads(saved.read_text())
    began = time.perf_counter()
    for _ in range(repeats):
        old = baseline.load_report(str(saved))
        planned = baseline.planned_setup("allreduce", 2, "gloo", "cpu", report["options"])
        baseline.check_setup(old, "allreduce", planned, str(saved))
        baseline.compare(old, report, baseline.default_tolerance(report))
    return (time.perf_counter() - began) / repeats


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=10)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="wt15-baseline-cost-") as scratch:
        saved = Path(scratch) / "baseline.json"
        run([], saved)
        plain, compared, ratios = [], [], []
        for i in range(args.pairs):
            order = [False, True] if i % 2 == 0 else [True, False]
            times = {}
            for with_baseline in order:
                extra = ["--baseline", str(saved)] if with_baseline else []
                times[with_baseline] = run(extra, Path(scratch) / f"run-{i}-{with_baseline}.json")
            plain.append(times[False])
            compared.append(times[True])
            ratios.append(times[True] / times[False])
        cost = in_process_cost(saved)
    print(f"end to end, {args.pairs} pairs (ABBA): without {statistics.median(plain):.3f} s, "
          f"with --baseline {statistics.median(compared):.3f} s, "
          f"median ratio {statistics.median(ratios):.3f}x")  # fmt: skip
    print(f"in process: --baseline adds {cost * 1e3:.2f} ms = "
          f"{cost / statistics.median(plain):.2%} of the run's wall time")  # fmt: skip


if __name__ == "__main__":
    main()
