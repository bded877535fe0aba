"""What a collective definition says about itself, and the team of ranks it runs on.

A definition (one small module per collective, beside this one) knows its buffers,
the pattern each rank writes, the result each rank must hold, nccl-tests' bus factor
and how to call torch.distributed. The sweep (collective/sweep.py) does the rest:
the sweep, the timing, counting wrong elements, localising, the rows and the verdicts.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar

from ddpcheck.checks.sweep.pattern import count_wrong

Buffers = dict[str, Any]  # name -> tensor


@dataclass(frozen=True)
class Team:
    """The ranks a collective runs on: the whole world, or a subgroup while localising."""

    ranks: tuple[int, ...]  # global ranks, in group order
    me: int  # this rank's index in `ranks`
    group: Any = None  # the process group handle; None is the world

    @property
    def size(self) -> int:
        return len(self.ranks)

    def rank(self, index: int) -> int:
        """The global rank of member `index` (torch's calls take global ranks)."""
        return self.ranks[index % self.size]


@dataclass(frozen=True)
class Received:
    """What a rank found in its result: wrong elements in all, and by the rank that sent them.

    `by_sender` is empty for reductions, where no single rank sent an element.
    """

    wrong: int
    by_sender: dict[int, int]


class Collective(ABC):
    """One collective: override what differs; sizes, buffers, variants and observers have common defaults."""

    name: ClassVar[str]
    reduces: ClassVar[bool] = False  # reductions localise by bisection; the others by sender and receiver
    min_ranks: ClassVar[int] = 1
    calls: ClassVar[tuple[str, ...]] = ()  # torch.distributed functions it needs (added over releases)

    @abstractmethod
    def bus_factor(self, n: int) -> float:
        """nccl-tests' factor from algbw to busbw (docs/collectives.md: busbw = algbw x factor)."""

    def count(self, size_bytes: int, item: int, n: int) -> int:
        """Elements of the whole buffer for a message of `size_bytes` (nccl-tests' size convention)."""
        return max(1, size_bytes // item)

    def missing(self) -> str | None:
        """Why this torch cannot run the collective (a call it lacks), or None."""
        import torch.distributed as dist

        lacking = [call for call in self.calls if not hasattr(dist, call)]
        return f"this torch has no {', '.join(lacking)}" if lacking else None

    def buffers(self, count: int, dtype: Any, device: Any, n: int) -> Buffers:
        """The tensors one run needs, allocated once per size: one buffer, `data`, unless overridden."""
        import torch

        return {"data": torch.empty(count, dtype=dtype, device=device)}

    def variants(self, n: int, size_index: int) -> list[int]:
        """The data check's runs per size: roots for rooted collectives, ring shifts for sendrecv."""
        return [0]

    @abstractmethod
    def load(self, bufs: Buffers, team: Team, variant: int, dtype_name: str, faults: Any) -> None:
        """Write this member's contribution (an injected corruption applies to what it sends)."""

    @abstractmethod
    def run(self, bufs: Buffers, team: Team, variant: int) -> None:
        """Call the collective once (what is timed)."""

    @abstractmethod
    def verify(self, bufs: Buffers, team: Team, variant: int, dtype_name: str) -> Received:
        """Compare this member's result with what it must hold, element by element."""

    def senders(self, n: int, variant: int) -> list[int]:
        """Which ranks send data in one run (collectives that move data, not reductions)."""
        return list(range(n))

    def observers(self, sender: int, n: int, variant: int) -> list[int]:
        """Which ranks receive `sender`'s data in one run (collectives that move data, not reductions)."""
        return list(range(n))

    def timed_variant(self) -> int:
        return 0

    def clear(self, bufs: Buffers) -> None:
        """Before timing: zeros keep repeated in-place reductions finite; speed does not depend on values."""
        for tensor in bufs.values():
            tensor.zero_()


class Blocked(Collective):
    """A collective whose buffer holds one block per rank (all_gather, reduce_scatter, all_to_all)."""

    def bus_factor(self, n: int) -> float:
        return (n - 1) / n

    def count(self, size_bytes: int, item: int, n: int) -> int:
        return max(n, size_bytes // item // n * n)  # whole blocks, at least one element each

    @staticmethod
    def received_blocks(output: Any, team: Team, expected: Callable[[int], list[int]]) -> Received:
        """Block j of `output` came from member j: compare each with `expected(sender)`."""
        by_sender = {}
        for index, block in enumerate(output.view(team.size, -1)):
            wrong = count_wrong(block, expected(team.rank(index)))
            if wrong:
                by_sender[team.rank(index)] = wrong
        return Received(sum(by_sender.values()), by_sender)


class Rooted(Collective):
    """A collective with a root (broadcast, reduce): one buffer, every root in turn in the data check."""

    def bus_factor(self, n: int) -> float:
        return 1.0

    def variants(self, n: int, size_index: int) -> list[int]:
        from ddpcheck.checks.sweep.ops.roots import roots_for

        return roots_for(n, size_index)


def corrupt_blocks(faults: Any, tensor: Any, blocks: int) -> None:
    """Corrupt every block that goes to a different receiver, so that each of them sees the fault."""
    for block in tensor.view(blocks, -1):
        faults.corrupt(block)
