"""`ddpcheck attach`: find the job's ranks, read them twice a short interval apart, and judge. Only reads.

A stopped rank is named at once. Otherwise a rank whose stack changed between samples means the
job makes progress (exit 0); none changed: the job is stuck, and the ranks that differ from their
peers are named as `watch` names them (failure/hangs.py), with what the flight recorders say.
"""

from __future__ import annotations

import contextlib
import os
import time

import psutil

from ddpcheck.checks.attach import AttachOptions, evidence, find, nodes
from ddpcheck.checks.attach.evidence import IO_PROGRESS_BYTES, SAMPLES, Seen
from ddpcheck.failure import processes, ras
from ddpcheck.failure.flight_judge import with_flight_recorders
from ddpcheck.failure.hangs import judge_hang, ranks_report
from ddpcheck.failure.processes import ProcState
from ddpcheck.report.model import Check, Report, Status
from ddpcheck.report.naming import span


def run(options: AttachOptions) -> Report:
    began = time.monotonic()
    job = find.from_all() if options.all else find.from_pid(options.pid)  # type: ignore[arg-type]
    seen = evidence.read(job, options.interval)
    missing: list[str] = []
    if options.dir is not None:
        count = options.nodes or nodes.node_count(os.environ)
        seen, missing = nodes.agree(seen, nodes.step_dir(options.dir, os.environ), count)
    if len(seen.gone) == len(seen.views):
        what = f"PID {options.pid}" if options.pid is not None else "--all"
        raise find.NoJob(f"{what}: the job ended while attach read it (every rank is gone)")
    report = judge(seen, options.interval)
    if missing:
        report.checks.append(Check("nodes", Status.WARN, f"no evidence from {', '.join(missing)} in time"))
    report.checks.append(ras_check(seen))
    report.checks.append(dumps_check(seen))
    report.notes += seen.notes
    if options.kill:
        report.notes.append(end(job))
    report.options = {"pid": options.pid, "all": options.all, "interval": options.interval,
                      "kill": options.kill, "dir": options.dir}  # fmt: skip
    report.elapsed_s = time.monotonic() - began
    return report


def judge(seen: Seen, interval: float) -> Report:
    views = seen.views
    live = [v for v in views if v.rank not in seen.gone]
    stopped = [v for v in live if ProcState.of_letter(v.state) is ProcState.STOPPED]
    moving = bool(live) and {v.rank for v in live} <= set(seen.moving)
    if (seen.changed or moving) and not stopped:
        how = (
            f"the stack of {span(seen.changed)} changed between {SAMPLES} samples over {interval:g} s"
            if seen.changed
            else f"every rank moved data (>= {IO_PROGRESS_BYTES // 1024} KiB) in {interval:g} s"
        )
        check = Check(
            "job",
            Status.PASS,
            f"making progress: {how}; {len(views)} rank{'s' if len(views) != 1 else ''}, none stopped",
        )
        report = ranks_report("attach", views, [check], [])
    else:
        why = (
            f"{SAMPLES} stack samples over {interval:g} s, none changed; how long before, attach cannot tell"
            if not stopped
            else "a stopped rank holds its peers"
        )
        report = judge_hang(live, interval, interval, command="attach", reason=why)
        hosts = {v.rank: v.host for v in views}
        report = with_flight_recorders(report, seen.traces, hosts, len(views))
        if len(live) < len(views):
            report.tables = ranks_report("attach", views, [], []).tables
    if seen.gone:
        gone = [v for v in views if v.rank in seen.gone]
        report.checks.append(
            Check(
                "ranks",
                Status.ERROR,
                "; ".join(
                    f"rank {v.rank} (host {v.host}, pid {v.pid}) ended while attach read it" for v in gone
                ),
                ranks=[v.rank for v in gone],
                hosts=list(dict.fromkeys(v.host for v in gone)),
            )
        )
    return report


def ras_check(seen: Seen) -> Check:
    """NCCL's own word on the job, beside ddpcheck's; it never decides the exit code."""
    name = "NCCL RAS"
    status = seen.ras
    if status is None:
        return Check(name, Status.SKIP, seen.ras_skipped or "not asked")
    if status.outcome == ras.Outcome.NO_SERVICE:
        return Check(name, Status.SKIP, status.verdict)
    if status.outcome == ras.Outcome.ANSWERED and status.healthy:
        return Check(name, Status.PASS, f"NCCL says: {status.verdict}")
    return Check(name, Status.WARN, f"NCCL says: {status.verdict}")


def dumps_check(seen: Seen) -> Check:
    name = "flight-recorder dumps"
    if not seen.traces:
        return Check(
            name,
            Status.SKIP,
            "none on disk (the job sets TORCH_FR_DUMP_TEMP_FILE / TORCH_NCCL_DEBUG_INFO_TEMP_FILE and "
            "TORCH_NCCL_DEBUG_INFO_PIPE_FILE for attach to get them: docs/attach.md)",
        )
    return Check(name, Status.PASS, f"read for {span(sorted(seen.traces))}")


def end(job: find.Job) -> str:
    """--kill: SIGTERM the launcher and every rank (a stopped one continued to take it), then SIGKILL."""
    procs: dict[int, psutil.Process] = {}  # by pid: a plain python is both the job's root and its rank 0
    for pid in [*job.roots, *(p.pid for p in job.ranks.values())]:
        with contextlib.suppress(psutil.Error):
            proc = psutil.Process(pid)
            if proc.name() != "slurmstepd":  # Slurm's own: srun notices its tasks end
                procs[pid] = proc
    left = processes.end(procs.values())
    killed = f", {len(left)} after SIGKILL" if left else ""
    return f"--kill: ended the job ({len(procs)} process(es) sent SIGTERM{killed})"
