"""Every command back to back, healthy and Ctrl-C'd, under each launcher: does every run end clean?

A Ctrl-C is what a terminal sends: SIGINT to the whole foreground process group (ddpcheck, its
ranks, torchrun, srun, mpirun), at a random moment of the run (from 0 to a healthy run's length: before the
ranks start, in rendezvous, mid-measure, in teardown). Each run has a TMPDIR of its own; after
it, the soak counts what it must never see:

- an interrupted run that does not exit 130 (a negative code: it died of that signal), or
  that prints the line `ddpcheck: interrupted; every rank was stopped` other than once
  (under torchrun, srun and mpirun: at most once, by rank 0; the launcher's own exit code is its own);
- `terminate called` (a C++ std::terminate: SIGABRT at teardown) or a Python traceback through
  ddpcheck's code (torchrun's own, of its Ctrl-C, is torchrun's);
- a healthy run that does not exit 0 (with its report's last line: which check failed, naming
  whom), srun's Ctrl-C'd once included: srun takes one Ctrl-C as a request to report its tasks'
  state and goes on, so that run is a healthy one;
- a run that had not ended 60 s after the Ctrl-C;
- any process of the run still alive 5 s after it ended, or anything left in its TMPDIR
  but torchrun's own log directories (torchelastic_*, which torchrun keeps, healthy runs too),
  mpirun's session directory (ompi.*) and, under `watch`, the user's job's compile cache
  (torchinductor_*).

    python tests/perf/soak.py --runs 100 [--launchers own,torchrun,srun,mpirun] [--commands allreduce,links]
        [--kinds healthy,ctrl-c,ctrl-c-twice] [--at mixed] [--healthy-rounds N] [--nproc 3]
        [--load steady|bursty]

Prints one table row per (command, launcher, kind): runs, exit codes seen, how many Ctrl-Cs came
while Python itself was starting (before ddpcheck's first line: Python's to handle, shown apart;
under torchrun, torchrun's own start, before any rank),
how many run directories of ranks the launcher killed outright (SIGKILL: srun on a second Ctrl-C)
the next run's sweep removed (each checked as that run would), how many times the user's job that
`watch` runs aborted by itself in torch's teardown and watch named the rank (its exit code and the
abort are then watch's report, not a failure), problems, and the moments at which
each problem struck; `--show-failures` prints each failing run's stderr.
Under srun the soak starts a Slurm of its own on this machine (root; tests/support/slurm.py).
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from ddpcheck.rank import rundir
from tests.support.fr_dumps import dump, entry, write_pickle
from tests.support.load import bursty_load, busy_cores
from tests.support.slurm import slurm_daemons

HERE = Path(__file__).resolve().parents[2]
TRAIN_JOB = HERE / "tests" / "support" / "train_job.py"
LINE = "ddpcheck: interrupted; every rank was stopped"
VERDICTS = ("FAIL ", "ERROR ")  # how a report's last line begins when the run did not pass
FAILING_ROW = re.compile(r"^\S.*?\s{2,}(FAIL|ERROR)\s{2,}")  # a check's row in the report's table
COMMANDS = (
    "allreduce", "collectives", "train", "profile", "links", "devices", "env", "watch", "show", "compare",
    "postmortem",
)  # fmt: skip
# Commands that read what runs left (made once before the runs: make_inputs), and every command
# that starts no ranks: each runs on its own, under no launcher.
READERS = ("show", "compare", "postmortem")
PLAIN = ("env", "watch", *READERS)
INPUTS: dict[str, Path] = {}  # what the readers read: a report, flight-recorder dumps
# Small, fast settings: the soak is about how runs end, not what they measure.
ARGS: dict[str, tuple[str, ...]] = {
    "allreduce": ("--sizes", "1K:64K", "--iters", "5"),
    "collectives": ("--sizes", "1K:16K", "--iters", "3"),
    "train": ("--steps", "5", "--hidden", "256"),
    "profile": ("--hidden", "256", "--steps", "4", "--warmup", "1"),
    # 30, not 3: with one exchange a pass, a healthy rank starved for a moment on the busy machine
    # read as 0.07 x its peers (1 healthy run in 10 FAILed); the defaults' 50 pass 20 of 20.
    "links": ("--size", "64K", "--iters", "30"),
    "devices": ("--size", "128", "--iters", "3"),
    "env": (),
}
LAUNCHERS = ("own", "torchrun", "srun", "mpirun")
KINDS = ("healthy", "ctrl-c", "ctrl-c-twice")
ENDED_WITHIN_S = 60.0
LEFTOVER_GRACE_S = 5.0


@dataclass
class Outcome:
    command: str
    launcher: str
    kind: str
    code: int | None
    seconds: float
    moment: str = ""  # where the run was when the Ctrl-C came
    stderr: str = ""
    verdict: str = ""  # the report's last line (stdout), when a run failed: which check, which rank
    ended_first: bool = False  # the run was over before the Ctrl-C was sent
    procs: list[str] = field(default_factory=list)
    dirs: list[str] = field(default_factory=list)
    swept: int = 0  # run directories of ranks the launcher killed outright, removed by the next run's sweep
    report: dict = field(default_factory=dict)  # the run's --json report, when it wrote one

    def job_aborted_itself(self) -> bool:
        """Under `watch`: a rank of the user's job died of its own SIGABRT as its interpreter ended.

        torch 2.13 over gloo can abort a process as the interpreter ends: a gloo worker thread
        releases a collective's tensors after Python began finalizing, cannot take the GIL, and
        the thread's forced unwinding through a noexcept destructor calls std::terminate
        ('terminate called without an active exception'). The job does it without ddpcheck too
        (docs/failures.md), and `watch` imports no torch: the abort is the job's. Reporting it is
        watch's job: a run it did not interrupt must exit 3 naming that rank (abort_named()).
        """
        return self.command == "watch" and "terminate called without an active exception" in self.stderr

    def abort_named(self) -> bool:
        """watch's report names exactly one rank, dead of 'Fatal Python error: Aborted'."""
        return self.code == 3 and any(
            c.get("status") == "ERROR"
            and len(c.get("ranks", [])) == 1
            and "Fatal Python error: Aborted" in c.get("detail", "")
            for c in self.report.get("checks", [])
        )

    def in_python_start(self) -> bool:
        """The Ctrl-C came while Python itself started (site, the .pth files), before ddpcheck's first
        line: Python's to handle (death by SIGINT, or exit 1 and 'Fatal Python error'), not ddpcheck's.
        Under torchrun, while torchrun itself imported torch, before any rank was started: torch's
        native part let the KeyboardInterrupt escape as a C++ exception, and torchrun died of
        SIGABRT (`terminate called after throwing an instance of 'pybind11::error_already_set'`),
        not ddpcheck, which was not running yet."""
        if self.kind == "healthy" or not self.moment.startswith("starting"):
            return False
        if through_ddpcheck(self.stderr) or LINE in self.stderr:
            return False
        if self.launcher == "torchrun":
            escaped = "pybind11::error_already_set" in self.stderr and "KeyboardInterrupt" in self.stderr
            return self.code == -signal.SIGABRT and escaped
        return self.launcher == "own" and self.code in (1, -2)

    def problems(self) -> list[str]:
        if self.in_python_start():
            return []
        aborted = self.job_aborted_itself()  # the job's abort is watch's to report, not a failure of it
        found = []
        # srun takes a first Ctrl-C for a request to report its tasks' state and goes on: only a second
        # within a second signals the tasks. Once Ctrl-C'd, such a run is a healthy run.
        passed_on = not (self.launcher == "srun" and self.kind == "ctrl-c")
        interrupted = self.kind != "healthy" and not self.ended_first and passed_on
        lines = self.stderr.count(LINE)
        if self.code is None:
            found.append("hung")
        elif aborted and not interrupted:
            if not self.abort_named():
                found.append(f"exit {self.code}, the job's abort not named")
        elif self.code != (130 if interrupted else 0) and not (interrupted and self.launcher != "own"):
            found.append(f"exit {self.code}" + (f" ({self.verdict})" if self.verdict else ""))
        if interrupted and (lines > 1 or (self.launcher == "own" and lines != 1)):
            found.append(f"{lines} lines")
        if "terminate called" in self.stderr and not aborted:
            found.append("terminate called")
        if through_ddpcheck(self.stderr):
            found.append("traceback")
        if self.procs:
            found.append(f"processes left: {'; '.join(self.procs)}")
        # torchrun keeps its own log directory (torchelastic_*) in TMPDIR, healthy runs too, mpirun
        # its session directory (ompi.HOST.UID) when a second Ctrl-C ends it at once, and the job
        # that `watch` runs its compile cache (torchinductor_*): not ddpcheck's, not counted.
        theirs = ("torchelastic_", "ompi.") + (("torchinductor_",) if self.command == "watch" else ())
        if left := [d for d in self.dirs if not d.startswith(theirs)]:
            found.append(f"files left: {' '.join(left)}")
        return found


