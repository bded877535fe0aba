"""Errors that end a command with a one-line message instead of a traceback."""

EXIT_USAGE = 2
EXIT_COULD_NOT_COMPLETE = 3
EXIT_INTERRUPTED = 130


class UsageError(Exception):
    """Bad usage or input: exit code 2, one line, nothing spawned."""
