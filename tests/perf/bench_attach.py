"""Time to verdict of `ddpcheck attach`: a real gloo job, hung, stopped or healthy, on one node or three.

Starts tests/support/attach_job.py (one rank sleeping in user code while its peers wait in
all_reduce, a rank in broadcast while its peers wait in all_reduce, a rank stopped by SIGSTOP, or
every rank stepping), waits until it is ready, then times `ddpcheck attach` from the command's
start to its exit, --reps times, and prints each run, the median and the worst, with the verdict
it gave. The figures in docs/attach.md come from it.

    python tests/perf/bench_attach.py --nproc 8 --reps 5 --mode hang

With --nodes 3 (root: network and pid namespaces, tests/support/netns.py), the job spans three
nodes of 2 ranks, torchrun the pid 1 of each, and one `attach --all --dir` per node is started at
once; a run's time is until the last of them exits, and its verdict counts as right only when
every node gave it.

    python tests/perf/bench_attach.py --nodes 3 --reps 5 --mode stopped
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from tests.support.attached import PER_NODE, across_nodes, attach_on_nodes, rank_pid, torchrun_job
from tests.support.netns import bridged

HERE = Path(__file__).resolve().parents[2]
ELAPSED = re.compile(r" in \d+(\.\d+)? s\b")
EXPECTED = {"hang": 3, "mismatch": 3, "stopped": 3, "healthy": 0}


def one_node(args: argparse.Namespace, env: dict[str, str], scratch: str) -> list[tuple[float, int, str]]:
    """Each rep: (seconds, exit code, last line) of `ddpcheck attach PID`, a torchrun job of --nproc ranks."""
    mode = "healthy" if args.mode == "stopped" else args.mode
    runs = []
    with torchrun_job(args.nproc, Path(scratch), {**env, "ATTACH_JOB_MODE": mode}) as job:
        if args.mode == "stopped":
            os.kill(rank_pid(Path(scratch), 1), signal.SIGSTOP)
        time.sleep(1.0)
        for _ in range(args.reps):
            began = time.monotonic()
            argv = [sys.executable, "-m", "ddpcheck", "attach", str(job.pid), "-q"]
            run = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120)
            last = (run.stdout.strip().splitlines() or [""])[-1]
            runs.append((time.monotonic() - began, run.returncode, last))
    return runs


def nodes(args: argparse.Namespace, scratch: str) -> list[tuple[float, int, str]]:
    """Each rep: one attach per node at once; (seconds to the last exit, the common exit code, or -1
    when the nodes' codes or verdicts differ, and the verdict)."""
    runs = []
    culprit = args.nodes * PER_NODE - 1  # on the last node: the others see only its peers
    mode = "healthy" if args.mode == "stopped" else args.mode
    with (
        tempfile.TemporaryDirectory() as logs,
        bridged("bench42", "10.231.142", args.nodes, tools=("ip", "unshare", "nsenter")) as hosts,
        across_nodes(hosts, Path(scratch), Path(logs), mode, culprit) as inits,
    ):
        work = Path(logs)
        if args.mode == "stopped":
            os.kill(rank_pid(Path(scratch), culprit), signal.SIGSTOP)
            time.sleep(1.0)
        for rep in range(args.reps):
            reports = [work / f"rep{rep}-node{i}.json" for i in range(args.nodes)]
            began = time.monotonic()
            procs = attach_on_nodes(inits, work / f"rep{rep}", Path(scratch), reports, "-q")
            outputs = [p.communicate(timeout=120) for p in procs]
            seconds = time.monotonic() - began
            codes = {p.returncode for p in procs}
            # The summary line less each node's own elapsed time ("... in 1.1 s - hang: rank 5").
            verdicts = {ELAPSED.sub("", (out.strip().splitlines() or [""])[-1]) for out, _ in outputs}
            code = codes.pop() if len(codes) == 1 and len(verdicts) == 1 else -1
            verdict = verdicts.pop() if len(verdicts) == 1 else f"disagree: {sorted(verdicts)}"
            runs.append((seconds, code, verdict))
    return runs


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--nproc", type=int, default=8, help="ranks on the one node (without --nodes)")
    parser.add_argument("--nodes", type=int, default=1, help="nodes made of namespaces, 2 ranks each (root)")
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--mode", choices=sorted(EXPECTED), default="hang")
    args = parser.parse_args()
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(HERE)}
    os.environ.update(OMP_NUM_THREADS="1", PYTHONPATH=str(HERE))
    with tempfile.TemporaryDirectory() as scratch:
        runs = nodes(args, scratch) if args.nodes > 1 else one_node(args, env, scratch)
    wrong = 0
    for index, (seconds, code, line) in enumerate(runs):
        wrong += code != EXPECTED[args.mode]
        print(f"run {index + 1}: {seconds:.2f} s, exit {code}: {line[:100]}")
    times = [seconds for seconds, _, _ in runs]
    what = f"{args.nodes} nodes x {PER_NODE} ranks" if args.nodes > 1 else f"{args.nproc} ranks"
    print(f"{what}, {args.mode}: median {statistics.median(times):.2f} s, worst {max(times):.2f} s, "
          f"{wrong} wrong of {len(runs)}")  # fmt: skip
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
