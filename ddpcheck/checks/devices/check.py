"""`ddpcheck devices`: measure every device, then judge each against its peers, its hardware and its results.

measure() on every rank: the same seeded matrix products everywhere (their checksums are
compared bitwise on rank 0), then three passes of timed products and copies. CPU ranks
take turns, one rank measuring while the others wait: ranks of one host share its cores
and memory bus, so measured together each would see the others' load and a healthy rank
could look slow; and a CPU rank's time leaves out what it waited for a core while the host
ran other processes (runqueue.py). GPU ranks measure at once, as a training step runs them,
each on its own device: that is also when power and thermal limits show. Each figure keeps its best pass
(noise on a busy host only ever slows a pass down). On GPUs, NVML's health readings and
the rank's topology follow. judge() on rank 0 (judge.py) compares plain numbers.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import platform
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from ddpcheck.checks.devices import DevicesOptions, runqueue, topology
from ddpcheck.checks.devices.fit import fit_iters, fit_passes
from ddpcheck.checks.devices.judge import (
    COPIES,
    DTYPES,
    judge,  # noqa: F401  (the command's judge, run on rank 0)
)
from ddpcheck.failure import gpu_facts
from ddpcheck.report.naming import counted

if TYPE_CHECKING:
    import torch

    from ddpcheck.rank.context import RankContext

SEED = 20_241_201
COPY_BYTES = {"cpu": 32 * 1024**2, "cuda": 256 * 1024**2}
# The shortest timed pass on CPU ranks (see timed()): 8 slices of a 20 ms duty cycle.
CPU_PASS_S = 0.15


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
    iters_asked = opts.iters
    turns = 1 if kind == "cuda" else ctx.world_size
    if ctx.budget:
        (slowest_s,), left_s = ctx.budget.agreed(ctx, [call_s])
        figures = len(DTYPES[kind]) + len(COPIES[kind])
        floor_s = 0.0 if kind == "cuda" else CPU_PASS_S
        iters = fit_iters(slowest_s, figures, turns, floor_s, iters_asked, opts.passes, left_s)
        opts = dataclasses.replace(opts, iters=iters)
    ctx.stage("measure: compute and copy rates")
    number, planned = 0, opts.passes
    while number < planned:
        began = time.perf_counter()
        for turn in range(turns):  # GPUs in one turn, all at once; CPU ranks each in its own
            ctx.barrier()
            if kind == "cuda" or turn == ctx.rank:
                passes.append(measure_pass(ctx, opts, operands))
        number += 1
        ctx.progress(number, planned, "devices: passes")
        if ctx.budget and number < planned:
            # Every rank must stop after the same pass: the slowest pass, the least time left.
            (pass_s,), left_s = ctx.budget.agreed(ctx, [time.perf_counter() - began])
            planned = number + fit_passes(pass_s, planned - number, left_s)
    ctx.barrier()
    account = ctx.budget and {
        "budget_s": ctx.budget.seconds,
        "passes_asked": opts.passes,
        "passes_run": number,
        "iters_asked": iters_asked,
        "iters_run": opts.iters,
    }
    return {
        "model": device_model(ctx.device),
        "checksums": checksums,
        "passes": passes,
        "health": gpu_facts.read(ctx.device) if kind == "cuda" else None,
        "topology": topology.read(ctx.device) if kind == "cuda" else None,
        **({"budget": account} if account else {}),
    }


def measure_pass(
    ctx: RankContext, opts: DevicesOptions, operands: dict[str, tuple[Any, Any]]
) -> dict[str, Any]:
    assert opts.iters is not None
    kind = ctx.device.type
    before, began = runqueue.waited_s(), time.perf_counter()
    gemm = {dtype: gemm_tflops(ctx, *operands[dtype], dtype, opts.iters) for dtype in DTYPES[kind]}
    copies = copy_rates(ctx, COPY_BYTES[kind], opts.iters)
    measured = {"gemm": gemm, "copy": copies}
    if kind != "cuda":
        # The share of the pass this rank waited for a core (left out of its rates): the host's load.
        measured["cpu_wait"] = runqueue.waited_since(before) / (time.perf_counter() - began)
    return measured


def _matrices(size: int, dtype: str, device: torch.device) -> tuple[Any, Any]:
    """The same two matrices on every rank: from a seeded CPU generator, then moved."""
    import torch

    generator = torch.Generator().manual_seed(SEED)
    a = torch.randn(size, size, generator=generator)
    b = torch.randn(size, size, generator=generator)
    torch_dtype = torch.float32 if dtype in ("float32", "tf32") else getattr(torch, dtype)
    return a.to(device, torch_dtype), b.to(device, torch_dtype)


@contextlib.contextmanager
def _precision(dtype: str) -> Iterator[None]:
    """fp32 products on TF32 tensor cores ("high"), as training runs them; float32 stays exact."""
    import torch

    saved = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision("high" if dtype == "tf32" else "highest")
    try:
        yield
    finally:
        torch.set_float32_matmul_precision(saved)


def product_checksum(ctx: RankContext, a: Any, b: Any, dtype: str) -> dict[str, Any]:
    """A digest of A @ B's bytes, and its sum (the evidence when the digests differ)."""
    import torch

    with _precision(dtype):
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
    with _precision(dtype):
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
    stopped part of every slice (a duty-cycled SIGSTOP) cannot look healthy in a pass short
    enough to fit between two stops. Its time leaves out what the thread spent waiting for a
    core while the host ran other processes: the host's load; the time a stopped or slow rank
    loses stays in (runqueue.py).
    """
    if ctx.device.type == "cuda":
        ctx.sync()
        return ctx.time_calls(call, iters), iters
    before = runqueue.waited_s()
    began = time.perf_counter()
    calls = 0
    while calls < iters or time.perf_counter() - began < CPU_PASS_S:
        call()
        ctx.tick()
        calls += 1
    wall = time.perf_counter() - began
    waited = runqueue.waited_since(before)
    # A wait the kernel counts as the whole pass (its clock and ours a tick apart) leaves no time to judge.
    if waited >= wall * 0.99:
        waited = 0.0
    return wall - waited, calls


def device_model(device: torch.device) -> str:
    """What must compute bit for bit alike: the GPU model, or the CPU model, torch and its threads."""
    import torch

    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return f"{cpu_model()} (torch {torch.__version__}, {counted(torch.get_num_threads(), 'thread')})"


def cpu_model() -> str:
    with contextlib.suppress(OSError), open("/proc/cpuinfo", encoding="utf-8") as info:
        for line in info:
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine() or "cpu"
