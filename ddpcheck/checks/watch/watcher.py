"""`ddpcheck watch`: run the job, pass its output through, watch every rank, and judge.

The loop, every TICK_S: has the job ended; has a rank ended (the in-process agent's records say
how); once the output has been silent for half of --hang-after, each rank's stack (py-spy,
without pausing it); every --sample-every seconds, each rank's flight recorder (sampling.py: a
straggler named); no progress for --hang-after: a hang. Then the stacks that the verdict rests
on (paused, so consistent), the flight-recorder dumps, the verdict, and the job ended.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from ddpcheck.checks.watch import WatchOptions, agent, fingerprints, judge
from ddpcheck.checks.watch.environment import job_environment
from ddpcheck.checks.watch.judge import RankView
from ddpcheck.checks.watch.progress import Event, Progress, sample_interval
from ddpcheck.checks.watch.replicas import Replicas
from ddpcheck.checks.watch.sampling import Exchange, Sampler
from ddpcheck.failure import hangs, processes, stacks
from ddpcheck.failure.exits import ExitKind, declared_rank, exit_of
from ddpcheck.failure.flight import find_dumps
from ddpcheck.failure.flight_judge import with_flight_recorders
from ddpcheck.failure.launchers import launcher_exit_codes
from ddpcheck.failure.proc import ProcState, state_letter, state_of
from ddpcheck.failure.process_records import process_file
from ddpcheck.failure.rank_env import rank_of
from ddpcheck.failure.recorders import poke_debug_pipes
from ddpcheck.report.model import Report

TICK_S = 0.1  # how often the ranks' liveness is read (/proc, one file per rank)
SCAN_S = 1.0  # how often the process tree is walked for new ranks
LAUNCHER_GRACE_S = 5.0  # a rank failed: how long its launcher has to end the job itself
DUMP_WAIT_S = 3.0  # how long the ranks have to write their flight-recorder dumps
TAIL_BYTES = 256 * 1024  # the end of the job's output kept for the judge (launchers' summaries)


class OutputPump:
    """Copies the job's stdout and stderr through untouched, noting when the last byte came."""

    def __init__(self, proc: subprocess.Popen, on_output: Callable[[], None]) -> None:
        self.tail: deque[bytes] = deque()
        self.size = 0
        self.lock = threading.Lock()
        self.on_output = on_output
        self.threads = [
            threading.Thread(target=self._copy, args=(pipe, sink), daemon=True)
            for pipe, sink in ((proc.stdout, sys.stdout.buffer), (proc.stderr, sys.stderr.buffer))
        ]
        for thread in self.threads:
            thread.start()

    def _copy(self, pipe: IO[bytes] | None, sink: IO[bytes]) -> None:
        if pipe is None:
            return
        fd = pipe.fileno()
        while True:
            try:
                chunk = os.read(fd, 65536)
            except OSError:
                return
            if not chunk:
                return
            with contextlib.suppress(OSError, ValueError):
                sink.write(chunk)
                sink.flush()
            self.on_output()
            with self.lock:
                self.tail.append(chunk)
                self.size += len(chunk)
                while self.size > TAIL_BYTES and len(self.tail) > 1:
                    self.size -= len(self.tail.popleft())

    def text(self) -> str:
        with self.lock:
            return b"".join(self.tail).decode(errors="replace")

    def join(self, timeout: float) -> None:
        for thread in self.threads:
            thread.join(timeout)


@dataclass
class Watched:
    """One rank as the watcher follows it."""

    process: processes.RankProcess
    gone_at: float | None = None  # wall clock, when seen gone
    samples: list[stacks.Stack] = field(default_factory=list)


