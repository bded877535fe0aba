"""`ddpcheck allreduce`: the classic check, the rank map and the all_reduce sweep (check.py does them)."""

from __future__ import annotations

from dataclasses import dataclass

from ddpcheck.checks.sweep import CORRUPT_FAULT
from ddpcheck.checks.sweep.sweep_options import SweepOptions
from ddpcheck.command import HARNESS_FAULTS, Command, Setup


@dataclass(kw_only=True)
class AllreduceOptions(SweepOptions):
    """`ddpcheck allreduce`: the classic check, the rank map and the all_reduce sweep."""


COMMAND = Command(
    name="allreduce",
    help="""Is the process group sound, which rank breaks it, and how fast is all_reduce?

    The classic check (all_reduce of ones * rank must give N(N-1)/2 on every rank),
    the rank map, an exact data check at every size, and an nccl-tests style
    bandwidth sweep; a wrong result is localised to the rank at fault.
    """,
    # \b: click keeps these lines as written (one command a line, to copy).
    epilog=(
        "\b\nExamples:\n"
        "  ddpcheck allreduce --gpus 8\n"
        "  ddpcheck allreduce --nproc 4 --sizes 1K:64M\n"
        "  ddpcheck allreduce --dtype bfloat16 --min-busbw 300 --json report.json\n"
        "  ddpcheck allreduce --gpus 8 --budget 20 --drain  # a health check"
    ),
    options=AllreduceOptions,
    implementation="ddpcheck.checks.allreduce.check",
    faults={**CORRUPT_FAULT, **HARNESS_FAULTS},
    fault_actions="ddpcheck.checks.sweep.faults:SweepFaults",
    charts={"bandwidth": "ddpcheck.checks.sweep.terminal:render_bandwidth_chart"},
    html_charts=("ddpcheck.checks.sweep.html",),
    family="bandwidth",
    figures="ddpcheck.checks.sweep.figures:bandwidth_figures",
    setup=(Setup("dtype", "dtype", ("dtype",)),),
    expected="ddpcheck.checks.sweep.expected:judge_expected",
    metrics="ddpcheck.checks.sweep.figures:bandwidth_metrics",
    judges=("ddpcheck.checks.sweep.judge", "ddpcheck.checks.sweep.bisection"),
    budgeted=True,
)
