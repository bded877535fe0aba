"""`ddpcheck postmortem DIR`: what a dead job left (flight-recorder dumps, logs), read and judged.

The declaration only: check.py does the work (failure/flight_judge.py judges the dumps,
logs.py reads and judges the logs).
"""

from __future__ import annotations

from dataclasses import dataclass

from ddpcheck.command import Command, option
from ddpcheck.errors import UsageError


@dataclass(kw_only=True)
class PostmortemOptions:
    directory: str = option(
        argument=True,
        metavar="DIR",
        help="What the job left: flight-recorder dumps, torchrun's --log-dir, Slurm output, logs.",
        show_default=False,
    )
    world_size: int | None = option(
        None,
        metavar="N",
        help="The job's number of ranks, when the files cannot tell (gloo's dumps name no group "
        "members): a rank without a dump is then named lost.",
    )

    def validate(self) -> None:
        if self.world_size is not None and self.world_size < 1:
            raise UsageError(f"--world-size must be at least 1, got {self.world_size}")


COMMAND = Command(
    name="postmortem",
    help="""Read what a dead job left: which rank hung, was lost, crashed or called another collective.

    Reads flight-recorder dumps (any prefix; the rank is the file name's trailing digits),
    torchrun's error files and --log-dir, Slurm output and NCCL debug files under DIR.
    Launches nothing. Exit 0: nothing wrong in what the job left; 1: ranks called different
    collectives; 3: a rank hung, was lost or crashed; 2: DIR is missing or holds nothing readable.
    """,
    # \b: click keeps these lines as written (one command a line, to copy).
    epilog=(
        "\b\nExamples:\n"
        "  ddpcheck postmortem /tmp/fr_dumps\n"
        "  ddpcheck postmortem job-dir --world-size 8\n"
        "  ddpcheck postmortem job-dir --json postmortem.json"
    ),
    options=PostmortemOptions,
    implementation="ddpcheck.checks.postmortem.check",
    judges=("ddpcheck.failure.flight_judge",),
    ranked=False,
)
