"""An inline rank's launcher stops it (SIGTERM) before the run answers that itself: name the peer.

torchrun, srun and mpirun end every rank once one died. A rank still importing torch, or in the
rendezvous, has no store to read yet: its host's job directory (rank/arrival.py) is what it can
read, and it names the peer whose process stopped or ended there, in one line, then exits 3.
Runs as the main thread's signal handler: the main thread is in Python then (imports), not
blocked in native code, which only the run's own signal thread can answer.
"""

from __future__ import annotations

import signal
from typing import NoReturn

from ddpcheck.errors import EXIT_COULD_NOT_COMPLETE, say
from ddpcheck.failure import explain
from ddpcheck.rank import arrival, interrupt
from ddpcheck.rank.here import HostDir


def answer_sigterm(noted: bool = False) -> None:
    """From this rank's first moment, until the run answers SIGTERM itself (interrupt.act_from_a_thread);
    `noted`: one came while ddpcheck's first modules loaded (the entry point noted it): answered now.

    Imported and installed before torch: a handler that had to import what it reads while the main
    thread is inside `import torch` could meet a half-loaded module, and say nothing."""
    if signal.getsignal(signal.SIGTERM) is not signal.SIG_IGN:
        signal.signal(signal.SIGTERM, lambda signum, frame: on_sigterm())
    if noted:
        on_sigterm()


def on_sigterm() -> NoReturn:
    me = arrival.current
    if me is None:
        interrupt.leave(EXIT_COULD_NOT_COMPLETE, say=False)
    rank, stage = me.identity.rank, me.stage_name
    # First: a SIGKILL may follow, and the peers must not take this rank for a culprit.
    me.stage(arrival.TERMINATED)
    line = (
        f"ddpcheck: rank {rank} stopped by SIGTERM at stage '{stage}' "
        "(its launcher ends every rank once one failed)"
    )
    try:
        ident = me.identity
        check = explain.judge_early(
            HostDir().seen(), ident.world_size, rank, ident.local_world_size == ident.world_size
        )
        line += f": {check.detail}" if check is not None else ""
    except Exception:  # a half-read directory: the line without its culprit is still the truth
        pass
    say(line)
    interrupt.leave(EXIT_COULD_NOT_COMPLETE, say=False)
