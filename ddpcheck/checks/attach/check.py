"""`ddpcheck attach`: find the job's ranks, sample their stacks over a short interval, and judge. Only reads.

A stopped rank is named at once. A rank of the job's world missing while the others stand still is
a crash (its peers wait for it). Otherwise a rank whose stack changed between samples means the job
makes progress (exit 0), and the rank its peers wait for, by the share of samples each waits in a
collective, is a straggler (WARN: failure/stragglers/sampled.py); none changed: the job is stuck,
and the ranks that differ from their peers are named as `watch` names them (failure/hangs.py),
with what the flight recorders say.
"""

from __future__ import annotations

import contextlib
import os
import time

import psutil

from ddpcheck.checks.attach import RAS_ANSWER, AttachOptions, evidence, find, nodes
from ddpcheck.checks.attach.evidence import IO_PROGRESS_BYTES, Seen
from ddpcheck.failure import processes, ras
from ddpcheck.failure.flight_judge import with_flight_recorders
from ddpcheck.failure.hangs import RankView, call_at, identity, judge_hang, ranks_report
from ddpcheck.failure.proc import ProcState
from ddpcheck.failure.rank_env import node_count
from ddpcheck.failure.stacks import Stack, in_collective
from ddpcheck.failure.stragglers import sampled
from ddpcheck.report.model import Check, Report, Status, Table
from ddpcheck.report.naming import counted, span


def run(options: AttachOptions) -> Report:
    began = time.monotonic()
    job = find.from_all() if options.all else find.from_pid(options.pid)  # type: ignore[arg-type]
    seen = evidence.read(job, options.interval)
    missing: list[str] = []
    if options.dir is not None:
        count = options.nodes or node_count(os.environ)
        seen, missing = nodes.agree(seen, nodes.step_dir(options.dir, os.environ), count)
        if missing:
            seen.expected = []  # a node that gave nothing is no rank that died
    if len(seen.gone) == len(seen.views):
        what = f"PID {options.pid}" if options.pid is not None else "--all"
        raise find.NoJob(f"{what}: the job ended while attach read it (every rank is gone)")
    report = judge(seen, options.interval)
    if missing:
        report.checks.append(Check("nodes", Status.WARN, f"no evidence from {', '.join(missing)} in time"))
    report.checks.append(ras_check(seen))
    report.tables += ras_answer(seen)
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
    absent = sorted(set(seen.expected) - {v.rank for v in views})
    count = max((len(history(v)) for v in views), default=0)  # the samples of the best-read rank
    if absent and not stopped and not (seen.changed or moving):
        report = crashed(live, absent, len(seen.expected), f"{count} stack samples over {interval:g} s")
    elif (seen.changed or moving) and not stopped:
        how = (
            f"the stack of {span(seen.changed)} changed between {count} samples over {interval:g} s"
            if seen.changed
            else f"every rank moved data (>= {IO_PROGRESS_BYTES // 1024} KiB) in {interval:g} s"
        )
        detail = f"making progress: {how}; {counted(len(views), 'rank')}, none stopped"
        check = Check("job", Status.PASS, detail)
        report = ranks_report("attach", views, [check, stragglers_check(views, interval)], [])
        if absent:
            report.notes.append(
                f"{span(absent)} of the job's {len(seen.expected)} on this node not found, yet the others "
                "make progress (an elastic job, or a world size in the environment that is not this job's)"
            )
    else:
        why = (
            f"{count} stack samples over {interval:g} s, none changed; how long before, attach cannot tell"
            if not stopped
            else "a stopped rank holds its peers"
        )
        report = unread_report(live, why)
        report = report or judge_hang(live, interval, interval, command="attach", reason=why)
        hosts = {v.rank: v.host for v in views}
        report = with_flight_recorders(report, seen.traces, hosts, len(views))
        if len(live) < len(views):
            report.tables = ranks_report("attach", views, [], []).tables
    if seen.gone:
        gone = [v for v in views if v.rank in seen.gone]
        said = "; ".join(
            f"rank {v.rank} (host {v.host}, pid {v.pid}) ended while attach read it" for v in gone
        )
        hosts = list(dict.fromkeys(v.host for v in gone))
        report.checks.append(Check("ranks", Status.ERROR, said, ranks=[v.rank for v in gone], hosts=hosts))
    return report


def history(view: RankView) -> list[Stack]:
    """Every stack sampled of the rank, oldest first (the view keeps the latest apart)."""
    return [*view.samples, view.stack] if view.stack is not None else list(view.samples)


