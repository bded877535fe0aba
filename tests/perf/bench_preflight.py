"""Benchmark: how long ddpcheck.preflight() takes on 2 CPU ranks, alone and beside a busy core.

One torchrun job of 2 gloo ranks calls preflight() CALLS times in a row (quiet, returning its
Report) and every rank prints each call's seconds, measured around the call; the first call
includes preflight's own imports. docs/preflight.md quotes the figures and chose the defaults
from them.

    python tests/perf/bench_preflight.py [--calls 20] [--busy 1] [--budget S]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.support.load import busy_cores

JOB = """
import sys, time
import torch.distributed as dist
import ddpcheck
dist.init_process_group("gloo")
kwargs = {"quiet": True, "raise_on_failure": False}
if sys.argv[2] != "None":
    kwargs["budget_s"] = float(sys.argv[2])
for _ in range(int(sys.argv[1])):
    began = time.perf_counter()
    report = ddpcheck.preflight(**kwargs)
    print(f"CALL {dist.get_rank()} {time.perf_counter() - began:.3f} {report.verdict.value}", flush=True)
dist.destroy_process_group()
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=20)
    parser.add_argument("--busy", type=int, default=0, help="spinning processes beside the job")
    parser.add_argument("--budget", type=float, default=None)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        script = Path(tmp) / "job.py"
        script.write_text(JOB)
        command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2"]
        command += [str(script), str(args.calls), str(args.budget)]
        load = busy_cores(args.busy) if args.busy else contextlib.nullcontext()
        with load:
            done = subprocess.run(
                command,
                capture_output=True,
                text=True,
                env={**os.environ, "OMP_NUM_THREADS": "1"},
                timeout=900,
            )
    calls = [line.split() for line in done.stdout.splitlines() if line.startswith("CALL ")]
    first = [float(c[2]) for c in calls[:2]]
    rest = sorted(float(c[2]) for c in calls[2:])
    verdicts = sorted({c[3] for c in calls})
    print(f"{len(calls)} calls over 2 ranks, busy={args.busy}, budget={args.budget}, verdicts {verdicts}")
    print(f"first call (imports included): {', '.join(f'{s:.2f}' for s in first)} s")
    if rest:
        print(
            f"later calls: median {statistics.median(rest):.2f} s, max {rest[-1]:.2f} s, min {rest[0]:.2f} s"
        )
    if done.returncode:
        print(done.stderr[-2000:])


if __name__ == "__main__":
    main()
