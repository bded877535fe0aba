"""What else a dead job left: torchrun's error files and log directories, Slurm's output files,
NCCL's debug files. Pure parsers over text (and the few file reads that find it).

- torchrun's error file (`error.json` in `--log-dir`'s `attempt_N/<local rank>/`, written by a
  rank whose entry point is decorated with `@record`): the exception's message and a time in
  seconds (its traceback is not read); the earliest is the first rank that failed *as it saw it*.
- per-rank `stderr.log`/`stdout.log` (torchrun `--log-dir`, `-r 3`), Slurm's `slurm-*.out`,
  any `*.log`, `*.out`, `*.err`, `*.txt`: "Fatal Python error" (faulthandler), the last line of a
  Python traceback, gloo's "Received data size doesn't match expected size", NCCL's `NCCL WARN`
  lines and NCCL's watchdog timeout. The rank is the file's place (`attempt_N/<rank>/`), or the
  line's prefix: torch's `[rank3]:`, srun `--label`'s `3: `; NCCL's lines start `host:pid:tid`.

A gloo collective mismatch aborts the rank that RECEIVES the wrong size, not the one that
called the collective wrongly; and a rank whose peer died fails with "Connection reset/closed
by peer": both are casualties, marked as such, never the culprit.
"""

from __future__ import annotations

import json
import os
import re
import time
from dataclasses import dataclass, field

from ddpcheck.failure.error_texts import (
    FATAL_PYTHON_ERROR,
    GLOO_SIZE_MISMATCH,
    GLOO_TIMEOUT,
    LOGGED_PEER_DIED,
    NCCL_WARN,
    NCCL_WATCHDOG_TIMEOUT,
    SOURCE_PLACE,
)
from ddpcheck.failure.launchers import torchrun_summary
from ddpcheck.report.model import Check, Status
from ddpcheck.report.naming import counted, hosts_known, span

LOG_SUFFIXES = (".log", ".out", ".err", ".txt")
_TAIL_BYTES = 4 * 1024 * 1024  # a log's last 4 MiB: where a dead job's last words are

# What a line can say, by kind; the first that matches is the line's kind.
_KINDS = (
    ("gloo_mismatch", GLOO_SIZE_MISMATCH),
    ("watchdog_timeout", NCCL_WATCHDOG_TIMEOUT),
    ("fatal", FATAL_PYTHON_ERROR),
    ("nccl_warn", NCCL_WARN),
    ("gloo_timeout", GLOO_TIMEOUT),
)
_TRACEBACK_START = "Traceback (most recent call last):"
_EXCEPTION = re.compile(
    r"^(?P<type>[A-Za-z_][\w.]*(?:Error|Exception|Interrupt|Failure|Exit)): (?P<what>.*)$"
)
_TORCH_PREFIX = re.compile(r"^\[rank(?P<rank>\d+)\]:\s?")
_SRUN_LABEL = re.compile(r"^\s*(?P<rank>\d+): ")
_NCCL_PREFIX = re.compile(r"^(?P<host>[\w.\-]+):(?P<pid>\d+):(?P<tid>\d+) ")
_MISMATCH_BYTES = re.compile(r"(?P<got>\d+) vs (?P<expected>\d+)\. Received data size")
_WATCHDOG_RANK = re.compile(r"\[Rank (?P<rank>\d+)\]")


@dataclass(frozen=True)
class LogFinding:
    """One line that says something about how the job ended."""

    # fatal, exception, gloo_mismatch, gloo_timeout, nccl_warn, watchdog_timeout; rank_exit and
    # root_cause: a line of torchrun's failure summary ("exitcode -6 (SIGABRT)")
    kind: str
    text: str  # the line, without its rank prefix
    rank: int | None = None
    host: str | None = None

    @property
    def peer_died(self) -> bool:
        """A casualty: this rank failed because another rank had died."""
        return self.kind in ("exception", "gloo_timeout") and bool(LOGGED_PEER_DIED.search(self.text))

    def mismatch_bytes(self) -> tuple[int, int] | None:
        """gloo's (received, expected) bytes of a collective mismatch."""
        found = _MISMATCH_BYTES.search(self.text)
        return (int(found["got"]), int(found["expected"])) if found else None


@dataclass(frozen=True)
class ErrorFile:
    """A torchrun error file: what one rank raised, and when."""

    rank: int | None
    message: str
    timestamp: float | None = None  # seconds since the epoch


@dataclass
class FoundLogs:
    errors: list[ErrorFile] = field(default_factory=list)
    findings: list[LogFinding] = field(default_factory=list)
    files: list[str] = field(default_factory=list)  # every file read
    skipped: list[tuple[str, str]] = field(default_factory=list)  # (path, why)
    ranks_seen: set[int] = field(default_factory=set)  # ranks that have a log directory or file
    # The files that are a job's (not any text file): error files, torchrun's log directories,
    # Slurm's output, and logs with a rank's prefix, a traceback, NCCL's lines or a finding.
    traced: list[str] = field(default_factory=list)


