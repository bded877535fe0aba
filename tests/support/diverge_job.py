"""A DDP training job (gloo, CPU) for the replica tests of `ddpcheck watch`; it knows nothing of ddpcheck.

Each step: every rank its own batch, forward, backward (DDP all_reduces the gradients), SGD with
momentum, then an all_reduce of the loss for the log line and, every 10 steps, a barrier. Planted
by environment, from outside the model's code:

  DIVERGE_JOB_FLIP=R:K   rank R's fc2.weight gets one bit flipped at step K, by a hook of the job's
                         optimizer after its step (the silent data corruption of one replica)
  DIVERGE_JOB_NAN=R:K    rank R's loss is NaN at step K (before its backward: its gradients)
  DIVERGE_JOB_STEPS=S    steps (default 200); DIVERGE_JOB_STEP_S: a sleep per step (default 0)
  DIVERGE_JOB_FSDP=RxS   FSDP2 instead of DDP: fully_shard on fc1, fc2 and the model, over a mesh of
                         R replicas of S shards (HSDP; the flip is in rank R's own shard of fc2.weight);
                         DIVERGE_JOB_FSDP=S alone: fully sharded over S ranks, no replicas;
                         DIVERGE_JOB_FSDP=v1:RxS: FSDP1 (FullyShardedDataParallel) with HYBRID_SHARD,
                         one unit (the flip is in rank R's shard of its flat parameter), v1:S FULL_SHARD

Steps count from 1, as the optimizer's step() calls do. Under torchrun, srun or mpirun it is one
rank (MASTER_ADDR and MASTER_PORT are the caller's under srun and mpirun); `python diverge_job.py
--nproc N` starts N ranks itself.
"""

from __future__ import annotations

import os
import sys
import time

import torch
import torch.distributed as dist

# Beside this script (its folder is on sys.path when it runs): the launchers' variables, read once.
from spawned_ranks import joined, nproc_given, spawn_ranks
from train_job import RANK_VARIABLES, SIZE_VARIABLES, first_of

FLIPPED_BIT = 20  # of a float32: its value changes by about 12%, kept by every later step


def planted(name: str, rank: int) -> int | None:
    """The step at which DIVERGE_JOB_<name>=R:K plants its fault on this rank, or None."""
    text = os.environ.get(f"DIVERGE_JOB_{name}", "")
    if not text:
        return None
    where, _, step = text.partition(":")
    return int(step) if int(where) == rank else None


class Net(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1 = torch.nn.Linear(32, 64)
        self.norm = torch.nn.BatchNorm1d(64)  # buffers too: DDP broadcasts them from rank 0
        self.fc2 = torch.nn.Linear(64, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(torch.relu(self.norm(self.fc1(x))))


def flip_one_bit(tensor: torch.Tensor) -> None:
    with torch.no_grad():
        tensor.view(-1).view(torch.int32)[3] ^= 1 << FLIPPED_BIT


def sharded(net: Net, shape: str) -> Net:
    """fully_shard (FSDP2) on each Linear and the whole model, over a mesh RxS (HSDP) or S (fully sharded);
    "v1:" before it: FSDP1 over the same mesh (HYBRID_SHARD, or FULL_SHARD)."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    version, _, shape = shape.rpartition(":")
    sizes = tuple(int(size) for size in shape.split("x"))
    names = ("replicate", "shard") if len(sizes) == 2 else ("shard",)
    mesh = init_device_mesh("cpu", sizes, mesh_dim_names=names)
    if version == "v1":
        from torch.distributed.fsdp import FullyShardedDataParallel, ShardingStrategy

        strategy = ShardingStrategy.HYBRID_SHARD if len(sizes) == 2 else ShardingStrategy.FULL_SHARD
        cpu = torch.device("cpu")
        return FullyShardedDataParallel(net, sharding_strategy=strategy, device_mesh=mesh, device_id=cpu)
    for layer in (net.fc1, net.fc2):
        fully_shard(layer, mesh=mesh)
    return fully_shard(net, mesh=mesh)


def run() -> None:
    os.environ.setdefault("RANK", str(first_of(RANK_VARIABLES, "0")))
    os.environ.setdefault("WORLD_SIZE", str(first_of(SIZE_VARIABLES, "1")))
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    shape = os.environ.get("DIVERGE_JOB_FSDP", "")
    model = sharded(Net(), shape) if shape else torch.nn.parallel.DistributedDataParallel(Net())
    net = model if shape else model.module
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    steps = int(os.environ.get("DIVERGE_JOB_STEPS", "200"))
    pause = float(os.environ.get("DIVERGE_JOB_STEP_S", "0"))
    flip_at, nan_at = planted("FLIP", rank), planted("NAN", rank)
    done = {"steps": 0}

    def corrupt(opt: torch.optim.Optimizer, args: object, kwargs: object) -> None:
        done["steps"] += 1
        if done["steps"] == flip_at:
            if shape.startswith("v1:"):  # FSDP1: this rank's shard of the one flat parameter
                flip_one_bit(next(model.parameters()))
            else:  # under FSDP2 a DTensor: this rank's shard is flipped
                weight = net.fc2.weight
                flip_one_bit(weight.to_local() if shape else weight)

    optimizer.register_step_post_hook(corrupt)
    generator = torch.Generator().manual_seed(1000 + rank)
    logged = torch.zeros(1)
    for step in range(1, steps + 1):
        inputs, targets = torch.randn(16, 32, generator=generator), torch.randn(16, 8, generator=generator)
        optimizer.zero_grad()
        loss = torch.nn.functional.mse_loss(model(inputs), targets)
        if step == nan_at:
            loss = loss * float("nan")
        loss.backward()
        optimizer.step()
        logged.fill_(float(loss.detach()))
        dist.all_reduce(logged)
        if step % 10 == 0:
            dist.barrier()
        if pause:
            time.sleep(pause)
    print(f"rank {rank} done: {steps} steps, loss {float(logged) / dist.get_world_size():.4f}", flush=True)
    dist.barrier()
    dist.destroy_process_group()


def main() -> None:
    nproc = nproc_given()
    if not nproc:
        run()
        return
    sys.exit(joined(spawn_ranks(run, nproc)))


if __name__ == "__main__":
    main()
