"""Every rank's arrival, through the job's store and bounded by the budget, before any collective.

An NCCL collective cannot be bounded from Python: a rank that never comes leaves its peers inside
it until the job's own timeout (30 minutes by default). So each rank announces itself in the store
(a key of its own and a counter) and waits, polling, until every rank has, or its wait ends. One
key decides for all: the first rank to see everyone sets it to "open", the first whose wait ends
first sets it to the ranks present then; `compare_set` makes that one decision, so a rank arriving
just late learns it was counted missing and stops too, instead of entering a collective alone.
"""

from __future__ import annotations

import itertools
import json
import os
import time
from dataclasses import dataclass, field
from typing import Any

from ddpcheck.torch_compat import store_has

PREFIX = "ddpcheck/preflight/"
POLL_S = 0.02
OPEN = "open"
calls = itertools.count()  # this process's calls: ranks that call preflight alike share each call's keys


@dataclass(frozen=True)
class Attendance:
    """What the store said: every rank came (missing == []), or who did by the end of the wait."""

    world_size: int
    missing: list[int]
    present: dict[int, dict[str, Any]] = field(default_factory=dict)  # rank -> where it said it runs
    waited_s: float = 0.0

    def host_of(self, rank: int) -> str | None:
        """The host of a rank that never came, from its node's other ranks (torchrun's layout:
        node = rank // local world size, when every rank that came fits it); None if unknown."""
        sizes = {p.get("local_world") for p in self.present.values()}
        if len(sizes) != 1 or not isinstance(size := sizes.pop(), int) or size < 1:
            return None
        if any(p.get("node") != r // size for r, p in self.present.items()):
            return None
        return next((p["host"] for r, p in self.present.items() if r // size == rank // size), None)


def arrive(
    store: Any,
    rank: int,
    world_size: int,
    me: dict[str, Any],
    wait_s: float,
    call: int,
    absent: bool = False,
) -> Attendance:
    """Announce this rank (unless `absent`: a planted fault) and wait at most `wait_s` for the rest."""
    # A torchrun restart keeps its agent's store: each attempt's keys apart from the last one's.
    key = f"{PREFIX}{os.environ.get('TORCHELASTIC_RESTART_COUNT', '0')}/{call}/"
    began = time.monotonic()
    if not absent:
        store.set(f"{key}rank/{rank}", json.dumps(me))
        store.add(f"{key}count", 1)
    deadline = began + wait_s
    while (decided := _read(store, f"{key}verdict")) is None:
        # The first rank to set it decides for all (compare_set): the next read returns its decision.
        if int(store.add(f"{key}count", 0)) >= world_size:
            store.compare_set(f"{key}verdict", "", OPEN)
        elif time.monotonic() >= deadline:
            present = {r: _read(store, f"{key}rank/{r}") for r in range(world_size)}
            came = {str(r): json.loads(p) for r, p in present.items() if p is not None}
            store.compare_set(f"{key}verdict", "", json.dumps(came))
        else:
            time.sleep(POLL_S)
    waited = time.monotonic() - began
    if decided == OPEN:
        return Attendance(world_size, [], {}, waited)
    came = {int(r): p for r, p in json.loads(decided).items()}
    return Attendance(world_size, [r for r in range(world_size) if r not in came], came, waited)


def _read(store: Any, key: str) -> str | None:
    return store.get(key).decode() if store_has(store, key) else None
