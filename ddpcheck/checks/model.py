"""The classic experiment's network and data, shared by `ddpcheck train` and `ddpcheck profile`.

One `nn.Linear(H, H)` trained with MSE on random inputs and targets, as the
classic mini_train.py. Everything is derived from a seed with its own CPU
generator, so any rank can rebuild any other rank's initial weights or batch
bit for bit without receiving them: that is what lets `train` compare against
a single-process reference without gathering data.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import sys
import tempfile
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ddpcheck.rank.context import RankContext

# What a derived seed is for: the same (seed, rank) must not give the same numbers to both.
INIT, DATA = 0, 1


@contextlib.contextmanager
def private_compile_cache() -> Iterator[None]:
    """Keep torch's compile cache out of TMPDIR for the duration: leave nothing behind.

    An optimizer's first step imports torch._dynamo, which creates
    $TMPDIR/torchinductor_$USER unless TORCHINDUCTOR_CACHE_DIR names another
    place; name a private one and remove it afterwards.
    """
    if "TORCHINDUCTOR_CACHE_DIR" in os.environ or "torch._dynamo" in sys.modules:
        yield
        return
    directory = tempfile.mkdtemp(prefix="ddpcheck-inductor-")
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = directory
    try:
        yield
    finally:
        os.environ.pop("TORCHINDUCTOR_CACHE_DIR", None)
        shutil.rmtree(directory, ignore_errors=True)


def derive_seed(seed: int, rank: int, purpose: int) -> int:
    """A distinct, deterministic seed for (seed, rank, purpose); seeds are < 2**32, so it fits 64 bits."""
    return (seed * 1_000_003 + rank) * 2 + purpose


def build_linear(hidden: int, seed: int, device: Any) -> Any:
    """nn.Linear(hidden, hidden) initialised from `seed` on the CPU, then moved to `device`.

    Initialising on the CPU makes the weights identical on every machine and
    device kind; the global RNG is left as it was.
    """
    import torch

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        module = torch.nn.Linear(hidden, hidden)
    return module.to(device)


def make_batch(hidden: int, batch: int, seed: int, device: Any) -> tuple[Any, Any]:
    """Random inputs and targets (batch x hidden each) from their own generator."""
    import torch

    generator = torch.Generator().manual_seed(seed)
    inputs = torch.randn(batch, hidden, generator=generator)
    targets = torch.randn(batch, hidden, generator=generator)
    return inputs.to(device), targets.to(device)


def make_optimizer(name: str, params: Any, lr: float) -> Any:
    import torch

    optimizer = {"adam": torch.optim.Adam, "sgd": torch.optim.SGD}[name]  # options.validate() refuses others
    return optimizer(params, lr=lr)


def wrap_ddp(module: Any, ctx: RankContext, bucket_cap_mb: float) -> Any:
    """DistributedDataParallel as the classic script builds it: device_ids=[local_rank] on GPUs."""
    from torch.nn.parallel import DistributedDataParallel

    device_ids = [ctx.device.index] if ctx.device.type == "cuda" else None
    return DistributedDataParallel(module, device_ids=device_ids, bucket_cap_mb=bucket_cap_mb)


def mse(output: Any, target: Any) -> Any:
    """The classic loss, ((out - y) ** 2).mean()."""
    return ((output - target) ** 2).mean()


def gradient_bytes(module: Any) -> int:
    """Bytes of gradient DDP reduces per step: one per trainable parameter element."""
    return sum(p.numel() * p.element_size() for p in module.parameters() if p.requires_grad)
