"""Writing an output file whole: a reader never sees half of it, and a failed write leaves nothing."""

from __future__ import annotations

import contextlib
import os
import sys


def write_text(path: str, text: str) -> None:
    """Write a whole output file at once (a temporary file beside it, then a rename).

    When the write fails (a full disk, a read-only file system), the temporary file goes too:
    a half-written `r.json.tmp123` beside the report is worse than none.
    """
    tmp = f"{path}.tmp{os.getpid()}"
    try:
        with open(tmp, "w", encoding="utf-8") as handle:
            handle.write(text)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def write_or_print(path: str, text: str) -> None:
    """The file at `path`, written whole; '-' means standard output."""
    if path == "-":
        sys.stdout.write(text)
        sys.stdout.flush()
        return
    write_text(path, text)
