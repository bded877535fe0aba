"""`ddpcheck profile`: where every DDP step's time goes, on every rank, and which rank is slow.

measure() runs on every rank: each step of nn.Linear(H, H) in DDP is timed in
three phases (forward, backward with gradient sync, optimizer update), with
CUDA events on GPUs and perf_counter on CPU, where every op has finished when
it returns. Each step also times one backward under `no_sync()`, the same
compute without communication: the difference is the communication backward
could not hide. After the steps, one all_reduce of the gradients' size, timed
alone, gives the bus bandwidth. judge() (judge.py) runs on rank 0 over plain timings.

Under DDP a slow rank makes every rank's step slow (the others wait for it in
backward's all-reduce), so stragglers are found by each rank's own work,
compute = forward + backward under no_sync + update, not by wall-clock step.
"""

from __future__ import annotations

import itertools
import sys
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ddpcheck.checks.model import (
    DATA,
    INIT,
    build_linear,
    derive_seed,
    gradient_bytes,
    make_batch,
    make_optimizer,
    mse,
    private_compile_cache,
    wrap_ddp,
)
from ddpcheck.checks.profile import ProfileOptions
from ddpcheck.checks.profile.judge import judge  # noqa: F401  (the command's judge, run on rank 0)
from ddpcheck.checks.sweep.sweep import time_collective

if TYPE_CHECKING:
    from ddpcheck.rank.context import RankContext


LR = 1e-3  # the classic script's Adam; the value does not change the timings
ALLREDUCE_WARMUP, ALLREDUCE_ITERS = 1, 3
# A slow rank (--inject slow) sleeps about as long as its step's compute: half speed.
SLOW_SCALE = 1.5  # forward + backward is about 1.5 x backward


# ---------------------------------------------------------------- timing
class Marks:
    """Timestamps at phase boundaries: CUDA events on a GPU, perf_counter on CPU.

    On a GPU the host only records events while kernels run, and `pending()` defers reading them:
    a loop reads all its steps' intervals once, after the last, so that no wait inside it drains
    the stream and every step after the first starts with work queued, as a training loop does.
    """

    def __init__(self, device: Any) -> None:
        self.cuda = device.type == "cuda"
        self.points: list[Any] = []

    def mark(self) -> None:
        if self.cuda:
            import torch

            event = torch.cuda.Event(enable_timing=True)
            event.record()
            self.points.append(event)
        else:
            self.points.append(time.perf_counter())

    def pending(self) -> Callable[[], list[float]]:
        """The seconds between consecutive marks since the last call, read when called (on a GPU,
        after waiting for the last mark's event)."""
        points, self.points = self.points, []
        if not self.cuda:
            intervals = [b - a for a, b in itertools.pairwise(points)]
            return lambda: intervals

        def read() -> list[float]:
            points[-1].synchronize()
            return [a.elapsed_time(b) / 1e3 for a, b in itertools.pairwise(points)]

        return read


def zero_grads(optimizer: Any, inputs: Any) -> None:
    optimizer.zero_grad(set_to_none=True)
    inputs.grad = None


def step_marked(
    ddp: Any,
    optimizer: Any,
    inputs: Any,
    targets: Any,
    marks: Marks,
    before_forward: Callable[[], None] | None = None,
) -> Callable[[], list[float]]:
    """One training step as the classic loop runs it; its (forward, backward, update) seconds, read later."""
    zero_grads(optimizer, inputs)
    marks.mark()
    if before_forward is not None:
        before_forward()
    loss = mse(ddp(inputs), targets)
    marks.mark()
    loss.backward()  # returns once DDP's all-reduce is done (on GPUs: once the stream waits for it)
    marks.mark()
    optimizer.step()
    marks.mark()
    return marks.pending()


def backward_marked(
    ddp: Any, optimizer: Any, inputs: Any, targets: Any, marks: Marks
) -> Callable[[], list[float]]:
    """The same backward without gradient sync (under no_sync), its seconds read later; leaves no
    gradients behind."""
    zero_grads(optimizer, inputs)
    with ddp.no_sync():
        loss = mse(ddp(inputs), targets)
        marks.mark()
        loss.backward()
        marks.mark()
    seconds = marks.pending()
    zero_grads(optimizer, inputs)  # the synchronised step must not reduce these
    return seconds


def peak_memory(ctx: RankContext) -> tuple[int, str]:
    """(bytes, kind): peak allocated device memory on a GPU, peak resident set of this process on CPU."""
    if ctx.device.type == "cuda":
        import torch

        return int(torch.cuda.max_memory_allocated(ctx.device)), "device"
    try:
        import resource

        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        return int(peak if sys.platform == "darwin" else peak * 1024), "rss"  # macOS: bytes; Linux: KiB
    except ImportError:  # Windows: the current RSS is the best there is
        import psutil

        return int(psutil.Process().memory_info().rss), "rss"


# ---------------------------------------------------------------- measure
def setup(ctx: RankContext, opts: ProfileOptions) -> tuple[Any, Any, Any, Any]:
    """(ddp, optimizer, inputs, targets): the classic model, ready to step."""
    module = build_linear(opts.hidden, derive_seed(0, 0, INIT), ctx.device)
    ddp = wrap_ddp(module, ctx, opts.bucket_cap_mb)
    optimizer = make_optimizer("adam", ddp.parameters(), LR)
    inputs, targets = make_batch(opts.hidden, opts.batch, derive_seed(0, ctx.rank, DATA), ctx.device)
    # As for a layer inside a deeper network, backward computes the input's gradient too: 4*B*H^2 FLOPs.
    inputs.requires_grad_(True)
    return ddp, optimizer, inputs, targets


@private_compile_cache()
def measure(ctx: RankContext, opts: ProfileOptions) -> dict[str, Any]:
    import torch
    import torch.distributed as dist

    ctx.stage("measure: build the model")
    if ctx.device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(ctx.device)
    ddp, optimizer, inputs, targets = setup(ctx, opts)
    marks = Marks(ctx.device)
    measured = []
    for step in range(opts.steps):
        ctx.stage(f"measure: step {step + 1}/{opts.steps}")
        ctx.progress(step, opts.steps, f"step {step + 1}/{opts.steps}")
        compute = backward_marked(ddp, optimizer, inputs, targets, marks)
        # A planted slow rank sleeps as long as its own work: read now (a wait, in self-tests only).
        slow_s = compute()[0] * SLOW_SCALE if ctx.faults.has("slow") else 0.0
        phases = step_marked(ddp, optimizer, inputs, targets, marks, lambda s=slow_s: ctx.faults.slow(s))
        measured.append((compute, phases))
    rows = []
    for compute, phases in measured:  # read once, after the last step: no wait inside the loop
        forward, backward, update = phases()
        rows.append(
            {"forward": forward, "backward": backward, "backward_compute": compute()[0], "update": update}
        )
    ctx.progress(opts.steps, opts.steps, "done")
    ctx.stage("measure: time one all_reduce of the gradients' size")
    grad_bytes = gradient_bytes(ddp.module)
    buffer = torch.zeros(grad_bytes // 4, dtype=torch.float32, device=ctx.device)  # float32, as the gradients
    allreduce_s = time_collective(ctx, lambda: dist.all_reduce(buffer), ALLREDUCE_WARMUP, ALLREDUCE_ITERS)
    memory, memory_kind = peak_memory(ctx)
    return {
        "steps": rows,
        "grad_bytes": grad_bytes,
        "allreduce_s": allreduce_s,
        "peak_memory_bytes": memory,
        "memory_kind": memory_kind,
        "matmul_precision": torch.get_float32_matmul_precision(),
    }
