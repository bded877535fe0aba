"""Every command, in the order `ddpcheck --help` lists them. Each declares itself in its own module.

Adding a command: its folder under checks/ (a declaration in `__init__.py`, the work in
`check.py`, its charts and fault actions beside them), its line here, its tests and its docs
page (docs/architecture.md says how).
"""

from __future__ import annotations

from ddpcheck.checks import (
    allreduce,
    attach,
    collectives,
    devices,
    env,
    links,
    postmortem,
    profile,
    train,
    watch,
)
from ddpcheck.command import Command
from ddpcheck.report import compare, show

COMMANDS: dict[str, Command] = {
    module.COMMAND.name: module.COMMAND
    for module in (
        env,
        show,
        compare,
        allreduce,
        collectives,
        train,
        profile,
        links,
        devices,
        watch,
        postmortem,
        attach,
    )
}


def commands_taking(kind: str) -> list[str]:
    """The commands whose --inject takes this fault kind."""
    return [c.name for c in COMMANDS.values() if kind in c.faults]


def family_of(command: str) -> str | None:
    """The family of figures a command's reports hold (None: nothing a baseline compares)."""
    found = COMMANDS.get(command)
    return found.family if found else None


def kept_line(command: str, directory: str) -> str:
    """'rank logs kept in DIR': what a report's kept directory holds, as its command declares it."""
    found = COMMANDS.get(command)
    return f"{found.kept if found else 'rank logs'} kept in {directory}"
