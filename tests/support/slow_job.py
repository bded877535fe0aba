"""A small gloo job with one rank slower than its peers, run under `ddpcheck watch` by the straggler tests.

Every rank works SLOW_JOB_STEP_S seconds per step (a sleep, jittered by +-SLOW_JOB_JITTER, seeded
by its rank: its data loader, say), then all_reduces (SLOW_JOB_DDP=1: a DDP step of a small model
instead, whose backward all_reduces the gradients). Planted by environment:

  SLOW_JOB_RANK=R      the slowed rank (none: a healthy job)
  SLOW_JOB_FACTOR=F    its work is F times its peers' (1.3: 30% slower; 2.0: 100%)
  SLOW_JOB_FROM=N      ...only from step N on (0: from the start)
  SLOW_JOB_STEPS=S     steps (default 200); SLOW_JOB_SECONDS=T: stop after about T seconds instead
                       (every rank at the same step: rank 0's clock decides, said in the all_reduce;
                       with DDP, T / SLOW_JOB_STEP_S steps)
  SLOW_JOB_UPLOAD=H:P  every step, every rank first sends SLOW_JOB_UPLOAD_BYTES (default 16384) to
                       the sink at H:P and waits for its one-byte answer (a shard written to remote
                       storage, say): a rank whose host's link is slow is slow (tests/support/sink.py)

Under torchrun, srun or mpirun it is one rank (its rank and world from the launcher's variables, as
train_job.py reads them; MASTER_ADDR and MASTER_PORT are the caller's to give under srun and
mpirun); run as a plain `python slow_job.py --nproc N` it starts N ranks itself (each with RANK in
its environment, as watch reads ranks).
"""

from __future__ import annotations

import os
import random
import socket
import sys
import time

import torch
import torch.distributed as dist

# Beside this script (its folder is on sys.path when it runs): the launchers' variables, read once.
from spawned_ranks import joined, nproc_given, spawn_ranks
from train_job import RANK_VARIABLES, SIZE_VARIABLES, first_of


def _number(name: str, default: float) -> float:
    return float(os.environ.get(name, default))


def work_factor(rank: int, step: int) -> float:
    """How many times its peers' work this rank does at `step`."""
    slowed = int(_number("SLOW_JOB_RANK", -1))
    if rank != slowed or step < int(_number("SLOW_JOB_FROM", 0)):
        return 1.0
    return _number("SLOW_JOB_FACTOR", 1.3)


def run() -> None:
    # srun's and mpirun's tasks carry their rank in the launcher's variables, not torch's.
    os.environ.setdefault("RANK", str(first_of(RANK_VARIABLES, "0")))
    os.environ.setdefault("WORLD_SIZE", str(first_of(SIZE_VARIABLES, "1")))
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    step_s, jitter = _number("SLOW_JOB_STEP_S", 0.05), _number("SLOW_JOB_JITTER", 0.1)
    steps, seconds = int(_number("SLOW_JOB_STEPS", 200)), _number("SLOW_JOB_SECONDS", 0)
    rng = random.Random(rank)
    began = time.monotonic()
    if os.environ.get("SLOW_JOB_DDP") == "1":
        model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(32, 32))
        data = torch.ones(4, 32)
        steps = round(seconds / step_s) if seconds else steps

        def collective(step: int) -> bool:
            model(data).sum().backward()
            return step + 1 < steps
    else:
        tensor = torch.ones(1024)

        def collective(step: int) -> bool:
            # Each rank deciding by its own clock would stop at different steps and hang the last
            # all_reduce: rank 0 says in the tensor whether this step is the last, for every rank.
            last = time.monotonic() - began >= seconds if seconds else step + 1 >= steps
            tensor.fill_(0.0)
            tensor[0] = float(rank == 0 and last)
            dist.all_reduce(tensor)
            return tensor[0].item() == 0.0

    upload = _uploader()
    step, going = 0, True
    while going:
        upload()
        time.sleep(step_s * work_factor(rank, step) * (1 + rng.uniform(-jitter, jitter)))
        going = collective(step)
        step += 1
    print(f"rank {rank} done: {step} steps in {time.monotonic() - began:.1f} s", flush=True)
    dist.barrier()
    dist.destroy_process_group()


def _uploader():
    """A step's upload to SLOW_JOB_UPLOAD (nothing without it), answered before the step goes on."""
    where = os.environ.get("SLOW_JOB_UPLOAD")
    if not where:
        return lambda: None
    host, port = where.rsplit(":", 1)
    payload = b"x" * int(_number("SLOW_JOB_UPLOAD_BYTES", 16384))
    sink = socket.create_connection((host, int(port)), timeout=60)

    def upload() -> None:
        sink.sendall(len(payload).to_bytes(4, "big") + payload)
        sink.recv(1)

    return upload


def main() -> None:
    nproc = nproc_given()
    if not nproc:
        run()
        return
    sys.exit(joined(spawn_ranks(run, nproc)))


if __name__ == "__main__":
    main()
