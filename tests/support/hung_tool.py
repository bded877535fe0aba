"""A command-line tool that hangs (a sick GPU's nvidia-smi, say), and whether what it started ended.

Each call's shell starts a `sleep` and writes its pid to a file of its own, whole (written, then
renamed): every call that got as far as starting one can be checked.
"""

from __future__ import annotations

import time
from pathlib import Path

from tests.conftest import process_ended


def write_hung_tool(path: Path, pids: Path, sleep_s: int = 60) -> Path:
    """An executable at `path` that hangs for `sleep_s`, recording its child's pid under `pids`."""
    pids.mkdir(exist_ok=True)
    path.parent.mkdir(parents=True, exist_ok=True)
    record = f"echo $! > {pids}/$$.tmp && mv {pids}/$$.tmp {pids}/$$"
    path.write_text(f"#!/bin/sh\nsleep {sleep_s} &\n{record}\nwait\n")
    path.chmod(0o755)
    return path


def started_children(pids: Path) -> list[int]:
    """The pids of the sleeps the calls so far have started."""
    return [int(f.read_text()) for f in pids.iterdir() if not f.name.endswith(".tmp")]


def wait_for_a_start(pids: Path, within_s: float = 30.0) -> None:
    deadline = time.monotonic() + within_s
    while not started_children(pids) and time.monotonic() < deadline:
        time.sleep(0.05)


def all_end(children: list[int], within_s: float = 5.0) -> bool:
    """Whether every one has ended (a zombie has) within `within_s`."""
    deadline = time.monotonic() + within_s
    while not all(process_ended(pid) for pid in children) and time.monotonic() < deadline:
        time.sleep(0.05)
    return all(process_ended(pid) for pid in children)
