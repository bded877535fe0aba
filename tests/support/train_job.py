"""A small user training job for `ddpcheck watch`: DDP over gloo on CPU, one line per step.

Nothing here knows about ddpcheck. Faults are planted through TRAIN_JOB_FAULT=KIND@RANK:stepN:
  sleep     the rank sleeps in its data loading (a rank that stopped while its peers went on)
  raise     the rank raises ValueError in its step
  mismatch  the rank all_reduces a tensor of another size than its peers (a collective mismatch)
TRAIN_JOB_STEPS (default 5) and TRAIN_JOB_STEP_S (the data loading's time per step, default 0.1)
shape the run. The rank and world come from torchrun, srun or mpirun's variables.
"""

from __future__ import annotations

import os
import sys
import time

RANK_VARIABLES = ("RANK", "SLURM_PROCID", "OMPI_COMM_WORLD_RANK", "PMI_RANK")
SIZE_VARIABLES = ("WORLD_SIZE", "SLURM_NTASKS", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE")


def first_of(names: tuple[str, ...], default: str) -> int:
    return int(next((os.environ[n] for n in names if n in os.environ), default))


def planted(rank: int) -> tuple[str, int] | None:
    """(kind, step) when TRAIN_JOB_FAULT plants a fault on this rank."""
    text = os.environ.get("TRAIN_JOB_FAULT", "")
    if not text:
        return None
    kind, _, where = text.partition("@")
    fault_rank, _, step = where.partition(":")
    if int(fault_rank) != rank:
        return None
    return kind, int(step.removeprefix("step"))


def load_batch(step: int, fault: tuple[str, int] | None) -> tuple:
    import torch

    time.sleep(float(os.environ.get("TRAIN_JOB_STEP_S", "0.1")))
    if fault == ("sleep", step):
        time.sleep(3600)  # stuck reading data: the peers wait in the gradients' all_reduce
    generator = torch.Generator().manual_seed(step)
    return torch.randn(16, 32, generator=generator), torch.randn(16, 8, generator=generator)


def train_step(model, optimizer, batch: tuple, step: int, fault: tuple[str, int] | None) -> float:
    import torch
    import torch.distributed as dist

    if fault == ("raise", step):
        raise ValueError(f"planted failure at step {step}")
    inputs, targets = batch
    optimizer.zero_grad()
    loss = torch.nn.functional.mse_loss(model(inputs), targets)
    loss.backward()
    optimizer.step()
    logged = torch.zeros(3 if fault == ("mismatch", step) else 1) + loss.detach()
    dist.all_reduce(logged)  # the mean loss, for the log line
    return float(logged[0]) / dist.get_world_size()


def main() -> None:
    import torch
    import torch.distributed as dist

    rank = first_of(RANK_VARIABLES, "0")
    world = first_of(SIZE_VARIABLES, "1")
    os.environ.setdefault("RANK", str(rank))
    os.environ.setdefault("WORLD_SIZE", str(world))
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    fault = planted(rank)
    torch.manual_seed(0)
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(32, 8))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    for step in range(int(os.environ.get("TRAIN_JOB_STEPS", "5"))):
        loss = train_step(model, optimizer, load_batch(step, fault), step, fault)
        print(f"rank {rank} step {step} loss {loss:.4f}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    sys.exit(main())
