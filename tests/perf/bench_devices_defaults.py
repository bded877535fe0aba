"""How `ddpcheck devices`' CPU defaults were chosen: healthy runs against a rank slowed from outside.

    python tests/perf/bench_devices_defaults.py [--nproc 4] [--runs 20] [--load [steady|bursty]] [--culprit 2]
        [--devices-args '--size 128 --iters 3'] [--launcher own|srun] [--keep-failed DIR]

Each healthy run records every rank's figures as a ratio to the median of the others (what
the judge compares with --threshold), and whether the run passed; and, from the same runs,
whom the best pass alone would have named (before each round was also judged against the
peers measured next to it: docs/devices.md), side by side. Each faulty run slows one
rank to about half its speed from outside the process, as a sick device or a noisy
neighbour would, by a SIGSTOP/SIGCONT duty cycle (stopped half of every 20 ms), and records
whether `compute` named exactly that rank and how slow it looked. --load runs one busy-loop
process per core beside every run; --load bursty makes them come and go as other jobs on a
shared node do (each runs, then stops, for a random 0.2 to 2 s; one of them copies memory
rather than computing), so the load can change between one rank's turn and the next.
--launcher srun runs each under `srun -K` (a Slurm of the bench's own on this machine, as the
tests start one), the ranks then inline in srun's tasks. Not collected by pytest; prints one
summary line per kind.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from ddpcheck.checks.devices.judge import slow_ranks
from tests.support.load import bursty_load, busy_cores, duty_cycle
from tests.support.slurm import slurm_daemons


def figures(report: dict[str, Any], key: str) -> dict[int, float]:
    """Rank -> its figure `key` (its best pass), from the report's devices table."""
    return {r["rank"]: r[key] for r in report["tables"]["devices"] if isinstance(r.get(key), (int, float))}


def by_best_pass(report: dict[str, Any], key: str, threshold: float) -> list[int]:
    """The ranks the best pass alone names: the judge before rounds were compared too."""
    return sorted(slow_ranks(figures(report, key), threshold))


def ratios(report: dict[str, Any], key: str) -> dict[int, float]:
    rows = figures(report, key)
    return {
        rank: value / statistics.median([v for r, v in rows.items() if r != rank])
        for rank, value in rows.items()
    }


def round_bias(runs: list[dict[str, Any]], key: str) -> dict[str, float]:
    """Rank -> the median over runs and rounds of its pass divided by its peers' median that round."""
    per_rank: dict[str, list[float]] = {}
    for run in runs:
        passes = run.get("passes", {}).get(key) or {}
        for rank, mine in passes.items():
            for number, value in enumerate(mine):
                peers = [theirs[number] for other, theirs in passes.items() if other != rank]
                per_rank.setdefault(str(rank), []).append(value / statistics.median(peers))
    return {rank: statistics.median(values) for rank, values in sorted(per_rank.items())}


def rank_pid(run: str, rank: int, deadline: float) -> int | None:
    """The pid of the rank process of run `run` (its BENCH_RUN) with RANK or SLURM_PROCID = rank.

    Looked up among all processes: srun's tasks are slurmstepd's children, not srun's.
    """
    while time.monotonic() < deadline:
        for proc in psutil.process_iter():
            try:
                env = proc.environ()
                if env.get("BENCH_RUN") != run or "ddpcheck" not in " ".join(proc.cmdline()):
                    continue
                if env.get("RANK", env.get("SLURM_PROCID")) == str(rank):
                    return proc.pid
            except psutil.Error:
                continue
        time.sleep(0.05)
    return None


