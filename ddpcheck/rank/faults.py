"""`--inject` faults: deliberate breakage that proves the checker catches what it claims.

A spec is KIND@RANK or KIND@RANK:STAGE (several: a comma list). Parsing is torch-free (the CLI
rejects a bad spec before spawning anything); the actions run inside the ranks. A command
declares the kinds it takes and what each does (Command.faults); the harness's kinds (a stage
of the run) and `slow` are struck here, a command's own by the Faults subclass in its folder
that its declaration names (Command.fault_actions).
"""

from __future__ import annotations

import os
import signal
import time
from dataclasses import dataclass, field

from ddpcheck.command import HARNESS_FAULTS
from ddpcheck.commands import COMMANDS, commands_taking
from ddpcheck.errors import UsageError
from ddpcheck.failure.stages import HARNESS as STAGES
from ddpcheck.failure.stages import MEASURE

# kind -> (whether it takes a :STAGE, what it does), from the declarations (the harness's take one).
KINDS: dict[str, tuple[bool, str]] = {
    kind: (kind in HARNESS_FAULTS, does)
    for command in COMMANDS.values()
    for kind, does in command.faults.items()
}
DEFAULT_STAGE = MEASURE
# slow: the least a slow rank sleeps per step; it sleeps longer when its step is longer.
SLOW_MIN_S = 0.02


@dataclass(frozen=True)
class Fault:
    kind: str
    rank: int
    stage: str = DEFAULT_STAGE
    spec: str = field(default="", compare=False)  # as the user wrote it, for messages

    def __str__(self) -> str:
        return f"{self.kind}@{self.rank}" + (f":{self.stage}" if self.kind in HARNESS_FAULTS else "")


def parse_fault(spec: str, command: str) -> Fault:
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
    return Fault(kind, int(rank_text), stage or DEFAULT_STAGE, spec)


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
    """The faults that apply to one rank: the harness's and `slow` struck here, a command's own kinds
    by its subclass (Command.fault_actions)."""

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

    def slow(self, scale_s: float = 0.0) -> None:
        """Sleep as a slow device would: at least SLOW_MIN_S, or `scale_s` (the step's own work)."""
        if self.has("slow"):
            time.sleep(max(SLOW_MIN_S, scale_s))
