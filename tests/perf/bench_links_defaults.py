"""Benchmark: do `ddpcheck links`' defaults cry wolf, and do they miss a slow link?

Runs `ddpcheck links --nproc N` RUNS times healthy and RUNS times with `--inject slowlink@R`
(R cycling over the ranks), with the device's default --size/--iters/--threshold unless
given, and prints: healthy runs that passed, slowed runs where exactly rank R was named,
and the smallest ratio to the median any healthy link showed (the margin to --threshold).

    python tests/perf/bench_links_defaults.py [--nproc 4] [--runs 20] [-- extra ddpcheck args]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def run(nproc: int, extra: list[str], fault: str | None, path: Path) -> dict:
    args = [sys.executable, "-m", "ddpcheck", "links", "--nproc", str(nproc), "--quiet", "--json", str(path)]
    args += ["--inject", fault] if fault else []
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    subprocess.run([*args, *extra], env=env, capture_output=True, text=True, timeout=300, check=False)
    return json.loads(path.read_text())


def named(report: dict) -> set[int]:
    return {r for c in report["checks"] if c["status"] == "FAIL" for r in c["ranks"]}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--nproc", type=int, default=4)
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("extra", nargs="*", help="more ddpcheck links options, after --")
    opts = parser.parse_args()
    passed = caught = 0
    worst = 1e9
    healthy_fail: list[str] = []
    began = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="wt13-bench-") as tmp:
        for i in range(opts.runs):
            report = run(opts.nproc, opts.extra, None, Path(tmp) / "h.json")
            ok = report["verdict"] == "pass"
            passed += ok
            if not ok:
                healthy_fail += [c["detail"] for c in report["checks"] if c["status"] == "FAIL"]
            ratios = [r["ratio"] for r in report["tables"]["links"] if r["ratio"] is not None]
            worst = min(worst, *ratios)
            rank = i % opts.nproc
            slowed = run(opts.nproc, opts.extra, f"slowlink@{rank}", Path(tmp) / "s.json")
            caught += named(slowed) == {rank}
            if named(slowed) != {rank}:
                missed = [
                    f"{c['name']} {c['status']}: {c['detail']}"
                    for c in slowed["checks"]
                    if c["status"] != "PASS"
                ]
                print(f"  slowlink@{rank}: verdict {slowed['verdict']}; {missed}", flush=True)
            print(
                f"run {i + 1}: healthy {report['verdict']} (min ratio {min(ratios):.2f}); "
                f"slowlink@{rank} named {sorted(named(slowed))}",
                flush=True,
            )
    print(
        f"nproc {opts.nproc} {' '.join(opts.extra)}: healthy passed {passed}/{opts.runs}, "
        f"slowed rank named exactly {caught}/{opts.runs}, smallest healthy ratio {worst:.2f}, "
        f"{time.monotonic() - began:.0f} s"
    )
    for detail in healthy_fail:
        print("  false alarm:", detail)


if __name__ == "__main__":
    main()