def rank_of_folder(folder: str) -> int | None:
    """torchrun's `--log-dir` keeps each rank's files in `attempt_N/<local rank>/`: that number."""
    folder = os.path.normpath(folder)  # the folder asked for may end in a slash
    name, parent = os.path.basename(folder), os.path.basename(os.path.dirname(folder))
    return int(name) if name.isdigit() and parent.startswith("attempt_") else None


def parse_error_file(text: str, *, rank: int | None = None) -> ErrorFile:
    """torchrun's error.json ({"message": {"message", "extraInfo": {"timestamp", ...}}},
    or {"message": "..."} for an error torch wrote itself). Raises ValueError."""
    data = json.loads(text)
    if not isinstance(data, dict) or "message" not in data:
        raise ValueError("not a torchrun error file (no 'message')")
    message = data["message"]
    if isinstance(message, dict):
        stamp = (message.get("extraInfo") or {}).get("timestamp")
        when = float(stamp) if stamp not in (None, "") else None
        return ErrorFile(rank, str(message.get("message", "")).strip(), when)
    return ErrorFile(rank, str(message).strip())


def earliest_error(errors: list[ErrorFile]) -> ErrorFile | None:
    """The earliest error file by its time (those without one come last)."""
    return min(errors, key=lambda e: (e.timestamp is None, e.timestamp or 0.0, e.rank or 0), default=None)


def scan_text(text: str, *, rank: int | None = None) -> list[LogFinding]:
    """The lines of one log that say how the job ended. `rank`: the rank the file belongs to."""
    found: list[LogFinding] = summary_exits(text)
    in_traceback: set[int | None] = set()  # the ranks whose traceback is being read
    for raw in text.splitlines():
        line, line_rank, host = _unprefixed(raw.rstrip())
        line_rank = line_rank if line_rank is not None else rank
        if line.startswith(_TRACEBACK_START):
            in_traceback.add(line_rank)
            continue
        kind = next((name for name, pattern in _KINDS if pattern.search(line)), None)
        if kind == "watchdog_timeout" and line_rank is None:
            said = _WATCHDOG_RANK.search(line)
            line_rank = int(said["rank"]) if said else None
        if kind is None and line_rank in in_traceback and _EXCEPTION.match(line.strip()):
            kind = "exception"
            in_traceback.discard(line_rank)
        if kind is not None:
            found.append(LogFinding(kind, line.strip(), line_rank, host))
    return found


def summary_exits(text: str) -> list[LogFinding]:
    """torchrun's failure summary: how each failed rank ended, on which host; the root cause marked."""
    return [
        LogFinding(
            "root_cause" if e.root_cause else "rank_exit",
            f"exit code {e.code}" + (f" ({e.signal})" if e.signal else ""),
            e.rank,
            e.host,
        )
        for e in torchrun_summary(text)
    ]


def _unprefixed(line: str) -> tuple[str, int | None, str | None]:
    for pattern in (_TORCH_PREFIX, _SRUN_LABEL):
        match = pattern.match(line)
        if match:
            inner, _, host = _unprefixed(line[match.end() :])
            return inner, int(match["rank"]), host
    match = _NCCL_PREFIX.match(line)
    if match and "NCCL" in line:
        return line[match.end() :], None, match["host"]
    return line, None, None


def find_logs(directory: str | os.PathLike[str]) -> FoundLogs:
    """Every error file and log under `directory`, read and scanned."""
    found = FoundLogs()
    for root, dirs, files in os.walk(directory):
        dirs.sort()
        rank = rank_of_folder(root)
        if rank is not None:
            found.ranks_seen.add(rank)
        for name in sorted(files):
            path = os.path.join(root, name)
            if name == "error.json":
                try:
                    with open(path, encoding="utf-8", errors="replace") as stream:
                        found.errors.append(parse_error_file(stream.read(), rank=rank))
                    found.files.append(path)
                    found.traced.append(path)
                except (OSError, ValueError) as exc:
                    found.skipped.append((path, f"unreadable torchrun error file: {exc}"))
            elif name.endswith(LOG_SUFFIXES) or name in ("stderr", "stdout"):
                try:
                    text = _tail(path)
                except OSError as exc:
                    found.skipped.append((path, f"unreadable: {exc.strerror or exc}"))
                    continue
                found.files.append(path)
                findings = scan_text(text, rank=rank)
                found.findings += findings
                if findings or rank is not None or is_job_log(path, text):
                    found.traced.append(path)
    return found


def is_job_log(path: str, text: str) -> bool:
    """A log a job wrote, not any text file, outside torchrun's `attempt_N/<rank>/`: its name
    (Slurm's `slurm-*.out`) or its lines (a rank's prefix, a Python traceback, NCCL's)."""
    if os.path.basename(path).startswith("slurm-"):
        return True
    if _TRACEBACK_START in text:
        return True
    return any(
        _TORCH_PREFIX.match(line) or (_NCCL_PREFIX.match(line) and "NCCL" in line)
        for line in text.splitlines()
    )


