"""The classic network's options, shared by `train` and `profile`: a layer, a batch and steps that exist."""

from __future__ import annotations

from ddpcheck.command import option
from ddpcheck.errors import UsageError, check_between

MAX_HIDDEN = 65_536  # a 16 GiB float32 matrix; beyond that the check itself is the problem
MAX_STEPS = 100_000
MAX_BATCH = 1_000_000


def hidden_option(default: int) -> int:
    return option(default, help="Width H of the nn.Linear(H, H) layer.")


def bucket_option() -> float:
    return option(25.0, help="DDP's gradient bucket size in MiB.", metavar="MIB")  # DDP's own default


def check_model_size(hidden: int, batch: int, steps: int) -> None:
    check_between("--hidden", hidden, 1, MAX_HIDDEN)
    check_between("--batch", batch, 1, MAX_BATCH)
    check_between("--steps", steps, 1, MAX_STEPS)


def check_bucket(bucket_cap_mb: float) -> None:
    if not 0 < bucket_cap_mb <= 65_536:
        raise UsageError(f"--bucket-cap-mb must be in (0, 65536] MiB, got {bucket_cap_mb:g}")