def one_run(
    nproc: int, culprit: int | None, scratch: Path, extra: list[str], launcher: str
) -> dict[str, Any]:
    out = scratch / "report.json"
    out.unlink(missing_ok=True)
    run = uuid.uuid4().hex
    env = {**os.environ, "OMP_NUM_THREADS": "1", "BENCH_RUN": run}
    devices = [sys.executable, "-m", "ddpcheck", "devices", "--json", str(out), "-q", *extra]
    if launcher == "srun":
        cmd = ["srun", "-n", str(nproc), "--kill-on-bad-exit=1", *devices]
    else:
        cmd = [*devices, "--nproc", str(nproc)]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    stop = threading.Event()
    cycler = None
    if culprit is not None:
        pid = rank_pid(run, culprit, time.monotonic() + 60)
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
        "best_named": {
            name: ranks
            for name, key, threshold in (("compute", "gemm_tflops", 0.7), ("memory", "copy_gbps", 0.4))
            if (ranks := by_best_pass(report, key, threshold))
        },
        # Every rank's every pass, for judging the same runs other ways afterwards (--json).
        "passes": {
            key: {r["rank"]: r.get(f"{key}_passes") for r in report["tables"]["devices"]}
            for key in ("gemm_tflops", "copy_gbps")
        },
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
    parser.add_argument(
        "--load",
        nargs="?",
        const="steady",
        choices=("steady", "bursty"),
        help="one busy-loop process per core beside every run; bursty: each comes and goes",
    )
    parser.add_argument("--json", help="write every run's figures here")
    parser.add_argument("--devices-args", default="", help="for devices, e.g. '--size 128 --iters 3'")
    parser.add_argument("--launcher", choices=("own", "srun"), default="own")
    parser.add_argument(
        "--keep-failed", type=Path, metavar="DIR", help="keep each failed healthy run's report"
    )
    parser.add_argument("--healthy-only", action="store_true", help="no slowed runs: false alarms alone")
    args = parser.parse_args()
    # Stopped with SIGTERM (kill, a time limit): leave through the blocks below, which end the
    # load's processes and the bench's Slurm; without this they outlived it.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    loads = {None: contextlib.nullcontext, "steady": busy_cores, "bursty": bursty_load}
    results: dict[str, list[dict[str, Any]]] = {"healthy": [], "slowed": []}
    with contextlib.ExitStack() as stack:
        stack.enter_context(loads[args.load]())
        scratch = Path(stack.enter_context(tempfile.TemporaryDirectory()))
        if args.launcher == "srun":
            os.environ.update(stack.enter_context(slurm_daemons()))
        extra = args.devices_args.split()
        for number in range(args.runs):
            healthy = one_run(args.nproc, None, scratch, extra, args.launcher)
            results["healthy"].append(healthy)
            if args.keep_failed and healthy.get("code") != 0 and (scratch / "report.json").exists():
                args.keep_failed.mkdir(parents=True, exist_ok=True)
                shutil.copy(scratch / "report.json", args.keep_failed / f"healthy-{number:02d}.json")
            if not args.healthy_only:
                results["slowed"].append(one_run(args.nproc, args.culprit, scratch, extra, args.launcher))
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))
    load = f"a {args.load} busy-loop process per core beside" if args.load else "idle"
    healthy, slowed = results["healthy"], results["slowed"]
    passed = sum(r.get("code") == 0 for r in healthy)
    best_passed = sum(r.get("code") is not None and not r.get("best_named") for r in healthy)
    best_exact = sum(r.get("best_named", {}).get("compute") == [args.culprit] for r in slowed)
    low_compute = min((min(r["compute"].values()) for r in healthy if "compute" in r), default=float("nan"))
    low_memory = min((min(r["memory"].values()) for r in healthy if "memory" in r), default=float("nan"))
    exact = sum(r.get("named", {}).get("compute") == [args.culprit] for r in slowed)
    culprit_ratios = [r["compute"][args.culprit] for r in slowed if "compute" in r]
    others = [v for r in slowed if "compute" in r for k, v in r["compute"].items() if k != args.culprit]
    elapsed = [r["elapsed_s"] for r in healthy if "elapsed_s" in r]
    print(
        f"# {len(healthy)} healthy and {len(slowed)} slowed runs of `devices`, {args.nproc} ranks "
        f"({args.launcher} launcher), {load}"
    )
    print(
        f"healthy: {passed}/{len(healthy)} passed (by best pass alone {best_passed}); "
        f"lowest rank-to-peers ratio: compute {low_compute:.2f}, "
        f"memory {low_memory:.2f}; run {statistics.median(elapsed):.1f} s (median)"
    )
    print(
        "healthy, each rank's median per-round ratio to its peers (a rank's process or turn "
        "that slows it shows below 1): compute "
        + ", ".join(f"{rank} {ratio:.2f}" for rank, ratio in round_bias(healthy, "gemm_tflops").items())
        + "; memory "
        + ", ".join(f"{rank} {ratio:.2f}" for rank, ratio in round_bias(healthy, "copy_gbps").items())
    )
    if not slowed:
        return
    print(
        f"slowed rank {args.culprit} (SIGSTOP half of every 20 ms): named exactly by compute in "
        f"{exact}/{len(slowed)} (by best pass alone {best_exact}); "
        f"its ratio {min(culprit_ratios):.2f}-{max(culprit_ratios):.2f} "
        f"(median {statistics.median(culprit_ratios):.2f}); the others' lowest {min(others):.2f}"
    )


if __name__ == "__main__":
    main()
