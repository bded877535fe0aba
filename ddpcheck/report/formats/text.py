"""Writing an output file whole: a reader never sees half of it."""

from __future__ import annotations

import os
import sys


def write_text(path: str, text: str) -> None:
    """Write a whole output file at once (a temporary file beside it, then a rename)."""
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "w", encoding="utf-8") as handle:
        handle.write(text)
    os.replace(tmp, path)


def write_or_print(path: str, text: str) -> None:
    """The file at `path`, written whole; '-' means standard output."""
    if path == "-":
        sys.stdout.write(text)
        sys.stdout.flush()
        return
    write_text(path, text)
