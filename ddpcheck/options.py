"""Typed options for launching ranks and for each check, and the parsers behind them.

Torch-free: the CLI validates everything here before a rank is spawned.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field
from typing import Any

from ddpcheck.checks.collective.ops import OPS
from ddpcheck.errors import UsageError

BACKENDS = ("auto", "nccl", "gloo")
DTYPES = ("float32", "float16", "bfloat16", "float64", "int32")
MAX_RANKS_PER_NODE = 256
MAX_NODES = 100_000
MAX_TIMEOUT_S = 86_400.0

_SIZE_RE = re.compile(r"^\s*(\d+)\s*([kKmMgG]?)[iI]?[bB]?\s*$")
_SIZE_UNITS = {"": 1, "k": 1024, "m": 1024**2, "g": 1024**3}


@dataclass(kw_only=True)
class LaunchOptions:
    """How ranks start; shared by every command that launches."""

    gpus: int | None = None
    nproc: int | None = None
    backend: str = "auto"
    nnodes: int = 1
    node_rank: int = 0
    rdzv_endpoint: str | None = None
    timeout: float = 60.0
    inject: list[str] = field(default_factory=list)

    def validate(self) -> None:
        if self.gpus is not None and self.nproc is not None:
            raise UsageError("give --gpus or --nproc, not both")
        for name, value in (("--gpus", self.gpus), ("--nproc", self.nproc)):
            if value is not None and not 1 <= value <= MAX_RANKS_PER_NODE:
                raise UsageError(f"{name} must be between 1 and {MAX_RANKS_PER_NODE}, got {value}")
        if self.backend not in BACKENDS:
            raise UsageError(f"unknown backend {self.backend!r}: choose one of {', '.join(BACKENDS)}")
        if not 1 <= self.nnodes <= MAX_NODES:
            raise UsageError(f"--nnodes must be between 1 and {MAX_NODES}, got {self.nnodes}")
        if not 0 <= self.node_rank < self.nnodes:
            raise UsageError(
                f"--node-rank must be in 0..{self.nnodes - 1} for --nnodes {self.nnodes}, "
                f"got {self.node_rank}"
            )
        if self.nnodes > 1 and not self.rdzv_endpoint:
            raise UsageError("--nnodes > 1 needs --rdzv-endpoint HOST:PORT (the same on every node)")
        if self.rdzv_endpoint is not None:
            parse_endpoint(self.rdzv_endpoint)
        if not 0 < self.timeout <= MAX_TIMEOUT_S:
            raise UsageError(f"--timeout must be in (0, {MAX_TIMEOUT_S:.0f}] seconds, got {self.timeout:g}")


@dataclass(kw_only=True)
class SweepOptions:
    """A message-size sweep (allreduce, collectives): sizes in bytes; None means the device's default."""

    min_bytes: int | None = None
    max_bytes: int | None = None
    dtype: str = "float32"
    iters: int | None = None
    warmup: int | None = None
    min_busbw: float | None = None

    def validate(self) -> None:
        if self.dtype not in DTYPES:
            raise UsageError(f"unknown dtype {self.dtype!r}: choose one of {', '.join(DTYPES)}")
        if self.iters is not None and not 1 <= self.iters <= 100_000:
            raise UsageError(f"--iters must be between 1 and 100000, got {self.iters}")
        if self.warmup is not None and not 0 <= self.warmup <= 100_000:
            raise UsageError(f"--warmup must be between 0 and 100000, got {self.warmup}")
        if self.min_busbw is not None and not 0 <= self.min_busbw < float("inf"):
            raise UsageError(f"--min-busbw must be a number >= 0 GB/s, got {self.min_busbw:g}")

    def for_device(self, device: str) -> Any:
        """The defaults that depend on the device: GPUs reach their plateau only with large messages."""
        gpu = device == "cuda"
        return dataclasses.replace(
            self,
            min_bytes=self.min_bytes or (1024**2 if gpu else 1024),
            max_bytes=self.max_bytes or (1024**3 if gpu else 4 * 1024**2),
            iters=self.iters or (20 if gpu else 10),
            warmup=self.warmup if self.warmup is not None else (5 if gpu else 2),
        )


@dataclass(kw_only=True)
class AllreduceOptions(SweepOptions):
    """`ddpcheck allreduce`: the classic check, the rank map and the all_reduce sweep."""


