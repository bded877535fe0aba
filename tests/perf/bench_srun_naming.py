"""Loop: under a real `srun -K`, rank 2 stopped (SIGSTOP) or killed (SIGKILL) mid-sweep, N times;
how often is it named exactly, idle and with one busy-loop process per core beside it?

Each run is `srun -n 3 --kill-on-bad-exit=1 ddpcheck allreduce --timeout 10 --json R` under
slurmctld/slurmd started here (tests/support/slurm.py; needs root), struck as
tests/test_launchers.py's `strike()` does. A run counts as

- named:    rank 0's report fails with exactly [2] and the right words (`hang` + "stopped
            (SIGSTOP)" / `rank lost` + "lost: its process ended"), and rank 1's one line names rank 2;
- misnamed: a report or rank 1's line names someone else, or more than rank 2;
- no report: rank 0 wrote no report (its line, if any, is printed).

    python tests/perf/bench_srun_naming.py [--runs 10] [--fault stop|kill|both] [--load idle|busy|both]
        [--iters 200]
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.support.load import busy_cores
from tests.support.slurm import slurm_daemons
from tests.test_launchers import Outcome, strike

SRUN = [
    "srun",
    "-n",
    "3",
    "--kill-on-bad-exit=1",
    sys.executable,
    "-m",
    "ddpcheck",
    "allreduce",
    "--timeout",
    "10",
]
FAULTS = {
    "stop": (signal.SIGSTOP, "hang", "stopped (SIGSTOP)"),
    "kill": (signal.SIGKILL, "rank lost", "lost"),
}


def settle(slurm_env: dict[str, str]) -> None:
    """No job of an earlier run left holding the node (a slurmd that stopped answering under load
    leaves slurmctld believing one still runs): cancel it, then wait for the queue to empty."""
    env = {**os.environ, **slurm_env}
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        queued = subprocess.run(["squeue", "-h", "-o", "%i"], env=env, capture_output=True, text=True).stdout
        if not queued.split():
            return
        subprocess.run(["scancel", *queued.split()], env=env, capture_output=True)
        time.sleep(1)
    print(f"jobs still queued after 60 s: {queued.split()}", flush=True)


def classify(outcome: Outcome, name: str, words: str) -> tuple[str, str]:
    """('named' | 'misnamed' | 'no report', what was said)."""
    who = f"rank 2 (host {socket.gethostname()}, pid {outcome.pids[2]}) is {words}"
    lines = [line for line in outcome.err.splitlines() if line.startswith("ddpcheck: rank ")]
    rank1 = [line for line in lines if line.startswith("ddpcheck: rank 1 ")]
    if outcome.report is None:
        return "no report", " | ".join(lines)[-400:]
    if outcome.report["verdict"] == "pass":
        return "passed (struck after the sweep)", ""
    failing = [c for c in outcome.report["checks"] if c["status"] == "ERROR"]
    said = f"{[(c['name'], c['ranks']) for c in failing]} | rank 1: {rank1}"
    if len(failing) != 1 or (failing[0]["name"], failing[0]["ranks"]) != (name, [2]):
        return "misnamed", said[-400:]
    if who not in failing[0]["detail"] or "ranks 0, 1 were waiting for it" not in failing[0]["detail"]:
        return "misnamed", failing[0]["detail"][-400:]
    if len(rank1) != 1 or who.split(" is ")[0] not in rank1[0]:
        return "misnamed", said[-400:]
    return "named", ""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--fault", choices=("stop", "kill", "both"), default="both")
    parser.add_argument("--load", choices=("idle", "busy", "both"), default="both")
    parser.add_argument(
        "--iters", type=int, default=200,
        help="iterations per size: 200 (1K:4M) is mid-sweep when struck; 10 (the default) often past it",
    )  # fmt: skip
    args = parser.parse_args()
    argv = [*SRUN, "--sizes", "1K:4M", "--iters", str(args.iters)]
    faults = ["stop", "kill"] if args.fault == "both" else [args.fault]
    loads = ["idle", "busy"] if args.load == "both" else [args.load]
    os.environ.setdefault("PYTHONPATH", str(Path(__file__).resolve().parents[2]))
    with slurm_daemons() as slurm_env:
        for load in loads:
            for fault in faults:
                signum, name, words = FAULTS[fault]
                tally: Counter[str] = Counter()
                with busy_cores(None if load == "busy" else 0):
                    for run in range(args.runs):
                        settle(slurm_env)
                        with tempfile.TemporaryDirectory() as scratch, tempfile.TemporaryDirectory() as tmp:
                            began = time.monotonic()
                            try:
                                outcome = strike(argv, Path(scratch), Path(tmp), signum, env=slurm_env)
                            except AssertionError as exc:
                                tally["never reached the sweep"] += 1
                                print(
                                    f"{load} {fault} run {run + 1}: never reached the sweep: {exc}",
                                    flush=True,
                                )
                                continue
                            kind, said = classify(outcome, name, words)
                            tally[kind] += 1
                            print(f"{load} {fault} run {run + 1}: {kind} ({time.monotonic() - began:.0f} s)"
                                  + (f": {said}" if said else ""), flush=True)  # fmt: skip
                print(f"== {load}, SIG{fault.upper()}: {dict(tally)} of {args.runs}", flush=True)


if __name__ == "__main__":
    main()
