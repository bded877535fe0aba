"""A small gloo job that knows nothing of ddpcheck, for `ddpcheck attach` to find (tests/test_attach.py).

Runs under torchrun (RANK), mpirun (OMPI_COMM_WORLD_*), srun (SLURM_*) or alone; the rendezvous is
MASTER_ADDR (default 127.0.0.1) and MASTER_PORT. Every rank all_reduces in a loop, with a little
compute in between, and prints "step N" on rank 0 now and then. ATTACH_JOB_MODE plants a fault
once every rank has done ATTACH_JOB_STEPS steps:

  healthy    go on for ever (the test ends it)
  hang       rank ATTACH_JOB_RANK sleeps in user code (`load_batch`); its peers wait in all_reduce
  mismatch   rank ATTACH_JOB_RANK calls broadcast where its peers call all_reduce: every rank waits,
             in another collective
A rank stopped by the test (SIGSTOP) needs no mode: its peers wait for it in all_reduce.

ATTACH_JOB_GAPS=DIR: each rank also writes to DIR/gaps<rank> every gap over 5 ms between the 1 ms
ticks of a thread of its own: the pauses a reader from outside (py-spy) made it take
(tests/perf/bench_attach_native.py).
"""

from __future__ import annotations

import datetime
import os
import sys
import threading
import time

import torch
import torch.distributed as dist


def _env(*names: str, default: str = "") -> str:
    return next((os.environ[n] for n in names if n in os.environ), default)


def write_gaps(path: str) -> None:
    """Every gap over 5 ms between 1 ms ticks, in ms, one a line: a pause from outside shows as one."""
    last = time.monotonic()
    with open(path, "a", buffering=1) as out:
        while True:
            time.sleep(0.001)
            now = time.monotonic()
            if now - last > 0.005:
                out.write(f"{now:.4f} {(now - last) * 1000:.1f}\n")
            last = now


def load_batch() -> None:
    while True:
        time.sleep(3600)


def train_step(x: torch.Tensor) -> None:
    y = x @ x.T  # a little compute between the collectives
    dist.all_reduce(y[0].contiguous())


def planted(x: torch.Tensor, mode: str, rank: int, culprit: int) -> None:
    if mode == "hang" and rank == culprit:
        load_batch()
    if mode == "mismatch" and rank == culprit:
        dist.broadcast(x[0].contiguous(), src=culprit)
    dist.all_reduce(x[0].contiguous())


def main() -> None:
    rank = int(_env("RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "SLURM_PROCID", default="0"))
    world = int(_env("WORLD_SIZE", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "SLURM_NTASKS", default="1"))
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    dist.init_process_group("gloo", rank=rank, world_size=world, timeout=datetime.timedelta(seconds=3600))
    if os.environ.get("ATTACH_JOB_GAPS"):
        path = os.path.join(os.environ["ATTACH_JOB_GAPS"], f"gaps{rank}")
        threading.Thread(target=write_gaps, args=(path,), daemon=True).start()
    mode = os.environ.get("ATTACH_JOB_MODE", "healthy")
    culprit = int(os.environ.get("ATTACH_JOB_RANK", "1"))
    steps = int(os.environ.get("ATTACH_JOB_STEPS", "20"))
    x = torch.ones(64, 64)
    step = 0
    while True:
        step += 1
        if step == steps:
            if rank == 0:
                print("ready", flush=True)
            if mode != "healthy":
                planted(x, mode, rank, culprit)
        train_step(x)
        if rank == 0 and step % 200 == 0:
            print(f"step {step}", file=sys.stderr, flush=True)


if __name__ == "__main__":
    main()