class Watcher:
    def __init__(self, options: WatchOptions, watch_dir: Path) -> None:
        self.options = options
        self.dir = watch_dir
        self.progress = Progress(time.monotonic())
        self.ranks: dict[int, Watched] = {}
        self.guesses: set[int] = set()  # ranks taken for a process only because none could be read
        self.proc: subprocess.Popen | None = None
        self.tree: processes.ProcessTree | None = None
        self.pump: OutputPump | None = None
        self.next_scan = self.next_sample = 0.0
        self.failed_at: float | None = None  # when a rank was first seen to have failed
        # How long no rank had made progress when the hang was declared (ending the job is progress).
        self.silent_s = 0.0
        self.began = time.monotonic()
        self.notes: list[str] = []
        self.sampler = Sampler(watch_dir, options.sample_every) if options.sample_every > 0 else None
        every = options.fingerprint_every
        self.replicas = Replicas(watch_dir, every) if every > 0 else None

    def start(self) -> None:
        env = job_environment(os.environ, self.dir, self.options.nccl_info)
        if self.replicas is not None:
            env[fingerprints.EVERY_VARIABLE] = str(self.options.fingerprint_every)
        self.proc = subprocess.Popen(
            self.options.command,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            # Its own session: Ctrl-C reaches the watcher alone, which then ends every process of the job.
            start_new_session=True,
        )
        self.tree = processes.ProcessTree(self.proc.pid, env, lambda pid: declared_rank(self.dir, pid))
        # The job's first process may be the rank itself (srun's or mpirun's task), and may end before
        # the first scan: its environment is the one given here.
        # (No rank variable at all: a plain `python train.py` is rank 0, as the process tree says.)
        if not processes.is_launcher(self.options.command):
            rank = rank_of(env) or 0
            self.ranks[rank] = Watched(processes.RankProcess(rank, self.proc.pid, self.tree.host))
        self.pump = OutputPump(self.proc, lambda: self.progress.progressed(time.monotonic()))

    # ------------------------------------------------------------ the loop
    def watch(self) -> Event:
        """Until the job ends (ENDED), a rank fails and the job goes on (CRASH), or it hangs (HANG)."""
        while True:
            event = self.step()
            if event is Event.FAILED:  # a crash once its launcher's grace passed without ending the job
                assert self.failed_at is not None
                event = Event.CRASH if time.monotonic() - self.failed_at >= LAUNCHER_GRACE_S else None
            if event is not None:
                return event
            time.sleep(TICK_S)

    def step(self) -> Event | None:
        """One look: ENDED, FAILED (a rank failed, the job goes on), HANG, or None."""
        assert self.proc is not None
        now = time.monotonic()
        if self.proc.poll() is not None:
            self._note_gone()
            return Event.ENDED
        if now >= self.next_scan:
            self._scan()
            self.next_scan = now + SCAN_S
        if self._note_gone() and self.failed_at is None and self._a_rank_failed():
            self.failed_at = now
        if self.sampler is not None and self.failed_at is None:
            self._tick_sampler()
        if self.replicas is not None:
            self.replicas.tick(now)
        if (
            self.ranks
            and self.progress.silent_for(now) >= self.options.hang_after / 2
            and now >= self.next_sample
        ):
            self._sample(blocking=False)
            self.next_sample = time.monotonic() + sample_interval(self.options.hang_after)
        self.silent_s = self.progress.silent_for(time.monotonic())
        if self.silent_s >= self.options.hang_after and self._stalled():
            if self.failed_at is None and self._raised_and_still_ending():
                self.failed_at = now
            return Event.FAILED if self.failed_at is not None else Event.HANG
        return Event.FAILED if self.failed_at is not None else None

    def _tick_sampler(self) -> None:
        """The straggler sampling's turn: never why a watch fails (a fault in it ends it, said once)."""
        assert self.sampler is not None
        try:
            live = {r: w for r, w in self.ranks.items() if w.gone_at is None}
            hosts = {r: w.process.host for r, w in live.items()}
            self.sampler.tick(hosts, {r: w.process.pid for r, w in live.items()})
        except Exception as exc:  # the hang and crash verdicts matter more than a straggler
            self.notes.append(f"the straggler sampling stopped: {type(exc).__name__}: {exc}")
            self.sampler = None

    def share_samples(self, exchange: Exchange, judging: bool) -> None:
        """One watcher per task: its samples go to task 0 through `exchange`; only task 0 judges them."""
        if self.sampler is not None:
            self.sampler.exchange = exchange
            self.sampler.judging = judging

    def _raised_and_still_ending(self) -> bool:
        """A live rank whose main thread raised uncaught: its interpreter is ending, and stuck at it.

        Its exception is its failure, not a hang (an exit handler that waits for a peer, or for a
        thread, keeps it alive past --hang-after, in a frame that is not where it failed).
        An exception that says a peer went away is that peer's failure, not this rank's.
        """
        raised = (  # read lazily: the first rank's own exception settles it
            exit_of(self.dir, w.process.pid, time.time(), None)
            for w in self.ranks.values()
            if w.gone_at is None and os.path.exists(process_file(self.dir, w.process.pid, "exception"))
        )
        # Not a peer's going, in its turn:
        return any(r.kind is ExitKind.EXCEPTION and not r.secondary for r in raised)

    def _stalled(self) -> bool:
        """Evidence that no rank moves: each live rank stopped, or its stack unchanged over half a window.

        A rank whose stack could not be read (py-spy failing on a process still starting) is no evidence.
        """
        now = time.monotonic()
        live = [(rank, w) for rank, w in self.ranks.items() if w.gone_at is None]
        return bool(live) and all(
            state_of(w.process.pid) is ProcState.STOPPED
            or (
                (self.progress.unchanged_for(rank, now) or 0.0) >= self.options.hang_after / 2
                # Loading a module (libtorch's shared objects take seconds on a busy node) is start-up.
                and not (w.samples and stacks.importing(w.samples[-1]))
            )
            for rank, w in live
        )

    def _scan(self) -> None:
        assert self.tree is not None
        now_found = self.tree.ranks()
        for rank, found in now_found.items():
            known = self.ranks.get(rank)
            if self._guess_of_another(rank, found.pid):
                continue
            if known is None or (
                known.process.pid != found.pid
                and (known.gone_at is not None or self.tree.guessed(known.process.pid))
            ):
                self.ranks[rank] = Watched(found)
                self.progress.progressed(time.monotonic())
                if self.tree.guessed(found.pid):
                    self.guesses.add(rank)
        # A guess that a later scan found under its own rank goes too.
        numbered = {found.pid: rank for rank, found in now_found.items() if not self.tree.guessed(found.pid)}
        for rank in list(self.guesses):
            if numbered.get(self.ranks[rank].process.pid, rank) != rank:
                del self.ranks[rank]
                self.progress.forget(rank)
                self.guesses.discard(rank)

    def _guess_of_another(self, rank: int, pid: int) -> bool:
        """Whether `pid` was taken for `rank` (0) only because no rank could be read from its environment
        (it reads as empty while the process is being exec'd) though it is known as another rank: a
        process has one rank (docs/watch.md, one watcher per task)."""
        assert self.tree is not None
        return self.tree.guessed(pid) and any(
            w.process.pid == pid for r, w in self.ranks.items() if r != rank
        )

    def _note_gone(self) -> bool:
        """Read every rank's state; True when one is newly gone."""
        newly = [w for w in self.ranks.values() if w.gone_at is None and state_of(w.process.pid).ended]
        for watched in newly:
            watched.gone_at = time.time()
            self.progress.progressed(time.monotonic())
        return bool(newly)

    def _a_rank_failed(self) -> bool:
        first, _ = judge.first_failed(self.views())
        return first is not None and first.exit is not None and not first.exit.secondary

    def _sample(self, blocking: bool) -> None:
        for rank, watched in self.ranks.items():
            if watched.gone_at is not None or state_of(watched.process.pid) is ProcState.STOPPED:
                continue  # a stopped process is not read: its stack cannot change
            stack = stacks.stacks_of({rank: watched.process.pid}, blocking=blocking).get(rank)
            if stack is not None:
                watched.samples = [*watched.samples[-3:], stack]
                self.progress.sample(rank, stack, time.monotonic())
            else:
                self.progress.forget(rank)  # unreadable now (ending, starting): no evidence either way

    # ------------------------------------------------------------ what was seen
    def views(self) -> list[RankView]:
        launcher_said = launcher_exit_codes(self.output())
        found = []
        for rank, watched in sorted(self.ranks.items()):
            pid = watched.process.pid
            exit = None
            if watched.gone_at is not None:
                code = self.proc.returncode if self.proc is not None and pid == self.proc.pid else None
                exit = exit_of(
                    self.dir, pid, watched.gone_at, code if code is not None else launcher_said.get(rank)
                )
            found.append(
                RankView(
                    rank,
                    watched.process.host,
                    pid,
                    state="gone" if watched.gone_at is not None else state_letter(pid),
                    stack=watched.samples[-1] if watched.samples else None,
                    exit=exit,
                    samples=list(watched.samples),
                )
            )
        return found

    def request_dumps(self) -> list[str]:
        """Ask every live rank for its flight-recorder dump; the dumps that came, by path."""
        (self.dir / agent.DUMP_REQUEST).touch()
        poke_debug_pipes(str(self.dir / agent.DEBUG_PIPE_PREFIX))  # NCCL dumps even if Python cannot
        wanted = [
            self.dir / f"{agent.DUMP_PREFIX}{w.process.rank}"
            for w in self.ranks.values()
            if w.gone_at is None and state_of(w.process.pid) is not ProcState.STOPPED
        ]
        deadline = time.monotonic() + DUMP_WAIT_S
        while time.monotonic() < deadline and not all(p.exists() for p in wanted):
            time.sleep(0.1)
        return sorted(
            str(p) for p in self.dir.glob(f"{agent.DUMP_PREFIX}*") if not p.name.endswith(".partial")
        )

    def evidence(self, decision: Event) -> list[RankView]:
        """What the verdict rests on, taken now: on a hang, every rank's stack (paused, consistent) and its
        flight-recorder dump, then the job ended unless --keep; on a crash, the job ended, every exit read."""
        if decision is Event.HANG:
            self._sample(blocking=True)
            views = self.views()
            dumps = self.request_dumps()
            if dumps:
                self.notes.append(
                    f"flight-recorder dumps of {len(dumps)} ranks: ddpcheck postmortem {self.dir}"
                )
            if self.options.keep:
                self.notes.append("--keep: the job was left running; end it yourself (Ctrl-C ends it)")
            else:
                self.notes.append(f"the job's {self.end()} processes were ended (SIGTERM, then SIGKILL)")
            return views
        if decision is Event.CRASH and self.proc is not None and self.proc.poll() is None:
            self.end()
        assert self.proc is not None
        self.proc.wait()
        self._note_gone()
        if self.pump is not None:
            self.pump.join(processes.GRACE_S)
        return self.views()

    def output(self) -> str:
        """The end of the job's output (launchers' summaries are read from it)."""
        return self.pump.text() if self.pump is not None else ""

    def job_code(self) -> int | None:
        """The job's exit status once it ended."""
        return self.proc.returncode if self.proc is not None else None

    def verdict(self, decision: Event, views: list[RankView], output: str) -> Report:
        """The hang, crash or success judged; then, whatever the job's end, the straggler check and
        tables over the whole watched run, and the replicas' checks and table (docs/diverges.md)."""
        report = self._judged(decision, views, output)
        judging = self.sampler is not None and self.sampler.judging
        report = _added(report, self.sampler if judging else None, "the stragglers could not be judged")
        speaks = self.replicas is not None and self.replicas.speaking
        return _added(report, self.replicas if speaks else None, "the replicas could not be compared")

    def share_replicas(self, judging: bool) -> dict | None:
        """One watcher per task: its ranks' fingerprints for task 0 (None: off); only task 0 speaks."""
        if self.replicas is None:
            return None
        self.replicas.speaking = judging
        self.replicas.read()
        return self.replicas.shared()

    def take_replicas(self, shared: dict) -> None:
        """Task 0: another task's fingerprints."""
        if self.replicas is not None:
            self.replicas.take(shared)

    def _judged(self, decision: Event, views: list[RankView], output: str) -> Report:
        if decision is Event.HANG:
            report = hangs.judge_hang(views, self.silent_s, self.options.hang_after, command=judge.COMMAND)
            traces = find_dumps(self.dir).traces
            return with_flight_recorders(report, traces, {v.rank: v.host for v in views}, len(views))
        code = self.job_code()
        if decision is Event.ENDED and code == 0:
            return judge.judge_success(views, time.monotonic() - self.began)
        return judge.judge_crash(views, output, code)

    def end(self) -> int:
        """SIGTERM every process of the job, then SIGKILL (processes.end); how many there were."""
        assert self.proc is not None and self.tree is not None
        everyone = self.tree.descendants()
        processes.end(everyone)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=processes.GRACE_S)
        return len(everyone)


def _added(report: Report, source: Replicas | Sampler | None, failed: str) -> Report:
    """`source`'s checks and tables added; should that fail, the verdict stands, said in a note."""
    if source is None:
        return report
    try:
        return source.add_to(report)
    except Exception as exc:
        report.notes.append(f"{failed}: {type(exc).__name__}: {exc}")
        return report
