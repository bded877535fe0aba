"""`ddpcheck attach PID | --all`: a job that runs now, started without ddpcheck, read and judged.

The declaration only (nothing heavy is imported here): the work is in check.py (the job's ranks
found in find.py, read in evidence.py, the nodes' attaches agreeing in nodes.py); the verdict is
failure/hangs.py's, the one `watch` gives.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from ddpcheck.command import Command, option
from ddpcheck.errors import UsageError

DEFAULT_INTERVAL_S = 1.0
RAS_ANSWER = "nccl_ras"  # the table of NCCL's RAS answer, line by line, where it is not healthy


def _pid(text: str) -> int:
    if not text.strip().isdigit():
        raise UsageError(f"PID {text}: not a process id")
    return int(text)


@dataclass(kw_only=True)
class AttachOptions:
    pid: int | None = option(
        None,
        argument=True,
        cli_type=str,
        cli_default="",
        parse=lambda text: {"pid": _pid(text) if text else None},
        metavar="PID",
        help="The job: its launcher's pid (torchrun, srun, mpirun, a plain python) or any rank's.",
        show_default=False,
    )
    all: bool = option(False, flags=("--all",), help="Every rank process on this node, instead of PID.")
    interval: float = option(
        DEFAULT_INTERVAL_S,
        metavar="SECONDS",
        help="How long apart the first and last stack samples are: a stack that changed is progress "
        "(a job that moves gets 20 rounds at least, its stragglers' samples).",
    )
    kill: bool = option(
        False, flags=("--kill",), help="After the verdict, end the job (SIGTERM, then SIGKILL after 5 s)."
    )
    dir: str | None = option(
        None,
        metavar="PATH",
        help="A directory every node's attach can read (one attach per node, srun --overlap): "
        "each writes its ranks there and all give one verdict.",
    )
    nodes: int | None = option(
        None,
        metavar="N",
        help="With --dir: how many nodes' attaches to wait for (default: srun's node count, else 1).",
    )

    def validate(self) -> None:
        if (self.pid is None) == (not self.all):
            raise UsageError("attach needs one job: a PID, or --all (every rank process on this node)")
        if self.pid is not None and self.pid < 1:
            raise UsageError(f"PID {self.pid}: not a process id")
        if not self.interval > 0:
            raise UsageError(f"--interval {self.interval:g}: must be more than 0 seconds")
        if self.nodes is not None and (self.nodes < 1 or self.dir is None):
            raise UsageError("--nodes N needs --dir PATH and N of at least 1")
        if self.dir is not None and os.path.exists(self.dir) and not os.path.isdir(self.dir):
            raise UsageError(f"--dir {self.dir}: is a file, not a directory")


COMMAND = Command(
    name="attach",
    help="""Read a running job started without ddpcheck: the rank that hangs it, named, the job left running.

    PID is the job's launcher (torchrun, srun, mpirun, a plain python) or any of its ranks; --all
    takes every rank process on this node. Reads each rank's Python stack (py-spy, without
    pausing it) every 50 ms over the interval, its state, the flight-recorder dumps the job can
    give and NCCL's RAS answer. Names a stopped rank, the rank outside the collective its peers
    wait in, the rank in another collective, a rank gone from the job's world while its peers wait
    for it, and in a job that progresses the rank its peers wait for (a straggler: WARN). Exit 0:
    the job makes progress; 3: a rank named (or the job is stuck); 2: PID is no job, ended
    meanwhile, or cannot be read.
    """,
    epilog=(
        "Examples: ddpcheck attach 12345 | ddpcheck attach --all | ddpcheck attach 12345 --kill | "
        "srun --overlap --jobid J --ntasks-per-node 1 ddpcheck attach --all --dir /shared/attach"
    ),
    options=AttachOptions,
    implementation="ddpcheck.checks.attach.check",
    ranked=False,
    details={RAS_ANSWER: "NCCL's RAS answer"},
)
