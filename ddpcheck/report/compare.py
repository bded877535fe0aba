"""Comparing with a saved run: `ddpcheck compare OLD NEW`, and --baseline on the measuring commands.

The options and compare's declaration; report/compare_run.py runs it, report/baseline.py compares.
"""

from __future__ import annotations

from dataclasses import dataclass

from ddpcheck.command import Command, option
from ddpcheck.errors import UsageError

BASELINE = "Baseline"  # the help section


def tolerance_option() -> float | None:
    return option(
        None,
        help="How much worse than the baseline a figure may be, a fraction of its speed "
        "(default 0.95 on CPU ranks, 0.2 on GPUs; see the README).",
        panel=BASELINE,
    )


def validate_tolerance(tolerance: float | None) -> None:
    if tolerance is not None and not 0 <= tolerance < 1:
        raise UsageError(f"--tolerance must be a fraction in [0, 1), got {tolerance:g}")


@dataclass(frozen=True, kw_only=True)
class BaselineOptions:
    """--baseline and --tolerance: a saved report of a known-good run to compare this one with."""

    path: str | None = option(
        None,
        name="baseline",
        flags=("--baseline",),
        metavar="PATH",
        help="A JSON report of a known-good run (saved with --json): FAIL when a figure is worse than it.",
        panel=BASELINE,
    )
    tolerance: float | None = tolerance_option()

    def validate(self) -> None:
        validate_tolerance(self.tolerance)
        if self.path is None and self.tolerance is not None:
            raise UsageError("--tolerance needs --baseline PATH (a saved report to compare with)")


@dataclass(kw_only=True)
class CompareOptions:
    old: str = option(
        argument=True,
        metavar="OLD.json",
        help="The baseline: a JSON report saved with --json.",
        show_default=False,
    )
    new: str = option(
        argument=True, metavar="NEW.json", help="The run to judge against it.", show_default=False
    )
    tolerance: float | None = tolerance_option()

    def validate(self) -> None:
        validate_tolerance(self.tolerance)


COMMAND = Command(
    name="compare",
    help="""Is NEW slower than OLD? Two saved reports compared like for like; nothing is launched.

    busbw per op and size, each link's bandwidth and latency, each profile phase's time
    and TFLOP/s: exit 1 when a figure is worse than OLD by more than --tolerance. Also shows
    the checks whose verdict changed and what changed in torch, CUDA, NCCL and the driver.
    Setups that differ (world size, backend, device, dtype) are compared only where the
    figures do not depend on what differs; nothing comparable is exit 2.
    """,
    epilog=(
        "Examples: ddpcheck compare monday.json today.json | ddpcheck compare a.json b.json --tolerance 0.2 "
        "--junit compare.xml | ddpcheck compare node-type.json new-node.json --quiet"
    ),
    options=CompareOptions,
    implementation="ddpcheck.report.compare_run",
    judges=("ddpcheck.report.baseline",),
    ranked=False,
)
