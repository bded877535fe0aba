"""How each process of a watched job ended, from the records `watch`'s in-process agent keeps.

The agent (checks/watch/agent.py, standard library only: it cannot import this) writes, per
process, `DIR/processes/PID.KIND` (failure/process_records.py names them): `start` (JSON: rank,
local rank, host, pid, ppid, argv, time), `exception` (JSON: type, message, traceback, frames,
time), `fatal` and `term` (faulthandler's text; both opened empty at start), `exit` (JSON: time;
the interpreter ended normally). `watch` (while the job runs) and `postmortem` (after) read them
with the same `exit_of`.
"""

from __future__ import annotations

import json
import os
import re
import signal
from dataclasses import dataclass
from pathlib import Path

from ddpcheck.failure.error_texts import WATCHED_PEER_GONE
from ddpcheck.failure.process_records import KINDS, PROCESSES, process_file
from ddpcheck.failure.stacks import Frame, Stack, parse_faulthandler
from ddpcheck.failure.text_enum import TextEnum

_RECORD = re.compile(rf"^(?P<pid>\d+)\.(?P<kind>{'|'.join(KINDS)})$")
# A message's first sentence: up to a full stop followed by white space, or the first line.
_SENTENCE_END = re.compile(r"(?<=[^\s.])\.(?=\s)")
SHORT_MESSAGE = 120  # characters: a message up to this long is said whole
LONGEST_SENTENCE = 200  # a first sentence longer than this is cut


class ExitKind(TextEnum):
    EXCEPTION = "exception"
    FATAL = "fatal"  # a fatal signal: faulthandler's trace
    TERMINATED = "terminated"  # SIGTERM
    EXITED = "exited"  # the interpreter's normal end
    ENDED = "ended"  # none of these: SIGKILL, os._exit


@dataclass(frozen=True)
class Exit:
    """How a rank's process ended, as far as its records (and the watcher) can tell."""

    time: float  # wall clock (time.time()): ranks on several hosts are ordered by it
    kind: ExitKind  # given as its value too (a view read back from JSON)
    code: int | None = None  # the exit status when known (negative: the signal)
    exception: str = ""  # 'ValueError: planted failure'
    traceback: str = ""
    fatal: str = ""  # faulthandler's first line ('Fatal Python error: Aborted')
    stack: Stack = ()  # where it was: the exception's frames or faulthandler's, innermost first

    def __post_init__(self) -> None:
        object.__setattr__(self, "kind", ExitKind(self.kind))

    @property
    def secondary(self) -> bool:
        """Ended because of another rank: torn down by the launcher, or its peer's connection gone."""
        return self.kind in (ExitKind.TERMINATED, ExitKind.EXITED) or (
            self.kind is ExitKind.EXCEPTION and bool(WATCHED_PEER_GONE.search(self.exception))
        )

    def describe(self) -> str:
        if self.kind is ExitKind.EXCEPTION:
            return self.exception
        if self.kind is ExitKind.FATAL:
            return self.fatal or "a fatal signal"
        if self.kind is ExitKind.TERMINATED:
            return "ended by SIGTERM (the launcher tearing the job down)"
        if self.kind is ExitKind.EXITED:
            return "exited normally"
        if self.code is not None and self.code < 0:
            return f"killed by {signal_name(-self.code)}"
        if self.code is not None:
            return f"exited with code {self.code}, without a Python exception"
        return "ended without a Python exception or a fatal-error trace (SIGKILL, or os._exit)"


@dataclass(frozen=True)
class Start:
    """A process's start record: who it is in the job (its pid: the record's name)."""

    rank: int | None  # None: no rank variable (a launcher such as torchrun)
    host: str
    ppid: int | None
    argv: tuple[str, ...]
    time: float


def signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def first_sentence(message: str) -> str:
    """A long message said short: its first sentence (or first line). A short one-line one whole."""
    text = message.strip()
    if len(text) <= SHORT_MESSAGE and "\n" not in text:
        return text
    first = next((line.strip() for line in text.splitlines() if line.strip()), "")
    end = _SENTENCE_END.search(first)
    cut = first[: end.start()] if end else first  # without its full stop: the caller's words follow
    return cut if len(cut) <= LONGEST_SENTENCE else cut[: LONGEST_SENTENCE - 3].rstrip() + "..."


def recorded_pids(watch_dir: str | os.PathLike[str]) -> list[int]:
    """The pids that left any record under `watch_dir/processes/`."""
    try:
        names = os.listdir(os.path.join(os.fspath(watch_dir), PROCESSES))
    except OSError:
        return []
    return sorted({int(m["pid"]) for m in map(_RECORD.match, names) if m})


def is_record(name: str) -> bool:
    return _RECORD.match(name) is not None


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


def declared_rank(watch_dir: str | os.PathLike[str], pid: int) -> int | None:
    """The rank torch.distributed gave the process (its rank record), None before or without one."""
    text = _text(process_file(watch_dir, pid, "rank"))
    try:
        rank = json.loads(text)["rank"] if text else None
        return int(rank) if rank is not None else None
    except (ValueError, TypeError, KeyError):
        return None


def start_of(watch_dir: str | os.PathLike[str], pid: int) -> Start | None:
    """The process's start record, its rank the one torch.distributed gave it where its launcher gave
    none; None for a directory kept before the agent wrote them."""
    text = _text(process_file(watch_dir, pid, "start"))
    if not text:
        return None
    try:
        data = json.loads(text)
        rank = data.get("rank")
        if rank is None:
            rank = declared_rank(watch_dir, pid)
        return Start(
            int(rank) if rank is not None else None,
            str(data.get("host") or ""),
            int(data["ppid"]) if data.get("ppid") is not None else None,
            tuple(str(a) for a in data.get("argv") or ()),
            float(data.get("time") or 0.0),
        )
    except (ValueError, TypeError, KeyError):
        return None


def exit_of(watch_dir: str | os.PathLike[str], pid: int, seen_gone: float, code: int | None) -> Exit:
    """The Exit of process `pid`: its exception, fatal signal, SIGTERM, normal exit, or none of these.

    `seen_gone` is when the process was seen gone (the time of an end that left no record).
    """
    exception = _text(process_file(watch_dir, pid, "exception"))
    if exception:
        try:
            data = json.loads(exception)
            frames = tuple(Frame.from_dict(f) for f in reversed(data.get("frames", [])))
            return Exit(
                float(data["time"]),
                ExitKind.EXCEPTION,
                code,
                exception=f"{data['type']}: {data['message']}",
                traceback=str(data.get("traceback", "")),
                stack=frames,
            )
        except (ValueError, KeyError, TypeError):
            pass
    for name, kind in (("fatal", ExitKind.FATAL), ("term", ExitKind.TERMINATED)):  # faulthandler's traces
        path = process_file(watch_dir, pid, name)
        trace = _text(path)
        if trace.strip():
            # A fatal record's first line says which: 'Fatal Python error: Aborted'.
            first = next(line for line in trace.splitlines() if line.strip())
            return Exit(
                _mtime(path, seen_gone),
                kind,
                code,
                fatal=first if kind is ExitKind.FATAL else "",
                traceback=trace,
                stack=parse_faulthandler(trace),
            )
    exit_path = process_file(watch_dir, pid, "exit")
    if os.path.exists(exit_path) and (code is None or code == 0):
        return Exit(_mtime(exit_path, seen_gone), ExitKind.EXITED, code)
    return Exit(seen_gone, ExitKind.ENDED, code)


def last_record_time(watch_dir: str | os.PathLike[str], pid: int) -> float:
    """When the process last wrote a record (the files' newest mtime): a dead job's best 'seen gone'."""
    return max(_mtime(process_file(watch_dir, pid, kind), 0.0) for kind in KINDS)
