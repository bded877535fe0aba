"""Each rank's Python stack, read from outside with py-spy; and what a stack says about where a rank is."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sysconfig
from dataclasses import dataclass

PY_SPY_TIMEOUT_S = 10.0

# Frames in these files mean "waiting for the other ranks": torch.distributed's calls, and the
# autograd engine, where DDP's gradient all_reduce is waited for at the end of backward().
_COLLECTIVE_PARTS = ("/torch/distributed/", "/torch/nn/parallel/distributed.py", "/torch/autograd/")
_LIBRARY_ROOTS = tuple(
    {os.path.realpath(sysconfig.get_paths()[key]) for key in ("stdlib", "purelib", "platlib")}
)


@dataclass(frozen=True)
class Frame:
    function: str
    file: str
    line: int

    @property
    def where(self) -> str:
        return f"{self.function} ({shown_path(self.file)}:{self.line})"

    @property
    def in_collective(self) -> bool:
        return any(part in self.file for part in _COLLECTIVE_PARTS)

    @property
    def in_library(self) -> bool:
        return "/site-packages/" in self.file or os.path.realpath(self.file).startswith(_LIBRARY_ROOTS)

    def to_dict(self) -> dict[str, object]:
        return {"function": self.function, "file": self.file, "line": self.line}

    @classmethod
    def from_dict(cls, data: dict) -> Frame:
        return cls(str(data["function"]), str(data["file"]), int(data["line"]))


def shown_path(path: str) -> str:
    """A file as the report shows it: relative to where watch was started when it lies below it."""
    try:
        relative = os.path.relpath(path)
    except ValueError:
        return path
    return path if relative.startswith("..") else relative


Stack = tuple[Frame, ...]  # innermost first, as py-spy and faulthandler list them


def py_spy() -> str | None:
    return shutil.which("py-spy")


def dump(pid: int, blocking: bool = False) -> Stack | None:
    """The main thread's stack (None when it cannot be read: the process ended, say).

    Without `blocking`, py-spy reads the process's memory without pausing it (--nonblocking):
    what periodic samples use, so that sampling never stalls a rank. The stacks a verdict
    rests on are read with the process paused, so that they are consistent.
    """
    exe = py_spy()
    if exe is None:
        return None
    argv = [exe, "dump", "--pid", str(pid), "--json"] + ([] if blocking else ["--nonblocking"])
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=PY_SPY_TIMEOUT_S, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if done.returncode != 0:
        return None
    return parse_dump(done.stdout)


def parse_dump(text: str) -> Stack | None:
    """py-spy's JSON (a list of threads) -> the main thread's frames (None: none to read)."""
    try:
        threads = json.loads(text)
    except ValueError:
        return None
    if not threads:
        return None
    main = next((t for t in threads if t.get("thread_name") == "MainThread"), threads[0])
    frames = tuple(Frame(f["name"], f["filename"], int(f["line"])) for f in main.get("frames", []))
    return frames or None  # no frame (the interpreter starting or ending): nothing to compare


def user_frame(stack: Stack) -> Frame | None:
    """The innermost frame of the job's own code (not the standard library, not site-packages)."""
    return next((f for f in stack if not f.in_library), stack[0] if stack else None)


def collective_frame(stack: Stack) -> Frame | None:
    """The collective the job called and waits in: torch.distributed's own function (not the
    wrappers around it), else the outermost torch.distributed or autograd frame."""
    api = [f for f in stack if f.file.endswith("/torch/distributed/distributed_c10d.py")]
    if api:
        return api[-1]
    inside = [f for f in stack if f.in_collective]
    return inside[-1] if inside else None


def importing(stack: Stack) -> bool:
    """Inside an import: a process starting up, whose stack stands still while a library loads."""
    return any(f.file.startswith("<frozen importlib") for f in stack)


def in_collective(stack: Stack) -> bool:
    return collective_frame(stack) is not None


FAULTHANDLER_LINE = "  File "


def parse_faulthandler(text: str) -> Stack:
    """faulthandler's traceback of the thread the signal struck -> frames, innermost first.

    faulthandler lists every thread, newest first, and marks the one the signal struck
    'Current thread': under watch the newest is the agent's own (agent.py), so the first listed
    is the wrong one. When the struck thread ran no Python (a native thread of torch's), the
    main thread's (listed last) says where the program was.
    """
    threads: list[tuple[bool, list[Frame]]] = []
    for line in text.splitlines():
        if line.startswith(("Current thread", "Thread ")):
            threads.append((line.startswith("Current thread"), []))
        elif threads and line.startswith(FAULTHANDLER_LINE) and '", line ' in line:
            file, _, rest = line[len(FAULTHANDLER_LINE) + 1 :].partition('", line ')
            number, _, function = rest.partition(" in ")
            if number.strip().isdigit():
                threads[-1][1].append(Frame(function.strip(), file, int(number)))
    struck = next((frames for current, frames in threads if current), [])
    return tuple(struck or (threads[-1][1] if threads else []))
