"""`ddpcheck devices`: measure every device, then judge each against its peers, its hardware and its results.

measure() on every rank: the same seeded matrix products everywhere (their checksums are
compared bitwise on rank 0), then three passes of timed products and copies. CPU ranks
take turns, one rank measuring while the others wait: ranks of one host share its cores
and memory bus, so measured together each would see the others' load and a healthy rank
could look slow. GPU ranks measure at once, as a training step runs them, each on its own
device: that is also when power and thermal limits show. Each figure keeps its best pass
(noise on a busy host only ever slows a pass down). On GPUs, NVML's health readings and
the rank's topology follow. judge() on rank 0 compares plain numbers.
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
import platform
import time
from collections import Counter
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ddpcheck.checks.devices import DevicesOptions, health, topology
from ddpcheck.checks.devices import expected as expectations
from ddpcheck.checks.devices.budget import budget_findings, fit_iters, fit_passes
from ddpcheck.checks.peers import EXACT_UP_TO, reference_of
from ddpcheck.checks.rankmap import judge_rank_map, rank_map_table
from ddpcheck.report.model import Check, Report, Status, Table, counted
from ddpcheck.report.naming import describe_ranks, hosts_of, where

if TYPE_CHECKING:
    import torch

    from ddpcheck.rank.context import RankContext

SEED = 20_241_201
COPY_BYTES = {"cpu": 32 * 1024**2, "cuda": 256 * 1024**2}
# The products whose checksums every rank compares: the dtypes training uses on each device.
DTYPES = {"cpu": ("float32",), "cuda": ("bfloat16", "tf32")}
COPIES = {"cpu": ("memcpy",), "cuda": ("h2d", "d2h", "d2d")}
# The shortest timed pass on CPU ranks (see timed()): 8 slices of a 20 ms duty cycle.
CPU_PASS_S = 0.15
COPY_LABELS = {
    "memcpy": "memcpy",
    "h2d": "host to device",
    "d2h": "device to host",
    "d2d": "device to device",
}


# ---------------------------------------------------------------- measure
def measure(ctx: RankContext, opts: DevicesOptions) -> dict[str, Any]:
    assert opts.size is not None and opts.iters is not None  # for_device() chose them
    kind = ctx.device.type
    ctx.stage("measure: the same seeded products on every rank")
    # Made once: at 8192 x 8192 the seeded CPU generator takes about a second per matrix.
    operands = {dtype: _matrices(opts.size, dtype, ctx.device) for dtype in DTYPES[kind]}
    began = time.perf_counter()
    checksums = {dtype: product_checksum(ctx, *operands[dtype], dtype) for dtype in DTYPES[kind]}
    # One product per dtype and its digest: what a timed call costs, at most (--budget's yardstick).
    call_s = (time.perf_counter() - began) / len(DTYPES[kind])
    passes: list[dict[str, Any]] = []
    passes_asked, iters_asked = opts.passes, opts.iters
    iters = iters_asked
    turns = 1 if kind == "cuda" else ctx.world_size
    if ctx.budget:
        slowest, least_left = ctx.agree_max(
            [math.ceil(call_s * 1e6), -math.floor(ctx.budget.measure_left() * 1e3)]
        )
        figures = len(DTYPES[kind]) + len(COPIES[kind])
        floor_s = 0.0 if kind == "cuda" else CPU_PASS_S
        iters = fit_iters(slowest / 1e6, figures, turns, floor_s, iters, passes_asked, -least_left / 1e3)
        opts = dataclasses.replace(opts, iters=iters)
    ctx.stage("measure: compute and copy rates")
    number, planned = 0, passes_asked
    while number < planned:
        began = time.perf_counter()
        if kind == "cuda":
            ctx.barrier()
            passes.append(measure_pass(ctx, opts, operands))
        else:
            for turn in range(ctx.world_size):
                ctx.barrier()
                if turn == ctx.rank:
                    passes.append(measure_pass(ctx, opts, operands))
        number += 1
        ctx.progress(number, planned, "devices: passes")
        if ctx.budget and number < planned:
            # Every rank must stop after the same pass: the slowest pass, the least time left.
            pass_us, least_left = ctx.agree_max(
                [math.ceil((time.perf_counter() - began) * 1e6), -math.floor(ctx.budget.measure_left() * 1e3)]
            )
            planned = number + fit_passes(pass_us / 1e6, planned - number, -least_left / 1e3)
    ctx.barrier()
    account = ctx.budget and {
        "budget_s": ctx.budget.seconds,
        "passes_asked": passes_asked,
        "passes_run": number,
        "iters_asked": iters_asked,
        "iters_run": iters,
    }
    return {
        "model": device_model(ctx.device),
        "checksums": checksums,
        "passes": passes,
        "health": health.read(ctx.device) if kind == "cuda" else None,
        "topology": topology.read(ctx.device) if kind == "cuda" else None,
        **({"budget": account} if account else {}),
    }


def measure_pass(
    ctx: RankContext, opts: DevicesOptions, operands: dict[str, tuple[Any, Any]]
) -> dict[str, Any]:
    assert opts.iters is not None
    kind = ctx.device.type
    gemm = {dtype: gemm_tflops(ctx, *operands[dtype], dtype, opts.iters) for dtype in DTYPES[kind]}
    copies = copy_rates(ctx, COPY_BYTES[kind], opts.iters)
    return {"gemm": gemm, "copy": copies}


def _matrices(size: int, dtype: str, device: torch.device) -> tuple[Any, Any]:
    """The same two matrices on every rank: from a seeded CPU generator, then moved."""
    import torch

    generator = torch.Generator().manual_seed(SEED)
    a = torch.randn(size, size, generator=generator)
    b = torch.randn(size, size, generator=generator)
    torch_dtype = torch.float32 if dtype in ("float32", "tf32") else getattr(torch, dtype)
    return a.to(device, torch_dtype), b.to(device, torch_dtype)


class _Precision:
    """fp32 products on TF32 tensor cores ("high"), as training runs them; float32 stays exact."""

    def __init__(self, dtype: str) -> None:
        self.dtype = dtype

    def __enter__(self) -> None:
        import torch

        self.saved = torch.get_float32_matmul_precision()
        torch.set_float32_matmul_precision("high" if self.dtype == "tf32" else "highest")

    def __exit__(self, *exc: object) -> None:
        import torch

        torch.set_float32_matmul_precision(self.saved)


def product_checksum(ctx: RankContext, a: Any, b: Any, dtype: str) -> dict[str, Any]:
    """A digest of A @ B's bytes, and its sum (the evidence when the digests differ)."""
    import torch

    with _Precision(dtype):
        product = a @ b
    ctx.faults.sdc(product)
    host = product.cpu().contiguous()
    digest = hashlib.sha256(host.view(torch.uint8).numpy().tobytes()).hexdigest()[:16]
    return {"sha256": digest, "sum": float(host.double().sum())}