# Every collective defined in collective/ops, in the order `ddpcheck collectives` runs them.
COLLECTIVES = tuple(OPS)


@dataclass(kw_only=True)
class CollectivesOptions(SweepOptions):
    """`ddpcheck collectives`: every collective of COLLECTIVES (or those of --ops), one after another."""

    ops: list[str] = field(default_factory=lambda: list(COLLECTIVES))

    @property
    def min_world_size(self) -> int:
        """The fewest ranks that run at least one of the chosen collectives (sendrecv needs two)."""
        return min(OPS[op].min_ranks for op in self.ops) if self.ops else 1

    def validate(self) -> None:
        super().validate()
        if not self.ops:
            raise UsageError(f"--ops is empty: name one or more of {', '.join(COLLECTIVES)}")
        unknown = [op for op in self.ops if op not in COLLECTIVES]
        if unknown:
            raise UsageError(
                f"unknown collective {unknown[0]!r} in --ops: choose from {', '.join(COLLECTIVES)}"
            )
        if len(set(self.ops)) != len(self.ops):
            raise UsageError(f"--ops names a collective twice: {', '.join(self.ops)}")


def parse_ops(text: str) -> list[str]:
    """'all_gather, sendrecv' -> ['all_gather', 'sendrecv'] (validated by CollectivesOptions)."""
    return [op.strip() for op in text.split(",") if op.strip()]


OPTIMIZERS = ("adam", "sgd")
MAX_HIDDEN = 65_536  # a 16 GiB float32 matrix; beyond that the check itself is the problem
MAX_STEPS = 100_000
MAX_BATCH = 1_000_000
MAX_SEED = 2**32 - 1


def _check_model_size(hidden: int, batch: int, steps: int) -> None:
    """The checks shared by train and profile: a layer, a batch and steps that exist."""
    if not 1 <= hidden <= MAX_HIDDEN:
        raise UsageError(f"--hidden must be between 1 and {MAX_HIDDEN}, got {hidden}")
    if not 1 <= batch <= MAX_BATCH:
        raise UsageError(f"--batch must be between 1 and {MAX_BATCH}, got {batch}")
    if not 1 <= steps <= MAX_STEPS:
        raise UsageError(f"--steps must be between 1 and {MAX_STEPS}, got {steps}")


def _check_bucket(bucket_cap_mb: float) -> None:
    if not 0 < bucket_cap_mb <= 65_536:
        raise UsageError(f"--bucket-cap-mb must be in (0, 65536] MiB, got {bucket_cap_mb:g}")


@dataclass(kw_only=True)
class TrainOptions:
    """`ddpcheck train`: the classic 5-step DDP training of nn.Linear(hidden, hidden)."""

    steps: int = 5
    hidden: int = 1024
    batch: int = 32
    lr: float = 1e-3
    optimizer: str = "adam"
    seed: int = 0
    bucket_cap_mb: float = 25.0  # DDP's own default

    def validate(self) -> None:
        _check_model_size(self.hidden, self.batch, self.steps)
        # NaN fails every comparison, so `not 0 < lr` also refuses it.
        if not 0 < self.lr < float("inf"):
            raise UsageError(f"--lr must be a positive number, got {self.lr:g}")
        if self.optimizer not in OPTIMIZERS:
            raise UsageError(f"unknown optimizer {self.optimizer!r}: choose one of {', '.join(OPTIMIZERS)}")
        if not 0 <= self.seed <= MAX_SEED:
            raise UsageError(f"--seed must be between 0 and {MAX_SEED}, got {self.seed}")
        _check_bucket(self.bucket_cap_mb)


@dataclass(kw_only=True)
class ProfileOptions:
    """`ddpcheck profile`: where each DDP step of nn.Linear(hidden, hidden) spends its time."""

    hidden: int = 4096
    batch: int = 32
    steps: int = 10
    warmup: int = 2
    straggler_threshold: float = 1.2
    peak_tflops: float | None = None
    bucket_cap_mb: float = 25.0

    def validate(self) -> None:
        _check_model_size(self.hidden, self.batch, self.steps)
        if not 0 <= self.warmup < self.steps:
            raise UsageError(
                f"--warmup must be at least 0 and below --steps ({self.steps}), got {self.warmup}"
            )
        if not 1.0 < self.straggler_threshold < float("inf"):
            raise UsageError(
                f"--straggler-threshold must be above 1.0 (a ratio to the median), "
                f"got {self.straggler_threshold:g}"
            )
        if self.peak_tflops is not None and not 0 < self.peak_tflops < float("inf"):
            raise UsageError(f"--peak-tflops must be a positive number, got {self.peak_tflops:g}")
        _check_bucket(self.bucket_cap_mb)


