"""What `ddpcheck watch` costs a healthy job: its wall time with and without watch, side by side.

Runs alternate (bare, watched, bare, watched, ...) so that a machine busy with other work weighs
on both alike; the ratio of the medians is the figure quoted in docs/watch.md. Also measures what
one stack sample costs the rank it reads: the longest gap a busy loop sees while py-spy reads it,
paused (the verdict's samples) and not paused (the periodic ones, --nonblocking).

    python tests/perf/bench_watch.py --reps 5 --steps 40
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parents[2]
TRAIN_JOB = str(HERE / "tests" / "support" / "train_job.py")
LOOP = """
import sys, time
gaps = []
last = time.perf_counter()
end = last + float(sys.argv[1])
while last < end:
    now = time.perf_counter()
    gaps.append(now - last)
    last = now
print(max(gaps) * 1000)
"""


def job(nproc: int) -> list[str]:
    return [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc-per-node",
        str(nproc),
        TRAIN_JOB,
    ]


def timed(argv: list[str], env: dict[str, str]) -> float:
    began = time.perf_counter()
    subprocess.run(argv, env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - began


def stall_ms(blocking: bool | None, samples: int) -> float:
    """The longest pause a busy Python loop sees while py-spy dumps it `samples` times (None: no dump,
    the machine's own scheduling: the reference)."""
    loop = subprocess.Popen(
        [sys.executable, "-c", LOOP, str(samples * 0.5 + 2)], stdout=subprocess.PIPE, text=True
    )
    time.sleep(1)
    if blocking is None:
        time.sleep(samples * 0.5)
    for _ in range(samples if blocking is not None else 0):
        argv = ["py-spy", "dump", "--pid", str(loop.pid)] + ([] if blocking else ["--nonblocking"])
        subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
        time.sleep(0.5)
    out, _ = loop.communicate()
    return float(out.strip())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--nproc", type=int, default=3)
    parser.add_argument("--hang-after", type=float, default=300)
    parser.add_argument("--stalls-only", action="store_true", help="only the stall of one stack sample")
    args = parser.parse_args()
    if args.stalls_only:
        stalls()
        return
    path = os.pathsep.join([str(HERE), *filter(None, [os.environ.get("PYTHONPATH")])])
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TRAIN_JOB_STEPS": str(args.steps),
           "TRAIN_JOB_STEP_S": "0.05", "PYTHONPATH": path}  # fmt: skip
    watched = [sys.executable, "-m", "ddpcheck", "watch", "--hang-after", str(args.hang_after), "--"]
    bare_s, watch_s = [], []
    with tempfile.TemporaryDirectory() as scratch:
        env["TMPDIR"] = scratch
        for rep in range(args.reps):
            bare_s.append(timed(job(args.nproc), env))
            watch_s.append(timed([*watched, *job(args.nproc)], env))
            print(f"rep {rep + 1}: bare {bare_s[-1]:.2f} s, watched {watch_s[-1]:.2f} s", flush=True)
    bare, watch = statistics.median(bare_s), statistics.median(watch_s)
    print(f"{args.nproc} ranks, {args.steps} steps, {args.reps} alternating reps (medians):")
    print(f"  bare     {bare:7.2f} s")
    print(f"  watched  {watch:7.2f} s   ratio {watch / bare:.3f}")
    stalls()


def stalls() -> None:
    labels = {None: "no dump (reference)", False: "--nonblocking (periodic)", True: "paused (verdict)"}
    for blocking, label in labels.items():
        print(
            f"  longest stall of a busy loop over 10 py-spy dumps, {label}: {stall_ms(blocking, 10):.1f} ms"
        )


if __name__ == "__main__":
    main()
