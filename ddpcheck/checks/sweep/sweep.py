"""The collective sweep, on every rank: the sweep, the timing, the exact data check and localisation.

For each size of the sweep a collective (a definition from collective/ops/) runs once
per data-check variant (every root, both ring directions) with an integer pattern that
every rank can predict; each rank counts its wrong elements, by the rank that sent
them where the data says who sent it. Then the collective is timed. When a reduction
was wrong anywhere, the ranks localise the fault together by re-running it on
subgroups. The judging is pure and runs on rank 0 (collective/judge.py).
"""

from __future__ import annotations

import functools
import math
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ddpcheck.checks.sweep.bisection import bisect
from ddpcheck.checks.sweep.fit import Fit, fit_sweep
from ddpcheck.checks.sweep.ops.base import Buffers, Collective, Team
from ddpcheck.checks.sweep.pattern import ITEM_SIZE
from ddpcheck.report.units import human_bytes

if TYPE_CHECKING:
    from ddpcheck.rank.budget import Budget
    from ddpcheck.rank.context import RankContext


def time_collective(ctx: RankContext, call: Callable[[], None], warmup: int, iters: int) -> float:
    """Seconds per call on this rank, after warm-up and a barrier: every rank starts the loop together."""
    warm_up(ctx, call, warmup)
    return ctx.time_calls(call, iters) / iters


def warm_up(ctx: RankContext, call: Callable[[], None], warmup: int) -> None:
    """`warmup` untimed calls, then a barrier: every rank starts its timed loop together."""
    for _ in range(warmup):
        call()
        ctx.tick()
    ctx.sync()
    ctx.barrier()


def measure_op(
    ctx: RankContext,
    op: Collective,
    sizes: list[int],
    dtype_name: str,
    warmup: int,
    iters: int,
    budget: Budget | None = None,
) -> dict[str, Any]:
    """This rank's account of one collective over the sweep: per size, time and wrong elements.

    With a budget, the timing and the sizes after each one are cut to fit (collective/fit.py),
    and a timing stops where the ranks agree the measuring time is over (time_within); the data
    check of every size that runs is whole.
    """
    reason = skip_reason(ctx, op, dtype_name)
    if reason:
        return {"op": op.name, "skipped": reason, "sizes": [], "culprits": [], "unlocalised": False}
    asked = {"warmup": warmup, "iters": iters}
    if ctx.world_size == 1:
        sizes = sizes[:1]  # one rank moves nothing: the data check at the smallest size says all there is
    rows = sweep_sizes(ctx, op, sizes, dtype_name, asked, budget)
    ctx.progress(len(sizes), len(sizes), "done")
    culprits = localise_first_wrong(ctx, op, rows, dtype_name) if op.reduces else []
    account = {
        "op": op.name,
        "skipped": None,
        "sizes": rows,
        "culprits": culprits or [],
        "unlocalised": culprits is None,
    }
    if budget is not None:
        account["budget"] = {"budget_s": budget.seconds, "sizes_asked": sizes} | {
            f"{k}_asked": v for k, v in asked.items()
        }
    return account


def skip_reason(ctx: RankContext, op: Collective, dtype_name: str) -> str | None:
    """Why no rank runs `op` (too few ranks, a torch or backend that lacks it); None when every rank can."""
    reason = f"needs at least {op.min_ranks} ranks" if ctx.world_size < op.min_ranks else op.missing()
    # Every rank must skip, or none: a rank that went on alone would wait for the others forever.
    (lacking,) = ctx.agree_max([int(reason is not None)])
    if lacking and not reason:
        reason = "another rank's torch cannot run it (see nodes agree)"
    return reason or unsupported(ctx, op, dtype_name)


