"""`ddpcheck train`: does DDP train correctly on these ranks, step by step?

The classic 5-step DDP training of nn.Linear(H, H) with MSE, turned into
verdicts. measure() runs on every rank. It initialises the layer from a
different seed on every rank, wraps it in DDP, and at each step records, on
this rank only: its local loss, a fingerprint of its gradients and weights,
how far its gradients are from the mean of every rank's local gradient
(computed here, independently, without DDP), and how far its weights are
from a single-process reference trained on the global batch. Every rank can
rebuild every rank's data and rank 0's initial weights from the seed, so
none of this needs data or weights from another rank. Ranks exchange only
fingerprints (two 64-bit checksums per tensor) and, only when these
disagree, receive rank 0's tensors to measure by how much. judge() runs on
rank 0 over that plain data.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from ddpcheck.checks.model import (
    DATA,
    INIT,
    build_linear,
    derive_seed,
    make_batch,
    make_optimizer,
    mse,
    private_compile_cache,
    wrap_ddp,
)
from ddpcheck.checks.train import TrainOptions
from ddpcheck.checks.train.judge import judge  # noqa: F401  (the command's judge, run on rank 0)

if TYPE_CHECKING:
    from ddpcheck.rank.context import RankContext


# Fingerprint: integer sums over the bits, in chunks so a huge tensor needs no huge temporary.
FINGERPRINT_CHUNK = 1 << 22
FINGERPRINT_MODULUS = 65_521  # a prime: position weights do not repeat with power-of-two shapes


# ---------------------------------------------------------------- fingerprints and differences
def fingerprint(tensor: Any) -> list[int]:
    """Two 64-bit checksums of a tensor's bits: equal tensors give equal fingerprints, bit for bit.

    The plain sum and a position-weighted sum of the bit patterns, taken as
    integers, so the result does not depend on summation order or device.
    Every NaN counts as the same NaN: a non-finite value is the loss check's
    finding, and payload bits differ between ranks for no fault.
    """
    import torch

    flat = tensor.detach().reshape(-1)
    as_int = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[flat.element_size()]
    plain = weighted = 0
    for start in range(0, flat.numel(), FINGERPRINT_CHUNK):
        chunk = flat[start : start + FINGERPRINT_CHUNK]
        if chunk.is_floating_point():
            chunk = torch.where(torch.isnan(chunk), torch.full_like(chunk, math.nan), chunk)
        bits = chunk.contiguous().view(as_int).to(torch.int64)
        positions = torch.arange(start, start + chunk.numel(), device=chunk.device)
        plain += int(bits.sum().item())
        weighted += int((bits * (positions % FINGERPRINT_MODULUS + 1)).sum().item())
    # Python ints do not wrap; fold back to int64 so fingerprints travel as int64 tensors.
    return [_wrap64(plain), _wrap64(weighted)]


def _wrap64(value: int) -> int:
    return (value + 2**63) % 2**64 - 2**63


def max_abs_diff(a: Any, b: Any) -> float:
    """max |a - b| over all elements; NaN when either holds a NaN where the other does not matter."""
    return float((a.detach() - b.detach()).abs().max().item())


def max_abs(tensor: Any) -> float:
    return float(tensor.detach().abs().max().item())


# ---------------------------------------------------------------- measure
class Batches:
    """Every rank's batch, rebuilt here from the seed: rows r*B..(r+1)*B of the global batch are rank r's."""

    def __init__(self, opts: TrainOptions, world_size: int, device: Any) -> None:
        import torch

        parts = [
            make_batch(opts.hidden, opts.batch, derive_seed(opts.seed, r, DATA), device)
            for r in range(world_size)
        ]
        self.inputs = torch.cat([x for x, _ in parts])
        self.targets = torch.cat([y for _, y in parts])
        self.batch = opts.batch
        self.world_size = world_size

    def of(self, rank: int) -> tuple[Any, Any]:
        rows = slice(rank * self.batch, (rank + 1) * self.batch)
        return self.inputs[rows], self.targets[rows]


class Reference:
    """One copy of the model in this process: rank 0's initial weights, trained on the global batch."""

    def __init__(self, opts: TrainOptions, batches: Batches, device: Any) -> None:
        self.module = build_linear(opts.hidden, derive_seed(opts.seed, 0, INIT), device)
        self.parameters = list(self.module.parameters())  # the optimizer updates them in place
        self.initial = [p.detach().clone() for p in self.parameters]
        self.optimizer = make_optimizer(opts.optimizer, self.parameters, opts.lr)
        self.batches = batches

    def step(self) -> float:
        """One step on the concatenated global batch; its loss before the update."""
        self.optimizer.zero_grad(set_to_none=True)
        loss = mse(self.module(self.batches.inputs), self.batches.targets)
        loss.backward()
        self.optimizer.step()
        return float(loss.item())


