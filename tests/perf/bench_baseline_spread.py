"""How far apart are two healthy runs? The measurement behind --baseline's default --tolerance.

Not collected by pytest (bench_*.py). Run:

    OMP_NUM_THREADS=1 python tests/perf/bench_baseline_spread.py --runs 20
    OMP_NUM_THREADS=1 python tests/perf/bench_baseline_spread.py --from DIR   # reports saved earlier

Runs `ddpcheck allreduce --nproc 2` (default CPU sizes) and `ddpcheck profile --nproc 2
--hidden 256` N times each, saving every report, then:

- per figure (busbw per size, each profile phase and TFLOP/s, each rank's compute): the
  spread across the runs, min and max over the median, with the sizes that
  `baseline.compare` treats as latency-bound marked;
- the worst figure of every ordered pair of runs (run i as the baseline, run j rerun),
  i.e. how slow a healthy rerun looks at its worst: the tolerance must be looser than that;
- how many of the N-1 reruns pass against the first run as the baseline, at the
  default tolerance and at a few others.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from collections import defaultdict
from pathlib import Path
from typing import Any

from ddpcheck.report import baseline

COMMANDS = {
    "allreduce": ["allreduce", "--nproc", "2"],
    "profile": ["profile", "--nproc", "2", "--hidden", "256"],
}


def collect(directory: Path, runs: int) -> None:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    for i in range(runs):
        for name, args in COMMANDS.items():
            out = directory / f"{name}-{i + 1:02d}.json"
            subprocess.run([sys.executable, "-m", "ddpcheck", *args, "--json", str(out), "--quiet"], env=env)


def spread(reports: list[dict[str, Any]]) -> None:
    values: dict[str, list[float]] = defaultdict(list)
    bound: dict[str, bool] = {}
    for report in reports:
        for fig in baseline.figures_of(report):
            values[fig.label].append(fig.value)
            bound[fig.label] = bound.get(fig.label, True) and fig.bandwidth_bound
    print(f"{'figure':48} {'median':>10} {'min/med':>8} {'max/med':>8}")
    for label, vals in values.items():
        med = statistics.median(vals)
        mark = "" if bound[label] else "  (latency-bound in some run)"
        print(f"{label:48} {med:10.4g} {min(vals) / med:8.2f} {max(vals) / med:8.2f}{mark}")


def worst_speed(old: dict[str, Any], new: dict[str, Any]) -> tuple[float, str]:
    table = baseline.compare(old, new, tolerance=0.99).table
    row = min(table.rows, key=lambda r: r["speed"])
    return row["speed"], row["figure"]


def pairs(reports: list[dict[str, Any]], tolerances: list[float]) -> None:
    worst = []
    for i, old in enumerate(reports):
        for j, new in enumerate(reports):
            if i != j:
                worst.append(worst_speed(old, new))
    speeds = sorted(s for s, _ in worst)
    lowest = min(worst)
    print(
        f"  worst figure over {len(worst)} ordered pairs: speed {lowest[0]:.3f} ({lowest[1]}); "
        f"5th percentile {speeds[len(speeds) // 20]:.3f}, median {statistics.median(speeds):.3f}"
    )
    first = reports[0]
    for tol in tolerances:
        passed = sum(baseline.compare(first, new, tol).check.status.value == "PASS" for new in reports[1:])
        passed_all = sum(s >= 1 - tol for s in speeds)
        print(
            f"  tolerance {tol:.2f}: {passed}/{len(reports) - 1} reruns pass against run 1; "
            f"{passed_all}/{len(speeds)} of all ordered pairs"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--from", dest="source", help="a directory of reports saved by an earlier run")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="wt15-spread-") as scratch:
        directory = Path(args.source) if args.source else Path(scratch)
        if not args.source:
            collect(directory, args.runs)
        for name in COMMANDS:
            reports = [json.loads(p.read_text()) for p in sorted(directory.glob(f"{name}-*.json"))]
            reports = [r for r in reports if r.get("verdict") == "pass"]
            print(f"\n== {name}: {len(reports)} healthy runs")
            if len(reports) < 2:
                continue
            spread(reports)
            device = reports[0]["world"]["device"]
            pairs(reports, sorted({0.1, 0.2, 0.3, 0.4, 0.5, 0.6, baseline.DEFAULT_TOLERANCE[device]}))


if __name__ == "__main__":
    main()
