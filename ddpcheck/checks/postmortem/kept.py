"""What `ddpcheck watch` kept of each process of the job (`DIR/processes/PID.*`), read and judged.

Read with the failure side's reader (failure/exits.py), the one watch itself uses. A process's
`.start` record says its rank (none: a launcher such as torchrun); a directory kept before the
agent wrote them has none, and its processes are then "a process of the job" by pid, unless the
launcher's failure summary (in its exception record) maps the pid to a rank.

The judgement (the ends read by failure/crashes.py, as watch reads them) never passes a job that
did not end by itself:
- a rank that raised (not because a peer was gone), died of a fatal signal, or ended without any
  record (no exception, no faulthandler trace, no exit mark: SIGKILL, the OOM killer) failed;
- a rank ended by SIGTERM (faulthandler's trace says where it was) was ended from outside: after
  another rank's failure it is a casualty; with no failure at all, the job was ended while it ran
  (watch on a hang, a time limit), and the ranks outside any collective while others wait in one
  are named, else every rank so ended.
"""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass, field

import psutil

from ddpcheck.failure.crashes import collateral, judge_ends, torn_down
from ddpcheck.failure.error_texts import SOURCE_PLACE
from ddpcheck.failure.exits import (
    PROCESSES,
    Exit,
    ExitKind,
    Start,
    exit_of,
    first_sentence,
    is_record,
    last_record_time,
    recorded_pids,
    start_of,
)
from ddpcheck.failure.hangs import call_at, frame_where
from ddpcheck.failure.launchers import launcher_exit_codes, torchrun_summary
from ddpcheck.failure.stacks import collective_frame
from ddpcheck.report.model import Check, Status, Table
from ddpcheck.report.naming import span

NAME = "the ranks ended by themselves"
NO_TRACE = "ended without a trace (killed, e.g. SIGKILL, or the OOM killer)"
_ELASTIC = "torch/distributed/elastic/"  # torchrun's agent: a launcher's traceback runs through it
_START_SLACK_S = 2.0  # a live pid started this much after the record is another process (pid reused)

PROCESSES_COLUMNS = {"rank": "rank", "host": "host", "pid": "pid", "ended": "how it ended", "where": "where"}


@dataclass(frozen=True)
class Kept:
    """One process's records."""

    pid: int
    start: Start | None
    exit: Exit
    rank: int | None  # from its start record, or the launcher's summary
    alive: bool = False  # still running (the job was kept running, or is still ending)

    @property
    def host(self) -> str:
        return self.start.host if self.start is not None else ""

    @property
    def launcher(self) -> bool:
        """A launcher's process (torchrun's): its start record has no rank, or (a directory kept before
        start records) its exception came from torch's elastic agent."""
        if self.start is not None:
            return self.start.rank is None
        return self.rank is None and _ELASTIC in self.exit.traceback

    @property
    def signalled(self) -> bool:
        return torn_down(self.exit)

    def who(self) -> str:
        host = f"host {self.host}, " if self.host else ""
        if self.rank is not None:
            return f"rank {self.rank} ({host}pid {self.pid})"
        program = _program(self.start.argv) if self.start is not None and self.start.argv else ""
        return f"a process of the job ({host}pid {self.pid}{': ' + program if program else ''})"


@dataclass
class KeptRecords:
    processes: list[Kept] = field(default_factory=list)

    def ranks(self) -> dict[int, Kept]:
        """Each rank's own process: the topmost carrying the rank (its data-loader workers carry it too)."""
        by_rank: dict[int, list[Kept]] = {}
        for kept in self.processes:
            if kept.rank is not None:
                by_rank.setdefault(kept.rank, []).append(kept)
        chosen = {}
        for rank, group in by_rank.items():
            pids = {k.pid for k in group}
            top = [k for k in group if k.start is None or k.start.ppid not in pids]
            chosen[rank] = min(top or group, key=lambda k: (k.start.time if k.start else 0.0, k.pid))
        return dict(sorted(chosen.items()))

    def hosts(self) -> dict[int, str]:
        return {rank: k.host for rank, k in self.ranks().items() if k.host}


def _program(argv: tuple[str, ...]) -> str:
    """'torchrun', 'python -m torch.distributed.run', 'python train.py': the command, short."""
    words = [os.path.basename(argv[0])]  # who() says it only of a process whose argv it has
    if argv[1:2] == ("-m",) and len(argv) > 2:
        words += argv[1:3]
    elif len(argv) > 1:
        words.append(os.path.basename(argv[1]))
    return " ".join(words)


