"""`ddpcheck train`: the classic 5-step DDP training, as verdicts (check.py trains and judges)."""

from __future__ import annotations

from dataclasses import dataclass

from ddpcheck.checks.model_options import bucket_option, check_bucket, check_model_size, hidden_option
from ddpcheck.command import HARNESS_FAULTS, SLOW_FAULT, Command, option
from ddpcheck.errors import UsageError, check_between

OPTIMIZERS = ("adam", "sgd")
MAX_SEED = 2**32 - 1


@dataclass(kw_only=True)
class TrainOptions:
    """`ddpcheck train`: the classic 5-step DDP training of nn.Linear(hidden, hidden)."""

    steps: int = option(5, help="Training steps.")
    hidden: int = hidden_option(1024)
    batch: int = option(32, help="Rows per rank per step (different data on every rank).")
    lr: float = option(1e-3, help="Learning rate.")
    optimizer: str = option("adam", help="adam or sgd.", choices=OPTIMIZERS, metavar="NAME")
    seed: int = option(0, help="Seed of every rank's initial weights and data.")
    bucket_cap_mb: float = bucket_option()

    def validate(self) -> None:
        check_model_size(self.hidden, self.batch, self.steps)
        # NaN fails every comparison, so `not 0 < lr` also refuses it.
        if not 0 < self.lr < float("inf"):
            raise UsageError(f"--lr must be a positive number, got {self.lr:g}")
        if self.optimizer not in OPTIMIZERS:
            raise UsageError(f"unknown optimizer {self.optimizer!r}: choose one of {', '.join(OPTIMIZERS)}")
        check_between("--seed", self.seed, 0, MAX_SEED)
        check_bucket(self.bucket_cap_mb)


COMMAND = Command(
    name="train",
    help="""Does DDP train correctly here? The classic 5-step training of one layer, as verdicts.

    nn.Linear(H, H) in DistributedDataParallel, Adam, MSE, a different batch on
    every rank. Checks that DDP's construction gives every rank rank 0's weights
    (ranks start from different seeds), that gradients are identical and equal the
    mean of the ranks' local gradients, that the loss stays finite and falls, that
    weights stay equal bit for bit after every step, and that the result matches one
    process trained on the global batch. A failure names the rank, the step and by how much.
    """,
    # \b: click keeps these lines as written (one command a line, to copy).
    epilog=(
        "\b\nExamples:\n"
        "  ddpcheck train --gpus 8\n"
        "  ddpcheck train --nproc 4 --steps 5\n"
        "  ddpcheck train --hidden 4096 --optimizer sgd --lr 0.1 --json train.json\n"
        "  ddpcheck train --nproc 2 --inject diverge@1"
    ),
    options=TrainOptions,
    implementation="ddpcheck.checks.train.check",
    faults={
        **HARNESS_FAULTS,
        "diverge": "rank R nudges its weights after a step",
        "nan": "rank R's loss turns NaN",
        **SLOW_FAULT,
    },
    fault_actions="ddpcheck.checks.train.faults:TrainFaults",
    html_charts=("ddpcheck.checks.train.html",),
    builds_ddp=True,
    metrics="ddpcheck.checks.train.figures:train_metrics",
    judges=("ddpcheck.checks.train.judge",),
)
