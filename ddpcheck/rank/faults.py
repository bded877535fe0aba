"""`--inject` faults: deliberate breakage that proves the checker catches what it claims.

Every fault lives here. A spec is KIND@RANK or KIND@RANK:STAGE (several: a comma list). Parsing is
torch-free (the CLI rejects a bad spec before spawning anything); the actions
run inside the ranks.
"""

from __future__ import annotations

import os
import signal
import time
from dataclasses import dataclass, field
from typing import Any

from ddpcheck.commands import COMMANDS, commands_taking
from ddpcheck.errors import UsageError
from ddpcheck.failure.stages import HARNESS as STAGES
from ddpcheck.failure.stages import MEASURE

# kind -> (whether it takes a :STAGE, what it does); which commands take it is in commands.py.
KINDS: dict[str, tuple[bool, str]] = {
    "corrupt": (False, "rank R adds 1 to every 13th element it contributes (to each receiver)"),
    "hang": (True, "rank R sleeps forever at STAGE"),
    "crash": (True, "rank R raises an exception at STAGE"),
    "kill": (True, "rank R sends itself SIGKILL at STAGE"),
    "diverge": (False, "rank R nudges its weights after a step"),
    "nan": (False, "rank R's loss turns NaN"),
    "slow": (False, "rank R sleeps a little in every step"),
    "slowlink": (False, "rank R's link traffic runs at about a tenth of its speed"),
    "slowgpu": (False, "rank R's matrix products run at a quarter of its device's speed"),
    "sdc": (False, "one element of each matrix product on rank R is wrong (silent data corruption)"),
}
DEFAULT_STAGE = MEASURE
CORRUPT_STRIDE = 13
# diverge: added to every element of the first parameter; far above rounding, small enough
# that the loss still falls, so only the checks that compare weights can catch it.
DIVERGE_NUDGE = 1e-3
# slow: the least a slow rank sleeps per step; it sleeps longer when its step is longer.
SLOW_MIN_S = 0.02
# slowlink: rank R's exchanges take this many times as long (it waits factor - 1 times each one's
# own duration before taking part), so its links run at about a tenth of their speed.
SLOWLINK_FACTOR = 10
# slowgpu: rank R computes each product this many times and counts it once: a quarter of its speed.
SLOWGPU_FACTOR = 4


def fault_step(steps: int) -> int:
    """The step one-shot faults (diverge, nan) strike: the middle, so 'first at step S' says something."""
    return steps // 2


@dataclass(frozen=True)
class Fault:
    kind: str
    rank: int
    stage: str = DEFAULT_STAGE
    spec: str = field(default="", compare=False)  # as the user wrote it, for messages

    def __str__(self) -> str:
        takes_stage = KINDS[self.kind][0]
        return f"{self.kind}@{self.rank}" + (f":{self.stage}" if takes_stage else "")


def parse_fault(spec: str, command: str, world_size: int | None = None) -> Fault:
    kind, sep, rest = spec.strip().partition("@")
    if kind not in KINDS:
        raise UsageError(f"unknown --inject fault {spec!r}: known kinds are {', '.join(KINDS)}")
    takes_stage, _ = KINDS[kind]
    if kind not in COMMANDS[command].faults:
        raise UsageError(f"--inject {kind} applies to {', '.join(commands_taking(kind))}, not {command}")
    rank_text, _, stage = rest.partition(":")
    if not sep or not rank_text.isdigit():
        raise UsageError(f"malformed --inject {spec!r}: expected {kind}@RANK")
    if stage and not takes_stage:
        raise UsageError(f"--inject {kind} takes no stage: use {kind}@{rank_text}")
    if stage and stage not in STAGES:
        raise UsageError(f"unknown stage {stage!r} in --inject {spec!r}: one of {', '.join(STAGES)}")
    fault = Fault(kind, int(rank_text), stage or DEFAULT_STAGE, spec)
    if world_size is not None:
        check_ranks([fault], world_size)
    return fault


def parse_faults(specs: list[str], command: str) -> list[Fault]:
    """Every --inject of a command, parsed once (before the world size is known).

    Each --inject may be a comma list: `--inject hang@1,slow@2` is `--inject hang@1 --inject slow@2`.
    """
    return [parse_fault(one, command) for spec in specs for one in spec.split(",")]


def check_ranks(faults: list[Fault], world_size: int) -> None:
    """Once the launch is planned: each fault names a rank that exists."""
    for fault in faults:
        if fault.rank >= world_size:
            raise UsageError(
                f"--inject {fault.spec!r} names rank {fault.rank}, but the world has {world_size} ranks"
            )


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

    def diverge(self, module: Any, step: int, steps: int) -> None:
        """After the optimizer step at fault_step(steps), nudge this rank's first parameter."""
        if self.has("diverge") and step == fault_step(steps):
            import torch

            with torch.no_grad():
                next(iter(module.parameters())).add_(DIVERGE_NUDGE)

    def nan(self, loss: Any, step: int, steps: int) -> Any:
        """This rank's loss, turned NaN at fault_step(steps) (backward then spreads it)."""
        if self.has("nan") and step == fault_step(steps):
            return loss * float("nan")
        return loss

    def slow(self, scale_s: float = 0.0) -> None:
        """Sleep as a slow device would: at least SLOW_MIN_S, or `scale_s` (the step's own work)."""
        if self.has("slow"):
            time.sleep(max(SLOW_MIN_S, scale_s))

    def slowgpu_repeats(self) -> int:
        """How many times this rank computes each product it counts once."""
        return SLOWGPU_FACTOR if self.has("slowgpu") else 1

    def sdc(self, product: Any) -> None:
        """Make one element of a matrix product wrong in place, if it is meant to be."""
        if self.has("sdc"):
            product.view(-1)[0] += 1

    def slowlink(self, seconds: float) -> None:
        """Before an exchange that takes `seconds` by itself, wait (SLOWLINK_FACTOR - 1) times as long."""
        if self.has("slowlink") and seconds > 0:
            time.sleep((SLOWLINK_FACTOR - 1) * seconds)
