"""A small gloo job that leaves flight-recorder dumps, run under torchrun by tests/test_postmortem.py.

Every rank does a few all_reduces on the world and one on a subgroup, then enqueues its last
all_reduce asynchronously (so that the flight recorder holds it while nothing has failed yet),
dumps the flight recorder into `FR_JOB_DUMP_PREFIX + rank` and only then waits on it.
Faults are planted by environment, each naming a rank:

  FR_JOB_SKIP_LAST=R   rank R never calls the last all_reduce (the others wait for it: behind)
  FR_JOB_BIGGER=R      rank R's last all_reduce is of another size (gloo aborts a receiving rank)
  FR_JOB_NO_DUMP=R     rank R writes no dump (lost)

With a rank skipping, nobody waits on the last all_reduce: every rank dumps and exits, since
the others would wait forever. With a bigger rank, the bigger rank enqueues its collective only
after the others have dumped (a key in the store), so that every dump is written before gloo
aborts anyone (SIGTERM from torchrun is held while a rank dumps); then every rank waits, and
the job dies as such a job dies.
"""

from __future__ import annotations

import os
import signal
import sys

import torch
import torch.distributed as dist
from torch._C._distributed_c10d import _dump_fr_trace
from torch.distributed.elastic.multiprocessing.errors import record

STEPS = 3


def _planted(name: str) -> int:
    return int(os.environ.get(name, "-1"))


def _dump(rank: int) -> None:
    if rank == _planted("FR_JOB_NO_DUMP"):
        return
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
    skipping, bigger = _planted("FR_JOB_SKIP_LAST"), _planted("FR_JOB_BIGGER")
    if rank == skipping:
        _dump(rank)
        os._exit(0)
    if rank == bigger:
        store.wait([f"dumped/{r}" for r in range(world) if r != rank])
    work = dist.all_reduce(torch.ones(512 if rank == bigger else 256), async_op=True)
    _dump(rank)
    store.set(f"dumped/{rank}", "1")
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})
    if skipping >= 0:
        sys.stdout.flush()
        os._exit(0)  # the others would wait forever for the rank that skipped
    work.wait()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
