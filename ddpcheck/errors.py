"""Errors that end a command with a one-line message instead of a traceback."""


class UsageError(Exception):
    """Bad usage or input: exit code 2, one line, nothing spawned."""
