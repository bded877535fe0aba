"""The crash judge over exit records: which process failed first of its own accord, which followed.

One reading of the ends `watch` sees while the job runs and `postmortem` reads after it
(failure/exits.py's Exit): a process that raised (not because a peer was gone), died of a fatal
signal or ended without any trace failed of its own accord; one whose error a lost peer caused is
collateral; one ended by SIGTERM (its trace, or torchrun's handler turning it into an exception)
was torn down from outside. Each command says the judgement in its own words.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from ddpcheck.failure.error_texts import SIGNAL_EXCEPTION
from ddpcheck.failure.exits import Exit, ExitKind

Failed = TypeVar("Failed")


def torn_down(exit: Exit) -> bool:
    """Ended from outside by a signal it could not survive (SIGTERM's trace, or torchrun's handler)."""
    return exit.kind is ExitKind.TERMINATED or (
        exit.kind is ExitKind.EXCEPTION and bool(SIGNAL_EXCEPTION.match(exit.exception))
    )


def failed_of_itself(exit: Exit) -> bool:
    """Raised (not for a peer's going), died of a fatal signal, or ended without any trace."""
    return exit.kind in (ExitKind.FATAL, ExitKind.ENDED) or (
        exit.kind is ExitKind.EXCEPTION and not exit.secondary and not torn_down(exit)
    )


def collateral(exit: Exit) -> bool:
    """Raised because a peer had gone first (its connection closed, its collective timed out)."""
    return exit.kind is ExitKind.EXCEPTION and exit.secondary and not torn_down(exit)


@dataclass
class Crash(Generic[Failed]):
    """The ends of a job's processes, judged, in the order they came."""

    failed: list[Failed]  # of their own accord, the first first
    ended: list[Failed]  # every end: the failed, the others, the normal exits

    @property
    def first(self) -> Failed | None:
        """The first to fail of its own accord; when none did, the earliest end all the same."""
        return self.failed[0] if self.failed else (self.ended[0] if self.ended else None)

    @property
    def followers(self) -> list[Failed]:
        """Every other end, in order."""
        return [e for e in self.ended if e is not self.first]


def judge_ends(
    ends: Iterable[Failed], exit_of: Callable[[Failed], Exit], when: Callable[[Failed], Any]
) -> Crash[Failed]:
    """The ends judged, ordered by `when`."""
    ordered = sorted(ends, key=when)
    return Crash([e for e in ordered if failed_of_itself(exit_of(e))], ordered)