def through_ddpcheck(stderr: str) -> bool:
    """Whether a traceback passes through ddpcheck's code (torchrun's own, of its Ctrl-C, does not)."""
    frames = re.findall(r'File "([^"]+)"', stderr)
    return any(f"{os.sep}ddpcheck{os.sep}" in f and f"{os.sep}torch{os.sep}" not in f for f in frames)


def argv_of(command: str, launcher: str, nproc: int, report: Path) -> list[str]:
    if command == "watch":
        job = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(nproc)]
        watch = [sys.executable, "-m", "ddpcheck", "watch", "--hang-after", "20", "--json", str(report)]
        return [*watch, "--", *job, str(TRAIN_JOB)]
    if command in READERS:
        report, dumps = str(INPUTS["report"]), str(INPUTS["dumps"])
        read = {"show": [report], "compare": [report, report], "postmortem": [dumps]}
        return [sys.executable, "-m", "ddpcheck", command, *read[command]]
    # Its report too: a failed run's is kept (--keep-failed), with every rank's figures to read.
    ddpcheck = [sys.executable, "-m", "ddpcheck", command, *ARGS[command], "--json", str(report)]
    if command == "env":
        return ddpcheck
    if launcher == "torchrun":
        torchrun = ["-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(nproc)]
        return [sys.executable, *torchrun, "-m", "ddpcheck", command, *ARGS[command]]
    if launcher == "srun":
        # The recipe of docs/multinode.md: -K ends the step once a task failed.
        return ["srun", "-n", str(nproc), "--kill-on-bad-exit=1", *ddpcheck]
    if launcher == "mpirun":
        passed = [
            arg for name in ("PYTHONPATH", "TMPDIR", "OMP_NUM_THREADS", "COLUMNS") for arg in ("-x", name)
        ]
        return ["mpirun", "--allow-run-as-root", "--oversubscribe", "-np", str(nproc), *passed, *ddpcheck]
    return [*ddpcheck, "--nproc", str(nproc)]


STAGES = ("launched", "device", "join", "measure", "gather", "done")
MOMENTS = ("random", "start", "launch", "measure", "end")


def stage_of(tmp: Path) -> str:
    """Where a run stands: starting, launching, the slowest rank's stage, teardown, or ended.

    From what it keeps in its TMPDIR: the run directory (own launcher) or a rank's inline one
    (torchrun), the ranks' status files (own launcher), rank 0's report.
    """
    runs = sorted(tmp.glob(f"{rundir.PREFIX}*"))
    if not runs:
        return "starting"
    if any((run / rundir.REPORT_FILE).exists() for run in runs):
        return "teardown"
    stages = []
    try:
        statuses = list(runs[0].glob("status/rank-*.json"))
    except FileNotFoundError:  # the run removed its directory while we looked
        statuses = []
    for path in statuses:
        try:
            stages.append(json.loads(path.read_text())["stage"].split(":")[0])
        except (OSError, ValueError, KeyError):
            continue
    if not stages:
        return "launching"
    return min(stages, key=lambda s: STAGES.index(s) if s in STAGES else len(STAGES))


def wait_for_moment(proc: subprocess.Popen, tmp: Path, at: str, horizon: float, rng: random.Random) -> str:
    """Wait until the run reaches the moment `at`; return where it stood, or '' if it ended first.

    start: within the first 3 s (Python's start-up, ddpcheck's and torch's imports); launch: the
    run directory exists, no rank reported yet; measure: a rank measures; end: the run directory
    came and went (the report is out, the process is ending); random: anywhere in a healthy run.
    """
    began = time.monotonic()
    fire_at = began + (rng.uniform(0.05, 3.0) if at == "start" else rng.uniform(0, horizon))
    seen = False
    while proc.poll() is None:
        stage = stage_of(tmp)
        seen = seen or stage != "starting"
        now = time.monotonic()
        if at in ("start", "random") and now >= fire_at:
            break
        if at == "launch" and stage == "launching":
            break
        if at == "measure" and stage in ("measure", "gather"):
            break
        if at == "end" and seen and stage == "starting":
            stage = "ended"
            break
        if now - began > ENDED_WITHIN_S * 3:
            break
        time.sleep(0.02)
    else:
        return ""
    return f"{stage} {time.monotonic() - began:.1f}s"


PF_EXITING = 0x4  # the kernel's flag for a process inside exit(): signals no longer act on it


def exited(pid: int) -> bool:
    """Whether the process has exited, or is exiting: a signal sent now reaches nothing.

    A process with torch loaded takes a moment inside exit() (unmapping its memory) before it is
    a zombie; a Ctrl-C then found it with its report printed, exit 0 and no line.
    """
    try:
        if psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
            return True
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return bool(int(fields[6]) & PF_EXITING)
    except (psutil.Error, OSError, IndexError, ValueError):
        return True


def run_of(tmp: Path) -> list[psutil.Process]:
    """Every process on this machine that carries this run's TMPDIR."""
    found = []
    for proc in psutil.process_iter():
        try:
            if proc.environ().get("TMPDIR") == str(tmp):
                found.append(proc)
        except psutil.Error:
            continue
    return found


def one(
    command: str, launcher: str, kind: str, at: str, nproc: int, horizon: float, rng: random.Random
) -> Outcome:
    tmp = Path(tempfile.mkdtemp(prefix="soak-"))
    env = {**os.environ, "TMPDIR": str(tmp), "OMP_NUM_THREADS": "1", "COLUMNS": "200"}
    if command == "watch":
        env |= {"TRAIN_JOB_STEPS": "400", "TRAIN_JOB_STEP_S": "0.02"}
    began = time.monotonic()
    # A session of its own: the run's process group is what a terminal's foreground job is.
    report = tmp.with_name(tmp.name + ".json")  # watch's: beside the TMPDIR, whose leftovers are counted
    proc = subprocess.Popen(
        argv_of(command, launcher, nproc, report),
        env=env,
        cwd=tmp.parent,  # not a checkout: `python -m ddpcheck` takes ddpcheck from PYTHONPATH
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        outcome = _finish(proc, tmp, Outcome(command, launcher, kind, None, 0.0), at, horizon, rng, began)
        with contextlib.suppress(OSError, ValueError):
            outcome.report = json.loads(report.read_text())
        return outcome
    except BaseException:  # the soak itself stopped mid-run: end the run, leave nothing
        for p in run_of(tmp):
            p.kill()
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    finally:
        report.unlink(missing_ok=True)


def _finish(
    proc: subprocess.Popen,
    tmp: Path,
    outcome: Outcome,
    at: str,
    horizon: float,
    rng: random.Random,
    began: float,
) -> Outcome:
    """Strike the run (Ctrl-C'd kinds), wait for it, and count what it left."""
    kind = outcome.kind
    if kind != "healthy":
        outcome.moment = wait_for_moment(proc, tmp, at, horizon, rng)
        # Exited already (a zombie not yet reaped takes a signal without a word): not interrupted.
        outcome.ended_first = not outcome.moment or proc.poll() is not None or exited(proc.pid)
        if not outcome.ended_first:
            os.killpg(proc.pid, signal.SIGINT)
            if kind == "ctrl-c-twice":
                time.sleep(rng.uniform(0.05, 1.0))
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGINT)
    try:
        out, err = proc.communicate(timeout=ENDED_WITHIN_S + (0 if kind != "healthy" else 240))
        outcome.code = proc.returncode
    except subprocess.TimeoutExpired:
        for p in run_of(tmp):
            p.kill()
        out, err = proc.communicate()
    outcome.seconds = time.monotonic() - began
    outcome.stderr = err
    last = next((line for line in reversed(out.splitlines()) if line.startswith(VERDICTS)), "")
    # With the checks that failed: an srun run that exited 1 said only its count of failures (12
    # of them, never explained).
    failing = [line.strip() for line in out.splitlines() if FAILING_ROW.match(line)]
    outcome.verdict = " | ".join([*failing[:3], last]) if last else ""
    deadline = time.monotonic() + LEFTOVER_GRACE_S
    while (left := run_of(tmp)) and time.monotonic() < deadline:
        time.sleep(0.1)
    outcome.procs = [" ".join(p.cmdline()[:6]) for p in left if p.is_running()]
    for p in left:
        p.kill()
    if outcome.code in (128 + signal.SIGKILL, -signal.SIGKILL):
        # The launcher killed every rank outright (srun, on a second Ctrl-C): none could remove its
        # run directory; the next inline run on this host sweeps them. Checked here, as it would.
        outcome.swept = sweep_in(tmp)
    # What is inside a directory left says who left it: a run directory never removed holds the
    # spec and every status file; one recreated after its removal, only what wrote last.
    outcome.dirs = sorted(described(p) for p in tmp.iterdir())
    shutil.rmtree(tmp, ignore_errors=True)
    return outcome


def described(path: Path) -> str:
    """A name left in TMPDIR, and for a directory the files in it."""
    if not path.is_dir():
        return path.name
    return f"{path.name} ({', '.join(sorted(str(f.relative_to(path)) for f in path.rglob('*')))})"


def sweep_in(tmp: Path) -> int:
    """How many run directories the next inline run, with this TMPDIR, would sweep before it starts."""
    left = list(tmp.glob(f"{rundir.INLINE_PREFIX}*-*"))
    saved, tempfile.tempdir = tempfile.tempdir, str(tmp)
    try:
        rundir.sweep_abandoned_inline()
    finally:
        tempfile.tempdir = saved
    return sum(not path.exists() for path in left)


def make_inputs(folder: Path) -> None:
    """A passing allreduce report (for show and compare) and three ranks' flight-recorder dumps that
    agree (for postmortem): each of those runs then exits 0 when healthy."""
    report = folder / "allreduce.json"
    allreduce = [sys.executable, "-m", "ddpcheck", "allreduce", "--nproc", "2", *ARGS["allreduce"]]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    subprocess.run([*allreduce, "--json", str(report), "--quiet"], env=env, check=True)
    dumps = folder / "dumps"
    dumps.mkdir()
    for rank in range(3):
        write_pickle(dumps / f"fr_{rank}", dump([entry(seq) for seq in range(1, 5)]))
    INPUTS.update(report=report, dumps=dumps)


def table(outcomes: list[Outcome]) -> str:
    groups: dict[tuple[str, str, str], list[Outcome]] = collections.defaultdict(list)
    for o in outcomes:
        groups[(o.command, o.launcher, o.kind)].append(o)
    rows = [
        ("command", "launcher", "kind", "runs", "exit codes", "in Python's start", "swept", "job aborted",
         "bad", "problems (moment)")
    ]  # fmt: skip
    for (command, launcher, kind), runs in groups.items():
        codes = collections.Counter(str(o.code) for o in runs)
        bad = [o for o in runs if o.problems()]
        problems = collections.Counter(p.split(":")[0].split(" (")[0] for o in bad for p in o.problems())
        where = "; ".join(f"{', '.join(o.problems())} @ {o.moment or 'healthy'}" for o in bad[:4])
        rows.append(
            (
                command,
                launcher,
                kind,
                str(len(runs)),
                " ".join(f"{c}×{n}" for c, n in sorted(codes.items())),
                str(sum(o.in_python_start() for o in runs)),
                str(sum(o.swept for o in runs)),
                str(sum(o.job_aborted_itself() for o in runs)),
                str(len(bad)),
                ", ".join(f"{p}×{n}" for p, n in problems.items()) + (f" [{where}]" if where else ""),
            )
        )
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]) - 1)]
    return "\n".join(
        "  ".join(c.ljust(w) for c, w in zip(r, widths, strict=False)) + "  " + r[-1] for r in rows
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3, help="runs of each kind per command and launcher")
    parser.add_argument("--commands", default=",".join(COMMANDS))
    parser.add_argument("--launchers", default=",".join(LAUNCHERS), help=", ".join(LAUNCHERS))
    parser.add_argument("--kinds", default=",".join(KINDS))
    parser.add_argument("--nproc", type=int, default=3)
    parser.add_argument(
        "--at", default="mixed", help=f"when Ctrl-C comes: {', '.join(MOMENTS)}, or mixed (each in turn)"
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--healthy-rounds",
        type=int,
        default=None,
        help="healthy runs in the first N rounds only (default: all)",
    )
    parser.add_argument("--show-failures", action="store_true", help="print each failing run's stderr")
    parser.add_argument(
        "--keep-failed", type=Path, metavar="DIR", help="write each failing run's --json report into DIR"
    )
    parser.add_argument(
        "--load",
        choices=("steady", "bursty"),
        help="beside every run, one busy-loop process per core; bursty: each comes and goes (0.2-2 s)",
    )
    args = parser.parse_args()
    # Started in the background by a shell without job control, this process and its children
    # would ignore SIGINT (and a Ctrl-C would do nothing): the runs get the default back.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [os.environ.get("PYTHONPATH"), str(HERE)]))
    rng = random.Random(args.seed)
    commands, launchers, kinds = (s.split(",") for s in (args.commands, args.launchers, args.kinds))
    began = time.monotonic()
    print(f"load before: {os.getloadavg()[0]:.2f} (1-min), {os.cpu_count()} cores", flush=True)
    with contextlib.ExitStack() as stack:
        if args.load:
            stack.enter_context(busy_cores() if args.load == "steady" else bursty_load(args.seed))
            print(f"beside every run: a {args.load} busy-loop process per core", flush=True)
        if "srun" in launchers:
            # A Slurm of the soak's own (slurmctld and slurmd, as the tests start it), ended after.
            os.environ.update(stack.enter_context(slurm_daemons()))
        if set(READERS) & set(commands):
            make_inputs(Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="soak-inputs-"))))
        outcomes: list[Outcome] = []
        try:
            soak(args, commands, launchers, kinds, rng, outcomes)
        except KeyboardInterrupt:  # the soak itself stopped (SIGINT to it alone): the runs so far
            print("\nsoak stopped early", flush=True)
    print(f"\n{len(outcomes)} runs in {time.monotonic() - began:.0f} s; load after: {os.getloadavg()[0]:.2f}")
    print(table(outcomes))