def stragglers_check(views: list[RankView], interval: float) -> Check:
    """The job makes progress: the rank its peers wait for, by the share of samples each waits in."""
    stacks = {v.rank: history(v) for v in views}
    found = sampled.judge(stacks)
    shares = sampled.summary(stacks)
    if not found:
        detail = f"no rank slows the job (samples waiting in a collective: {shares})"
        return Check("stragglers", Status.PASS, detail)
    by_rank = {v.rank: v for v in views}
    parts = []
    for s in found:
        where = sampled.place(s)
        parts.append(
            f"{identity(by_rank[s.rank])} slows the job: its peers wait in a collective in "
            f"{s.peers_share:.0%} of their samples, it in {s.share:.0%}"
            + (f"; it was in {where}" if where else "")
        )
    detail = "; ".join(parts) + f" (samples in a collective: {shares}, over {interval:g} s)"
    hosts = list(dict.fromkeys(by_rank[s.rank].host for s in found))
    return Check("stragglers", Status.WARN, detail, ranks=[s.rank for s in found], hosts=hosts)


def crashed(live: list[RankView], absent: list[int], expected: int, sampled_how: str) -> Report:
    """Ranks of the job's world not among its processes while the others stand still: they died, and the
    others wait for them (NCCL until its timeout; gloo, where a dead rank's sockets stay open)."""
    waiters = [v for v in live if v.stack is not None and in_collective(v.stack)]
    detail = f"{span(absent)} {'is' if len(absent) == 1 else 'are'} gone: not among the job's processes"
    detail += f" ({expected} expected here, by the world size the job's ranks give)"
    if waiters:
        calls = sorted({call_at(v.stack) for v in waiters})
        detail += f"; {span([v.rank for v in waiters])} {'waits' if len(waiters) == 1 else 'wait'} for it in "
        detail += ", ".join(calls)
    others = [v for v in live if v not in waiters]
    if others:
        detail += "; " + "; ".join(f"{identity(v)} is in {call_at(v.stack)}" for v in others)
    detail += f" ({sampled_how}, none changed)"
    hosts = list(dict.fromkeys(v.host for v in live))
    check = Check("crash", Status.ERROR, detail, ranks=absent, hosts=hosts)
    return ranks_report("attach", live, [check], [])


def unread_report(live: list[RankView], why: str) -> Report | None:
    """Ranks with no Python stack in any sample while every other waits in a collective: the ranks they
    wait for, in no Python code (an interpreter ending after an error, or starting). None otherwise."""
    unread = [v for v in live if v.stack is None and not v.samples and v.state not in ("T", "t")]
    read = [v for v in live if v not in unread]
    if not unread or not read or not all(v.stack is not None and in_collective(v.stack) for v in read):
        return None
    parts = [f"{identity(v)} runs no Python code py-spy can read (its interpreter ending, after an "
             "error, or starting)" for v in unread]  # fmt: skip
    calls = ", ".join(sorted({call_at(v.stack) for v in read}))
    detail = f"no rank made progress: {'; '.join(parts)}; {span([v.rank for v in read])} "
    detail += f"{'was' if len(read) == 1 else 'were'} waiting in {calls} ({why})"
    hosts = list(dict.fromkeys(v.host for v in unread))
    check = Check("hang", Status.ERROR, detail, ranks=[v.rank for v in unread], hosts=hosts)
    return ranks_report("attach", live, [check], unread)


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


def ras_answer(seen: Seen) -> list[Table]:
    """NCCL's answer as it wrote it, where its verdict is not 'healthy' (problems, an unknown layout,
    an answer cut short): the verdict names what it could read; the rest is in these lines."""
    status = seen.ras
    if status is None or status.answer is None or status.healthy:
        return []
    rows = [{"line": line} for line in status.answer.raw.rstrip().splitlines()]
    return [Table(RAS_ANSWER, "NCCL's RAS answer", {"line": "as NCCL wrote it"}, rows)] if rows else []


def dumps_check(seen: Seen) -> Check:
    name = "flight-recorder dumps"
    if not seen.traces:
        detail = (
            "none on disk (the job sets TORCH_FR_DUMP_TEMP_FILE / TORCH_NCCL_DEBUG_INFO_TEMP_FILE and "
            "TORCH_NCCL_DEBUG_INFO_PIPE_FILE for attach to get them: docs/attach.md)"
        )
        return Check(name, Status.SKIP, detail)
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