def sweep_sizes(
    ctx: RankContext,
    op: Collective,
    sizes: list[int],
    dtype_name: str,
    asked: dict[str, int],
    budget: Budget | None,
) -> list[dict[str, Any]]:
    """One row per size that ran: its data check, then its timing; with a budget, until the plan or the
    measuring time runs out."""
    import torch

    n = ctx.world_size
    dtype, item = getattr(torch, dtype_name), ITEM_SIZE[dtype_name]
    world = Team(tuple(range(n)), ctx.rank)
    rows = []
    for index, size in enumerate(sizes):
        count = op.count(size, item, n)
        label = human_bytes(count * item)
        ctx.stage(f"measure: {op.name} {label}")
        ctx.progress(index, len(sizes), f"{op.name} {label}")  # after the stage, which clears progress
        buffers = op.buffers(count, dtype, ctx.device, n)
        variants = op.variants(n, index)
        wrong, by_sender, check_s = check_data(ctx, op, buffers, world, variants, dtype_name)
        op.clear(buffers)
        call = functools.partial(op.run, buffers, world, op.timed_variant())
        seconds, timing, fit = time_size(ctx, call, sizes[index:], check_s, asked, budget)
        rows.append(
            {
                "size_bytes": count * item,
                "count": count,
                "seconds": seconds,
                "wrong": wrong,
                "wrong_from": by_sender,
                "variants": variants,
                **timing,
            }
        )
        del buffers
        if fit is not None and (fit.sizes == 1 or timing["iters"] < fit.iters):
            break  # the plan ran out, or the measuring time did
    return rows


def check_data(
    ctx: RankContext, op: Collective, buffers: Buffers, world: Team, variants: list[int], dtype_name: str
) -> tuple[int, dict[int, int], float]:
    """Every data-check variant once: the wrong elements here, by their sender, and the seconds it took."""
    wrong, by_sender = 0, {}
    began = time.perf_counter()
    for variant in variants:
        op.load(buffers, world, variant, dtype_name, ctx.faults)
        op.run(buffers, world, variant)
        received = op.verify(buffers, world, variant, dtype_name)
        wrong += received.wrong
        for sender, elements in received.by_sender.items():
            by_sender[sender] = by_sender.get(sender, 0) + elements
    return wrong, by_sender, time.perf_counter() - began


def time_size(
    ctx: RankContext,
    call: Callable[[], None],
    sizes_left: list[int],
    check_s: float,
    asked: dict[str, int],
    budget: Budget | None,
) -> tuple[float, dict[str, int], Fit | None]:
    """Seconds per call at this size, the warm-up and iterations it ran, and the fit that chose them."""
    if budget is None:
        return time_collective(ctx, call, **asked), asked, None
    # Every rank must take the same decision, or one would wait for a collective the others skipped:
    # the slowest rank's times and the least time left, agreed, then the same pure function everywhere.
    (slowest_check, slowest_call), left_s = budget.agreed(ctx, [check_s, probe_call(ctx, call)])
    # From what was asked, at every size: an early, pessimistic projection cuts nothing for good.
    fit = fit_sweep(sizes_left, slowest_check, slowest_call, seconds_left=left_s, **asked)
    seconds, iters = time_within(ctx, call, fit.warmup, fit.iters, budget)
    return seconds, {"warmup": fit.warmup, "iters": iters}, fit


def localise_first_wrong(
    ctx: RankContext, op: Collective, rows: list[dict[str, Any]], dtype_name: str
) -> list[int] | None:
    """The culprits of a reduction's first size wrong anywhere ([]: none was wrong; None: not localised)."""
    # Every rank must take the same decision and localise at the same size (a reduce's
    # result is on its root only): agree on the first size that failed anywhere.
    first_wrong = next((i for i, r in enumerate(rows) if r["wrong"]), len(rows))
    (failing,) = ctx.agree_min([first_wrong])
    if failing >= len(rows):
        return []
    ctx.stage(f"measure: localise the faulty rank of {op.name} by bisection")
    return localise(ctx, op, rows[failing]["size_bytes"], dtype_name)


def localise(ctx: RankContext, op: Collective, size_bytes: int, dtype_name: str) -> list[int] | None:
    """Ranks whose participation makes a reduction wrong, found by re-running it on subgroups."""
    return bisect(ctx.world_size, lambda groups: run_on_groups(ctx, op, size_bytes, dtype_name, groups))


# With a budget, the timed loop runs in chunks of about CHUNK_S, and between chunks the ranks agree
# whether the measuring time is over: on a contended host a loop can run far slower than its probe
# said, so the iterations planned are a plan, not a promise (docs/fleet.md).
CHUNK_S = 0.2


