"""`ddpcheck watch -- COMMAND...`: the user's own training job, run and watched; a hang or crash named.

The declaration only (nothing heavy is imported here): the work is in check.py (the watcher in
watcher.py, the team of watchers in team.py), the verdict in judge.py, what runs inside the job's
processes in agent.py.
"""

from __future__ import annotations

import math
import os
import shutil
from dataclasses import dataclass

from ddpcheck.command import Command, option
from ddpcheck.errors import UsageError

DEFAULT_HANG_AFTER_S = 300.0
# How often the ranks' flight recorders are sampled for a straggler (docs/watch.md, "The rank that
# slows the job"): a verdict needs about a minute of collectives anyway, and a dump pauses a rank little.
DEFAULT_SAMPLE_EVERY_S = 5.0
MIN_SAMPLE_EVERY_S = 0.5  # the agent looks for a request twice a second: more often asks in vain
# Steps between two replica fingerprints (docs/diverges.md): a pass over the parameters every 100
# steps costs little beside them; the job's last step is fingerprinted too.
DEFAULT_FINGERPRINT_EVERY = 100


@dataclass(kw_only=True)
class WatchOptions:
    command: list[str] = option(
        default_factory=list,
        argument=True,
        metavar="COMMAND",
        help="The job, after --: torchrun ... train.py, python train.py, mpirun ..., as you run it.",
    )
    hang_after: float = option(
        DEFAULT_HANG_AFTER_S,
        metavar="SECONDS",
        help="A hang: no rank printed anything and no rank's Python stack changed for this long.",
    )
    dir: str | None = option(
        None,
        metavar="PATH",
        help="The watch directory (flight-recorder dumps, tracebacks, NCCL logs); default: a fresh one.",
    )
    keep: bool = option(False, flags=("--keep",), help="On a hang, only report: leave the job running.")
    nccl_info: bool = option(
        False, flags=("--nccl-info",), help="NCCL_DEBUG=INFO instead of WARN (into the watch directory)."
    )
    sample_every: float = option(
        DEFAULT_SAMPLE_EVERY_S,
        metavar="SECONDS",
        help="Read every rank's flight recorder this often and name the rank that slows the job "
        "(--sample-every 10: every 10 s); 0: off.",
    )
    fingerprint_every: int = option(
        DEFAULT_FINGERPRINT_EVERY,
        metavar="STEPS",
        help="Fingerprint every DDP replica's parameters after every N optimizer steps and name the rank "
        "that differs from its replicas, and the rank that made the first NaN; 0: off.",
    )

    def validate(self) -> None:
        if not self.command:
            raise UsageError("watch needs the job to run, after --: ddpcheck watch -- torchrun ... train.py")
        program = self.command[0]
        if shutil.which(program) is None:  # a path is taken as it is, and so is refused a directory
            raise UsageError(f"{program}: no such command (not found on PATH, or not executable)")
        if not self.hang_after > 0:
            raise UsageError(f"--hang-after {self.hang_after:g}: must be more than 0 seconds")
        if self.sample_every != 0 and not (
            math.isfinite(self.sample_every) and self.sample_every >= MIN_SAMPLE_EVERY_S
        ):
            raise UsageError(
                f"--sample-every {self.sample_every:g}: must be 0 (off) or at least "
                f"{MIN_SAMPLE_EVERY_S:g} seconds, e.g. --sample-every 10"
            )
        if self.fingerprint_every < 0:
            raise UsageError(
                f"--fingerprint-every {self.fingerprint_every}: must be 0 (off) or a number of steps, "
                "e.g. --fingerprint-every 100"
            )
        if self.dir is not None and os.path.exists(self.dir) and not os.path.isdir(self.dir):
            raise UsageError(f"--dir {self.dir}: is a file, not a directory")


COMMAND = Command(
    name="watch",
    help="""Run your own training job and watch it: a hang or crash named (rank, host, function, file:line).

    The job's output passes through untouched; its environment gets the diagnostics a hang or
    crash needs (faulthandler, the flight recorder, NCCL's dump on timeout). A hang (no output
    and no rank's stack changed for --hang-after seconds) names the rank that stopped while its
    peers wait, then ends the job. A crash names the first rank to fail, with its traceback.
    Every --sample-every seconds the ranks' flight recorders are read: a rank that slows the
    job (its peers wait for it at collective after collective) is named on stderr while the job
    runs, and in the report (a warning: the exit code stays the job's).
    Exit 0 when the job succeeds, 3 on a hang or crash, 130 on Ctrl-C (the whole job is ended).
    """,
    # \b: click keeps these lines as written (one command a line, to copy).
    epilog=(
        "\b\nExamples:\n"
        "  ddpcheck watch -- torchrun --nproc-per-node 8 train.py\n"
        "  ddpcheck watch --hang-after 120 -- python train.py\n"
        "  ddpcheck watch --sample-every 10 --html watch.html -- python train.py\n"
        "  srun -K -n 16 ddpcheck watch -- python train.py\n"
        "  ddpcheck watch --json watch.json -- mpirun -np 4 python train.py"
    ),
    options=WatchOptions,
    implementation="ddpcheck.checks.watch.check",
    judges=("ddpcheck.checks.watch.judge",),
    html_charts=("ddpcheck.checks.watch.html",),
    metrics="ddpcheck.checks.watch.figures:watch_metrics",
    ranked=False,
    terse_pass=True,
    kept="the watch directory (dumps, stacks)",  # what watch took, not the job's logs
    interrupt_raises=True,
)
