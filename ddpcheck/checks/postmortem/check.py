"""`ddpcheck postmortem DIR`: what a dead job left, read and judged. Launches nothing.

`examine(directory, world_size=None)` is the whole of it, for callers that hold a directory
(`ddpcheck watch` after the job it watched has died); `run(options)` is the command's entry.
"""

from __future__ import annotations

import os
import time

from ddpcheck.checks.postmortem import PostmortemOptions
from ddpcheck.checks.postmortem.judge import judge
from ddpcheck.checks.postmortem.logs import FoundLogs, find_logs, judge_logs
from ddpcheck.errors import UsageError
from ddpcheck.failure.flight import FoundDumps, find_dumps
from ddpcheck.report.model import Check, Report, Status


class NothingToRead(UsageError):
    """The directory holds no dump, error file or log: one line, exit 2."""


def examine(directory: str | os.PathLike[str], world_size: int | None = None) -> Report:
    """The Report on one dead job's directory: its flight-recorder dumps and its logs judged together.

    Raises NothingToRead when the directory holds nothing readable, UsageError when it is no directory.
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
    if not dumps.traces and not logs.files:
        skipped = (
            f" ({len(dumps.skipped)} unreadable dump{'s' if len(dumps.skipped) != 1 else ''})"
            if dumps.skipped
            else ""
        )
        raise NothingToRead(
            f"{directory}: nothing to read: no flight-recorder dump, torchrun error file or log{skipped}"
        )
    report = Report(command="postmortem")
    hosts = {f.rank: f.host for f in logs.findings if f.rank is not None and f.host}
    world = max([world_size or 0, *(r + 1 for r in logs.ranks_seen)])
    culprits: list[int] = []
    report.checks.append(_dumps_check(dumps))
    if dumps.traces:
        judgement = judge(dumps.traces, world or None, hosts)
        world = judgement.world_size
        report.checks += judgement.checks
        culprits = [r for c in judgement.checks if c.status is Status.FAIL for r in c.ranks]
        if judgement.table is not None:
            report.tables.append(judgement.table)
    report.checks += judge_logs(logs, culprits)
    backend = next((t.backend for t in dumps.traces.values() if t.backend), None)
    device = {"nccl": "cuda", "gloo": "cpu"}.get(backend or "", "unknown device")
    report.world = {"size": world or None, "backend": backend or "unknown backend", "device": device}
    report.notes += _notes(dumps, logs)
    report.options = {"directory": directory, "world_size": world_size}
    report.elapsed_s = time.monotonic() - began
    return report


def run(options: PostmortemOptions) -> Report:
    return examine(options.directory, options.world_size)


def _dumps_check(dumps: FoundDumps) -> Check:
    name = "flight-recorder dumps"
    if not dumps.traces:
        detail = "none found: set TORCH_FR_BUFFER_SIZE in the job (docs/postmortem.md says how to make them)"
        return Check(name, Status.SKIP, detail)
    ranks = sorted(dumps.traces)
    versions = sorted({t.version for t in dumps.traces.values()})
    detail = f"{len(ranks)} read (ranks {', '.join(map(str, ranks))}; format {', '.join(versions)})"
    if dumps.skipped:
        detail += f"; {len(dumps.skipped)} unreadable: " + "; ".join(
            f"{os.path.basename(s.path)}: {s.reason}" for s in dumps.skipped
        )
        return Check(name, Status.WARN, detail)
    return Check(name, Status.PASS, detail)


def _notes(dumps: FoundDumps, logs: FoundLogs) -> list[str]:
    notes = [f"read {len(dumps.traces)} flight-recorder dump(s) and {len(logs.files)} log or error file(s)"]
    notes += [f"could not read {path}: {why}" for path, why in logs.skipped]
    return notes
