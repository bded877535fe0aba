"""Writing an output file whole: a reader never sees half of it, and a failed write leaves nothing."""

from __future__ import annotations

import contextlib
import os
import sys


def write_text(path: str, text: str) -> None:
    """Write a whole output file at once (a temporary file beside it, then a rename).

    When the write fails (a full disk, a read-only file system), the temporary file goes too:
    a half-written `r.json.tmp123` beside the report is worse than none. Where the file system
    allows, the temporary file has no name while it is written: a SIGKILL then (mpirun's, a second
    after its SIGTERM) leaves nothing at all.
    """
    with contextlib.suppress(OSError):
        _write_unnamed(path, text)
        return
    tmp = f"{path}.tmp{os.getpid()}"
    try:
        with open(tmp, "w", encoding="utf-8") as handle:
            handle.write(text)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def _write_unnamed(path: str, text: str) -> None:
    """Write into an unnamed file (O_TMPFILE) beside `path`, then give it the name: OSError where
    the file system cannot (the caller falls back to a named temporary file)."""
    fd = os.open(os.path.dirname(os.path.abspath(path)), os.O_TMPFILE | os.O_WRONLY, 0o666)
    try:
        with os.fdopen(fd, "w", encoding="utf-8", closefd=False) as handle:
            handle.write(text)
        try:
            os.link(f"/proc/self/fd/{fd}", path, follow_symlinks=True)
        except FileExistsError:
            tmp = f"{path}.tmp{os.getpid()}"  # named for a moment only: the link and the rename
            os.link(f"/proc/self/fd/{fd}", tmp, follow_symlinks=True)
            os.replace(tmp, path)
    finally:
        os.close(fd)


def write_or_print(path: str, text: str) -> None:
    """The file at `path`, written whole; '-' means standard output."""
    if path == "-":
        sys.stdout.write(text)
        sys.stdout.flush()
        return
    write_text(path, text)
