"""The message-size sweep's options, shared by `allreduce` and `collectives`."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from ddpcheck.command import option
from ddpcheck.errors import UsageError, check_between
from ddpcheck.report.units import parse_sizes

DTYPES = ("float32", "float16", "bfloat16", "float64", "int32")
MAX_STEP_FACTOR = 1024.0


def _sizes(text: str) -> dict[str, int]:
    low, high = parse_sizes(text)
    return {"min_bytes": low, "max_bytes": high}


@dataclass(kw_only=True)
class SweepOptions:
    """A message-size sweep (allreduce, collectives): sizes in bytes; None means the device's default."""

    min_bytes: int | None = option(
        None,
        name="sizes",
        metavar="MIN:MAX",
        cli_type=str | None,
        parse=_sizes,
        help="Message sizes MIN:MAX, or one size, in bytes (K/M/G suffixes). "
        "Default 1K:4M on CPU, 1M:1G on GPU.",
    )
    max_bytes: int | None = None  # set with min_bytes by --sizes
    step_factor: float = option(
        2.0, metavar="F", help="Each size of the sweep is F times the last (nccl-tests' -f)."
    )
    dtype: str = option(
        "float32", help="float32, float16, bfloat16, float64 or int32.", choices=DTYPES, metavar="NAME"
    )
    iters: int | None = option(None, help="Timed iterations per size (default 10 on CPU, 20 on GPU).")
    warmup: int | None = option(None, help="Untimed iterations per size (default 2 on CPU, 5 on GPU).")
    min_busbw: float | None = option(
        None, help="FAIL when a collective's peak bus bandwidth (GB/s) is below this.", metavar="GBPS"
    )

    def validate(self) -> None:
        if self.dtype not in DTYPES:
            raise UsageError(f"unknown dtype {self.dtype!r}: choose one of {', '.join(DTYPES)}")
        check_between("--iters", self.iters, 1, 100_000)
        check_between("--warmup", self.warmup, 0, 100_000)
        if not 1 < self.step_factor <= MAX_STEP_FACTOR:
            raise UsageError(
                f"--step-factor must be above 1 and at most {MAX_STEP_FACTOR}, got {self.step_factor:g}"
            )
        if self.min_busbw is not None and not 0 <= self.min_busbw < float("inf"):
            raise UsageError(f"--min-busbw must be a number >= 0 GB/s, got {self.min_busbw:g}")

    def for_device(self, device: str) -> SweepOptions:
        """The defaults that depend on the device: GPUs reach their plateau only with large messages."""
        gpu = device == "cuda"
        return dataclasses.replace(
            self,
            min_bytes=self.min_bytes or (1024**2 if gpu else 1024),
            max_bytes=self.max_bytes or (1024**3 if gpu else 4 * 1024**2),
            iters=self.iters or (20 if gpu else 10),
            warmup=self.warmup if self.warmup is not None else (5 if gpu else 2),
        )
