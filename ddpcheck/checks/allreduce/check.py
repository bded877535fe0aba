"""`ddpcheck allreduce`: is the process group sound, who breaks it, and how fast is it?

The classic `ones * rank` reduction and the rank map, then the collective sweep
(ddpcheck/checks/sweep/) with the all_reduce definition: an exact integer pattern at
every size of the sweep, counted element by element (nccl-tests' #wrong), the
bandwidth timing, and - only when something was wrong - a bisection over subgroups
that finds the ranks whose participation makes the sum wrong.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ddpcheck.checks.allreduce import AllreduceOptions
from ddpcheck.checks.sweep import sweep
from ddpcheck.checks.sweep.fit import budget_findings
from ddpcheck.checks.sweep.judge import (
    bandwidth_rows,
    bandwidth_table,
    culprit_clause,
    judge_bandwidth,
    judge_data,
)
from ddpcheck.checks.sweep.ops import OPS
from ddpcheck.checks.sweep.pattern import sweep_sizes
from ddpcheck.rank.rankmap import judge_rank_map, rank_map_table
from ddpcheck.report.model import Check, Report, Status, Table
from ddpcheck.report.naming import hosts_of

if TYPE_CHECKING:
    from ddpcheck.rank.context import RankContext

ALL_REDUCE = OPS["all_reduce"]


# ---------------------------------------------------------------- measure
def measure(ctx: RankContext, opts: AllreduceOptions) -> dict[str, Any]:
    ctx.stage("measure: classic all_reduce of ones * rank")
    classic = _classic(ctx)
    sizes = sweep_sizes(opts.min_bytes, opts.max_bytes, opts.dtype, opts.step_factor)
    swept = sweep.measure_op(ctx, ALL_REDUCE, sizes, opts.dtype, opts.warmup, opts.iters, ctx.budget)
    if not swept["culprits"] and not swept["unlocalised"]:
        # The sweep was right everywhere; a wrong classic sum alone still needs its culprit.
        (classic_wrong,) = ctx.agree_max([int(classic["got"] != classic["expected"])])
        if classic_wrong:
            ctx.stage("measure: localise the faulty rank by bisection")
            culprits = sweep.localise(ctx, ALL_REDUCE, 4, "float32")
            swept.update(culprits=culprits or [], unlocalised=culprits is None)
    return {"classic": classic, **swept}


def _classic(ctx: RankContext) -> dict[str, Any]:
    import torch
    import torch.distributed as dist

    value = torch.ones(1, device=ctx.device) * ctx.rank
    ctx.faults.corrupt(value)
    dist.all_reduce(value)
    n = ctx.world_size
    return {"got": value.item(), "expected": float(n * (n - 1) // 2)}


# ---------------------------------------------------------------- judge
def judge(data: list[dict[str, Any]], identities: list[dict[str, Any]], opts: AllreduceOptions) -> Report:
    n = len(data)
    report = Report(command="allreduce")
    report.checks.append(_judge_classic(data, identities))
    report.checks.append(judge_rank_map(identities))
    skipped = data[0].get("skipped")
    rows = [] if skipped else bandwidth_rows(ALL_REDUCE.name, data, opts.dtype)
    if skipped:
        # The backend refuses this dtype (or this torch lacks the call): said, not a crash.
        for name in ("data integrity", "bandwidth"):
            report.checks.append(Check(name, Status.SKIP, f"the all_reduce sweep did not run: {skipped}"))
    else:
        report.checks.append(judge_data("data integrity", ALL_REDUCE.name, rows, data, identities))
        report.checks.append(judge_bandwidth("bandwidth", rows, n, opts.min_busbw))
    budget = budget_findings([data[0]])
    if budget:
        report.checks.append(budget[0])
    report.tables.append(_classic_table(data, identities))
    report.tables.append(rank_map_table(identities))
    if rows and n > 1:
        title = f"all_reduce bandwidth ({opts.dtype}, {n} ranks, slowest rank's time)"
        report.tables.append(bandwidth_table("bandwidth", title, rows))
    if budget:
        report.tables.append(budget[1])
    return report


def _judge_classic(data: list[dict[str, Any]], identities: list[dict[str, Any]]) -> Check:
    n = len(data)
    expected = n * (n - 1) / 2
    culprits = data[0].get("culprits") or []
    wrong = [r for r, d in enumerate(data) if d["classic"]["got"] != expected]
    if not wrong:
        return Check("classic all_reduce", Status.PASS, f"every rank holds sum(0..{n - 1}) = {expected:g}")
    got = ", ".join(f"rank {r} got {data[r]['classic']['got']:g}" for r in wrong[:8])
    detail = f"expected {expected:g} on every rank; {got}"
    detail += culprit_clause(culprits, bool(data[0].get("unlocalised")), identities)
    ranks = culprits or wrong
    return Check("classic all_reduce", Status.FAIL, detail, ranks, hosts_of(ranks, identities))


def _classic_table(data: list[dict[str, Any]], identities: list[dict[str, Any]]) -> Table:
    rows = [
        {
            "rank": rank,
            **{key: identities[rank][key] for key in ("local_rank", "host", "device")},
            "got": d["classic"]["got"],
            "expected": d["classic"]["expected"],
            "status": "PASS" if d["classic"]["got"] == d["classic"]["expected"] else "FAIL",
        }
        for rank, d in enumerate(data)
    ]
    columns = {
        k: k.replace("_", " ") for k in ("rank", "local_rank", "host", "device", "got", "expected", "status")
    }
    return Table("classic", "Classic check: all_reduce(ones * rank)", columns, rows)
