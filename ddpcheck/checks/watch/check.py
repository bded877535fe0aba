"""`ddpcheck watch`'s work: run the job, watch it alone or as one task of a team, and report."""

from __future__ import annotations

import contextlib
import os
import select
import shutil
import signal
import sys
import time
from pathlib import Path

from ddpcheck.checks.watch import WatchOptions, team
from ddpcheck.checks.watch.environment import make_watch_dir
from ddpcheck.checks.watch.progress import Event
from ddpcheck.checks.watch.watcher import Watcher
from ddpcheck.rank import interrupt
from ddpcheck.report.model import Check, Report, Status


def run(options: WatchOptions) -> Report:
    began = time.monotonic()
    task = team.task_of(os.environ, options.command)
    with interrupt.deferred():  # made and registered as one step
        watch_dir, fresh = make_watch_dir(options.dir)
        if fresh:
            interrupt.remove_on_leave(watch_dir)
    if interrupt.interrupted():
        raise KeyboardInterrupt
    print(
        f"ddpcheck watch: diagnostics (flight-recorder dumps, tracebacks) go to {watch_dir}", file=sys.stderr
    )
    watcher = Watcher(options, watch_dir)
    try:
        store = team.connect(task) if task is not None else None  # before the job: task 0 is ready
        # The job starts whole, its process and the tree that ends it: a Ctrl-C is acted on after.
        with interrupt.deferred():
            watcher.start()
        if interrupt.interrupted():
            raise KeyboardInterrupt
        if task is None:
            decision = watcher.watch()
            report = watcher.verdict(decision, watcher.evidence(decision), watcher.output())
        else:
            decision, found = team.run_team(watcher, task, store)
            report = found if found is not None else _follower_report(decision, task.index)
    except KeyboardInterrupt:
        if watcher.tree is not None:
            watcher.end()
        _remove(watch_dir, fresh)
        raise
    report.elapsed_s = time.monotonic() - began
    report.options = {
        "command": list(options.command),
        "hang_after": options.hang_after,
        "keep": options.keep,
        "sample_every": options.sample_every,
        "fingerprint_every": options.fingerprint_every,
    }
    report.notes += watcher.notes
    if report.verdict.exit_code == 0:
        _remove(watch_dir, fresh)
    else:
        report.log_dir = str(watch_dir)
    interrupt.forget(watch_dir)
    if options.keep and decision is Event.HANG:
        _hand_over_output(watcher)
    return report


def _follower_report(decision: Event, index: int) -> Report:
    """The one line of a watcher that is not task 0: task 0 writes the report."""
    status = Status.PASS if decision is Event.ENDED else Status.ERROR
    words = {
        Event.ENDED: "the job ran to completion",
        Event.HANG: "the job hung",
        Event.CRASH: "a rank of the job failed",
    }
    detail = f"{words.get(decision, decision)}; the report is task 0's (this is task {index})"
    return Report(command="watch", checks=[Check("watch", status, detail)], world={"report_on": 0})


def _hand_over_output(watcher: Watcher) -> None:
    """--keep: the report goes out now; a process of its own passes the job's output on until it ends.

    Forked: it copies the two pipes to this terminal until the job closes them, then exits. (Its
    copy and this process's threads may each take a chunk in the moment before this one exits.)
    """
    assert watcher.proc is not None
    pipes = [p.fileno() for p in (watcher.proc.stdout, watcher.proc.stderr) if p is not None]
    if os.fork() != 0:
        return
    os.setsid()
    for sig in (signal.SIGINT, signal.SIGTERM):  # a plain copier: a signal ends it, without watch's line
        signal.signal(sig, signal.SIG_DFL)
    sinks = {pipes[0]: sys.stdout.fileno(), pipes[-1]: sys.stderr.fileno()}
    while pipes:
        ready, _, _ = select.select(pipes, [], [])
        for fd in ready:
            chunk = os.read(fd, 65536)
            if not chunk:
                pipes.remove(fd)
                continue
            with contextlib.suppress(OSError):
                os.write(sinks[fd], chunk)
    os._exit(0)


def _remove(watch_dir: Path, fresh: bool) -> None:
    if fresh:
        shutil.rmtree(watch_dir, ignore_errors=True)
