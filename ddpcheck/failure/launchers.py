"""What a launcher said of each rank's end: torchrun's failure summary, mpirun's and srun's lines."""

from __future__ import annotations

import re
import signal
from dataclasses import dataclass

# torchrun's failure summary: per failed rank "host : H", "rank : R (local_rank: L)", "exitcode : C ...".
_SUMMARY_FIELD = re.compile(r"^\s*(?P<key>host|rank|exitcode)\s+:\s*(?P<value>.*)$")
_ROOT_CAUSE = "Root Cause (first observed failure):"
_SIGNAL_NAME = re.compile(r"\((SIG\w+)\)")
_PID = re.compile(r"\(pid: (\d+)\)")
_MPIRUN_SIGNAL = re.compile(r"process rank (\d+) with PID \d+ on node \S+ exited on signal (\d+)")
_SRUN_SIGNAL = re.compile(r"srun: error: \S+: task (\d+): (Killed|Aborted|Segmentation fault|Terminated)")
_SRUN_NAMES = {"Killed": signal.SIGKILL, "Aborted": signal.SIGABRT, "Segmentation fault": signal.SIGSEGV,
               "Terminated": signal.SIGTERM}  # fmt: skip


@dataclass(frozen=True)
class SummaryExit:
    """One failed rank in torchrun's failure summary."""

    rank: int
    host: str | None
    code: str  # as torchrun wrote it: "-6", "1", "<N/A>"
    signal: str | None  # "SIGABRT", when torchrun named one
    root_cause: bool  # listed under "Root Cause (first observed failure)"
    pid: int | None  # "exitcode : -9 (pid: 4242)": the rank's process


def torchrun_summary(text: str) -> list[SummaryExit]:
    """Every failed rank torchrun's failure summary lists, in its order."""
    found: list[SummaryExit] = []
    host: str | None = None
    rank: int | None = None
    root = False
    for line in text.splitlines():
        if line.strip() == _ROOT_CAUSE:
            root = True
            continue
        match = _SUMMARY_FIELD.match(line)
        if not match:
            continue
        key, value = match["key"], match["value"].strip()
        if key == "host":
            host = value
        elif key == "rank":
            rank = int(value.split()[0]) if value.split() and value.split()[0].isdigit() else None
        elif rank is not None:
            said, pid = _SIGNAL_NAME.search(value), _PID.search(value)
            code = value.split()[0] if value.split() else "?"
            signal_name, process = (said[1] if said else None), (int(pid[1]) if pid else None)
            found.append(SummaryExit(rank, host, code, signal_name, root, process))
            rank = None
    return found


def launcher_exit_codes(output: str) -> dict[int, int]:
    """What torchrun's failure summary, mpirun or srun said of each rank's end (negative: a signal)."""
    codes = {e.rank: int(e.code) for e in torchrun_summary(output) if re.fullmatch(r"-?\d+", e.code)}
    codes.update({int(rank): -int(number) for rank, number in _MPIRUN_SIGNAL.findall(output)})
    codes.update({int(rank): -int(_SRUN_NAMES[name]) for rank, name in _SRUN_SIGNAL.findall(output)})
    return codes