def mean_local_gradients(module: Any, batches: Batches) -> list[Any]:
    """The mean over ranks of each rank's local gradient at this module's weights, without DDP.

    functional_call on detached copies of the parameters: autograd never
    touches the real ones, so DDP's reducer hooks stay out of it.
    """
    import torch
    from torch.func import functional_call

    params = {name: p.detach().requires_grad_(True) for name, p in module.named_parameters()}
    total = [torch.zeros_like(p) for p in params.values()]
    for rank in range(batches.world_size):
        inputs, targets = batches.of(rank)
        loss = mse(functional_call(module, params, (inputs,)), targets)
        grads = torch.autograd.grad(loss, list(params.values()))
        total = [t + g for t, g in zip(total, grads, strict=True)]
    return [t / batches.world_size for t in total]


@contextlib.contextmanager
def full_fp32_matmuls() -> Iterator[None]:
    """Exact float32 matmuls for the duration (TF32 off), restored afterwards.

    With TF32 (set by site code or TORCH_ALLOW_TF32_CUBLAS_OVERRIDE), the one-process
    reference's matmul over the global batch rounds ~1e-3 apart from the per-rank ones,
    and Adam turns that into whole steps of difference: "same as one big batch" would
    fail on a healthy GPU.
    """
    import torch

    saved = (torch.get_float32_matmul_precision(), torch.backends.cuda.matmul.allow_tf32)
    torch.set_float32_matmul_precision("highest")
    torch.backends.cuda.matmul.allow_tf32 = False
    try:
        yield
    finally:
        torch.set_float32_matmul_precision(saved[0])
        torch.backends.cuda.matmul.allow_tf32 = saved[1]


@private_compile_cache()
@full_fp32_matmuls()
def measure(ctx: RankContext, opts: TrainOptions) -> dict[str, Any]:
    import torch

    torch.manual_seed(derive_seed(opts.seed, ctx.rank, INIT))  # nothing below should draw, but be sure
    ctx.stage("measure: initialise the layer from this rank's own seed")
    module = build_linear(opts.hidden, derive_seed(opts.seed, ctx.rank, INIT), ctx.device)
    names = [name for name, _ in module.named_parameters()]
    batches = Batches(opts, ctx.world_size, ctx.device)
    reference = Reference(opts, batches, ctx.device)
    before = _init_state(module, reference)

    ctx.stage("measure: wrap in DistributedDataParallel (broadcasts rank 0's weights)")
    ddp = wrap_ddp(module, ctx, opts.bucket_cap_mb)
    after = _init_state(module, reference)
    optimizer = make_optimizer(opts.optimizer, ddp.parameters(), opts.lr)

    steps = []
    evidence_taken: set[str] = set()
    for step in range(opts.steps):
        ctx.stage(f"measure: step {step + 1}/{opts.steps}")
        ctx.progress(step, opts.steps, f"step {step + 1}/{opts.steps}")
        record = _train_step(ctx, opts, ddp, optimizer, batches, reference, step)
        _compare_across_ranks(ctx, module, record, step, opts.steps, evidence_taken)
        steps.append(record)
    ctx.progress(opts.steps, opts.steps, "done")
    return {
        "params": names,
        "init": {"before": before, "after": after},
        "steps": steps,
        "update_scale": [
            max_abs_diff(p, p0) for p, p0 in zip(reference.parameters, reference.initial, strict=True)
        ],
        "weight_scale": [max_abs(p) for p in reference.parameters],
    }


