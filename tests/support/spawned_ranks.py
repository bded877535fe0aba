"""`--nproc N` of the test jobs (slow_job.py, straggler_shapes.py, diverge_job.py): N ranks started
from the job's own process with the spawn method, no launcher; without it, the job is one rank."""

from __future__ import annotations

import argparse
import os
import socket
from collections.abc import Callable

import torch.multiprocessing as mp


def nproc_given() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--nproc", type=int, default=0, help="start this many ranks (no launcher)")
    return parser.parse_args().nproc


def spawn_ranks(run: Callable[[], None], nproc: int) -> list:
    """`nproc` processes each running `run` as its rank, rendezvous on a free local port."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    context = mp.get_context("spawn")
    ranks = []
    for rank in range(nproc):
        # Set before the start: a spawned child's environment is this one's, so watch reads its rank.
        os.environ.update(RANK=str(rank), WORLD_SIZE=str(nproc))
        process = context.Process(target=_spawned, args=(run, rank, nproc, port))
        process.start()
        ranks.append(process)
    return ranks


def joined(ranks: list) -> int:
    """The worst exit code once every rank has ended."""
    for process in ranks:
        process.join()
    return max((p.exitcode or 0) for p in ranks)


def _spawned(run: Callable[[], None], rank: int, world: int, port: int) -> None:
    os.environ.update(RANK=str(rank), WORLD_SIZE=str(world), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    run()
