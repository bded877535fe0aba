"""`ddpcheck postmortem DIR`: what a dead job left, read and judged. Launches nothing.

`examine(directory, world_size=None)` is the whole of it, for callers that hold a directory
(`ddpcheck watch` after the job it watched has died); `run(options)` is the command's entry.
"""

from __future__ import annotations

import os
import time

from ddpcheck.checks.postmortem import PostmortemOptions
from ddpcheck.checks.postmortem.kept import KeptRecords, find_records, judge_records
from ddpcheck.checks.postmortem.logs import ENDS_NAME as LOGS_ENDS
from ddpcheck.checks.postmortem.logs import FoundLogs, find_logs, judge_logs
from ddpcheck.errors import UsageError
from ddpcheck.failure.flight import FoundDumps, find_dumps
from ddpcheck.failure.flight_judge import judge
from ddpcheck.report.model import Check, Report, Status
from ddpcheck.report.naming import counted


class NothingToRead(UsageError):
    """The directory holds no job's traces (no dump, watch record, error file, job log): one line, exit 2."""


def examine(directory: str | os.PathLike[str], world_size: int | None = None) -> Report:
    """The Report on one dead job's directory: its flight-recorder dumps, the records `watch` kept of
    its processes, and its logs, judged together.

    Raises NothingToRead when the directory holds no job's traces, UsageError when it is no directory.
    """
    began = time.monotonic()
    directory = os.fspath(directory)
    if not os.path.isdir(directory):
        raise UsageError(
            f"{directory}: "
            + ("is a file, not a directory" if os.path.exists(directory) else "no such directory")
        )
    dumps = find_dumps(directory)
    logs = find_logs(directory)
    kept = find_records(directory)
    if not dumps.traces and not logs.traced and not kept.processes:
        raise NothingToRead(_no_traces(directory, dumps, logs))
    report = Report(command="postmortem")
    hosts = {f.rank: f.host for f in logs.findings if f.rank is not None and f.host}
    hosts.update(kept.hosts())
    world = max([world_size or 0, *(r + 1 for r in logs.ranks_seen), *(r + 1 for r in kept.ranks())])
    culprits: list[int] = []
    report.checks.append(_dumps_check(dumps))
    # A dump that holds no collective says nothing of how far its rank got: "nothing recorded".
    if any(t.entries for t in dumps.traces.values()):
        judgement = judge(dumps.traces, world or None, hosts)
        world = judgement.world_size
        report.checks += judgement.checks
        culprits = [r for c in judgement.checks if c.status is Status.FAIL for r in c.ranks]
        if judgement.table is not None:
            report.tables.append(judgement.table)
    ended, table = judge_records(kept)
    report.checks += ended
    if table is not None:
        report.tables.append(table)
    logged = judge_logs(logs, culprits)
    if ended:  # how the ranks ended is the records' to say: the logs' all-clear would contradict them
        logged = [c for c in logged if not (c.name == LOGS_ENDS and c.status is Status.PASS)]
    report.checks += logged
    backend = next((t.backend for t in dumps.traces.values() if t.backend), None)
    device = {"nccl": "cuda", "gloo": "cpu"}.get(backend or "", "unknown device")
    report.world = {"size": world or None, "backend": backend or "unknown backend", "device": device}
    report.notes += _notes(dumps, logs, kept)
    report.options = {"directory": directory, "world_size": world_size}
    report.elapsed_s = time.monotonic() - began
    return report


def _no_traces(directory: str, dumps: FoundDumps, logs: FoundLogs) -> str:
    """The one line for a directory that holds no job's traces (exit 2)."""
    what = "no flight-recorder dump, watch record, torchrun error file or job log"
    if not logs.files:
        skipped = f" ({counted(len(dumps.skipped), 'unreadable dump')})" if dumps.skipped else ""
        return f"{directory}: no job's traces here: nothing to read ({what}){skipped}"
    return (
        f"{directory}: no job's traces here: {what}; the {counted(len(logs.files), 'text file')} "
        "read hold no rank's lines, traceback or NCCL line"
    )


def run(options: PostmortemOptions) -> Report:
    return examine(options.directory, options.world_size)


def _dumps_check(dumps: FoundDumps) -> Check:
    name = "flight-recorder dumps"
    if not dumps.traces:
        detail = "none found: set TORCH_FR_BUFFER_SIZE in the job (docs/postmortem.md says how to make them)"
        return Check(name, Status.SKIP, detail)
    ranks = sorted(dumps.traces)
    if not any(t.entries for t in dumps.traces.values()):
        detail = (
            f"nothing recorded: the {counted(len(ranks), 'dump')} (ranks "
            f"{', '.join(map(str, ranks))}) hold no collective: the recorder was off (TORCH_FR_BUFFER_SIZE "
            "unset or 0), the dump was of another backend's recorder, or no collective ran yet"
        )
        return Check(name, Status.SKIP, detail)
    versions = sorted({t.version for t in dumps.traces.values()})
    detail = f"{len(ranks)} read (ranks {', '.join(map(str, ranks))}; format {', '.join(versions)})"
    if dumps.skipped:
        detail += f"; {len(dumps.skipped)} unreadable: " + "; ".join(
            f"{os.path.basename(path)}: {why}" for path, why in dumps.skipped
        )
        return Check(name, Status.WARN, detail)
    return Check(name, Status.PASS, detail)


def _notes(dumps: FoundDumps, logs: FoundLogs, kept: KeptRecords) -> list[str]:
    notes = [
        f"read {len(dumps.traces)} flight-recorder dump(s), {len(logs.files)} log or error file(s) and "
        f"the records watch kept of {len(kept.processes)} process(es)"
    ]
    notes += [f"could not read {path}: {why}" for path, why in logs.skipped]
    return notes