def find_records(directory: str | os.PathLike[str]) -> KeptRecords:
    """Every watch directory under `directory` (a `processes/` folder of records), its processes read."""
    found = KeptRecords()
    for root, dirs, files in os.walk(directory):
        dirs.sort()
        if os.path.basename(root) != PROCESSES or not any(is_record(n) for n in files):
            continue
        found.processes += _read(os.path.dirname(root))
    return found


def _read(watch_dir: str) -> list[Kept]:
    pids = recorded_pids(watch_dir)
    starts = {pid: start_of(watch_dir, pid) for pid in pids}
    first = {pid: exit_of(watch_dir, pid, last_record_time(watch_dir, pid), None) for pid in pids}
    # The launcher's failure summary, in its own exception record: each failed rank's exit code, and
    # (torchrun) its pid, which gives old directories without start records their ranks.
    said = "\n".join(e.exception for e in first.values() if e.kind is ExitKind.EXCEPTION)
    codes = launcher_exit_codes(said)
    by_pid = {e.pid: e.rank for e in torchrun_summary(said) if e.pid is not None}
    found = []
    for pid in pids:
        start = starts[pid]
        rank = start.rank if start is not None else by_pid.get(pid)
        if start is None and rank is None and len(pids) == 1:
            rank = 0  # one process and no launcher: a plain `python train.py`, rank 0 as watch has it
        code = codes.get(rank) if rank is not None else None
        ended = (
            first[pid] if code is None else exit_of(watch_dir, pid, last_record_time(watch_dir, pid), code)
        )
        found.append(Kept(pid, start, ended, rank, _alive(pid, start)))
    return found


def _alive(pid: int, start: Start | None) -> bool:
    """Still running here: the same process (started by the record's time), not a reuse of its pid."""
    if start is None or (start.host and start.host != socket.gethostname()):
        return False
    try:
        process = psutil.Process(pid)
        return (
            process.status() != psutil.STATUS_ZOMBIE and process.create_time() <= start.time + _START_SLACK_S
        )
    except psutil.Error:
        return False


# ---------------------------------------------------------------- the judgement
def judge_records(kept: KeptRecords) -> tuple[list[Check], Table | None]:
    """How the job's processes ended: the check (its culprits in `ranks`) and a table of them."""
    ranks = kept.ranks()
    # The ranks; without any known, the job's other processes; the launcher alone only when it is all.
    unranked = sorted((k for k in kept.processes if not k.launcher), key=lambda k: k.pid)
    judged = list(ranks.values()) or unranked or sorted(kept.processes, key=lambda k: k.pid)
    if not judged:
        return [], None
    alive = [k for k in judged if k.alive]
    ended = [k for k in judged if not k.alive]
    # A traceless end's time is its records' last write, not its end: it comes after the ends timed.
    failed = judge_ends(
        ended, lambda k: k.exit, lambda k: (k.exit.kind is ExitKind.ENDED, k.exit.time)
    ).failed
    signalled = [k for k in ended if k.signalled]
    parts: list[str] = []
    if failed:
        named = failed
        for i, k in enumerate(failed):
            lead = " failed first:" if i == 0 and len(failed) > 1 else ":"
            parts.append(f"{k.who()}{lead} {_ended(k)}")
        parts += [f"{k.who()}: {_ended(k)} (a peer had gone first)" for k in ended if collateral(k.exit)]
        if signalled:
            parts.append(f"{_names(signalled)} ended by SIGTERM after it (the job torn down)")
    elif signalled:
        named = _stuck(signalled)
        waiting = [k for k in signalled if k not in named]
        parts += _alike(named)
        if waiting:
            calls = sorted({call_at(k.exit.stack) for k in waiting})
            verb = "was" if len(waiting) == 1 else "were"
            parts.append(f"{_names(waiting)} {verb} waiting in {', '.join(calls)}, ended by SIGTERM too")
        parts.append(
            "the job did not end by itself: it was ended from outside (watch on a hang, a time limit, kill)"
        )
    else:
        named = []
    if alive:
        parts.append(f"{_names(alive)} still running")
    table = _table(judged, {k.pid for k in named})
    if not parts:
        count = len(judged)
        what = f"every rank ({count})" if ranks else f"every process of the job ({count})"
        return [Check(NAME, Status.PASS, f"{what} exited normally")], table
    status = Status.ERROR if named else Status.WARN
    culprits = sorted(k.rank for k in named if k.rank is not None)
    where = list(dict.fromkeys(k.host for k in named if k.host))
    return [Check(NAME, status, "; ".join(parts), ranks=culprits, hosts=where)], table


