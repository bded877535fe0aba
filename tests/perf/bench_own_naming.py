"""Loop: under ddpcheck's own launcher, rank 1 stopped (SIGSTOP) N times; is it named alone?

Each run is `ddpcheck allreduce --nproc 3 --sizes 1K:4M --iters 200 --timeout 4 --json -`, started
as tests/test_failures.py's stopped-rank test starts it. Rank 1 is stopped

- `random`: 0 to 2 s after every rank wrote its status file (launch, join, the first sizes);
- `join`: the moment its status says it waits in the join's barrier (polled every 2 ms), then
  0 to 50 ms: where a rank stopped after answering one peer and not the other leaves one peer
  a stage behind the rest.

A run counts as named when the report fails with one `hang` naming [1] "stopped (SIGSTOP)",
else misnamed (what it said is printed). Idle, and with one busy-loop process per core beside it.

    python tests/perf/bench_own_naming.py [--runs 20] [--moment random|join|both] [--load idle|busy|both]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from ddpcheck.failure import stages
from ddpcheck.rank.status_channel import read_statuses
from tests.conftest import start_run, wait_for_workers
from tests.support.load import busy_cores

ARGV = ["--nproc", "3", "--sizes", "1K:4M", "--iters", "200", "--timeout", "4", "--json", "-"]


def wait_until_rank1_joins(scratch: Path, timeout: float = 60.0) -> None:
    """Until rank 1's status says it waits in the join's barrier, read every 2 ms."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if any(
            getattr(read_statuses(run).get(1), "stage", None) == stages.JOIN_WAIT
            for run in scratch.glob("ddpcheck-*")
        ):
            return
        time.sleep(0.002)
    raise AssertionError(f"rank 1 never reached the join within {timeout:.0f} s")


def one(moment: str, rng: random.Random) -> tuple[str, str]:
    """('named' | 'misnamed', what the report said)."""
    with tempfile.TemporaryDirectory() as scratch_name:
        scratch = Path(scratch_name)
        proc = start_run(scratch, *ARGV)
        try:
            workers = wait_for_workers(scratch, 3)
            victim = next(w for w in workers if w.environ().get("RANK") == "1")
            if moment == "join":
                wait_until_rank1_joins(scratch)
                time.sleep(rng.uniform(0, 0.05))
            else:
                time.sleep(rng.uniform(0, 2))
            victim.suspend()
            out, err = proc.communicate(timeout=60)
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.communicate()
    try:
        report = json.loads(out)
    except ValueError:
        return "misnamed", f"exit {proc.returncode}, no report: {err[-300:]}"
    failing = [c for c in report["checks"] if c["status"] == "ERROR"]
    named = [(c["name"], c["ranks"]) for c in failing] == [("hang", [1])]
    if named and "stopped (SIGSTOP)" in failing[0]["detail"]:
        return "named", ""
    return "misnamed", " | ".join(f"{c['name']} {c['ranks']}: {c['detail']}" for c in failing)[-400:]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--moment", choices=("random", "join", "both"), default="both")
    parser.add_argument("--load", choices=("idle", "busy", "both"), default="both")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    os.environ.setdefault("PYTHONPATH", str(Path(__file__).resolve().parents[2]))
    rng = random.Random(args.seed)
    moments = ["random", "join"] if args.moment == "both" else [args.moment]
    loads = ["idle", "busy"] if args.load == "both" else [args.load]
    for load in loads:
        for moment in moments:
            tally: Counter[str] = Counter()
            with busy_cores(None if load == "busy" else 0):
                for run in range(args.runs):
                    kind, said = one(moment, rng)
                    tally[kind] += 1
                    print(
                        f"{load} {moment} run {run + 1}: {kind}" + (f": {said}" if said else ""), flush=True
                    )
            print(f"== {load}, stopped at {moment}: {dict(tally)} of {args.runs}", flush=True)


if __name__ == "__main__":
    main()
