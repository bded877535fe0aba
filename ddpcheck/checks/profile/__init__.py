"""`ddpcheck profile`: where each DDP step's time goes, on every rank (check.py times, judge.py judges)."""

from __future__ import annotations

from dataclasses import dataclass

from ddpcheck.checks.model_options import bucket_option, check_bucket, check_model_size, hidden_option
from ddpcheck.command import HARNESS_FAULTS, SLOW_FAULT, Command, Setup, option
from ddpcheck.errors import UsageError


@dataclass(kw_only=True)
class ProfileOptions:
    """`ddpcheck profile`: where each DDP step of nn.Linear(hidden, hidden) spends its time."""

    hidden: int = hidden_option(4096)
    batch: int = option(32, help="Rows per rank per step.")
    steps: int = option(10, help="Steps, warm-up included.")
    warmup: int = option(2, help="First steps shown but kept out of the summary (start-up costs).")
    straggler_threshold: float = option(
        1.2, help="WARN when a rank's compute time per step is this many times the others' median."
    )
    peak_tflops: float | None = option(
        None,
        help="The device's peak TFLOP/s, for the fraction of peak (default: known GPUs).",
        metavar="TFLOPS",
    )
    bucket_cap_mb: float = bucket_option()

    def validate(self) -> None:
        check_model_size(self.hidden, self.batch, self.steps)
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
        check_bucket(self.bucket_cap_mb)


COMMAND = Command(
    name="profile",
    help="""Where does each DDP step's time go, on every rank, and which rank is slow?

    Times forward, backward and the optimizer update of nn.Linear(H, H) in
    DistributedDataParallel on every rank (CUDA events on GPUs), the communication
    backward could not hide (backward with gradient sync minus backward under
    no_sync()), gradient bytes and bus bandwidth, FLOPs and TFLOP/s, and peak memory;
    warns about stragglers and unsteady ranks by name.
    """,
    # \b: click keeps these lines as written (one command a line, to copy).
    epilog=(
        "\b\nExamples:\n"
        "  ddpcheck profile --gpus 8\n"
        "  ddpcheck profile --hidden 8192 --batch 64\n"
        "  ddpcheck profile --nproc 4 --hidden 1024 --steps 20 --warmup 5 --json profile.json\n"
        "  ddpcheck profile --straggler-threshold 1.1 --peak-tflops 67"
    ),
    options=ProfileOptions,
    implementation="ddpcheck.checks.profile.check",
    faults={**HARNESS_FAULTS, **SLOW_FAULT},
    charts={"breakdown": "ddpcheck.checks.profile.terminal:render_breakdown_chart"},
    html_charts=("ddpcheck.checks.profile.html",),
    builds_ddp=True,
    family="profile",
    figures="ddpcheck.checks.profile.figures:profile_figures",
    setup=(
        Setup("hidden", "--hidden", ("hidden",)),
        Setup("batch", "--batch", ("batch",)),
        Setup("bucket_cap_mb", "--bucket-cap-mb", ("bucket_cap_mb",)),
    ),
    metrics="ddpcheck.checks.profile.figures:profile_metrics",
    judges=("ddpcheck.checks.profile.judge",),
)
