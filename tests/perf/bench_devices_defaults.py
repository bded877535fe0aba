"""How `ddpcheck devices`' CPU defaults were chosen: healthy runs against a rank slowed from outside.

    python tests/perf/bench_devices_defaults.py [--nproc 4] [--runs 20] [--load] [--culprit 2]

Each healthy run records every rank's figures as a ratio to the median of the others (what
the judge compares with --threshold), and whether the run passed. Each faulty run slows one
rank to about half its speed from outside the process, as a sick device or a noisy
neighbour would, by a SIGSTOP/SIGCONT duty cycle (stopped half of every 20 ms), and records
whether `compute` named exactly that rank and how slow it looked. --load runs one busy-loop
process per core beside every run. Not collected by pytest; prints one summary line per kind.
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
import threading
import time
from pathlib import Path
from typing import Any

import psutil

BUSY = "while True: pass"


def ratios(report: dict[str, Any], key: str) -> dict[int, float]:
    rows = {r["rank"]: r[key] for r in report["tables"]["devices"] if isinstance(r.get(key), (int, float))}
    return {
        rank: value / statistics.median([v for r, v in rows.items() if r != rank])
        for rank, value in rows.items()
    }


def rank_pid(launcher: psutil.Process, rank: int, deadline: float) -> int | None:
    """The pid of the rank process with RANK=rank among the launcher's descendants."""
    while time.monotonic() < deadline:
        for child in launcher.children(recursive=True):
            try:
                if "ddpcheck.rank.harness" in " ".join(child.cmdline()) and child.environ().get(
                    "RANK"
                ) == str(rank):
                    return child.pid
            except psutil.Error:
                continue
        time.sleep(0.05)
    return None


def duty_cycle(pid: int, stop: threading.Event, fraction: float = 0.5, period_s: float = 0.02) -> None:
    while not stop.is_set():
        try:
            os.kill(pid, signal.SIGSTOP)
            time.sleep(fraction * period_s)
            os.kill(pid, signal.SIGCONT)
            time.sleep((1 - fraction) * period_s)
        except ProcessLookupError:
            return
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGCONT)


def one_run(nproc: int, culprit: int | None, scratch: Path) -> dict[str, Any]:
    out = scratch / "report.json"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, "-m", "ddpcheck", "devices", "--nproc", str(nproc), "--json", str(out), "-q"]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    stop = threading.Event()
    cycler = None
    if culprit is not None:
        pid = rank_pid(psutil.Process(proc.pid), culprit, time.monotonic() + 60)
        if pid is not None:
            cycler = threading.Thread(target=duty_cycle, args=(pid, stop), daemon=True)
            cycler.start()
    stdout, stderr = proc.communicate(timeout=300)
    stop.set()
    if cycler:
        cycler.join()
    report = json.loads(out.read_text()) if out.exists() else None
    if report is None:
        return {"code": proc.returncode, "error": (stdout + stderr)[-500:]}
    named = {c["name"]: c["ranks"] for c in report["checks"] if c["status"] in ("FAIL", "ERROR")}
    return {
        "code": proc.returncode,
        "named": named,
        "compute": ratios(report, "gemm_tflops"),
        "memory": ratios(report, "copy_gbps"),
        "elapsed_s": report["elapsed_s"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--nproc", type=int, default=4)
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--culprit", type=int, default=2)
    parser.add_argument("--load", action="store_true", help="one busy-loop process per core beside every run")
    parser.add_argument("--json", help="write every run's figures here")
    args = parser.parse_args()
    hogs = (
        [subprocess.Popen([sys.executable, "-c", BUSY]) for _ in range(os.cpu_count() or 1)]
        if args.load
        else []
    )
    results: dict[str, list[dict[str, Any]]] = {"healthy": [], "slowed": []}
    try:
        with tempfile.TemporaryDirectory() as scratch:
            for _ in range(args.runs):
                results["healthy"].append(one_run(args.nproc, None, Path(scratch)))
                results["slowed"].append(one_run(args.nproc, args.culprit, Path(scratch)))
    finally:
        for hog in hogs:
            hog.kill()
            hog.wait()
    load = f"{len(hogs)} busy-loop processes beside" if hogs else "idle"
    healthy, slowed = results["healthy"], results["slowed"]
    passed = sum(r.get("code") == 0 for r in healthy)
    low_compute = min((min(r["compute"].values()) for r in healthy if "compute" in r), default=float("nan"))
    low_memory = min((min(r["memory"].values()) for r in healthy if "memory" in r), default=float("nan"))
    exact = sum(r.get("named", {}).get("compute") == [args.culprit] for r in slowed)
    culprit_ratios = [r["compute"][args.culprit] for r in slowed if "compute" in r]
    others = [v for r in slowed if "compute" in r for k, v in r["compute"].items() if k != args.culprit]
    elapsed = [r["elapsed_s"] for r in healthy if "elapsed_s" in r]
    print(f"# {args.runs} healthy and {args.runs} slowed runs of `devices --nproc {args.nproc}`, {load}")
    print(
        f"healthy: {passed}/{len(healthy)} passed; lowest rank-to-peers ratio: compute {low_compute:.2f}, "
        f"memory {low_memory:.2f}; run {statistics.median(elapsed):.1f} s (median)"
    )
    print(
        f"slowed rank {args.culprit} (SIGSTOP half of every 20 ms): named exactly by compute in "
        f"{exact}/{len(slowed)}; its ratio {min(culprit_ratios):.2f}-{max(culprit_ratios):.2f} "
        f"(median {statistics.median(culprit_ratios):.2f}); the others' lowest {min(others):.2f}"
    )
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
