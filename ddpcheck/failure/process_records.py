"""Where `watch`'s in-process agent keeps each process's records: `DIR/processes/PID.KIND`.

The agent (checks/watch/agent.py) writes them inside the user's job, where it loads this file by its
path (standard library only); failure/exits.py reads them, for `watch` and `postmortem` alike.
"""

from __future__ import annotations

import os

PROCESSES = "processes"  # the folder of the per-process records in a watch directory
# start, exception and exit: JSON; fatal and term: faulthandler's text (both opened empty at start);
# rank: JSON, once torch.distributed is initialized (a framework's own ranks carry no rank variable).
KINDS = ("start", "exception", "fatal", "term", "exit", "rank")


def process_file(watch_dir: str | os.PathLike[str], pid: int, kind: str) -> str:
    """One of a process's records."""
    return os.path.join(os.fspath(watch_dir), PROCESSES, f"{pid}.{kind}")


def write_whole(path: str, data: bytes) -> None:
    """Written to a partial file, then renamed: a reader sees it whole or not at all."""
    with open(f"{path}.partial", "wb") as out:
        out.write(data)
    os.replace(f"{path}.partial", path)
