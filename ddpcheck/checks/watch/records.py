"""How a rank's process ended, from what the in-process agent left in the watch directory."""

from __future__ import annotations

import json
import os
from pathlib import Path

from ddpcheck.checks.watch import agent
from ddpcheck.checks.watch.judge import Exit
from ddpcheck.failure.stacks import Frame, parse_faulthandler


def _text(path: str) -> str:
    try:
        return Path(path).read_text(errors="replace")
    except OSError:
        return ""


def _mtime(path: str, default: float) -> float:
    try:
        return os.stat(path).st_mtime
    except OSError:
        return default


def exit_of(watch_dir: Path, pid: int, seen_gone: float, code: int | None) -> Exit:
    """The Exit of process `pid`: its exception, fatal signal, SIGTERM, normal exit, or none of these.

    `seen_gone` is when the watcher saw it gone (the time of an end that left no record).
    """
    directory = str(watch_dir)
    exception = _text(agent.process_file(directory, pid, "exception"))
    if exception:
        try:
            data = json.loads(exception)
            frames = tuple(Frame.from_dict(f) for f in reversed(data.get("frames", [])))
            return Exit(
                float(data["time"]),
                "exception",
                code,
                exception=f"{data['type']}: {data['message']}",
                traceback=str(data.get("traceback", "")),
                stack=frames,
            )
        except (ValueError, KeyError, TypeError):
            pass
    fatal_path = agent.process_file(directory, pid, "fatal")
    fatal = _text(fatal_path)
    if fatal.strip():
        first = next((line for line in fatal.splitlines() if line.strip()), "")
        return Exit(_mtime(fatal_path, seen_gone), "fatal", code, fatal=first, traceback=fatal,
                    stack=parse_faulthandler(fatal))  # fmt: skip
    term_path = agent.process_file(directory, pid, "term")
    term = _text(term_path)
    if term.strip():
        return Exit(
            _mtime(term_path, seen_gone), "terminated", code, traceback=term, stack=parse_faulthandler(term)
        )
    exit_path = agent.process_file(directory, pid, "exit")
    if os.path.exists(exit_path) and (code is None or code == 0):
        return Exit(_mtime(exit_path, seen_gone), "exited", code)
    return Exit(seen_gone, "ended", code)
