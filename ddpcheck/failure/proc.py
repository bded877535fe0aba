"""A process as /proc shows it, by its pid: its state, its command line and environment, the libraries
it mapped.

Standard library only: rank/arrival.py, which the entry point loads before Typer and torch, reads
its peers' states here (failure/processes.py, with psutil, finds and ends processes).
"""

from __future__ import annotations

import os

from ddpcheck.failure.text_enum import TextEnum


class ProcState(TextEnum):
    """What /proc says of a process. psutil's words map so: stopped and tracing-stop are STOPPED,
    zombie is ZOMBIE, dead (and no such process) is GONE, every other (sleeping, disk-sleep, ...) RUNNING."""

    RUNNING = "running"
    STOPPED = "stopped"  # SIGSTOP, or a debugger's stop
    ZOMBIE = "zombie"  # ended, not yet reaped by its parent
    GONE = "gone"

    @classmethod
    def of_letter(cls, letter: str) -> ProcState:
        """From /proc's state letter (R, S, D, T stopped, t traced, Z zombie, X dead) or 'gone'."""
        if letter in ("T", "t"):
            return cls.STOPPED
        if letter == "Z":
            return cls.ZOMBIE
        return cls.GONE if letter in ("X", "x", "gone") else cls.RUNNING

    @property
    def ended(self) -> bool:
        return self in (ProcState.ZOMBIE, ProcState.GONE)


def state_letter(pid: int) -> str:
    """The process's state letter from /proc (R, S, D, T stopped, t traced, Z zombie), or 'gone'."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rpartition(")")[2].split()[0]
    except (OSError, IndexError):
        return "gone"


def state_of(pid: int) -> ProcState:
    return ProcState.of_letter(state_letter(pid))


def cmdline(pid: int) -> bytes:
    """A process's command line as /proc holds it (its arguments NUL-separated); empty when unreadable."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as arguments:
            return arguments.read()
    except OSError:
        return b""


def environ(pid: int) -> dict[str, str] | None:
    """A process's environment as /proc holds it (NUL-separated); None when it is gone or unreadable."""
    try:
        with open(f"/proc/{pid}/environ", "rb") as variables:
            entries = variables.read().split(b"\0")
    except OSError:
        return None
    pairs = (os.fsdecode(entry).partition("=") for entry in entries)
    return {name: value for name, equals, value in pairs if name and equals}


def maps_any(pid: int, *libraries: str) -> bool:
    """Whether the process has mapped a file whose path holds one of `libraries` (False: unreadable)."""
    try:
        with open(f"/proc/{pid}/maps") as maps:
            return any(library in line for line in maps for library in libraries)
    except OSError:
        return False
