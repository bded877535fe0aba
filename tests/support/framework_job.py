"""Training jobs as the frameworks start them, for `watch` and `attach`: nothing here knows ddpcheck.

  python framework_job.py lightning        Lightning's Trainer, strategy="ddp" on 2 CPU processes: it
                                           starts its second rank itself (LOCAL_RANK only, no RANK)
  accelerate launch --multi_gpu --num_processes 2 framework_job.py accelerate
                                           an Accelerate script on CPU (Accelerator(cpu=True)):
                                           accelerate runs torchrun's agent (`--cpu` would start one
                                           process: its simple launcher, two only with an MPI hostfile)
  python framework_job.py own              a plain script that starts its own ranks, each given its
                                           rank in init_process_group only (no rank variable at all)
  torchrun --nproc-per-node 2 framework_job.py plain    (or srun -n 2, with MASTER_ADDR and MASTER_PORT)
                                           the same DDP loop as a plain script under torchrun (RANK)
                                           or srun (SLURM_PROCID)

Every step: a forward and backward (DDP's gradient all_reduce), the optimizer, and a logged loss
all_reduced: several collectives a step, as training loops run them. Faults by FRAMEWORK_JOB_FAULT,
comma-separated KIND@RANK[:STEP]:
  slow@R      rank R sleeps FRAMEWORK_JOB_SLOW_S (0.05 s) in its data loading every step (with
              FRAMEWORK_JOB_SLOW_WHEN=PATH, only while PATH exists: a rank slowed partway)
  hang@R:S    rank R sleeps for an hour in its data loading at step S
  raise@R:S   rank R raises ValueError in its training step at step S
  fail@R      rank R raises FileNotFoundError at its start, before it joins its peers (its data shard
              missing): its peers wait for it in init_process_group (Lightning's rank 0 for 30 min)
FRAMEWORK_JOB_STEPS (default 200) steps; one line per 20 steps on rank 0.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time

import torch

STEPS = int(os.environ.get("FRAMEWORK_JOB_STEPS", "200"))
SLOW_S = float(os.environ.get("FRAMEWORK_JOB_SLOW_S", "0.05"))
WORLD = 2


def start(rank: int) -> None:
    """What a rank does before it joins its peers: fail@R fails here."""
    if "fail" in faults(rank):
        raise FileNotFoundError(f"planted: rank {rank}'s data shard is missing")


def faults(rank: int) -> dict[str, int | None]:
    """This rank's planted faults: kind -> step (None: every step)."""
    found: dict[str, int | None] = {}
    for item in filter(None, os.environ.get("FRAMEWORK_JOB_FAULT", "").split(",")):
        kind, _, where = item.partition("@")
        fault_rank, _, step = where.partition(":")
        if int(fault_rank) == rank:
            found[kind] = int(step) if step else None
    return found


def load_batch(step: int, planted: dict[str, int | None]) -> tuple[torch.Tensor, torch.Tensor]:
    if "slow" in planted and os.path.exists(os.environ.get("FRAMEWORK_JOB_SLOW_WHEN", "/")):
        time.sleep(SLOW_S)
    if planted.get("hang") == step:
        time.sleep(3600)  # stuck reading data: its peers wait in the gradients' all_reduce
    generator = torch.Generator().manual_seed(step)
    return torch.randn(32, 64, generator=generator), torch.randn(32, 1, generator=generator)


def training_step(
    model: torch.nn.Module, batch: tuple, step: int, planted: dict[str, int | None]
) -> torch.Tensor:
    if planted.get("raise") == step:
        raise ValueError(f"planted failure at step {step}")
    inputs, targets = batch
    return torch.nn.functional.mse_loss(model(inputs), targets)


def network() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 1))


class Batches(torch.utils.data.IterableDataset):
    """The steps' batches, loaded (and slowed, and stuck) where a data loader would be."""

    def __init__(self, rank_of) -> None:
        self.rank_of = rank_of

    def __iter__(self):
        rank = self.rank_of()
        planted = faults(rank)
        for step in range(STEPS):
            yield load_batch(step, planted)


