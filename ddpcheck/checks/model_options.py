"""The classic network's options, shared by `train` and `profile`: a layer, a batch and steps that exist."""

from __future__ import annotations

from ddpcheck.command import option
from ddpcheck.errors import UsageError

MAX_HIDDEN = 65_536  # a 16 GiB float32 matrix; beyond that the check itself is the problem
MAX_STEPS = 100_000
MAX_BATCH = 1_000_000


def hidden_option(default: int) -> int:
    return option(default, help="Width H of the nn.Linear(H, H) layer.")


def bucket_option() -> float:
    return option(25.0, help="DDP's gradient bucket size in MiB.", metavar="MIB")  # DDP's own default


def check_model_size(hidden: int, batch: int, steps: int) -> None:
    if not 1 <= hidden <= MAX_HIDDEN:
        raise UsageError(f"--hidden must be between 1 and {MAX_HIDDEN}, got {hidden}")
    if not 1 <= batch <= MAX_BATCH:
        raise UsageError(f"--batch must be between 1 and {MAX_BATCH}, got {batch}")
    if not 1 <= steps <= MAX_STEPS:
        raise UsageError(f"--steps must be between 1 and {MAX_STEPS}, got {steps}")


def check_bucket(bucket_cap_mb: float) -> None:
    if not 0 < bucket_cap_mb <= 65_536:
        raise UsageError(f"--bucket-cap-mb must be in (0, 65536] MiB, got {bucket_cap_mb:g}")
