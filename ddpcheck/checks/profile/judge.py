"""`ddpcheck profile`'s verdicts and tables: pure, over every rank's plain timings (check.measure's).

Apart from the measuring so that the judgement alone can be tested, and mutated
(docs/testing.md), without ranks. Stragglers are found by each rank's own work (compute =
forward + backward under no_sync + update) against the median of the other ranks'.
"""

from __future__ import annotations

import bisect
import math
import statistics
from typing import Any

from ddpcheck.checks.profile import ProfileOptions
from ddpcheck.checks.sweep.ops.all_reduce import bus_factor
from ddpcheck.rank.rankmap import judge_rank_map, rank_map_table
from ddpcheck.report.model import Check, Report, Status, Table
from ddpcheck.report.naming import counted, hosts_of, where
from ddpcheck.report.units import significant

# A rank whose compute time varies more than this (standard deviation / mean) over the
# steady-state steps is unsteady: thermal throttling, a noisy neighbour, a swapping host.
CV_WARN = 0.25

# Dense FP32 (no tensor cores) peak TFLOP/s of known GPUs, by a fragment of the device name, most
# specific first. The profiled layer is float32 at torch's default "highest" matmul precision.
PEAK_FP32_TFLOPS: tuple[tuple[str, float], ...] = (
    ("H200", 67.0),
    ("H100 PCIe", 51.0),
    ("H100 NVL", 60.0),
    ("H100", 67.0),
    ("A100", 19.5),
    ("L40S", 91.6),
    ("L40", 90.5),
    ("L4", 30.3),
    ("A10", 31.2),
    ("A6000", 38.7),
    ("RTX 4090", 82.6),
    ("RTX 3090", 35.6),
    ("V100", 15.7),
    ("T4", 8.1),
)

# The phases timed per step, with their labels; the derived ones are computed in judge().
SUMMARY_PHASES = {
    "forward": "forward",
    "backward": "backward (with sync)",
    "backward_compute": "backward compute (no_sync)",
    "exposed_comm": "exposed communication",
    "update": "update",
    "step": "step (wall)",
    "compute": "compute (own work)",
}
CHART_PARTS = {
    "forward": "forward",
    "backward_compute": "backward compute",
    "exposed_comm": "exposed comm",
    "update": "update",
}


def flops(opts: ProfileOptions) -> dict[str, float]:
    """Matmul FLOPs per step and rank of one Linear(H, H) on B rows (the bias is noise)."""
    forward = 2.0 * opts.batch * opts.hidden**2
    return {"forward": forward, "backward": 2 * forward, "step": 3 * forward}


def step_times(rows: list[dict[str, float]]) -> list[dict[str, float]]:
    """Each timed step with the derived phases: exposed communication, wall step and own compute."""
    return [
        {
            **row,
            "exposed_comm": row["backward"] - row["backward_compute"],
            "step": row["forward"] + row["backward"] + row["update"],
            "compute": row["forward"] + row["backward_compute"] + row["update"],
        }
        for row in rows
    ]


def rank_medians(data: list[dict[str, Any]], warmup: int) -> list[dict[str, float]]:
    """Per rank, the median of each phase over the steady-state steps (warm-up left out)."""
    return [
        {p: statistics.median(s[p] for s in steady) for p in SUMMARY_PHASES}
        for steady in (step_times(d["steps"])[warmup:] for d in data)
    ]


def variation(data: list[dict[str, Any]], warmup: int) -> list[float]:
    """Per rank, the coefficient of variation of the compute time over the steady-state steps."""
    out = []
    for d in data:
        compute = [s["compute"] for s in step_times(d["steps"])[warmup:]]
        mean = statistics.fmean(compute)
        # In floats: statistics.pstdev sums exact fractions, slow over thousands of ranks.
        spread = math.sqrt(statistics.fmean([(x - mean) ** 2 for x in compute]))
        out.append(spread / mean if len(compute) > 1 and mean > 0 else 0.0)
    return out