def gemm_tflops(ctx: RankContext, a: Any, b: Any, dtype: str, iters: int) -> float:
    """Sustained products of two n x n matrices, TFLOP/s (2 n^3 per product)."""
    import torch

    size = a.shape[0]
    out = torch.empty_like(a)
    # --inject slowgpu: this rank computes every product SLOWGPU_FACTOR times and counts it once.
    repeats = ctx.faults.slowgpu_repeats()
    with _Precision(dtype):
        for _ in range(2):
            torch.mm(a, b, out=out)

        def product() -> None:
            for _ in range(repeats):
                torch.mm(a, b, out=out)

        seconds, calls = timed(ctx, product, iters)
    return 2 * size**3 * calls / seconds / 1e12


def copy_rates(ctx: RankContext, size_bytes: int, iters: int) -> dict[str, float]:
    """Bytes copied per second, GB/s: memcpy on CPU; pinned host<->device and device-to-device on GPUs."""
    import torch

    count = size_bytes // 4
    if ctx.device.type != "cuda":
        src, dst = torch.ones(count), torch.empty(count)
        seconds, calls = timed(ctx, lambda: dst.copy_(src), iters)
        return {"memcpy": size_bytes * calls / seconds / 1e9}
    host = torch.ones(count, pin_memory=True)
    device, other = torch.empty(count, device=ctx.device), torch.empty(count, device=ctx.device)
    rates = {}
    for name, dst, src in (("h2d", device, host), ("d2h", host, device), ("d2d", other, device)):
        dst.copy_(src, non_blocking=True)  # warm-up
        seconds, calls = timed(ctx, lambda dst=dst, src=src: dst.copy_(src, non_blocking=True), iters)
        rates[name] = size_bytes * calls / seconds / 1e9
    return rates


