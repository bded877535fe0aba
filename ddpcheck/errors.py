"""Errors that end a command with a one-line message instead of a traceback."""

import contextlib
import os
import sys

EXIT_USAGE = 2
EXIT_COULD_NOT_COMPLETE = 3
EXIT_INTERRUPTED = 130


class UsageError(Exception):
    """Bad usage or input: exit code 2, one line, nothing spawned."""


def check_between(flag: str, value: int | None, low: int, high: int) -> None:
    """A UsageError unless `value` (None: not given) is within low..high, both included."""
    if value is not None and not low <= value <= high:
        raise UsageError(f"{flag} must be between {low} and {high}, got {value}")


def say(line: str) -> None:
    """One line on stderr, in one write.

    Ranks under torchrun, srun or mpirun share their launcher's stderr, and print() writes the
    text and its newline apart: another rank's line can get in between (docs/failures.md). One
    write of a line up to PIPE_BUF (4 KiB) to a pipe is never split.
    """
    with contextlib.suppress(Exception):  # what this process printed before goes first
        sys.stderr.flush()
    with contextlib.suppress(OSError):
        os.write(2, f"{line}\n".encode(errors="replace"))
