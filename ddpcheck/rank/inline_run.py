"""A rank that torchrun, srun or mpirun started: run the command as this rank, spawn nothing.

No ddpcheck launcher watches: the ranks' own timeout is the bound (RunSpec.collective_timeout), a
rank that gives up names who stopped beating (rank/giving_up.py), and the launcher's SIGTERM, which
ends every rank once one failed, is answered at once, even mid-collective (interrupt.act_from_a_thread).
Rank 0 returns the Report; every other rank the verdict rank 0 shared.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path

from ddpcheck.errors import say
from ddpcheck.failure import explain, stages
from ddpcheck.failure.rank_env import launcher_of
from ddpcheck.rank import arrival, assemble, giving_up, here, interrupt, remover, rundir
from ddpcheck.rank.harness import run_rank
from ddpcheck.rank.rundir import RunSpec
from ddpcheck.report.model import Report, Verdict


def run(
    spec: RunSpec, given: list[str], write_files: Callable[[Report], list[str]] | None = None
) -> Report | Verdict:
    """Run `spec` as this rank. `given`: the --inject faults as the user wrote them; `write_files`
    writes a report's files (--json, --junit, --html ...) and says where: rank 0 calls it itself
    when its launcher stops it (SIGTERM) before it could return the report."""
    started = time.monotonic()
    interrupt.leave_on_sigterm()
    run_dir = make_inline_run_dir()
    spec.inline = True
    spec.launcher = launcher_of(os.environ)

    def assembled(report: Report) -> Report:
        return assemble.after_launch(report, time.monotonic() - started, spec.options, None, given)

    def write_stopped(report: Report) -> list[str]:
        return write_files(assembled(report)) if write_files is not None else []

    os.environ.update(rundir.compile_cache_env(run_dir))
    import_what_ddp_imports(spec.command)
    # SIGTERM, and SIGINT (torchrun passes Ctrl-C on so), answered at once from here on.
    interrupt.act_from_a_thread(lambda: giving_up.on_sigterm(spec, run_dir, write_stopped))
    try:
        code = run_rank(spec, str(run_dir), write_stopped)
        # A peer here stopped after the last collective blocks no one: no one else would name it.
        ended = [here.seen_of(p) for p in here.stopped_at_the_end()] if code == 0 else []
        report = rundir.read_rank0_report(run_dir)
        if report is not None:
            arrival.stage(stages.WRITING_REPORT)
            if ended:
                report.checks.append(explain.stopped_after_the_run(ended))
            return assembled(report)
        shared = rundir.read_verdict(run_dir)
        if code != 0 or shared is None:
            return Verdict.ERROR
        if ended and here.speaks_for_this_host(int(os.environ["RANK"]), [s["rank"] for s in ended]):
            say(f"ddpcheck: rank {os.environ['RANK']}: {explain.stopped_after_the_run(ended).detail}")
            return Verdict.ERROR
        return shared[0]
    finally:
        interrupt.ignore_sigterm()  # this rank's account is complete: it exits with its verdict
        remover.remove_now(run_dir)
        interrupt.forget(run_dir)


def make_inline_run_dir() -> Path:
    """This rank's run directory, removed if a Ctrl-C (SIGINT from torchrun, srun, mpirun) or a
    launcher's SIGTERM ends the process: arranged before the directory exists, so that a signal
    just after it is made cannot leave it; and removed by another process if this one is killed
    outright (mpirun's SIGKILL once a peer exited)."""
    run_dir = rundir.new_inline_path()
    interrupt.remove_on_leave(run_dir)
    rundir.remove_once_this_process_is_gone(run_dir)
    return rundir.create_inline(run_dir)


def import_what_ddp_imports(command: str) -> None:
    """A rank that will build DistributedDataParallel imports torch._dynamo now, before a signal is
    answered on a thread of its own: that import makes the compile cache directory inside the run
    directory, and made after a SIGTERM thread removed that directory, it would be left behind
    (docs/failures.md). A signal during the import is answered on this thread, after it or instead."""
    from ddpcheck.commands import COMMANDS

    if COMMANDS[command].builds_ddp:
        import torch._dynamo  # noqa: F401