def _tail(path: str) -> str:
    with open(path, "rb") as stream:
        stream.seek(0, os.SEEK_END)
        size = stream.tell()
        stream.seek(max(0, size - _TAIL_BYTES))
        return stream.read().decode("utf-8", errors="replace")


# How telling each kind of line is about how a rank ended: the first found names the rank's end.
_TELLING = (
    "watchdog_timeout",
    "gloo_mismatch",
    "fatal",
    "exception",
    "gloo_timeout",
    "root_cause",
    "rank_exit",
)


def judge_logs(found: FoundLogs, mismatch_culprits: list[int] | None = None) -> list[Check]:
    """Checks from what the logs say: how each rank ended (culprits apart from casualties), a gloo
    collective mismatch (never blaming the rank gloo aborted), NCCL's warnings.

    `mismatch_culprits`: the ranks the flight-recorder dumps show calling another collective.
    """
    if not found.files:
        return []
    checks: list[Check] = []
    hosts = {f.rank: f.host for f in found.findings if f.rank is not None and f.host}
    receivers = sorted({f.rank for f in found.findings if f.kind == "gloo_mismatch" and f.rank is not None})
    mismatches = [f for f in found.findings if f.kind == "gloo_mismatch"]
    if mismatches:
        sizes = mismatches[0].mismatch_bytes()
        got = f" ({sizes[0]} bytes arrived where {sizes[1]} were expected)" if sizes else ""
        who = (
            f"the flight-recorder dumps name {span(mismatch_culprits)}"
            if mismatch_culprits
            else "flight-recorder dumps (TORCH_FR_BUFFER_SIZE) would say which"
        )
        aborted = span(receivers) if receivers else "a rank"
        detail = (
            f"{aborted} aborted on gloo's 'Received data size doesn't match expected size'{got}: "
            "a collective mismatch. gloo aborts the rank that RECEIVES the wrong size, not the "
            f"one that called the collective wrongly: {who}"
        )
        name = "no collective mismatch in the logs"
        named = list(mismatch_culprits or [])
        checks.append(Check(name, Status.FAIL, detail, ranks=named, hosts=hosts_known(named, hosts)))
    checks.append(_ends(found, receivers, hosts))
    warnings = [f for f in found.findings if f.kind == "nccl_warn"]
    if warnings:
        warned = sorted({f.rank for f in warnings if f.rank is not None})
        where = sorted({f.host for f in warnings if f.host})
        on = f" on {', '.join(where)}" if where else ""
        detail = f"{counted(len(warnings), 'NCCL WARN line')}{on}, the first: {warnings[0].text}"
        checks.append(Check("no NCCL warnings", Status.WARN, detail, ranks=warned, hosts=where))
    return checks


ENDS_NAME = "the ranks ran to the end"


def _ends(found: FoundLogs, receivers: list[int], hosts: dict[int, str]) -> Check:
    by_rank: dict[int, list[LogFinding]] = {}
    for finding in found.findings:
        if finding.rank is not None and finding.kind in _TELLING:
            by_rank.setdefault(finding.rank, []).append(finding)
    for error in found.errors:
        if error.rank is not None and error.rank not in by_rank:
            by_rank[error.rank] = [LogFinding("exception", error.message, error.rank)]
    if not by_rank:
        unranked = [f for f in found.findings if f.kind in _TELLING]
        if unranked:
            return Check(ENDS_NAME, Status.ERROR, f"the job's output ends with: {unranked[-1].text}")
        return Check(ENDS_NAME, Status.PASS, f"no rank failed in the {len(found.files)} log files read")
    causes: list[int] = []
    parts: list[str] = []
    for rank in sorted(by_rank):
        telling = min(by_rank[rank], key=lambda f: _TELLING.index(f.kind))
        casualty = ""
        if rank in receivers:
            casualty = " (aborted by gloo on receiving the wrong size: not the culprit)"
        elif telling.peer_died:
            casualty = " (a peer had died first)"
        elif telling.kind in ("rank_exit", "root_cause") and "SIGTERM" in telling.text:
            casualty = " (ended by its launcher)"
        else:
            causes.append(rank)
        parts.append(f"rank {rank}: {_said(telling)}{casualty}")
    first = earliest_error(found.errors)
    if first is not None and first.rank is not None and first.timestamp is not None:
        when = time.strftime("%H:%M:%S UTC", time.gmtime(first.timestamp))
        parts.append(f"first error file: rank {first.rank}'s, at {when}")
    return Check(ENDS_NAME, Status.ERROR, "; ".join(parts), ranks=causes, hosts=hosts_known(causes, hosts))


def _said(finding: LogFinding, limit: int = 160) -> str:
    """A finding's line, short: gloo's source paths dropped, a mismatch said in words."""
    if finding.kind == "gloo_mismatch":
        sizes = finding.mismatch_bytes()
        return "aborted: gloo received a collective of another size" + (
            f" ({sizes[0]} bytes where {sizes[1]} were expected)" if sizes else ""
        )
    text = SOURCE_PLACE.sub("", finding.text)
    return text if len(text) <= limit else text[: limit - 3] + "..."
