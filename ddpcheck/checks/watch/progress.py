"""Progress, defined once: a byte of the job's output, or a change in any rank's Python stack.

A job has made no progress for S seconds when for S seconds no rank printed anything and every
rank's stack (each frame's function, file and line, of its main thread) stayed the same at every
sample. A rank starting or ending counts as progress too. A hang also needs evidence from every
live rank: stopped (state T), or its stack read and found unchanged for at least half of S, and
not inside an import (a library loading for seconds on a busy node is start-up, not a hang).
Stacks are sampled only once the output has been silent for half of --hang-after: a job that
prints is never looked into.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ddpcheck.failure.stacks import Stack
from ddpcheck.failure.text_enum import TextEnum

SAMPLES_PER_WINDOW = 5  # stack samples within one --hang-after
MIN_SAMPLE_INTERVAL_S = 0.5


class Event(TextEnum):
    """What a look at the job found; HANG, CRASH and ENDED are also the decisions a verdict is judged on."""

    ENDED = "ended"  # the job ended
    FAILED = "failed"  # a rank failed and the job goes on (its launcher may still end it)
    CRASH = "crash"  # a rank failed and the job went on past its launcher's grace
    HANG = "hang"


def sample_interval(hang_after: float) -> float:
    return max(MIN_SAMPLE_INTERVAL_S, hang_after / 2 / SAMPLES_PER_WINDOW)


@dataclass
class Progress:
    last: float  # when the job last made progress (time.monotonic())
    stacks: dict[int, Stack] = field(default_factory=dict)
    changed: dict[int, float] = field(default_factory=dict)  # rank -> when its stack last changed

    def progressed(self, now: float) -> None:
        """A byte of the job's output, or a rank started or ended."""
        self.last = max(self.last, now)

    def sample(self, rank: int, stack: Stack, now: float) -> None:
        if self.stacks.get(rank) != stack:
            if rank in self.stacks:  # a first sample compares with nothing: not a change
                self.last = max(self.last, now)
            self.stacks[rank] = stack
            self.changed[rank] = now

    def forget(self, rank: int) -> None:
        self.stacks.pop(rank, None)
        self.changed.pop(rank, None)

    def silent_for(self, now: float) -> float:
        return now - self.last

    def unchanged_for(self, rank: int, now: float) -> float | None:
        return now - self.changed[rank] if rank in self.changed else None