def timed(ctx: RankContext, call: Callable[[], object], iters: int) -> tuple[float, int]:
    """(seconds, calls): `iters` calls on GPUs; on CPU at least `iters` calls and at least CPU_PASS_S.

    A CPU pass lasts long enough to span many of the scheduler's time slices: a rank that is
    stopped part of every slice (a noisy neighbour, a duty-cycled SIGSTOP) cannot look healthy
    in a pass short enough to fit between two stops.
    """
    if ctx.device.type == "cuda":
        ctx.sync()
        return ctx.time_calls(call, iters), iters
    began = time.perf_counter()
    calls = 0
    while calls < iters or time.perf_counter() - began < CPU_PASS_S:
        call()
        ctx.tick()
        calls += 1
    return time.perf_counter() - began, calls


def device_model(device: torch.device) -> str:
    """What must compute bit for bit alike: the GPU model, or the CPU model, torch and its threads."""
    import torch

    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return f"{cpu_model()} (torch {torch.__version__}, {counted(torch.get_num_threads(), 'thread')})"


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as info:
            for line in info:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "cpu"


# ---------------------------------------------------------------- judge
def judge(data: list[dict[str, Any]], identities: list[dict[str, Any]], opts: DevicesOptions) -> Report:
    assert opts.threshold is not None and opts.memory_threshold is not None
    kind = "cuda" if any(str(i.get("device", "")).startswith("cuda") for i in identities) else "cpu"
    rows = device_rows(data, identities, kind)
    report = Report(command="devices")
    report.checks.append(judge_rank_map(identities))
    report.checks.append(judge_compute(rows, identities, opts.threshold, kind))
    report.checks.append(judge_memory(rows, identities, opts.memory_threshold, kind))
    report.checks.append(judge_results(data, identities))
    if kind == "cuda":
        report.checks.append(health.judge([d["health"] for d in data], identities))
        report.checks.append(topology.judge([d["topology"] for d in data], identities))
        report.tables.append(health.table([d["health"] for d in data], identities))
    else:
        report.checks.append(Check("health", Status.SKIP, "CPU ranks: no GPU to read health from (NVML)"))
        report.checks.append(Check("topology", Status.SKIP, "CPU ranks: no GPU whose NUMA node to match"))
    blamed = {r for c in report.checks if c.status in (Status.FAIL, Status.ERROR) for r in c.ranks}
    for row in rows:
        row["status"] = "FAIL" if row["rank"] in blamed else "PASS"
    report.tables.insert(0, devices_table(rows, kind, opts))
    report.tables.append(rank_map_table(identities))
    budget = budget_findings(data[0].get("budget"))
    if budget:
        report.checks.append(budget[0])
        report.tables.append(budget[1])
    return report


def device_rows(
    data: list[dict[str, Any]], identities: list[dict[str, Any]], kind: str
) -> list[dict[str, Any]]:
    """One row per rank: its best pass of every figure (noise only ever slows a pass)."""
    rows = []
    primary = DTYPES[kind][0]
    for rank, d in enumerate(data):
        ident = identities[rank]
        passes = d["passes"]
        row: dict[str, Any] = {
            "rank": rank,
            "host": ident["host"],
            "device": ident["device"],
            "device_name": ident.get("device_name"),
            "model": d["model"],
            "gemm_dtype": primary,
        }
        for dtype in DTYPES[kind]:
            key = "gemm_tflops" if dtype == primary else f"{dtype}_tflops"
            row[key] = _sig(max(p["gemm"][dtype] for p in passes))
        for copy in COPIES[kind]:
            key = "copy_gbps" if copy in ("memcpy", "d2d") else f"{copy}_gbps"
            row[key] = _sig(max(p["copy"][copy] for p in passes))
        row["checksum"] = d["checksums"][primary]["sha256"]
        if d.get("health"):
            row["sm_clock_mhz"] = d["health"].get("sm_clock_mhz")
            row["throttle"] = ", ".join(d["health"].get("throttle") or []) or None
        rows.append(row)
    return rows


