"""What does `ddpcheck profile`'s instrumentation cost? Step time with and without it, in one run.

Not collected by pytest (bench_*.py). Run:

    OMP_NUM_THREADS=1 python tests/perf/bench_profile_overhead.py --nproc 2 --hidden 1024

Each rank builds the model exactly as `ddpcheck profile` does (profile.setup) and
alternates blocks of steps: the bare classic loop (zero_grad, forward, loss,
backward, step) and the same step through profile.step_marked, which is what
`ddpcheck profile` times (phase marks; CUDA events read once per step on GPUs).
Blocks alternate ABBA so that drift (thermals, a neighbour's load) falls on both
alike; a block's time is the slowest rank's, as in DDP. Prints the median
per-step time of each, their ratio (target <= 1.03), and how close the step time
that profile reports (forward + backward + update) is to the bare loop's wall
clock. profile also times one no_sync backward per step; that is an extra
measurement, not instrumentation of the step, and is not counted here.
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import time
from types import SimpleNamespace
from typing import Any

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from ddpcheck.checks.model import mse, private_compile_cache
from ddpcheck.checks.profile import ProfileOptions
from ddpcheck.checks.profile import check as profile


def bare_step(ddp: Any, optimizer: Any, inputs: Any, targets: Any) -> None:
    """The uninstrumented loop body: what a training script does."""
    profile.zero_grads(optimizer, inputs)
    loss = mse(ddp(inputs), targets)
    loss.backward()
    optimizer.step()


def run_block(ctx: Any, steps: int, step: Any) -> tuple[float, float]:
    """(wall seconds per step for the slowest rank, seconds per step that profile reported here)."""
    ctx.barrier()
    reported = 0.0
    began = time.perf_counter()
    for _ in range(steps):
        phases = step()
        if phases:
            reported += sum(phases)
    ctx.sync()
    elapsed = torch.tensor([time.perf_counter() - began], dtype=torch.float64, device=ctx.device)
    dist.all_reduce(elapsed, op=dist.ReduceOp.MAX)
    return elapsed.item() / steps, reported / steps


def rank_main(rank: int, world: int, port: int, args: argparse.Namespace, out: Any) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE=str(world))
    cuda = args.device == "cuda"
    device = torch.device("cuda", rank) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(device)
    dist.init_process_group("nccl" if cuda else "gloo", rank=rank, world_size=world)
    ctx = SimpleNamespace(
        rank=rank,
        device=device,
        sync=lambda: torch.cuda.synchronize(device) if cuda else None,
        barrier=lambda: dist.barrier(device_ids=[rank]) if cuda else dist.barrier(),
    )
    opts = ProfileOptions(hidden=args.hidden, batch=args.batch)
    with private_compile_cache():
        ddp, optimizer, inputs, targets = profile.setup(ctx, opts)
        marks = profile.Marks(device)
        variants = {
            "bare": lambda: bare_step(ddp, optimizer, inputs, targets),
            "instrumented": lambda: profile.step_marked(ddp, optimizer, inputs, targets, marks)(),
        }
        for _ in range(args.warmup):
            for step in variants.values():
                step()
        results: dict[str, list[float]] = {"bare": [], "instrumented": [], "reported": []}
        for block in range(args.blocks):
            order = ["bare", "instrumented"] if block % 2 == 0 else ["instrumented", "bare"]
            for name in order:
                wall, reported = run_block(ctx, args.steps, variants[name])
                results[name].append(wall)
                if name == "instrumented":
                    results["reported"].append(reported)
    if rank == 0:
        out.put(results)
    dist.destroy_process_group()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nproc", type=int, default=2)
    parser.add_argument("--hidden", type=int, default=1024)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--blocks", type=int, default=12, help="blocks of each kind, alternating")
    parser.add_argument("--steps", type=int, default=10, help="steps per block")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    args = parser.parse_args()
    if args.nproc < 1:
        parser.error(f"--nproc must be at least 1, got {args.nproc}")
    if args.device == "cuda" and torch.cuda.device_count() < args.nproc:
        parser.error(f"--device cuda --nproc {args.nproc}: {torch.cuda.device_count()} GPU(s) visible")
    context = mp.get_context("spawn")
    queue = context.SimpleQueue()
    mp.start_processes(
        rank_main, args=(args.nproc, free_port(), args, queue), nprocs=args.nproc, start_method="spawn"
    )
    results = queue.get()
    bare = statistics.median(results["bare"])
    instrumented = statistics.median(results["instrumented"])
    reported = statistics.median(results["reported"])
    print(
        f"ranks={args.nproc} device={args.device} hidden={args.hidden} batch={args.batch} "
        f"blocks={args.blocks}x{args.steps} steps each, torch {torch.__version__}"
    )
    print(f"bare loop           {bare * 1e3:9.3f} ms/step (median of blocks, slowest rank)")
    print(f"profile.step_marked {instrumented * 1e3:9.3f} ms/step")
    print(f"overhead ratio      {instrumented / bare:9.4f}x  (target <= 1.03)")
    print(f"reported step time  {reported * 1e3:9.3f} ms/step = {reported / bare:.4f}x the bare wall clock")
    spread = statistics.pstdev(results["bare"]) / bare
    print(f"block-to-block noise of the bare loop: {spread:.1%} (std/mean)")


if __name__ == "__main__":
    main()
