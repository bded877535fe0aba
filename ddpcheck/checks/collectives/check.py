"""`ddpcheck collectives`: every collective a training job uses, checked exactly and timed, in one launch.

FSDP and ZeRO live on all_gather and reduce_scatter, MoE on all_to_all, pipeline
parallelism on send/recv, checkpoint loading on broadcast. Each runs through the
collective sweep in turn (nccl-tests' separate *_perf binaries, in one world); each
gets a check named after it that names the rank, receiver or link at fault.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ddpcheck.checks.collectives import CollectivesOptions
from ddpcheck.checks.sweep import sweep
from ddpcheck.checks.sweep.fit import budget_findings
from ddpcheck.checks.sweep.judge import (
    bandwidth_rows,
    bandwidth_table,
    judge_bandwidth,
    judge_data,
    peak,
)
from ddpcheck.checks.sweep.ops import OPS
from ddpcheck.checks.sweep.pattern import sweep_sizes
from ddpcheck.rank.rankmap import judge_rank_map, rank_map_table
from ddpcheck.report.model import Check, Report, Status, Table

if TYPE_CHECKING:
    from ddpcheck.rank.context import RankContext


def measure(ctx: RankContext, opts: CollectivesOptions) -> dict[str, Any]:
    sizes = sweep_sizes(opts.min_bytes, opts.max_bytes, opts.dtype, opts.step_factor)
    accounts = []
    for index, name in enumerate(opts.ops):
        # Each collective gets an equal share of what the ones before it left.
        share = ctx.budget.share(len(opts.ops) - index) if ctx.budget else None
        accounts.append(sweep.measure_op(ctx, OPS[name], sizes, opts.dtype, opts.warmup, opts.iters, share))
    return {"ops": accounts}


def judge(data: list[dict[str, Any]], identities: list[dict[str, Any]], opts: CollectivesOptions) -> Report:
    n = len(data)
    report = Report(command="collectives")
    report.checks.append(judge_rank_map(identities))
    all_rows: list[dict[str, Any]] = []
    peaks: list[dict[str, Any]] = []
    for index, name in enumerate(opts.ops):
        per_rank = [rank["ops"][index] for rank in data]
        skipped = per_rank[0].get("skipped")
        if skipped:
            report.checks.append(Check(name, Status.SKIP, f"{name} not run: {skipped}"))
            peaks.append({"op": name, "busbw_gbps": None, "size": None, "wrong": None, "status": "SKIP"})
            continue
        rows = bandwidth_rows(name, per_rank, opts.dtype)
        check = _judge_op(name, rows, per_rank, identities, n, opts.min_busbw)
        report.checks.append(check)
        top = peak(rows) if n > 1 else {}  # one rank: no traffic, no peak
        peaks.append(
            {
                "op": name,
                **{key: top.get(key) for key in ("busbw_gbps", "algbw_gbps", "size", "size_bytes")},
                "wrong": sum(r["wrong"] for r in rows),
                "status": check.status.value,
            }
        )
        all_rows += rows
    report.tables.append(rank_map_table(identities))
    title = f"{{group}} bandwidth ({opts.dtype}, {n} ranks, slowest rank's time)"
    if n > 1:
        report.tables.append(bandwidth_table("bandwidth", title, all_rows, group_by="op"))
    columns = {
        "op": "collective",
        "busbw_gbps": "peak busbw (GB/s)",
        "size": "at",
        "wrong": "#wrong",
        "status": "status",
    }
    report.tables.append(Table("summary", "Peak bus bandwidth of every collective", columns, peaks))
    budget = budget_findings(data[0]["ops"])
    if budget:
        report.checks.append(budget[0])
        report.tables.append(budget[1])
    return report


def _judge_op(
    name: str,
    rows: list[dict[str, Any]],
    per_rank: list[dict[str, Any]],
    identities: list[dict[str, Any]],
    n: int,
    min_busbw: float | None,
) -> Check:
    """One check per collective: exact data at every size, then the bandwidth floor."""
    data = judge_data(name, name, rows, per_rank, identities)
    speed = judge_bandwidth(name, rows, n, min_busbw)
    if data.status != Status.PASS:
        return data
    if speed.status not in (Status.PASS, Status.SKIP):
        return speed
    return Check(name, Status.PASS, f"{data.detail}; {speed.detail}")
