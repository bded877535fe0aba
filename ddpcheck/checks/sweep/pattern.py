"""Exactly representable data every rank can predict: what each rank sends, and what each must receive.

Torch-free to import (tensors are made inside the functions), so the judges and the
launcher can use the sizes and limits without loading torch.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

# The largest integer each dtype holds exactly (all smaller ones too).
EXACT_LIMIT = {
    "float16": 2**11,
    "bfloat16": 2**8,
    "float32": 2**24,
    "float64": 2**53,
    "int32": 2**31 - 1,
}
ITEM_SIZE = {"float16": 2, "bfloat16": 2, "float32": 4, "float64": 8, "int32": 4}
MAX_PERIOD = 251  # a prime, so the pattern does not line up with power-of-two sizes
# What a receive buffer holds before the collective: never a value of any pattern, so a
# block that never arrived counts as wrong in every element.
UNWRITTEN = MAX_PERIOD + 1


def sweep_sizes(min_bytes: int, max_bytes: int, dtype: str, factor: float = 2.0) -> list[int]:
    """Sizes from min to max, each `factor` times the last (nccl-tests' -f), rounded down to whole
    elements (at least one)."""
    item = ITEM_SIZE[dtype]
    sizes: list[int] = []
    size = min_bytes
    while size <= max_bytes:
        rounded = max(item, size // item * item)
        if not sizes or rounded != sizes[-1]:
            sizes.append(rounded)
        size = max(size + 1, int(size * factor))
    return sizes


@dataclass(frozen=True)
class Pattern:
    """What a reduction's members contribute: exactly representable, different on every rank, a known sum.

    Element i of member j holds (i + j) mod P: every partial sum is a small
    non-negative integer, so any difference from the expected sum is a fault,
    never rounding. When even 0/1 values could overflow the dtype's exact range
    in a sum (bfloat16 beyond 256 ranks), each element is 1 on exactly one rank.
    """

    period: int
    world_size: int
    one_hot: bool

    @classmethod
    def for_world(cls, world_size: int, dtype: str) -> Pattern:
        period = min(MAX_PERIOD, EXACT_LIMIT[dtype] // world_size + 1)
        if period >= 2:
            return cls(period, world_size, one_hot=False)
        return cls(world_size, world_size, one_hot=True)

    def contribution(self, index: int) -> list[int]:
        """One period of what the member at `index` (within its group) contributes."""
        if self.one_hot:
            return [1 if i == index else 0 for i in range(self.period)]
        return [(i + index) % self.period for i in range(self.period)]

    def expected(self, offset: int = 0) -> list[int]:
        """One period of the sum over all `world_size` contributions, from element `offset` on."""
        if self.one_hot:
            return [1] * self.period
        p, n = self.period, self.world_size
        full, rest = divmod(n, p)
        out = []
        for s in range(p):
            wraps = max(0, s + rest - p)
            out.append(full * p * (p - 1) // 2 + rest * s + rest * (rest - 1) // 2 - p * wraps)
        shift = offset % p
        return out[shift:] + out[:shift]


def block_values(src: int, dst: int = 0) -> list[int]:
    """One period of the block that rank `src` sends to rank `dst` in a collective that moves data.

    Two interleaved digits, each below P = 251 (so exact in every dtype, bfloat16
    included): even elements (i + src) mod P, odd ones (i + src // P + 16·dst) mod P.
    A block that came from another sender, or was meant for another receiver, differs
    from the expected one, up to 251² senders (a world of 1,000 ranks included).
    """
    low = [(i + src) % MAX_PERIOD for i in range(MAX_PERIOD)]
    high = [(i + src // MAX_PERIOD + 16 * dst) % MAX_PERIOD for i in range(MAX_PERIOD)]
    return [value for pair in zip(low, high, strict=True) for value in pair]


def fill(buffer: Any, period_values: list[int]) -> None:
    """Write `period_values` over `buffer` again and again (a 1-D tensor)."""
    import torch

    period = torch.tensor(period_values, dtype=buffer.dtype, device=buffer.device)
    count, p = buffer.numel(), len(period_values)
    whole = count // p * p
    if whole:
        buffer[:whole].view(-1, p).copy_(period.expand(count // p, p))
    buffer[whole:].copy_(period[: count - whole])


def count_wrong(buffer: Any, expected_values: list[int]) -> int:
    """How many elements of `buffer` differ from `expected_values` repeated (exact comparison)."""
    import torch

    period = torch.tensor(expected_values, dtype=buffer.dtype, device=buffer.device)
    count, p = buffer.numel(), len(expected_values)
    whole = count // p * p
    wrong = 0
    if whole:
        wrong += int((buffer[:whole].view(-1, p) != period).sum().item())
    wrong += int((buffer[whole:] != period[: count - whole]).sum().item())
    return wrong
