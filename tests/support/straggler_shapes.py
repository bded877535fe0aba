"""Small gloo jobs shaped like real training loops, one rank slowed, for the straggler tests and benchmark.

Each step every rank works SLOW_JOB_STEP_S seconds (a sleep, jittered by +-SLOW_JOB_JITTER, seeded by
its rank: its data loader, say), then runs the step's collectives, by SLOW_JOB_SHAPE:

  one      one all_reduce a step (as slow_job.py)
  two      the gradient sync, then a small all_reduce (a loss, a grad norm, AMP's found_inf): the
           slowed rank is late at the first of each step only, on time at the second
  accum    DDP with gradient accumulation: SLOW_JOB_ACCUM micro-steps (default 4) of
           SLOW_JOB_STEP_S / SLOW_JOB_ACCUM each, all but the last under no_sync(): one gradient
           all_reduce every SLOW_JOB_ACCUM micro-steps
  stall    one all_reduce a step, and the slowed rank stopped from outside (SIGSTOP) SLOW_JOB_STALL
           of every SLOW_JOB_STALL_PERIOD_S (default 0.4 of 0.1 s: cgroup or thermal throttling)
           by a small process the rank starts once its steps begin (STOPPER): under every
           launcher, since a launcher's own tasks (srun, mpirun) have no parent of ours to do it,
           and a thread of the rank cannot (SIGSTOP stops every thread of the process)

The work of a step is a sleep in `load_batch` (a data loader waiting for its storage, say); with
SLOW_JOB_WORK=compute the slowed rank's is a busy loop in `compute` instead (a rank computing more).

Planted as slow_job.py's: SLOW_JOB_RANK (none: healthy), SLOW_JOB_FACTOR (its work is F times its
peers'; not with stall), SLOW_JOB_FROM (from step N on), SLOW_JOB_SECONDS (about T seconds of steps),
SLOW_JOB_DDP=1 (`two`: the gradient sync is a DDP backward; accum is always DDP); SLOW_JOB_ALL=1: every
rank slowed alike (the whole job slowing from step SLOW_JOB_FROM). Run as
`python straggler_shapes.py --nproc N` it starts N ranks itself; under torchrun it is one rank.
"""

from __future__ import annotations

import contextlib
import os
import random
import signal
import subprocess
import sys
import time

import torch
import torch.distributed as dist

# Beside this script (its folder is on sys.path when it runs).
from spawned_ranks import joined, nproc_given, spawn_ranks
from train_job import RANK_VARIABLES, SIZE_VARIABLES, first_of

MIN_STEPS = 40  # never fewer, whatever the clock says: a window's worth of collectives (20) and more

# The stopper: the rank's child, at real-time priority where the kernel allows it (as a thread of a
# loaded test it woke late, tests/support/load.py). It stops its parent, the rank, FRACTION of every
# PERIOD; on SIGTERM (the rank's steps are done) it lets the rank go on and ends; it ends by itself
# once the rank is gone (it is then another process's child). Run with -I: PYTHONPATH's in-rank
# agent (watch's sitecustomize) is not loaded in it. Its last argument names the job, so a test
# finds it among the job's processes left behind.
STOPPER = """
import os, signal, sys, time
rank, fraction, period = int(sys.argv[1]), float(sys.argv[2]), float(sys.argv[3])
def let_go(*_):
    try:
        os.kill(rank, signal.SIGCONT)
    finally:
        os._exit(0)
signal.signal(signal.SIGTERM, let_go)
try:
    os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(10))
except OSError:
    pass
while os.getppid() == rank:
    os.kill(rank, signal.SIGSTOP)
    time.sleep(fraction * period)
    os.kill(rank, signal.SIGCONT)
    time.sleep((1 - fraction) * period)
"""


def _number(name: str, default: float) -> float:
    return float(os.environ.get(name, default))


def work_factor(rank: int, step: int) -> float:
    slowed = int(_number("SLOW_JOB_RANK", -1))
    every = os.environ.get("SLOW_JOB_ALL") == "1"
    if os.environ.get("SLOW_JOB_SHAPE") == "stall" or (rank != slowed and not every):
        return 1.0
    return _number("SLOW_JOB_FACTOR", 1.3) if step >= int(_number("SLOW_JOB_FROM", 0)) else 1.0