def _sig(value: float, digits: int = 4) -> float:
    return float(f"{value:.{digits}g}")


def slow_ranks(values: dict[int, float], threshold: float) -> dict[int, float]:
    """Ranks below `threshold` x the median of the others, and further below than their noise.

    Each rank against the others only: with four ranks and one slow, its own figure does not
    pull down the reference it is held to (beyond EXACT_UP_TO ranks, one reference over all
    of them serves every rank: linear time). Returns rank -> that reference.
    """
    found = {}
    if len(values) > EXACT_UP_TO:
        shared = reference_of(list(values.values()), threshold)
        assert shared is not None
        return {r: shared.median for r, v in values.items() if shared.is_slow(v, threshold)}
    for rank, value in values.items():
        others = [v for r, v in values.items() if r != rank]
        reference = reference_of(others, threshold)
        if reference is not None and reference.is_slow(value, threshold):
            found[rank] = reference.median
    return found


def _peer_check(
    name: str,
    figures: list[tuple[str, str, str]],
    rows: list[dict[str, Any]],
    identities: list[dict[str, Any]],
    threshold: float,
    expected: Callable[[str, str, float], str | None],
) -> Check:
    """One check over several figures (key, label, unit): FAIL on a slow rank, WARN below the hardware."""
    problems, warnings, summary = [], [], []
    ranks: set[int] = set()
    warned: set[int] = set()
    for key, label, unit in figures:
        values = {row["rank"]: row[key] for row in rows if isinstance(row.get(key), (int, float))}
        if not values:
            continue
        for rank, reference in sorted(slow_ranks(values, threshold).items()):
            ranks.add(rank)
            problems.append(
                f"{where(rank, identities)}: {label} {values[rank]:.3g} {unit}, "
                f"{values[rank] / reference:.2f}x its peers' median {reference:.3g} {unit} "
                f"(below {threshold:g}x)"
            )
        summary.append(f"{label} {min(values.values()):.3g}-{max(values.values()):.3g} {unit}")
        for row in rows:
            warning = expected(key, row.get("device_name") or "", row[key]) if key in row else None
            if warning:
                warned.add(row["rank"])
                warnings.append(f"{where(row['rank'], identities)}: {warning}")
    if problems:
        ordered = sorted(ranks)
        return Check(name, Status.FAIL, _listed(problems), ordered, hosts_of(ordered, identities))
    if warnings:
        ordered = sorted(warned)
        return Check(name, Status.WARN, _listed(warnings), ordered, hosts_of(ordered, identities))
    peers = counted(len(rows), "rank")
    return Check(name, Status.PASS, f"{peers} within {threshold:g}x of their peers: {'; '.join(summary)}")


# Findings a check's detail spells out: two figures on every GPU of an 8-GPU node; the rest are
# counted (the check's ranks and hosts, and the devices table, name every one).
FINDINGS_SHOWN = 16


def _listed(findings: list[str]) -> str:
    shown = "; ".join(findings[:FINDINGS_SHOWN])
    more = len(findings) - FINDINGS_SHOWN
    return shown + (f"; and {more} more (the devices table in --json has every rank)" if more > 0 else "")


def judge_compute(
    rows: list[dict[str, Any]], identities: list[dict[str, Any]], threshold: float, kind: str
) -> Check:
    primary = DTYPES[kind][0]
    figures = [("gemm_tflops", f"{primary} products", "TFLOP/s")]
    if kind == "cuda":
        figures.append(("tf32_tflops", "tf32 products", "TFLOP/s"))
    check = _peer_check("compute", figures, rows, identities, threshold, expectations.compute_warning)
    throttled = [r for r in rows if r.get("throttle") and r["rank"] in check.ranks]
    if throttled:
        check.detail += "; throttled: " + ", ".join(f"rank {r['rank']} ({r['throttle']})" for r in throttled)
    return check


