"""Benchmark: `ddpcheck links`' rounds against pairs one at a time, and its bandwidth against a bare loop.

1. The matrix's measuring time on N ranks: the round-robin plan (all pairs of a round at once,
   n-1 rounds) against the same n(n-1)/2 pairs measured one after another, alternating in
   one torchrun job (the function `links` runs, measure_plan, with each plan). Ideal
   speed-up n/2; here concurrent pairs share this machine's cores.
2. With 2 ranks: the bandwidth `links` reports (its timing function, the median of timed
   exchanges) against a bare batched isend/irecv loop of the same size (perf_counter around
   ITERS exchanges, the mean), alternating blocks in one job. Target >= 0.95x.

    python tests/perf/bench_links.py [--nprocs 2,4,8,16] [--size 1M] [--blocks 7]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

SCRIPT = """
import os, statistics, time, torch, torch.distributed as dist
from types import SimpleNamespace
from ddpcheck.checks.links.check import _time_exchange, measure_plan
from ddpcheck.checks.links.schedule import Round, link_plan
from ddpcheck.checks.links.faults import LinkFaults
from ddpcheck.checks.links import LinksOptions

dist.init_process_group("gloo")
rank, n = dist.get_rank(), dist.get_world_size()
ctx = SimpleNamespace(
    rank=rank, device=torch.device("cpu"), sync=lambda: None, barrier=dist.barrier, tick=lambda: None,
    stage=lambda s: None, progress=lambda *a: None, faults=LinkFaults([], rank),
)
opts = LinksOptions(size={size}, iters={iters}, warmup={warmup}, threshold=0.25)
rounds = link_plan([list(range(n))])
one_by_one = [Round(r.kind, (pair,)) for r in rounds for pair in r.pairs]

def timed(plan):
    dist.barrier()
    began = time.perf_counter()
    measure_plan(ctx, plan, opts, 1)
    return time.perf_counter() - began

ours, seq = [], []
for _ in range({blocks}):
    ours.append(timed(rounds))
    seq.append(timed(one_by_one))
if rank == 0:
    print("MATRIX", n, len(rounds), len(one_by_one), statistics.median(ours), statistics.median(seq))

if n == 2:
    peer = 1 - rank
    send = torch.full(({size},), rank, dtype=torch.uint8)
    recv = torch.empty_like(send)
    ops = [dist.P2POp(dist.isend, send, peer), dist.P2POp(dist.irecv, recv, peer)]
    def bare():
        for _ in range({warmup}):
            for w in dist.batch_isend_irecv(ops): w.wait()
        dist.barrier()
        t = time.perf_counter()
        for _ in range({iters}):
            for w in dist.batch_isend_irecv(ops): w.wait()
        return {size} / ((time.perf_counter() - t) / {iters}) / 1e9
    def links():
        for _ in range({warmup}):
            for w in dist.batch_isend_irecv(ops): w.wait()
        dist.barrier()
        _, exchange_s = _time_exchange(ctx, peer, send, recv, {iters}, 0.0)
        # The mean, as the bare loop: the same quantity, so the ratio is the timing's overhead.
        return {size} / statistics.mean(exchange_s) / 1e9, {size} / statistics.median(exchange_s) / 1e9
    a, b, m = [], [], []
    for _ in range(5 * {blocks}):
        b.append(bare())
        mean, median = links()
        a.append(mean)
        m.append(median)
    if rank == 0:
        print("BANDWIDTH", statistics.median(a), statistics.median(b), statistics.median(m), flush=True)
dist.destroy_process_group()
"""


def parse_size(text: str) -> int:
    from ddpcheck.report.units import parse_size as parse

    return parse(text)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--nprocs", default="2,4,8,16")
    parser.add_argument("--size", default="1M")
    parser.add_argument("--iters", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--blocks", type=int, default=7)
    args = parser.parse_args()
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    with tempfile.TemporaryDirectory(prefix="wt13-bench-") as tmp:
        script = Path(tmp) / "bench.py"
        script.write_text(
            SCRIPT.format(
                size=parse_size(args.size), iters=args.iters, warmup=args.warmup, blocks=args.blocks
            )
        )
        for n in map(int, args.nprocs.split(",")):
            cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={n}"]
            proc = subprocess.run([*cmd, str(script)], capture_output=True, text=True, env=env, check=False)
            if proc.returncode != 0:
                raise SystemExit(f"{n} ranks failed:\n{proc.stderr[-2000:]}")
            for line in proc.stdout.splitlines():
                if line.startswith("MATRIX"):
                    _, ranks, rounds, pairs, ours, seq = line.split()
                    print(
                        f"{ranks} ranks, {args.size}: {rounds} rounds {float(ours):.3f} s, "
                        f"{pairs} pairs one by one {float(seq):.3f} s: "
                        f"{float(seq) / float(ours):.2f}x faster (ideal {int(ranks) / 2:g}x)",
                        flush=True,
                    )
                if line.startswith("BANDWIDTH"):
                    ours, bare, median = map(float, line.split()[1:])
                    print(
                        f"2 ranks, {args.size}: links' timing {ours:.3f} GB/s (mean), "
                        f"bare batched isend/irecv loop {bare:.3f} GB/s: {ours / bare:.2f}x; "
                        f"links reports the median, {median:.3f} GB/s",
                        flush=True,
                    )


if __name__ == "__main__":
    main()