def time_within(
    ctx: RankContext, call: Callable[[], None], warmup: int, iters: int, budget: Budget
) -> tuple[float, int]:
    """time_collective's loop, stopped early where the ranks agree the budget's measuring end is near.

    Returns seconds per call and the iterations timed (at least one). Every rank runs the same
    chunks: their sizes come from the slowest rank's calls, agreed with the stop (one all_reduce
    of two integers between chunks, outside the timed calls).
    """
    warm_up(ctx, call, warmup)
    took, done, chunk = 0.0, 0, 1
    while done < iters:
        count = min(chunk, iters - done)
        chunk_s = ctx.time_calls(call, count)
        took, done = took + chunk_s, done + count
        # Late: another chunk as long as this one would end past the measuring end.
        late, slowest_call_us = ctx.agree_max(
            [int(time.time() + chunk_s >= budget.measure_end), math.ceil(chunk_s / count * 1e6)]
        )
        if late:
            break
        chunk = max(1, math.floor(CHUNK_S * 1e6 / max(1, slowest_call_us)))
    return took / done, done


# One call alone, while every rank is hot, promises far less than a loop on shared CPUs costs
# (docs/fleet.md): the probe runs calls in growing batches until a batch lasts PROBE_S, as the
# timed loop will.
PROBE_S = 0.1
PROBE_MAX_CALLS = 4096


def probe_call(ctx: RankContext, call: Callable[[], object]) -> float:
    """Seconds per call on this rank, from a batch long enough to show what a timed loop sees.

    Untimed in the figures. Every rank runs the same batches: they agree after each whether
    any rank's batch lasted PROBE_S.
    """
    calls = 1
    while True:
        began = time.perf_counter()
        for _ in range(calls):
            call()
            ctx.tick()
        ctx.sync()
        took = time.perf_counter() - began
        (enough,) = ctx.agree_max([int(took >= PROBE_S or calls >= PROBE_MAX_CALLS)])
        if enough:
            return took / calls
        calls *= 4


# How backends refuse a collective or a dtype they lack (gloo: "... is not supported"), as
# opposed to a failure of the run itself, which must stay a finding.
UNSUPPORTED_MARKERS = ("not supported", "unsupported", "not implemented", "notimplemented")


def unsupported(ctx: RankContext, op: Collective, dtype_name: str) -> str | None:
    """Why this backend cannot run `op` on `dtype_name`, from one call on a tiny buffer; None if it can.

    A backend refuses before any traffic, alike on every rank, so every rank skips together.
    """
    import torch

    n, item = ctx.world_size, ITEM_SIZE[dtype_name]
    buffers = op.buffers(op.count(n * item, item, n), getattr(torch, dtype_name), ctx.device, n)
    try:
        op.run(buffers, Team(tuple(range(n)), ctx.rank), op.timed_variant())
    except (RuntimeError, NotImplementedError, ValueError, TypeError) as exc:
        message = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        if not any(m in f"{type(exc).__name__} {message}".lower() for m in UNSUPPORTED_MARKERS):
            raise
        return f"the {ctx.backend} backend cannot run it with {dtype_name}: {message}"
    return None


def run_on_groups(
    ctx: RankContext, op: Collective, size_bytes: int, dtype_name: str, groups: list[list[int]]
) -> list[bool]:
    """Run the data check in each (disjoint) group at once; which groups saw a wrong element."""
    import torch
    import torch.distributed as dist

    handles = [dist.new_group(ranks=g) for g in groups]  # every rank creates every group
    mine = next((i for i, g in enumerate(groups) if ctx.rank in g), None)
    wrong_here = [0] * len(groups)
    if mine is not None:
        members = sorted(groups[mine])  # a process group orders its members by global rank
        team = Team(tuple(members), members.index(ctx.rank), handles[mine])
        item = ITEM_SIZE[dtype_name]
        count = op.count(size_bytes, item, team.size)
        buffers = op.buffers(count, getattr(torch, dtype_name), ctx.device, team.size)
        for variant in op.variants(team.size, 0):
            op.load(buffers, team, variant, dtype_name, ctx.faults)
            op.run(buffers, team, variant)
            wrong_here[mine] |= op.verify(buffers, team, variant, dtype_name).wrong > 0
    seen = ctx.agree_max(wrong_here)  # each group's verdict reaches every rank
    for handle in handles:
        dist.destroy_process_group(handle)
    return [bool(w) for w in seen]