def parse_size(text: str) -> int:
    """'64', '4K', '16M', '1G' (binary multiples) -> bytes."""
    match = _SIZE_RE.match(text)
    if not match:
        raise UsageError(f"malformed size {text!r}: use bytes with an optional K, M or G suffix")
    return int(match.group(1)) * _SIZE_UNITS[match.group(2).lower()]


def parse_sizes(text: str) -> tuple[int, int]:
    """'MIN:MAX' or a single size -> (min_bytes, max_bytes)."""
    parts = text.split(":")
    if len(parts) > 2:
        raise UsageError(f"malformed --sizes {text!r}: expected MIN:MAX, e.g. 1K:64M")
    low, high = parse_size(parts[0]), parse_size(parts[-1])
    if low <= 0:
        raise UsageError(f"--sizes must start above 0 bytes, got {text!r}")
    if low > high:
        raise UsageError(f"--sizes MIN must not exceed MAX, got {text!r}")
    if high > 16 * 1024**3:
        raise UsageError(f"--sizes MAX above 16G is not supported, got {text!r}")
    return low, high


def parse_endpoint(text: str) -> tuple[str, int]:
    """'HOST:PORT' or '[IPv6]:PORT' -> (host, port)."""
    host, sep, port_text = text.rpartition(":")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    if not sep or not host or not port_text.isdigit() or any(c.isspace() for c in host):
        raise UsageError(f"malformed --rdzv-endpoint {text!r}: expected HOST:PORT")
    port = int(port_text)
    if not 1 <= port <= 65535:
        raise UsageError(f"--rdzv-endpoint port must be 1..65535, got {port}")
    return host, port


def options_to_dict(options: Any) -> dict[str, Any]:
    return dataclasses.asdict(options)


def options_from_dict(cls: type, data: dict[str, Any]) -> Any:
    names = {f.name for f in dataclasses.fields(cls)}
    return cls(**{k: v for k, v in data.items() if k in names})


MAX_LINK_BYTES = 4 * 1024**3


@dataclass(kw_only=True)
class LinksOptions:
    """`ddpcheck links`: every pair of ranks exchanges `size` bytes; None means the device's default."""

    size: int | None = None
    iters: int | None = None
    warmup: int | None = None
    threshold: float | None = None
    min_gbps: float | None = None
    # The harness refuses fewer ranks with a usage error: one rank has no link to measure.
    min_world_size = 2

    def validate(self) -> None:
        if self.size is not None and not 1 <= self.size <= MAX_LINK_BYTES:
            raise UsageError(f"--size must be between 1 byte and 4G, got {self.size}")
        if self.iters is not None and not 1 <= self.iters <= 100_000:
            raise UsageError(f"--iters must be between 1 and 100000, got {self.iters}")
        if self.warmup is not None and not 0 <= self.warmup <= 100_000:
            raise UsageError(f"--warmup must be between 0 and 100000, got {self.warmup}")
        if self.threshold is not None and not 0 < self.threshold < 1:
            raise UsageError(
                f"--threshold must be in (0, 1), a fraction of the median link, got {self.threshold:g}"
            )
        if self.min_gbps is not None and not 0 <= self.min_gbps < float("inf"):
            raise UsageError(f"--min-gbps must be >= 0 GB/s, got {self.min_gbps:g}")

    def for_device(self, device: str) -> Any:
        """Defaults from 20 healthy runs and a slowed link named every time (README: `ddpcheck links`)."""
        gpu = device == "cuda"
        return dataclasses.replace(
            self,
            size=self.size or (64 * 1024**2 if gpu else 1024**2),
            iters=self.iters or (20 if gpu else 50),
            warmup=self.warmup if self.warmup is not None else (5 if gpu else 3),
            threshold=self.threshold or (0.5 if gpu else 0.2),
        )