def stopper(rank: int) -> subprocess.Popen | None:
    """The slowed rank's stopper (STOPPER) in a stall job, started by the rank itself; None elsewhere."""
    if os.environ.get("SLOW_JOB_SHAPE") != "stall" or rank != int(_number("SLOW_JOB_RANK", -1)):
        return None
    fraction, period = _number("SLOW_JOB_STALL", 0.4), _number("SLOW_JOB_STALL_PERIOD_S", 0.1)
    argv = [sys.executable, "-I", "-c", STOPPER, str(os.getpid()), str(fraction), str(period)]
    return subprocess.Popen([*argv, os.path.abspath(__file__)])


def let_go(stopping: subprocess.Popen | None) -> None:
    """The stopper ended, this rank running: it answers SIGTERM with a SIGCONT (a SIGSTOP it sent as
    the SIGTERM came is undone), so the rank is never left stopped."""
    if stopping is not None:
        stopping.send_signal(signal.SIGTERM)
        stopping.wait()


def run() -> None:
    os.environ.setdefault("RANK", str(first_of(RANK_VARIABLES, "0")))
    os.environ.setdefault("WORLD_SIZE", str(first_of(SIZE_VARIABLES, "1")))
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    shape = os.environ.get("SLOW_JOB_SHAPE", "one")
    step_s, jitter = _number("SLOW_JOB_STEP_S", 0.05), _number("SLOW_JOB_JITTER", 0.1)
    seconds = _number("SLOW_JOB_SECONDS", 10)
    rng = random.Random(rank)
    grads, flag = torch.ones(1024), torch.zeros(1)
    ddp = shape == "accum" or os.environ.get("SLOW_JOB_DDP") == "1"
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(32, 32)) if ddp else None
    data = torch.ones(4, 32)
    if model is not None:  # DDP's first backward builds its buckets: slow on a loaded host, not a step
        model(data).sum().backward()
    dist.barrier()
    stopping = stopper(rank)  # from its first step: its start-up is no stall
    began = time.monotonic()
    micro = int(_number("SLOW_JOB_ACCUM", 4)) if shape == "accum" else 1
    steps = round(seconds / step_s)

    computes = os.environ.get("SLOW_JOB_WORK") == "compute" and rank == int(_number("SLOW_JOB_RANK", -1))

    def load_batch(seconds: float) -> None:
        time.sleep(seconds)

    def compute(seconds: float) -> None:
        # Torch's work, as a forward is: each op lets go of the GIL, so the agent's stack sample comes
        # when asked. A pure-Python loop holds it for 5 ms at a time, and the sample then fell on the
        # next torch op, in going(), in 1 of 3 runs (a clean clone's CI named "going" for "compute").
        end = time.monotonic() + seconds
        product = torch.eye(32)
        while time.monotonic() < end:
            product = torch.mm(product, product).clamp_(-1.0, 1.0)

    def work(step: int) -> None:
        seconds = step_s / micro * work_factor(rank, step) * (1 + rng.uniform(-jitter, jitter))
        (compute if computes else load_batch)(seconds)

    def sync() -> None:
        if model is not None:
            model(data).sum().backward()
        else:
            dist.all_reduce(grads)

    def going(step: int) -> bool:
        # Each rank deciding by its own clock would stop at different steps and hang: rank 0 says.
        flag.fill_(float(rank == 0 and step >= MIN_STEPS and time.monotonic() - began >= seconds))
        dist.all_reduce(flag)
        return flag.item() == 0.0

    step, more = 0, True
    while more:
        if shape == "accum":
            for i in range(micro):
                work(step)
                with model.no_sync() if i < micro - 1 else contextlib.nullcontext():  # type: ignore[union-attr]
                    sync()
            more = step + 1 < steps
        elif shape == "two":
            work(step)
            sync()
            more = going(step)
        else:  # one, stall: the step's only collective says whether it was the last
            work(step)
            more = going(step)
        step += 1
    let_go(stopping)
    print(f"rank {rank} done: {step} steps in {time.monotonic() - began:.1f} s", flush=True)
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
