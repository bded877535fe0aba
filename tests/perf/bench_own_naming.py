"""Loop: under ddpcheck's own launcher, rank 1 stopped (SIGSTOP) N times; is it named alone?

Each run is `ddpcheck allreduce --nproc 3 --sizes 1K:4M --iters 200 --timeout 4 --json -`, as
tests/test_failures.py's stopped-rank test runs it. Rank 1 is stopped

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
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.conftest import worker_processes
from tests.support.load import busy_cores

ARGV = ["allreduce", "--nproc", "3", "--sizes", "1K:4M", "--iters", "200", "--timeout", "4", "--json", "-"]


def wait_for(predicate, what: str, timeout: float = 60.0, every: float = 0.05):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = predicate()
        if found:
            return found
        time.sleep(every)
    raise AssertionError(f"{what} not within {timeout:.0f} s")


def rank1_stage(scratch: Path) -> str | None:
    for path in scratch.glob("ddpcheck-*/status/rank-1.json"):
        try:
            return json.loads(path.read_text())["stage"]
        except (OSError, ValueError, KeyError):
            return None  # being rewritten: read again
    return None


def one(moment: str, rng: random.Random) -> tuple[str, str]:
    """('named' | 'misnamed', what the report said)."""
    with tempfile.TemporaryDirectory() as scratch_name:
        scratch = Path(scratch_name)
        env = {**os.environ, "TMPDIR": scratch_name, "OMP_NUM_THREADS": "1"}
        proc = subprocess.Popen(
            [sys.executable, "-m", "ddpcheck", *ARGV],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        try:
            wait_for(lambda: len(list(scratch.glob("ddpcheck-*/status/rank-*.json"))) == 3, "3 status files")
            victim = wait_for(
                lambda: next((w for w in worker_processes(scratch) if w.environ().get("RANK") == "1"), None),
                "rank 1",
            )
            if moment == "join":
                wait_for(
                    lambda: (rank1_stage(scratch) or "").startswith("join: waiting"), "the join", every=0.002
                )
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
    if [(c["name"], c["ranks"]) for c in failing] == [("hang", [1])] and "stopped (SIGSTOP)" in failing[0][
        "detail"
    ]:
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
