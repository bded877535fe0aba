"""What the straggler judge reads: samples of every rank's flight recorder, taken again and again."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ddpcheck.failure.flight import RankTrace, parse_trace


@dataclass(frozen=True)
class Sample:
    """What every rank's flight recorder held when the watcher asked.

    `clock_offsets_ns`: per rank, its clock minus the watcher's, where the caller measured it
    (absent: ranks of different hosts are not compared by enqueue time).
    """

    traces: Mapping[int, RankTrace]
    hosts: Mapping[int, str] = field(default_factory=dict)
    clock_offsets_ns: Mapping[int, int] = field(default_factory=dict)


def sample_from_dumps(
    dumps: Mapping[int, Mapping[str, Any]],
    hosts: Mapping[int, str] | None = None,
    clock_offsets_ns: Mapping[int, int] | None = None,
) -> Sample:
    """A Sample from each rank's raw dump (the unpickled dict). Raises NotADump as parse_trace does."""
    return Sample(
        traces={rank: parse_trace(raw, rank=rank) for rank, raw in dumps.items()},
        hosts=dict(hosts or {}),
        clock_offsets_ns=dict(clock_offsets_ns or {}),
    )
