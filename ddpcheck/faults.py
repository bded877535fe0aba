"""`--inject` faults: deliberate breakage that proves the checker catches what it claims.

Every fault lives here. A spec is KIND@RANK or KIND@RANK:STAGE. Parsing is
torch-free (the CLI rejects a bad spec before spawning anything); the actions
run inside the ranks.
"""

from __future__ import annotations

import os
import signal
import time
from dataclasses import dataclass
from typing import Any

from ddpcheck.errors import UsageError

# The harness stages every rank passes through, in order (worker.py enters them).
STAGES = ("launched", "joined", "device", "measure", "gather", "done")

# kind -> (commands it applies to, whether it takes a :STAGE, what it does)
KINDS: dict[str, tuple[tuple[str, ...], bool, str]] = {
    "corrupt": (("allreduce",), False, "rank R adds 1 to every 13th element it contributes"),
    "hang": (("allreduce", "train", "profile"), True, "rank R sleeps forever at STAGE"),
    "crash": (("allreduce", "train", "profile"), True, "rank R raises an exception at STAGE"),
    "kill": (("allreduce", "train", "profile"), True, "rank R sends itself SIGKILL at STAGE"),
    "diverge": (("train",), False, "rank R nudges its weights after a step"),
    "nan": (("train",), False, "rank R's loss turns NaN"),
    "slow": (("profile", "train"), False, "rank R sleeps a little in every step"),
}
DEFAULT_STAGE = "measure"
CORRUPT_STRIDE = 13


@dataclass(frozen=True)
class Fault:
    kind: str
    rank: int
    stage: str = DEFAULT_STAGE

    def __str__(self) -> str:
        takes_stage = KINDS[self.kind][1]
        return f"{self.kind}@{self.rank}" + (f":{self.stage}" if takes_stage else "")


def parse_fault(spec: str, command: str, world_size: int | None = None) -> Fault:
    kind, sep, rest = spec.strip().partition("@")
    if kind not in KINDS:
        raise UsageError(f"unknown --inject fault {spec!r}: known kinds are {', '.join(KINDS)}")
    commands, takes_stage, _ = KINDS[kind]
    if command not in commands:
        raise UsageError(f"--inject {kind} applies to {' and '.join(commands)}, not {command}")
    rank_text, _, stage = rest.partition(":")
    if not sep or not rank_text.isdigit():
        raise UsageError(f"malformed --inject {spec!r}: expected {kind}@RANK")
    if stage and not takes_stage:
        raise UsageError(f"--inject {kind} takes no stage: use {kind}@{rank_text}")
    if stage and stage not in STAGES:
        raise UsageError(f"unknown stage {stage!r} in --inject {spec!r}: one of {', '.join(STAGES)}")
    rank = int(rank_text)
    if world_size is not None and rank >= world_size:
        raise UsageError(f"--inject {spec!r} names rank {rank}, but the world has {world_size} ranks")
    return Fault(kind, rank, stage or DEFAULT_STAGE)


def parse_faults(specs: list[str], command: str, world_size: int | None = None) -> list[Fault]:
    return [parse_fault(s, command, world_size) for s in specs]


class Faults:
    """The faults that apply to one rank."""

    def __init__(self, faults: list[Fault], rank: int) -> None:
        self.mine = [f for f in faults if f.rank == rank]

    def has(self, kind: str) -> bool:
        return any(f.kind == kind for f in self.mine)

    def at_stage(self, stage: str) -> None:
        """Called by the harness as this rank enters each stage."""
        for fault in self.mine:
            if fault.stage != stage:
                continue
            if fault.kind == "hang":
                while True:  # alive (the heartbeat thread keeps beating) but never arrives
                    time.sleep(3600)
            if fault.kind == "crash":
                raise RuntimeError(f"injected crash ({fault}) at stage {stage!r}")
            if fault.kind == "kill":
                os.kill(os.getpid(), signal.SIGKILL)

    def corrupt(self, tensor: Any) -> None:
        """Make this rank's contribution wrong in place, if it is meant to be."""
        if self.has("corrupt"):
            tensor.view(-1)[::CORRUPT_STRIDE] += 1
