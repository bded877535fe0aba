"""What preflight() is asked to do, checked before anything touches the process group.

Torch-free and pure: the API and `python -m ddpcheck.preflight` both validate here, so bad
arguments are one line (PreflightUsageError) on every rank before any collective or store call.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from ddpcheck.errors import UsageError

# The checks a caller may pick (checks=[...], --checks); arrival always runs: without it an NCCL
# collective waits for a missing rank as long as the job's own timeout.
CHECKS = ("sum", "bandwidth", "versions", "health", "rankmap")
# The default budget: seconds from the call to its return, on every rank (docs/preflight.md says
# how these were chosen from measurements).
DEFAULT_BUDGET_S = {"cuda": 10.0, "cpu": 5.0}
MIN_BUDGET_S = 1.0
MAX_BUDGET_S = 3600.0
# Faults a self-test may plant (inject=[...], --inject KIND@RANK): the gate shown to catch them.
FAULTS = {
    "corrupt": "rank R adds 1 to every 13th element it contributes to the all_reduce",
    "torch": "rank R reports another torch version in its fingerprint",
    "absent": "rank R never announces its arrival (it waits out the budget like a missing rank)",
}


class PreflightUsageError(UsageError, ValueError):
    """A bad argument to preflight(): one line, raised on every rank before any collective."""


@dataclass(frozen=True)
class PreflightOptions:
    checks: tuple[str, ...] = CHECKS
    budget_s: float | None = None  # None: DEFAULT_BUDGET_S for the device
    min_busbw: float | None = None  # GB/s: FAIL below it
    quiet: bool = False
    json_path: str | None = None
    faults: tuple[tuple[str, int], ...] = field(default=())  # (kind, rank) planted by inject=

    def budget_for(self, device: str) -> float:
        return self.budget_s if self.budget_s is not None else DEFAULT_BUDGET_S[device]

    def injected(self) -> list[str]:
        return [f"{kind}@{rank}" for kind, rank in self.faults]


def build(
    checks: object = None,
    budget_s: object = None,
    min_busbw: object = None,
    quiet: object = False,
    json_path: object = None,
    inject: object = None,
) -> PreflightOptions:
    """PreflightOptions from what the caller passed, or PreflightUsageError naming the argument."""
    return PreflightOptions(
        checks=_checks(checks),
        budget_s=_number("budget_s", budget_s, MIN_BUDGET_S, MAX_BUDGET_S),
        min_busbw=_number("min_busbw", min_busbw, 0.0, math.inf),
        quiet=flag("quiet", quiet),
        json_path=_path(json_path),
        faults=_faults(inject),
    )


def _checks(value: object) -> tuple[str, ...]:
    if value is None:
        return CHECKS
    names = value.split(",") if isinstance(value, str) else value
    if not isinstance(names, (list, tuple, set, frozenset)) or not all(isinstance(n, str) for n in names):
        raise PreflightUsageError(f"checks must be a list of names from {', '.join(CHECKS)}, got {value!r}")
    picked = [n.strip() for n in names if n.strip()]
    unknown = [n for n in picked if n not in CHECKS]
    if unknown:
        raise PreflightUsageError(f"unknown check {unknown[0]!r}: choose from {', '.join(CHECKS)}")
    if not picked:
        raise PreflightUsageError(f"checks is empty: name at least one of {', '.join(CHECKS)}")
    return tuple(n for n in CHECKS if n in picked)


def _number(name: str, value: object, low: float, high: float) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise PreflightUsageError(f"{name} must be a number, got {value!r}")
    if not (low <= value <= high) or math.isnan(value):
        bound = f"at least {low:g}" if high == math.inf else f"between {low:g} and {high:g}"
        raise PreflightUsageError(f"{name} must be {bound}, got {value!r}")
    return float(value)


def flag(name: str, value: object) -> bool:
    if not isinstance(value, bool):
        raise PreflightUsageError(f"{name} must be True or False, got {value!r}")
    return value


def _path(value: object) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or not value:
        raise PreflightUsageError(f"json_path must be a file path, got {value!r}")
    return value


def _faults(value: object) -> tuple[tuple[str, int], ...]:
    if value is None:
        return ()
    specs = value.split(",") if isinstance(value, str) else value
    if not isinstance(specs, (list, tuple)) or not all(isinstance(s, str) for s in specs):
        raise PreflightUsageError(f"inject must be a list of KIND@RANK, got {value!r}")
    faults = []
    for spec in (s.strip() for s in specs if s.strip()):
        kind, sep, rank = spec.partition("@")
        if kind not in FAULTS:
            raise PreflightUsageError(f"unknown inject fault {spec!r}: known kinds are {', '.join(FAULTS)}")
        if not sep or not rank.isdigit():
            raise PreflightUsageError(f"malformed inject {spec!r}: expected {kind}@RANK")
        faults.append((kind, int(rank)))
    return tuple(faults)


def check_world(opts: PreflightOptions, world_size: int) -> None:
    """Once the world is known (still before any collective): each fault names a rank that exists."""
    for kind, rank in opts.faults:
        if rank >= world_size:
            raise PreflightUsageError(
                f"inject {kind}@{rank} names rank {rank}, but the world has {world_size} ranks"
            )
