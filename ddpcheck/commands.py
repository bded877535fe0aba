"""Every command that runs on ranks, in one table that cli.py, faults.py, worker.py and render.py read.

Adding a command means one entry here, its check module (measure() on every rank,
judge() on rank 0, an Options dataclass) and its Typer declaration in cli.py.
Torch-free: the CLI reads this before anything is launched.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from types import ModuleType

# What every ranked command can be made to suffer (faults.py says what each kind does).
HARNESS_FAULTS = ("hang", "crash", "kill")


@dataclass(frozen=True)
class Command:
    name: str
    check: str  # the module with measure(), judge() and Options
    faults: tuple[str, ...]  # the --inject kinds it takes
    # Tables the terminal draws a chart for (render.py's chart kinds), after the table itself.
    charts: dict[str, str] = field(default_factory=dict)
    measures: bool = False  # it measures speed: --baseline and --tolerance compare it with a saved run

    def module(self) -> ModuleType:
        return importlib.import_module(self.check)


COMMANDS: dict[str, Command] = {
    c.name: c
    for c in (
        Command(
            "allreduce",
            "ddpcheck.checks.allreduce",
            ("corrupt", *HARNESS_FAULTS),
            charts={"bandwidth": "busbw"},
            measures=True,
        ),
        Command(
            "collectives",
            "ddpcheck.checks.collectives",
            ("corrupt", *HARNESS_FAULTS),
            charts={"bandwidth": "busbw"},
            measures=True,
        ),
        Command(
            "links",
            "ddpcheck.checks.links",
            ("slowlink", *HARNESS_FAULTS),
            charts={"link_matrix": "heatmap"},
            measures=True,
        ),
        Command("train", "ddpcheck.checks.train", (*HARNESS_FAULTS, "diverge", "nan", "slow")),
        Command(
            "profile",
            "ddpcheck.checks.profile",
            (*HARNESS_FAULTS, "slow"),
            charts={"breakdown": "breakdown"},
            measures=True,
        ),
    )
}


def commands_taking(kind: str) -> list[str]:
    """The commands whose --inject takes this fault kind."""
    return [c.name for c in COMMANDS.values() if kind in c.faults]