def soak(
    args: argparse.Namespace,
    commands: list[str],
    launchers: list[str],
    kinds: list[str],
    rng: random.Random,
    outcomes: list[Outcome],
) -> None:
    """Every command under every launcher, `args.runs` rounds; each run's outcome added as it comes."""
    healthy_rounds = args.runs if args.healthy_rounds is None else args.healthy_rounds
    horizon: dict[tuple[str, str], float] = {}
    for attempt in range(args.runs):
        for command in commands:
            for launcher in launchers if command not in PLAIN else ["own"]:
                for kind in kinds:
                    if kind == "healthy" and attempt >= healthy_rounds:
                        continue
                    # A Ctrl-C lands anywhere in a healthy run's length (measured, or a first guess).
                    span = horizon.get((command, launcher), 15.0)
                    at = MOMENTS[len(outcomes) % len(MOMENTS)] if args.at == "mixed" else args.at
                    if launcher != "own" and at in ("launch", "measure"):
                        at = "random"  # inline ranks keep their stages in the store, not in files
                    if command in PLAIN and command != "watch" and at in ("launch", "measure", "end"):
                        # No run directory to tell those moments by: each waited for the end, and the
                        # Ctrl-C came after it (4 in 5 of show's, compare's and postmortem's).
                        at = "random"
                    outcome = one(command, launcher, kind, at, args.nproc, span, rng)
                    if kind == "healthy" and outcome.code == 0:
                        horizon[(command, launcher)] = outcome.seconds
                    outcomes.append(outcome)
                    mark = ", ".join(outcome.problems()) or (
                        "in Python's start"
                        if outcome.in_python_start()
                        else "the job aborted itself, named"
                        if outcome.job_aborted_itself()
                        else "ok"
                    )
                    print(
                        f"[{attempt + 1}/{args.runs}] {command} {launcher} {kind}: exit {outcome.code} "
                        f"in {outcome.seconds:.1f} s {outcome.moment} {mark}",
                        flush=True,
                    )
                    if args.show_failures and outcome.problems():
                        print("    " + outcome.stderr.strip().replace("\n", "\n    "), flush=True)
                    if args.keep_failed and outcome.problems() and outcome.report:
                        args.keep_failed.mkdir(parents=True, exist_ok=True)
                        kept = args.keep_failed / f"{len(outcomes):04d}-{command}-{launcher}-{kind}.json"
                        kept.write_text(json.dumps(outcome.report, indent=1))
                        print(f"    report kept: {kept}", flush=True)


if __name__ == "__main__":
    main()
