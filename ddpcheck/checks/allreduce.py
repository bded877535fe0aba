"""`ddpcheck allreduce`: is the process group sound, who breaks it, and how fast is it?

measure() runs on every rank: the classic `ones * rank` reduction, an exact
integer pattern at every size of the sweep (counted element by element, as
nccl-tests' #wrong), the bandwidth timing, and - only when something was
wrong - a bisection over subgroups that finds the ranks whose participation
makes the sum wrong. judge() runs on rank 0 over plain data from every rank.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from ddpcheck.checks.rankmap import describe_ranks, hosts_of, judge_rank_map, rank_map_table
from ddpcheck.options import AllreduceOptions
from ddpcheck.report import Check, Report, Status, Table

Options = AllreduceOptions

# The largest integer each dtype holds exactly (all smaller ones too).
EXACT_LIMIT = {
    "float16": 2**11,
    "bfloat16": 2**8,
    "float32": 2**24,
    "float64": 2**53,
    "int32": 2**31 - 1,
}
ITEM_SIZE = {"float16": 2, "bfloat16": 2, "float32": 4, "float64": 8, "int32": 4}
MAX_PERIOD = 251  # a prime, so the pattern does not line up with power-of-two sizes


def bus_factor(world_size: int) -> float:
    """nccl-tests' all_reduce bus bandwidth factor 2(n-1)/n."""
    return 2 * (world_size - 1) / world_size