def _init_state(module: Any, reference: Reference) -> dict[str, Any]:
    """This rank's fingerprints and its distance from rank 0's initial weights (rebuilt here)."""
    params = list(module.parameters())
    return {
        "fingerprint": [fingerprint(p) for p in params],
        "diff_from_rank0": [max_abs_diff(p, p0) for p, p0 in zip(params, reference.initial, strict=True)],
    }


def _train_step(
    ctx: RankContext,
    opts: TrainOptions,
    ddp: Any,
    optimizer: Any,
    batches: Batches,
    reference: Reference,
    step: int,
) -> dict[str, Any]:
    """One DDP step as the classic loop does it, with what each check needs recorded on the way."""
    import torch

    module = ddp.module
    expected = mean_local_gradients(module, batches)
    inputs, targets = batches.of(ctx.rank)
    optimizer.zero_grad(set_to_none=True)
    ctx.faults.slow()
    loss = ctx.faults.nan(mse(ddp(inputs), targets), step, opts.steps)
    loss.backward()
    grads = [p.grad for p in module.parameters()]
    record: dict[str, Any] = {
        "loss": float(loss.item()),
        "grad_fingerprint": [fingerprint(g) for g in grads],
        "grad_dev": [max_abs_diff(g, e) for g, e in zip(grads, expected, strict=True)],
        "grad_scale": [max_abs(e) for e in expected],
    }
    optimizer.step()
    ctx.faults.diverge(module, step, opts.steps)
    record["reference_loss"] = reference.step()
    params = list(module.parameters())
    record["weight_fingerprint"] = [fingerprint(p) for p in params]
    record["weight_finite"] = all(bool(torch.isfinite(p).all().item()) for p in params)
    record["reference_dev"] = [max_abs_diff(p, r) for p, r in zip(params, reference.parameters, strict=True)]
    return record


def _compare_across_ranks(
    ctx: RankContext, module: Any, record: dict[str, Any], step: int, steps: int, taken: set[str]
) -> None:
    """Exchange fingerprints; where they disagree, measure each rank's distance from rank 0.

    The evidence costs one broadcast of rank 0's tensors (what DDP's own
    construction sends), so it is taken only at the first disagreement of
    gradients and of weights, and at the last step to show where it ended.
    """
    import torch
    import torch.distributed as dist

    mine = [v for fp in record["grad_fingerprint"] + record["weight_fingerprint"] for v in fp]
    local = torch.tensor(mine, dtype=torch.int64, device=ctx.device)
    gathered = [torch.empty_like(local) for _ in range(ctx.world_size)]
    dist.all_gather(gathered, local)
    half = len(mine) // 2
    rows = [g.tolist() for g in gathered]
    for kind, part in (("grad", slice(0, half)), ("weight", slice(half, None))):
        if all(r[part] == rows[0][part] for r in rows) or (kind in taken and step != steps - 1):
            continue
        taken.add(kind)
        tensors = [p.grad if kind == "grad" else p for p in module.parameters()]
        record[f"{kind}_diff_from_rank0"] = [_diff_from_rank0(t) for t in tensors]


def _diff_from_rank0(tensor: Any) -> float:
    import torch.distributed as dist

    theirs = tensor.detach().clone()
    dist.broadcast(theirs, src=0)
    return max_abs_diff(tensor, theirs)
