"""A process's Python stack, read from outside with py-spy; and what a stack says about where it is.

One reader for ddpcheck's own ranks (the launcher's monitor, before a stall's kill) and for the
ranks of a watched or attached job, with one bound.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import sysconfig
import time
from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from typing import TypeVar

from ddpcheck.failure.processes import output_within, started

Key = TypeVar("Key", bound=Hashable)

# Frames in these files mean "waiting for the other ranks": torch.distributed's calls, and the
# autograd engine, where DDP's gradient all_reduce is waited for at the end of backward().
_COLLECTIVE_PARTS = ("/torch/distributed/", "/torch/nn/parallel/distributed.py", "/torch/autograd/")
_TORCH_FILE = re.compile(r"[/\\]torch[/\\]")
_LIBRARY_ROOTS = tuple(
    {os.path.realpath(sysconfig.get_paths()[key]) for key in ("stdlib", "purelib", "platlib")}
)
# One round of py-spy dumps, every process asked at once: what has not answered by then is left unread.
PY_SPY_TIMEOUT_S = 10.0


@dataclass(frozen=True)
class Frame:
    """One frame of a Python stack: from py-spy, faulthandler, a traceback or a flight-recorder dump."""

    function: str
    file: str
    line: int

    def __str__(self) -> str:
        return f"{os.path.basename(self.file)}:{self.line} in {self.function}"

    @property
    def where(self) -> str:
        return f"{self.function} ({shown_path(self.file)}:{self.line})"

    @property
    def in_collective(self) -> bool:
        return any(part in self.file for part in _COLLECTIVE_PARTS)

    @property
    def in_torch(self) -> bool:
        return bool(_TORCH_FILE.search(self.file))

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


def py_spy_dumps(
    pids: dict[Key, int],
    *,
    timeout: float = PY_SPY_TIMEOUT_S,
    as_json: bool = False,
    blocking: bool = True,
    with_locals: bool = False,
) -> dict[Key, str]:
    """key -> py-spy's dump of each process, all taken at once and together bounded by `timeout`.

    A process py-spy could not read (gone, no ptrace, too slow) is left out; nothing at all
    without py-spy. Without `blocking`, py-spy reads the memory without pausing the process.
    """
    exe = py_spy()
    if exe is None or not pids:
        return {}
    options = (["--json"] if as_json else []) + ([] if blocking else ["--nonblocking"])
    options += ["--locals"] if with_locals else []
    running = {}
    for key, pid in pids.items():
        with contextlib.suppress(OSError):
            running[key] = started([exe, "dump", "--pid", str(pid), *options])
    deadline = time.monotonic() + timeout
    dumps = {}
    for key, proc in running.items():
        out = output_within(proc, max(0.1, deadline - time.monotonic()))
        if out is not None and proc.returncode == 0 and out.strip():
            dumps[key] = out.strip()
    return dumps


def stacks_of(pids: dict[Key, int], *, blocking: bool = False) -> dict[Key, Stack]:
    """key -> the main thread's stack of each process that could be read (one that ended cannot).

    Periodic samples read without pausing the process, so that sampling never stalls a rank;
    the stacks a verdict rests on are read with it paused, so that they are consistent.
    """
    texts = py_spy_dumps(pids, as_json=True, blocking=blocking)
    return {key: stack for key, text in texts.items() if (stack := parse_dump(text))}


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


def user_frame(stack: Sequence[Frame], *, outside_torch: bool = False) -> Frame | None:
    """The innermost frame of the job's own code: outside the standard library and site-packages
    (the innermost frame when every one is library code), or with `outside_torch` only outside
    torch (None when every frame is torch's: a flight recorder's frames are torch's and the job's)."""
    if outside_torch:
        return next((f for f in stack if not f.in_torch), None)
    return next((f for f in stack if not f.in_library), stack[0] if stack else None)


def collective_frame(stack: Stack) -> Frame | None:
    """The collective the job called and waits in: torch.distributed's own function (not the
    wrappers around it), else the outermost torch.distributed or autograd frame."""
    outward = stack[::-1]  # the outermost frame first
    api = next((f for f in outward if f.file.endswith("/torch/distributed/distributed_c10d.py")), None)
    return api or next((f for f in outward if f.in_collective), None)


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
