"""--budget: the wall time of each budgeted command against its budget (not collected by pytest).

    python tests/perf/bench_budget.py [--reps 3] [--nproc 2] [--budgets 15,30] [--only links,devices]

Each command runs with far more work than any budget holds (100,000 iterations a size, a link
or a pass), so
that the budget, not the work, sets its end: the wall time from before the process starts to
after it ends, the exit code, and what the report says was cut. The figures quoted in
docs/fleet.md come from here. Exits 1 when a run ended after its budget.
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

WORK = {
    "allreduce": ["--sizes", "1K:1M", "--iters", "100000"],
    "collectives": ["--ops", "all_reduce,all_gather,broadcast", "--sizes", "1K:256K", "--iters", "100000"],
    "links": ["--size", "64K", "--iters", "100000"],
    "devices": ["--iters", "100000"],
}


def run(command: str, nproc: int, budget: float) -> tuple[float, int, str]:
    """(wall seconds, exit code, the budget check's line or the failing check's)."""
    with tempfile.TemporaryDirectory() as scratch:
        report = Path(scratch) / "report.json"
        argv = [sys.executable, "-m", "ddpcheck", command, "--nproc", str(nproc), "--budget", f"{budget:g}"]
        env = {**os.environ, "OMP_NUM_THREADS": "1"}
        began = time.monotonic()
        proc = subprocess.run(
            [*argv, *WORK[command], "--json", str(report), "--quiet"], capture_output=True, text=True, env=env
        )
        wall = time.monotonic() - began
        if not report.exists():
            return wall, proc.returncode, proc.stderr.strip().splitlines()[-1]
        checks = json.loads(report.read_text())["checks"]
        said = next((c for c in checks if c["name"] == "budget"), None) or next(
            c for c in checks if c["status"] in ("FAIL", "ERROR")
        )
        return wall, proc.returncode, f"{said['name']}: {said['detail']}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--nproc", type=int, default=2)
    parser.add_argument("--budgets", default="15,30")
    parser.add_argument("--only", help="comma-separated commands (default: all)")
    args = parser.parse_args()
    budgets = [float(b) for b in args.budgets.split(",")]
    load = os.getloadavg()[0]
    print(f"{os.cpu_count()} cores, load average {load:.1f} at the start; {args.nproc} CPU ranks over gloo")
    header = f"{'command':<12} {'budget':>7} {'wall (median, max)':>20}  exit codes"
    print(f"{header}   what the report said (last run)")
    late = False
    for command in args.only.split(",") if args.only else WORK:
        for budget in budgets:
            walls, codes, said = [], [], ""
            for _ in range(args.reps):
                wall, code, said = run(command, args.nproc, budget)
                walls.append(wall)
                codes.append(code)
            late |= max(walls) > budget
            shown = f"{statistics.median(walls):6.1f} s, {max(walls):5.1f} s"
            print(f"{command:<12} {budget:>6g}s {shown:>20}  {','.join(map(str, codes)):<12} {said[:110]}")
    return 1 if late else 0


if __name__ == "__main__":
    sys.exit(main())