def _alike(kept: list[Kept]) -> list[str]:
    """'ranks 0, 1 (host vm, pids 41, 42) ended by SIGTERM while in load_batch (train.py:40)': the
    processes that ended alike, said once."""
    by_words: dict[str, list[Kept]] = {}
    for k in kept:
        by_words.setdefault(_ended(k), []).append(k)
    said = []
    for words, group in by_words.items():
        if len(group) == 1 or any(k.rank is None for k in group):
            said += [f"{k.who()} {words}" for k in group]
            continue
        hosts = list(dict.fromkeys(k.host for k in group if k.host))
        where = f"host{'s' if len(hosts) > 1 else ''} {', '.join(hosts)}, " if hosts else ""
        pids = ", ".join(str(k.pid) for k in group)
        said.append(
            f"{span(sorted(k.rank for k in group if k.rank is not None))} ({where}pids {pids}) {words}"
        )
    return said


def _stuck(signalled: list[Kept]) -> list[Kept]:
    """Of the ranks ended from outside, the ones that held the others up: outside any collective while
    some wait in one (a rank asleep in its data loading); else every one of them."""
    outside = [k for k in signalled if not collective_frame(k.exit.stack)]
    inside = [k for k in signalled if collective_frame(k.exit.stack)]
    return outside if outside and inside else signalled


def _ended(k: Kept) -> str:
    """How one process ended, with where it was."""
    where = frame_where(k.exit.stack)
    at = f" ({where})" if where else ""
    if k.signalled:
        if k.exit.kind is ExitKind.TERMINATED:
            return f"ended by SIGTERM while in {where}" if where else "ended by SIGTERM (no Python stack)"
        return f"ended by a signal: {first_sentence(k.exit.exception)}{', in ' + where if where else ''}"
    if k.exit.kind is ExitKind.EXCEPTION:
        return f"{_message(k.exit.exception)}{', in ' + where if where else ''}"
    if k.exit.kind is ExitKind.FATAL:
        return f"{first_sentence(k.exit.describe())}{', in ' + where if where else ''}"
    if k.exit.kind is ExitKind.ENDED:
        return k.exit.describe() + at if k.exit.code is not None else NO_TRACE
    return k.exit.describe()


def _short(k: Kept) -> str:
    """How it ended, for the table (where it was has a column of its own)."""
    if k.alive:
        return "still running"
    if k.signalled:
        return "ended by SIGTERM" if k.exit.kind is ExitKind.TERMINATED else first_sentence(k.exit.exception)
    if k.exit.kind is ExitKind.EXCEPTION:
        return _message(k.exit.exception)
    if k.exit.kind is ExitKind.ENDED and k.exit.code is None:
        return "ended without a trace"
    return first_sentence(k.exit.describe())


def _message(exception: str) -> str:
    """An exception said short: gloo's source place dropped, its first sentence."""
    return first_sentence(SOURCE_PLACE.sub("", exception))


def _names(kept: list[Kept]) -> str:
    ranks = sorted(k.rank for k in kept if k.rank is not None)
    said = [span(ranks)] if ranks else []
    return ", ".join(said + [f"process {k.pid}" for k in kept if k.rank is None])


def _table(judged: list[Kept], named: set[int]) -> Table:
    rows = []
    for k in sorted(judged, key=lambda k: (k.rank is None, k.rank or 0, k.pid)):
        words = _short(k)
        rows.append({
            "rank": k.rank if k.rank is not None else "-",
            "host": k.host,
            "pid": k.pid,
            "ended": words if len(words) <= 60 else words[:57] + "...",
            "where": frame_where(k.exit.stack),
            "named": k.pid in named,
            # The whole of what the short words cut (torch's out-of-memory message), for the JSON.
            "exception": k.exit.exception or k.exit.fatal,
            "traceback": k.exit.traceback,
        })  # fmt: skip
    return Table("processes", "How each process of the job ended (watch's records)", PROCESSES_COLUMNS, rows)
