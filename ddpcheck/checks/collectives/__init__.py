"""`ddpcheck collectives`: every collective a training job uses, in one launch (check.py runs them)."""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from typing import ClassVar

from ddpcheck.checks.sweep import SWEEP_DECLARATION
from ddpcheck.checks.sweep.ops import OPS
from ddpcheck.checks.sweep.sweep_options import SweepOptions
from ddpcheck.command import Command, option
from ddpcheck.errors import UsageError

# Every collective defined in sweep/ops, in the order `ddpcheck collectives` runs them.
COLLECTIVES = tuple(OPS)


@dataclass(kw_only=True)
class CollectivesOptions(SweepOptions):
    """`ddpcheck collectives`: every collective of COLLECTIVES (or those of --ops), one after another."""

    ops: list[str] = option(
        default_factory=lambda: list(COLLECTIVES),
        cli_type=str | None,
        parse=lambda text: {"ops": [op.strip() for op in text.split(",") if op.strip()]},
        metavar="OP[,OP...]",
        help=f"Comma-separated collectives to run (default all): {', '.join(COLLECTIVES)}.",
    )
    CLI_ORDER: ClassVar[tuple[str, ...]] = (
        "ops",
        "sizes",
        "step_factor",
        "dtype",
        "iters",
        "warmup",
        "min_busbw",
    )

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
            close = difflib.get_close_matches(unknown[0], COLLECTIVES, n=1, cutoff=0.6)
            hint = f"did you mean {close[0]}? " if close else ""
            raise UsageError(
                f"unknown collective {unknown[0]!r} in --ops: {hint}choose from {', '.join(COLLECTIVES)}"
            )
        if len(set(self.ops)) != len(self.ops):
            raise UsageError(f"--ops names a collective twice: {', '.join(self.ops)}")


COMMAND = Command(
    name="collectives",
    help="""Does every collective a training job uses work, who breaks it, and how fast is each?

    all_reduce, all_gather, reduce_scatter, broadcast, reduce, all_to_all and sendrecv
    (a ring: rank r sends to r+1 and receives from r-1) in one launch, each checked
    exactly at every size (an integer pattern every rank predicts) and timed like
    nccl-tests (message size, algbw, busbw with nccl-tests' bus factors). A wrong block
    names the rank that sent it, the rank that received it badly, or the link between
    them; a wrong reduction is localised by re-running it on subgroups.
    """,
    # \b: click keeps these lines as written (one command a line, to copy).
    epilog=(
        "\b\nExamples:\n"
        "  ddpcheck collectives --gpus 8\n"
        "  ddpcheck collectives --nproc 4 --sizes 1K:1M\n"
        "  ddpcheck collectives --ops all_gather,reduce_scatter --dtype bfloat16 --min-busbw 100\n"
        "  ddpcheck collectives --nproc 3 --inject corrupt@1"
    ),
    options=CollectivesOptions,
    implementation="ddpcheck.checks.collectives.check",
    details={"bandwidth": "every collective's bandwidth by message size"},
    **SWEEP_DECLARATION,
)
