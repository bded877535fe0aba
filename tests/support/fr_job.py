"""A small gloo job that leaves flight-recorder dumps, run under torchrun by tests/test_postmortem.py.

Every rank does a few all_reduces on the world (group 0) and ranks 0 and 1 one on a pair group
(group 1); then each enqueues its last collectives asynchronously (so that the flight recorder
holds them while nothing has failed yet), dumps the flight recorder into
`FR_JOB_DUMP_PREFIX + rank`, and only then waits. Faults are planted by environment:

  FR_JOB_SKIP_LAST=R   rank R (0 or 1) never calls the pair group's last all_reduce: behind
  FR_JOB_BIGGER=R      rank R's last all_reduce on the world is of another size: gloo aborts
                       a rank that receives it, not rank R

The bigger rank enqueues its collective only after the others have dumped (keys in the store),
so that every dump is written before gloo aborts anyone; then every rank waits, and the job dies
as such a job dies, torchrun ending the ranks that are left.
"""

from __future__ import annotations

import os
import signal

import torch
import torch.distributed as dist
from torch._C._distributed_c10d import _dump_fr_trace
from torch.distributed.elastic.multiprocessing.errors import record

STEPS = 3


def _planted(name: str) -> int:
    return int(os.environ.get(name, "-1"))


def _dump(rank: int) -> None:
    path = os.environ["FR_JOB_DUMP_PREFIX"] + str(rank)
    with open(path + ".part", "wb") as out:
        out.write(_dump_fr_trace())
    os.replace(path + ".part", path)


@record
def main() -> None:
    # torchrun ends every rank (SIGTERM) as soon as gloo aborts one: hold the signal until this
    # rank's dump is whole, then let it end the rank as it would have. Blocked before any thread
    # starts, so that no thread of gloo's takes it in the meantime.
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    store = dist.distributed_c10d._get_default_store()
    pair = dist.new_group([0, 1])
    for _ in range(STEPS):
        dist.all_reduce(torch.ones(256))
    if rank in (0, 1):
        dist.all_reduce(torch.ones(8, dtype=torch.int64), group=pair)
        if rank != _planted("FR_JOB_SKIP_LAST"):
            dist.all_reduce(torch.ones(8, dtype=torch.int64), group=pair, async_op=True)
    bigger = _planted("FR_JOB_BIGGER")
    if rank == bigger:
        store.wait([f"dumped/{r}" for r in range(world) if r != rank])
    work = dist.all_reduce(torch.ones(512 if rank == bigger else 256), async_op=True)
    _dump(rank)
    store.set(f"dumped/{rank}", "1")
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})
    work.wait()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