def sweep_sizes(min_bytes: int, max_bytes: int, dtype: str) -> list[int]:
    """Doubling sizes from min to max, each rounded down to whole elements (at least one)."""
    item = ITEM_SIZE[dtype]
    sizes: list[int] = []
    size = min_bytes
    while size <= max_bytes:
        rounded = max(item, size // item * item)
        if not sizes or rounded != sizes[-1]:
            sizes.append(rounded)
        size *= 2
    return sizes


# ---------------------------------------------------------------- the pattern
@dataclass(frozen=True)
class Pattern:
    """Exactly representable integers, different on every rank, with a known sum.

    Element i of rank j holds (i + j) mod P: every partial sum is a small
    non-negative integer, so any difference from the expected sum is a fault,
    never rounding. When even 0/1 values could overflow the dtype's exact range
    in a sum (bfloat16 beyond 256 ranks), each element is 1 on exactly one rank.
    """

    period: int
    world_size: int
    one_hot: bool

    @classmethod
    def for_world(cls, world_size: int, dtype: str) -> Pattern:
        period = min(MAX_PERIOD, EXACT_LIMIT[dtype] // world_size + 1)
        if period >= 2:
            return cls(period, world_size, one_hot=False)
        return cls(world_size, world_size, one_hot=True)

    def contribution(self, index: int) -> list[int]:
        """One period of what the rank at `index` (within its group) contributes."""
        if self.one_hot:
            return [1 if i == index else 0 for i in range(self.period)]
        return [(i + index) % self.period for i in range(self.period)]

    def expected(self) -> list[int]:
        """One period of the sum over all `world_size` contributions."""
        if self.one_hot:
            return [1] * self.period
        p, n = self.period, self.world_size
        full, rest = divmod(n, p)
        out = []
        for s in range(p):
            wraps = max(0, s + rest - p)
            out.append(full * p * (p - 1) // 2 + rest * s + rest * (rest - 1) // 2 - p * wraps)
        return out


def _fill(buffer: Any, period_values: list[int]) -> None:
    import torch

    period = torch.tensor(period_values, dtype=buffer.dtype, device=buffer.device)
    count, p = buffer.numel(), len(period_values)
    whole = count // p * p
    if whole:
        buffer[:whole].view(-1, p).copy_(period.expand(count // p, p))
    buffer[whole:].copy_(period[: count - whole])


def _count_wrong(buffer: Any, expected_values: list[int]) -> int:
    import torch

    period = torch.tensor(expected_values, dtype=buffer.dtype, device=buffer.device)
    count, p = buffer.numel(), len(expected_values)
    whole = count // p * p
    wrong = 0
    if whole:
        wrong += int((buffer[:whole].view(-1, p) != period).sum().item())
    wrong += int((buffer[whole:] != period[: count - whole]).sum().item())
    return wrong


def _reduce_pattern(ctx: Any, buffer: Any, index: int, size: int, group: Any = None) -> int:
    """Fill this rank's contribution, all_reduce it in `group`, return #wrong elements here."""
    import torch.distributed as dist

    pattern = Pattern.for_world(size, _dtype_name(buffer))
    _fill(buffer, pattern.contribution(index))
    ctx.faults.corrupt(buffer)
    dist.all_reduce(buffer, group=group)
    return _count_wrong(buffer, pattern.expected())


# ---------------------------------------------------------------- measure
def measure(ctx: Any, opts: AllreduceOptions) -> dict[str, Any]:
    import torch

    dtype = getattr(torch, opts.dtype)
    ctx.stage("measure: classic all_reduce of ones * rank")
    classic = _classic(ctx)

    sizes = sweep_sizes(opts.min_bytes, opts.max_bytes, opts.dtype)
    rows = []
    largest = torch.empty(max(sizes) // ITEM_SIZE[opts.dtype], dtype=dtype, device=ctx.device)
    for i, size in enumerate(sizes):
        label = human_bytes(size)
        ctx.stage(f"measure: all_reduce {label}")
        ctx.progress(i, len(sizes), label)  # after the stage, which clears the previous progress
        buffer = largest[: size // ITEM_SIZE[opts.dtype]]
        wrong = _reduce_pattern(ctx, buffer, ctx.rank, ctx.world_size)
        seconds = _time_all_reduce(ctx, buffer, opts.warmup, opts.iters)
        rows.append({"size_bytes": size, "count": buffer.numel(), "seconds": seconds, "wrong": wrong})
    ctx.progress(len(sizes), len(sizes), "done")
    del largest

    # Whether anything went wrong anywhere decides, identically on every rank, whether to localise.
    ctx.stage("measure: compare results across ranks")
    any_wrong = ctx.all_gather_object(classic["got"] != classic["expected"] or any(r["wrong"] for r in rows))
    culprits: list[int] | None = []
    if any(any_wrong):
        ctx.stage("measure: localise the faulty rank by bisection")
        # At the size that failed: a fault may only show with a larger message (another protocol).
        failing = next((r["count"] for r in rows if r["wrong"]), 1)
        culprits = localise(ctx, failing, dtype)
    return {
        "classic": classic,
        "sizes": rows,
        "culprits": culprits or [],
        "unlocalised": culprits is None,
    }


def _classic(ctx: Any) -> dict[str, Any]:
    import torch
    import torch.distributed as dist

    value = torch.ones(1, device=ctx.device) * ctx.rank
    ctx.faults.corrupt(value)
    dist.all_reduce(value)
    n = ctx.world_size
    return {"got": value.item(), "expected": float(n * (n - 1) // 2)}


def _time_all_reduce(ctx: Any, buffer: Any, warmup: int, iters: int) -> float:
    """Seconds per all_reduce on this rank: CUDA events on GPUs, perf_counter on CPU."""
    import torch
    import torch.distributed as dist

    # Values grow with repeated in-place sums; zeros keep them finite (speed does not depend on them).
    buffer.zero_()
    for _ in range(warmup):
        dist.all_reduce(buffer)
        ctx.tick()
    ctx.sync()
    ctx.barrier()
    if ctx.device.type == "cuda":
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(iters):
            dist.all_reduce(buffer)
            ctx.tick()
        end.record()
        end.synchronize()
        return start.elapsed_time(end) / 1e3 / iters
    began = time.perf_counter()
    for _ in range(iters):
        dist.all_reduce(buffer)
        ctx.tick()
    return (time.perf_counter() - began) / iters


def localise(ctx: Any, count: int, dtype: Any) -> list[int] | None:
    """Ranks whose participation makes the reduction wrong, found on subgroups.

    Bisect: split every wrong group into halves and reduce each half on its
    own subgroup. A wrong pair is split once more, each member reduced
    alongside a rank already proven good (or alone, when none is known yet).
    A wrong group whose parts are all right is named whole: the fault needs
    those ranks together; None when that group is the whole world (nothing
    was localised). Every rank follows the same steps, since all learn every
    result.
    """
    import torch

    buffer = torch.empty(count, dtype=dtype, device=ctx.device)
    suspects: list[list[int]] = [list(range(ctx.world_size))]
    good: list[int] = []
    culprits: list[int] = []
    while suspects:
        candidates: list[tuple[int, list[int]]] = []  # (parent index, group)
        spare = list(good)
        for parent, group in enumerate(suspects):
            if len(group) > 2:
                half = (len(group) + 1) // 2
                candidates += [(parent, group[:half]), (parent, group[half:])]
                continue
            for member in group:
                partner = [spare.pop()] if spare else []
                candidates.append((parent, [member, *partner]))
        wrong = _reduce_on_groups(ctx, buffer, [g for _, g in candidates])
        next_suspects: list[list[int]] = []
        for parent, group in enumerate(suspects):
            children = [(g, w) for (p, g), w in zip(candidates, wrong, strict=True) if p == parent]
            bad = [g for g, w in children if w]
            good += [r for g, w in children if not w for r in g if r not in good]
            if not bad and len(group) == ctx.world_size:
                return None  # every part is right alone: only the whole world shows the fault
            if not bad:
                culprits += group
            for g in bad:
                if len(group) <= 2:
                    culprits.append(g[0])  # a member tested alone or beside a good rank
                else:
                    next_suspects.append(g)
        suspects = next_suspects
    return sorted(set(culprits))


def _reduce_on_groups(ctx: Any, buffer: Any, groups: list[list[int]]) -> list[bool]:
    """Reduce the pattern in each (disjoint) group at once; which groups saw a wrong element."""
    import torch.distributed as dist

    handles = [dist.new_group(ranks=g) for g in groups]  # every rank creates every group
    mine = next((i for i, g in enumerate(groups) if ctx.rank in g), None)
    wrong_here = False
    if mine is not None:
        group = groups[mine]
        wrong_here = _reduce_pattern(ctx, buffer, group.index(ctx.rank), len(group), handles[mine]) > 0
    seen = ctx.all_gather_object((mine, wrong_here))
    for handle in handles:
        dist.destroy_process_group(handle)
    return [any(m == i and w for m, w in seen) for i in range(len(groups))]


def _dtype_name(tensor: Any) -> str:
    return str(tensor.dtype).removeprefix("torch.")


# ---------------------------------------------------------------- judge
def judge(data: list[dict[str, Any]], identities: list[dict[str, Any]], opts: AllreduceOptions) -> Report:
    n = len(data)
    culprits = data[0].get("culprits") or []
    unlocalised = bool(data[0].get("unlocalised"))
    report = Report(command="allreduce")
    report.checks.append(_judge_classic(data, identities, culprits, unlocalised))
    report.checks.append(judge_rank_map(identities))
    bandwidth = bandwidth_rows(data, opts.dtype)
    report.checks.append(_judge_data(bandwidth, identities, culprits, unlocalised))
    report.checks.append(_judge_bandwidth(bandwidth, n, opts.min_busbw))
    report.tables.append(_classic_table(data, identities))
    report.tables.append(rank_map_table(identities))
    report.tables.append(
        Table(
            "bandwidth",
            f"all_reduce bandwidth ({opts.dtype}, {n} ranks, slowest rank's time)",
            {
                "size": "size",
                "count": "count",
                "time_us": "time (us)",
                "algbw_gbps": "algbw (GB/s)",
                "busbw_gbps": "busbw (GB/s)",
                "wrong": "#wrong",
            },
            bandwidth,
        )
    )
    return report


def bandwidth_rows(data: list[dict[str, Any]], dtype: str) -> list[dict[str, Any]]:
    """One row per size: the slowest rank's time, nccl-tests' algbw and busbw, #wrong summed."""
    n = len(data)
    rows = []
    for i, first in enumerate(data[0]["sizes"]):
        seconds = max(rank["sizes"][i]["seconds"] for rank in data)
        algbw = first["size_bytes"] / seconds / 1e9 if seconds > 0 else 0.0
        rows.append(
            {
                "size_bytes": first["size_bytes"],
                "size": human_bytes(first["size_bytes"]),
                "count": first["count"],
                "dtype": dtype,
                "time_us": round(seconds * 1e6, 2),
                "algbw_gbps": round(algbw, 3),
                "busbw_gbps": round(algbw * bus_factor(n), 3),
                "wrong": sum(rank["sizes"][i]["wrong"] for rank in data),
                "wrong_ranks": [r for r, rank in enumerate(data) if rank["sizes"][i]["wrong"]],
            }
        )
    return rows


UNLOCALISED = (
    "could not localise: every subgroup reduced correctly, so the fault shows only with all "
    "ranks together (an algorithm or link used only at full scale); the ranks named saw wrong values"
)


def _culprit_text(culprits: list[int], identities: list[dict[str, Any]]) -> str:
    if not culprits:
        return UNLOCALISED
    named = describe_ranks(culprits, identities)
    verb = "makes" if len(culprits) == 1 else "make"
    return f"localised by re-running on subgroups: {named} {verb} the sum wrong"


def _judge_classic(
    data: list[dict[str, Any]], identities: list[dict[str, Any]], culprits: list[int], unlocalised: bool
) -> Check:
    n = len(data)
    expected = n * (n - 1) / 2
    wrong = [r for r, d in enumerate(data) if d["classic"]["got"] != expected]
    if not wrong:
        return Check("classic all_reduce", Status.PASS, f"every rank holds sum(0..{n - 1}) = {expected:g}")
    got = ", ".join(f"rank {r} got {data[r]['classic']['got']:g}" for r in wrong[:8])
    detail = f"expected {expected:g} on every rank; {got}"
    if culprits or unlocalised:
        detail += f"; {_culprit_text(culprits, identities)}"
    ranks = culprits or wrong
    return Check("classic all_reduce", Status.FAIL, detail, ranks, hosts_of(ranks, identities))


def _classic_table(data: list[dict[str, Any]], identities: list[dict[str, Any]]) -> Table:
    rows = []
    for rank, d in enumerate(data):
        ident = identities[rank]
        ok = d["classic"]["got"] == d["classic"]["expected"]
        rows.append(
            {
                "rank": rank,
                "local_rank": ident["local_rank"],
                "host": ident["host"],
                "device": ident["device"],
                "got": d["classic"]["got"],
                "expected": d["classic"]["expected"],
                "status": "PASS" if ok else "FAIL",
            }
        )
    columns = {
        k: k.replace("_", " ") for k in ("rank", "local_rank", "host", "device", "got", "expected", "status")
    }
    return Table("classic", "Classic check: all_reduce(ones * rank)", columns, rows)


def _judge_data(
    rows: list[dict[str, Any]], identities: list[dict[str, Any]], culprits: list[int], unlocalised: bool
) -> Check:
    bad = [r for r in rows if r["wrong"]]
    if not bad:
        total = sum(r["count"] for r in rows)
        return Check(
            "data integrity",
            Status.PASS,
            f"{len(rows)} sizes, {total:,} elements per rank compared exactly, 0 wrong",
        )
    sizes = ", ".join(f"{r['size']}: {r['wrong']:,} wrong" for r in bad[:6])
    detail = f"wrong elements after all_reduce ({sizes})"
    if culprits or unlocalised:
        detail += f"; {_culprit_text(culprits, identities)}"
    ranks = culprits or sorted({x for r in bad for x in r["wrong_ranks"]})
    return Check("data integrity", Status.FAIL, detail, ranks, hosts_of(ranks, identities))


def _judge_bandwidth(rows: list[dict[str, Any]], n: int, min_busbw: float | None) -> Check:
    peak = max(rows, key=lambda r: r["busbw_gbps"])
    detail = f"peak busbw {peak['busbw_gbps']:.3f} GB/s at {peak['size']}"
    if n == 1:
        return Check("bandwidth", Status.PASS, detail + " (one rank: no traffic, busbw is 0)")
    if min_busbw is not None and peak["busbw_gbps"] < min_busbw:
        return Check("bandwidth", Status.FAIL, f"{detail}, below --min-busbw {min_busbw:g} GB/s")
    if min_busbw is not None:
        detail += f" (>= --min-busbw {min_busbw:g})"
    return Check("bandwidth", Status.PASS, detail)


def human_bytes(size: int) -> str:
    for unit, scale in (("G", 1024**3), ("M", 1024**2), ("K", 1024)):
        if size >= scale and size % scale == 0:
            return f"{size // scale}{unit}"
    return f"{size}B" if size < 1024 else f"{size / 1024:.1f}K"