def judge_memory(
    rows: list[dict[str, Any]], identities: list[dict[str, Any]], threshold: float, kind: str
) -> Check:
    figures = [
        ("copy_gbps" if copy in ("memcpy", "d2d") else f"{copy}_gbps", COPY_LABELS[copy] + " copies", "GB/s")
        for copy in COPIES[kind]
    ]
    return _peer_check("memory", figures, rows, identities, threshold, expectations.copy_warning)


def judge_results(data: list[dict[str, Any]], identities: list[dict[str, Any]]) -> Check:
    """The same seeded products, bitwise, across the ranks of one device model: the odd ones out named."""
    problems: list[str] = []
    culprits: set[int] = set()
    compared = 0
    by_model: dict[str, list[int]] = {}
    for rank, d in enumerate(data):
        by_model.setdefault(d["model"], []).append(rank)
    for model, ranks in by_model.items():
        for dtype in data[ranks[0]]["checksums"]:
            digests = {r: data[r]["checksums"][dtype]["sha256"] for r in ranks}
            compared += 1
            counts = Counter(digests.values())
            if len(counts) == 1:
                continue
            (top, top_count), *rest = counts.most_common()
            if rest and rest[0][1] == top_count:
                culprits |= set(ranks)
                problems.append(
                    f"{dtype} products on {model} disagree and no majority says which is right "
                    f"({', '.join(f'rank {r}: {digests[r]}' for r in ranks)})"
                )
                continue
            odd = sorted(r for r in ranks if digests[r] != top)
            culprits |= set(odd)
            agree = next(r for r in ranks if digests[r] == top)
            sums = ", ".join(
                f"sum {data[r]['checksums'][dtype]['sum']:.6g} against "
                f"{data[agree]['checksums'][dtype]['sum']:.6g}"
                for r in odd[:4]
            )
            problems.append(
                f"{describe_ranks(odd, identities)}: {dtype} product differs from the {top_count} of "
                f"{len(ranks)} ranks of {model} that agree ({sums})"
            )
    if problems:
        ordered = sorted(culprits)
        return Check(
            "results agree", Status.FAIL, "; ".join(problems), ordered, hosts_of(ordered, identities)
        )
    singles = [m for m, r in by_model.items() if len(r) == 1]
    if len(singles) == len(by_model) and len(data) > 1:
        return Check(
            "results agree", Status.SKIP, "every rank's device is a different model: nothing to compare"
        )
    models = counted(len(by_model), "device model")
    return Check(
        "results agree",
        Status.PASS,
        f"the same seeded products bit for bit on every rank of each model ({models}, "
        f"{counted(compared, 'product')} compared)",
    )


def devices_table(rows: list[dict[str, Any]], kind: str, opts: DevicesOptions) -> Table:
    primary = DTYPES[kind][0]
    # The units in the title and short headers: the table fits 80 columns. On GPUs the host (the
    # rank map's) and the checksum (the results check names a rank that differs) are JSON only.
    if kind == "cuda":
        columns = {"rank": "rank", "device": "device", "gemm_tflops": primary, "tf32_tflops": "tf32"}
        columns |= {"h2d_gbps": "H2D", "d2h_gbps": "D2H", "copy_gbps": "D2D", "sm_clock_mhz": "SM MHz"}
        units = "TFLOP/s of products, GB/s of copies"
    else:
        columns = {"rank": "rank", "host": "host", "device": "device", "gemm_tflops": primary}
        columns |= {"copy_gbps": "memcpy", "checksum": "checksum"}
        units = "TFLOP/s of products, GB/s of memcpy"
    columns["status"] = "status"
    title = f"Devices: {units} ({opts.size}x{opts.size} products, best of {opts.passes} passes)"
    return Table("devices", title, columns, rows)
