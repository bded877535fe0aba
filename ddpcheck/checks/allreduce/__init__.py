"""`ddpcheck allreduce`: the classic check, the rank map and the all_reduce sweep (check.py does them)."""

from __future__ import annotations

from dataclasses import dataclass

from ddpcheck.checks.sweep import SWEEP_DECLARATION
from ddpcheck.checks.sweep.sweep_options import SweepOptions
from ddpcheck.command import Command


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
    **SWEEP_DECLARATION,
)