def lightning() -> None:
    import lightning as L

    # Its second rank runs this script again (LOCAL_RANK); under srun every rank is a task (SLURM_PROCID).
    start(int(os.environ.get("SLURM_PROCID", os.environ.get("LOCAL_RANK", "0"))))

    class Module(L.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.net = network()

        def training_step(self, batch: tuple, index: int) -> torch.Tensor:
            loss = training_step(self.net, batch, index, faults(self.global_rank))
            self.log("loss", loss, sync_dist=True)  # a second all_reduce every step
            if self.global_rank == 0 and index % 20 == 0:
                print(f"step {index} loss {loss.item():.4f}", flush=True)
            return loss

        def configure_optimizers(self) -> torch.optim.Optimizer:
            return torch.optim.SGD(self.parameters(), lr=0.01)

    module = Module()
    loader = torch.utils.data.DataLoader(Batches(lambda: module.global_rank), batch_size=None)
    trainer = L.Trainer(
        accelerator="cpu", devices=WORLD, strategy="ddp", max_epochs=1, logger=False,
        enable_progress_bar=False, enable_model_summary=False, enable_checkpointing=False,
    )  # fmt: skip
    trainer.fit(module, loader)


def accelerate() -> None:
    from accelerate import Accelerator

    start(int(os.environ["RANK"]))
    accelerator = Accelerator(cpu=True)
    model = network()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    model, optimizer = accelerator.prepare(model, optimizer)
    planted = faults(accelerator.process_index)
    for step in range(STEPS):
        batch = load_batch(step, planted)
        loss = training_step(model, batch, step, planted)
        accelerator.backward(loss)
        optimizer.step()
        optimizer.zero_grad()
        logged = accelerator.reduce(loss.detach(), reduction="mean")  # a second all_reduce every step
        if accelerator.is_main_process and step % 20 == 0:
            print(f"step {step} loss {logged.item():.4f}", flush=True)


def own(rank: int | None) -> None:
    """Rank 0 starts the others with this script; each learns its rank from its argument only."""
    import torch.distributed as dist

    if rank is None:
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        others = [
            subprocess.Popen([sys.executable, __file__, "own", str(r), str(port)]) for r in range(1, WORLD)
        ]
        run_own(0, port, dist)
        sys.exit(max(p.wait() for p in others))
    run_own(rank, int(sys.argv[3]), dist)


def run_own(rank: int, port: int, dist) -> None:
    start(rank)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=WORLD)
    train_ddp(rank, dist)


def plain() -> None:
    """Under torchrun or srun: the rank and the world from its environment, the rendezvous MASTER_*'s."""
    import torch.distributed as dist

    rank = int(os.environ.get("RANK", os.environ.get("SLURM_PROCID", "0")))
    world = int(os.environ.get("WORLD_SIZE", os.environ.get("SLURM_NTASKS", "1")))
    start(rank)
    address = f"tcp://{os.environ.get('MASTER_ADDR', '127.0.0.1')}:{os.environ['MASTER_PORT']}"
    dist.init_process_group("gloo", init_method=address, rank=rank, world_size=world)
    train_ddp(rank, dist)


def train_ddp(rank: int, dist) -> None:
    world = dist.get_world_size()
    model = torch.nn.parallel.DistributedDataParallel(network())
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    planted = faults(rank)
    for step in range(STEPS):
        batch = load_batch(step, planted)
        loss = training_step(model, batch, step, planted)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        logged = loss.detach().clone()
        dist.all_reduce(logged)  # a second all_reduce every step
        if rank == 0 and step % 20 == 0:
            print(f"step {step} loss {logged.item() / world:.4f}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    which = sys.argv[1] if len(sys.argv) > 1 else ""
    if which == "lightning":
        lightning()
    elif which == "accelerate":
        accelerate()
    elif which == "own":
        own(int(sys.argv[2]) if len(sys.argv) > 2 else None)
    elif which == "plain":
        plain()
    else:
        sys.exit("usage: framework_job.py lightning|accelerate|own|plain")