def straggler_ratios(medians: list[dict[str, float]]) -> list[float]:
    """Each rank's compute time over the median of the *other* ranks' (1.0 for a lone rank).

    The others, not all ranks: with two ranks, the median of all is the mean
    of the straggler and its peer, which hides half of the gap.
    """
    compute = [m["compute"] for m in medians]
    ordered = sorted(compute)
    bases = [_median_without(ordered, own) if len(ordered) > 1 else own for own in compute]
    return [own / base if base > 0 else 1.0 for own, base in zip(compute, bases, strict=True)]


def _median_without(ordered: list[float], value: float) -> float:
    """statistics.median of `ordered` (sorted) with one occurrence of `value` left out, in O(log n):
    one sort serves every rank (the quadratic way it replaced: docs/performance.md)."""
    at = bisect.bisect_left(ordered, value)

    def other(k: int) -> float:  # the k-th of the others, as if `value` were removed
        return ordered[k] if k < at else ordered[k + 1]

    m = len(ordered) - 1
    if m % 2:
        return other(m // 2)
    return (other(m // 2 - 1) + other(m // 2)) / 2


def known_peak(device_name: str | None) -> float | None:
    name = (device_name or "").lower()
    return next((tflops for fragment, tflops in PEAK_FP32_TFLOPS if fragment.lower() in name), None)


def judge(data: list[dict[str, Any]], identities: list[dict[str, Any]], opts: ProfileOptions) -> Report:
    """Verdicts and tables over every rank's timings; pure, so tests feed it synthetic timings."""
    n = len(data)
    medians = rank_medians(data, opts.warmup)
    ratios = straggler_ratios(medians)
    cvs = variation(data, opts.warmup)
    figures = figures_of(data, identities, opts, medians)
    report = Report(command="profile")
    report.checks += [
        judge_rank_map(identities),
        judge_stragglers(medians, ratios, identities, opts.straggler_threshold),
        judge_stability(cvs, identities),
        judge_communication(figures, n),
        judge_compute(figures),
        judge_memory(data, identities),
    ]
    report.tables += [
        rank0_table(data[0], opts.warmup),
        summary_table(medians, identities, opts),
        per_rank_table(data, medians, ratios, cvs, identities, opts),
        breakdown_table(medians),
        steps_table(data, identities, opts.warmup, _step_ranks(ratios, report.checks)),
        Table("figures", "Communication and compute figures", {}, [figures]),
        rank_map_table(identities),
    ]
    return report


def _ms(seconds: float) -> float:
    return round(seconds * 1e3, 3)


def _median_across(medians: list[dict[str, float]], phase: str) -> float:
    return statistics.median(m[phase] for m in medians)


def figures_of(
    data: list[dict[str, Any]], identities: list[dict[str, Any]], opts: ProfileOptions, medians: list[dict]
) -> dict[str, Any]:
    """The scalar results: bytes, bandwidth, hidden communication, FLOP/s and the fraction of peak."""
    n = len(data)
    work = flops(opts)
    grad_bytes = data[0]["grad_bytes"]
    bus_bytes = grad_bytes * bus_factor(n)
    allreduce_s = max(d["allreduce_s"] for d in data)  # the collective is as slow as its slowest rank
    exposed_s = max(0.0, _median_across(medians, "exposed_comm"))
    forward_s = _median_across(medians, "forward")
    backward_s = _median_across(medians, "backward_compute")
    compute_s = _median_across(medians, "compute")
    peak = opts.peak_tflops
    peak_source = "--peak-tflops" if peak else None
    name = identities[0].get("device_name")
    if (
        peak is None
        and identities[0].get("device", "cpu") != "cpu"
        and data[0]["matmul_precision"] == "highest"
    ):
        peak = known_peak(name)
        peak_source = f"{name} FP32" if peak else None
    step_tflops = work["step"] / compute_s / 1e12 if compute_s > 0 else 0.0
    return {
        "world_size": n,
        "hidden": opts.hidden,
        "batch": opts.batch,
        "grad_bytes": grad_bytes,
        "bus_bytes_per_step": int(bus_bytes),
        "allreduce_ms": _ms(allreduce_s),
        "busbw_gbps": significant(bus_bytes / allreduce_s / 1e9) if allreduce_s > 0 and n > 1 else 0.0,
        "exposed_comm_ms": _ms(exposed_s),
        "hidden_comm_pct": (
            round(100 * max(0.0, 1 - exposed_s / allreduce_s), 1) if allreduce_s > 0 and n > 1 else None
        ),
        "forward_gflop": work["forward"] / 1e9,
        "backward_gflop": work["backward"] / 1e9,
        "forward_tflops": significant(work["forward"] / forward_s / 1e12) if forward_s > 0 else 0.0,
        "backward_tflops": significant(work["backward"] / backward_s / 1e12) if backward_s > 0 else 0.0,
        "step_tflops": significant(step_tflops),
        "peak_tflops": peak,
        "peak_source": peak_source,
        "peak_fraction": significant(step_tflops / peak) if peak else None,
    }


def judge_stragglers(
    medians: list[dict[str, float]],
    ratios: list[float],
    identities: list[dict[str, Any]],
    threshold: float,
) -> Check:
    name = "stragglers"
    if len(medians) == 1:
        return Check(name, Status.PASS, "one rank: nothing to compare")
    slow = [r for r, ratio in enumerate(ratios) if ratio >= threshold]
    if not slow:
        return Check(
            name,
            Status.PASS,
            f"every rank's compute per step is within {threshold:g}x of the others' median "
            f"(from {min(ratios):.2f}x to {max(ratios):.2f}x)",
        )
    parts = [
        f"{where(r, identities)}: compute {_ms(medians[r]['compute']):g} ms per step, {ratios[r]:.2f}x "
        f"the median of the other ranks"
        for r in slow[:8]
    ]
    detail = f"{'; '.join(parts)} (threshold {threshold:g}x)"
    rest = [m["exposed_comm"] for r, m in enumerate(medians) if r not in slow]
    if rest:
        # Under DDP the others cannot finish backward's all-reduce before the slow rank joins it.
        detail += (
            f". Every other rank waits for it in backward's all-reduce: their exposed communication "
            f"({_ms(statistics.median(rest)):g} ms median) is mostly that wait"
        )
    return Check(name, Status.WARN, detail, slow, hosts_of(slow, identities))


def judge_stability(cvs: list[float], identities: list[dict[str, Any]]) -> Check:
    name = "timing stability"
    unsteady = [r for r, cv in enumerate(cvs) if cv > CV_WARN]
    if not unsteady:
        return Check(
            name,
            Status.PASS,
            f"every rank's compute time varies by at most {max(cvs):.0%} (std/mean) across steps",
        )
    parts = ", ".join(f"{where(r, identities)} varies by {cvs[r]:.0%}" for r in unsteady[:8])
    return Check(
        name,
        Status.WARN,
        f"{parts} (std/mean of compute time across steps, above {CV_WARN:.0%}): "
        "throttling, a noisy neighbour or host contention",
        unsteady,
        hosts_of(unsteady, identities),
    )


def judge_communication(figures: dict[str, Any], n: int) -> Check:
    name = "communication"
    size = f"{figures['grad_bytes'] / 2**20:.1f} MiB of gradients"
    if n == 1:
        return Check(name, Status.PASS, f"one rank: {size}, nothing to send")
    hidden = figures["hidden_comm_pct"]
    return Check(
        name,
        Status.PASS,
        f"{size}; each rank sends {figures['bus_bytes_per_step'] / 2**20:.1f} MiB per step "
        f"(2(n-1)/n); one all_reduce of that size takes {figures['allreduce_ms']:g} ms "
        f"(busbw {figures['busbw_gbps']:g} GB/s); backward exposes {figures['exposed_comm_ms']:g} ms"
        + (
            " (more than the all-reduce alone: the rest is waiting for slower ranks, or contention)"
            if figures["exposed_comm_ms"] > figures["allreduce_ms"]
            else f", so {hidden:g}% of the all-reduce is hidden behind backward compute"
            if hidden is not None
            else ""
        ),
    )


def judge_compute(figures: dict[str, Any]) -> Check:
    detail = (
        f"forward {figures['forward_tflops']:g} TFLOP/s ({figures['forward_gflop']:.3g} GFLOP), "
        f"backward {figures['backward_tflops']:g} TFLOP/s ({figures['backward_gflop']:.3g} GFLOP), "
        f"whole step {figures['step_tflops']:g} TFLOP/s (matmul FLOPs over own compute time, median rank)"
    )
    if figures["peak_fraction"] is not None:
        detail += (
            f"; {figures['peak_fraction']:.1%} of the {figures['peak_tflops']:g} TFLOP/s peak "
            f"({figures['peak_source']})"
        )
    return Check("compute", Status.PASS, detail)


def judge_memory(data: list[dict[str, Any]], identities: list[dict[str, Any]]) -> Check:
    peaks = [d["peak_memory_bytes"] for d in data]
    kind = "device memory allocated" if data[0]["memory_kind"] == "device" else "resident set (RSS)"
    top = max(range(len(peaks)), key=peaks.__getitem__)
    return Check(
        "memory",
        Status.PASS,
        f"peak {kind} per rank: {min(peaks) / 2**20:.0f} to {peaks[top] / 2**20:.0f} MiB "
        f"(highest: {where(top, identities)})",
    )


# ---------------------------------------------------------------- tables
def rank0_table(data: dict[str, Any], warmup: int) -> Table:
    """The classic per-step printout of rank 0, warm-up steps marked."""
    rows = [
        {
            "step": step,
            "forward_ms": _ms(s["forward"]),
            "backward_ms": _ms(s["backward"]),
            "update_ms": _ms(s["update"]),
            "exposed_comm_ms": _ms(s["exposed_comm"]),
            "note": "warm-up" if step < warmup else "",
        }
        for step, s in enumerate(step_times(data["steps"]))
    ]
    columns = {
        "step": "Step",
        "forward_ms": "forward",
        "backward_ms": "backward",
        "update_ms": "update",
        "exposed_comm_ms": "exposed comm",
        "note": "",
    }
    return Table("rank0", "Rank 0, step by step (ms)", columns, rows)


def summary_table(
    medians: list[dict[str, float]], identities: list[dict[str, Any]], opts: ProfileOptions
) -> Table:
    """Per phase: each rank's median over steady-state steps, then min / median / max across ranks."""
    rows = []
    for phase, label in SUMMARY_PHASES.items():
        values = [m[phase] for m in medians]
        slowest = max(range(len(values)), key=values.__getitem__)
        rows.append(
            {
                "phase": phase,
                "label": label,
                "min_ms": _ms(min(values)),
                "median_ms": _ms(statistics.median(values)),
                "max_ms": _ms(max(values)),
                "slowest_rank": slowest,
                "slowest_host": identities[slowest]["host"],
            }
        )
    columns = {
        "label": "phase",
        "min_ms": "min",
        "median_ms": "median",
        "max_ms": "max",
        "slowest_rank": "slowest rank",
        "slowest_host": "host",
    }
    steady = opts.steps - opts.warmup
    title = f"Across ranks (ms): each rank's median over {counted(steady, 'steady step')}"
    return Table("summary", title, columns, rows)


def per_rank_table(
    data: list[dict[str, Any]],
    medians: list[dict[str, float]],
    ratios: list[float],
    cvs: list[float],
    identities: list[dict[str, Any]],
    opts: ProfileOptions,
) -> Table:
    work = flops(opts)["step"]
    rows = [
        {
            "rank": r,
            "host": identities[r]["host"],
            "step_ms": _ms(m["step"]),
            "compute_ms": _ms(m["compute"]),
            "exposed_comm_ms": _ms(m["exposed_comm"]),
            "ratio": round(ratios[r], 3),
            "cv": round(cvs[r], 3),
            "tflops": significant(work / m["compute"] / 1e12) if m["compute"] > 0 else 0.0,
            "peak_memory_mib": round(data[r]["peak_memory_bytes"] / 2**20, 1),
            "status": "WARN" if ratios[r] >= opts.straggler_threshold or cvs[r] > CV_WARN else "PASS",
        }
        for r, m in enumerate(medians)
    ]
    columns = {
        "rank": "rank",
        "step_ms": "step",
        "compute_ms": "compute",
        "exposed_comm_ms": "comm",
        "ratio": "vs med",
        "cv": "cv",
        "tflops": "TFLOP/s",
        "peak_memory_mib": "MiB",
        "status": "status",
    }
    # The host is the rank map's; the JSON keeps it in every row.
    title = (
        "Per rank, ms, medians of steady steps (comm: exposed; vs med: compute / the others' "
        "median; cv: std/mean of compute; MiB: peak memory)"
    )
    return Table("per_rank", title, columns, rows)


def breakdown_table(medians: list[dict[str, float]]) -> Table:
    """Where the median rank's step goes: the parts add up to the wall-clock step."""
    parts = {p: max(0.0, _median_across(medians, p)) for p in CHART_PARTS}
    total = sum(parts.values())
    rows = [
        {
            "part": part,
            "label": label,
            "ms": _ms(parts[part]),
            "share_pct": round(100 * parts[part] / total, 1) if total > 0 else 0.0,
        }
        for part, label in CHART_PARTS.items()
    ]
    return Table("breakdown", "Where a step's time goes (median across ranks)", {}, rows)


# Ranks whose every step the report keeps, at most: beyond, rank 0, the ranks a check names and
# the slowest (every step of every rank grows the JSON without bound: docs/performance.md);
# per_rank keeps every rank's medians.
STEP_RANKS = 64


def _step_ranks(ratios: list[float], checks: list[Check]) -> list[int]:
    """The ranks whose every step goes into the report: all of them, or at scale the telling ones."""
    if len(ratios) <= STEP_RANKS:
        return list(range(len(ratios)))
    named = {r for c in checks if c.status != Status.PASS for r in c.ranks}
    slowest = sorted(range(len(ratios)), key=lambda r: -ratios[r])
    chosen = dict.fromkeys([0, *sorted(named)][:STEP_RANKS])
    chosen.update(dict.fromkeys(slowest))  # after them, in order, the slowest not already chosen
    return sorted(list(chosen)[:STEP_RANKS])


def steps_table(
    data: list[dict[str, Any]], identities: list[dict[str, Any]], warmup: int, ranks: list[int]
) -> Table:
    """One row per rank per step, every phase in milliseconds (JSON only: the terminal shows rank 0)."""
    rows = [
        {
            "rank": r,
            "host": identities[r]["host"],
            "step": step,
            "warmup": step < warmup,
            **{f"{phase}_ms": _ms(s[phase]) for phase in SUMMARY_PHASES},
        }
        for r in ranks
        for step, s in enumerate(step_times(data[r]["steps"]))
    ]
    if len(ranks) == len(data):
        return Table("steps", "Every rank, every step", {}, rows)
    title = (
        f"Every step of {len(ranks)} of {len(data):,} ranks: rank 0, the ranks a check names, the slowest "
        "(every rank's medians: per_rank)"
    )
    return Table("steps", title, {}, rows)
