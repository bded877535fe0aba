"""The run directory: the one place the launcher and the ranks meet on disk.

Every file name is here, with what writes and what reads it:

- `spec.json`: the RunSpec, written by the launcher, read by every rank (with --budget, the
  wall-clock end the ranks size their work by);
- `status/rank-R.json`: each rank's RankStatus (failure/statuses.py), read by the launcher's monitor;
- `report.json`: rank 0's Report, as a saved `--json` report holds it, read by the launcher;
- `verdict`: the verdict rank 0 shared with every node, for a node without rank 0;
- `logs/`: each rank's stdout and stderr (torch's elastic agent writes them);
- `flight/dump`: the watchdog's request, when it declares a stall, that every rank dump its
  flight recorder; `flight/fr_rank_R`: rank R's dump (a thread in each rank watches for the
  request: under gloo nothing else can ask a rank from outside);
- `inductor/`: torch's compile cache, kept inside so it goes with the directory.

A run that completes leaves nothing; one that could not complete keeps only `logs/`, even
when no rank wrote a line (a hang).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import secrets
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ddpcheck.failure.proc import ProcState, state_of
from ddpcheck.failure.rank_env import Launcher
from ddpcheck.rank import remover
from ddpcheck.rank.budget import Budget
from ddpcheck.rank.faults import Fault
from ddpcheck.report.model import Report, Verdict, report_from_dict

SPEC_FILE = "spec.json"
REPORT_FILE = "report.json"
VERDICT_FILE = "verdict"
STATUS_DIR = "status"
LOGS_DIR = "logs"
INDUCTOR_DIR = "inductor"
FLIGHT_DIR = "flight"
FLIGHT_REQUEST = "dump"
FLIGHT_PREFIX = "fr_rank_"
# The flight recorder's ring buffer in ranks a launcher watches: the last collectives are what a
# hang finding needs. A user's own TORCH_FR_BUFFER_SIZE wins.
FLIGHT_BUFFER_ENV = "TORCH_FR_BUFFER_SIZE"
FLIGHT_BUFFER_ENTRIES = 200
PREFIX = "ddpcheck-"
# Inline run directories carry their rank's pid, so a peer on the same host can remove the one
# left by a rank that was killed (SIGKILL) and cannot remove it itself.
INLINE_PREFIX = "ddpcheck-inline-"

# Ranks' own collective timeout is a little longer than the launcher's stall bound,
# so that the launcher, which sees every rank, names the culprit first.
COLLECTIVE_GRACE_S = 5.0


@dataclass
class RunSpec:
    """What every rank runs: the command, its options and how the ranks were planned."""

    command: str
    options: dict[str, Any]
    backend: str
    device: str  # "cuda" or "cpu"
    timeout: float  # --timeout: the bound on every wait
    faults: list[Fault] = field(default_factory=list)
    device_index: int | None = None  # this rank's GPU when not its local rank (inline runs)
    inline: bool = False  # torchrun, srun or mpirun started the ranks: no ddpcheck launcher watches
    launcher: Launcher | None = None  # which one, when inline
    budget_s: float | None = None  # --budget
    budget_end: float | None = None  # when it runs out, on the wall clock (rank/budget.py)

    def __post_init__(self) -> None:
        if self.launcher is not None:
            self.launcher = Launcher(self.launcher)  # from its JSON form, or a test's word

    @property
    def collective_timeout(self) -> float:
        """The process group's timeout: past the launcher's bound, or the bound itself when none watches."""
        return self.timeout if self.inline else self.timeout + COLLECTIVE_GRACE_S

    @property
    def budget(self) -> Budget | None:
        if self.budget_s is None or self.budget_end is None:
            return None
        return Budget(self.budget_s, self.budget_end)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RunSpec:
        return cls(**{**data, "faults": [Fault(**f) for f in data.get("faults", [])]})


def create() -> Path:
    """A fresh run directory for a launch from this process."""
    return Path(tempfile.mkdtemp(prefix=PREFIX))


def new_inline_path() -> Path:
    """The path of a run directory of this rank's own, not made yet: the caller can arrange for its
    removal first (a signal right after it is made must not leave it)."""
    return Path(tempfile.gettempdir()) / f"{INLINE_PREFIX}{os.getpid()}-{secrets.token_hex(6)}"


def create_inline(path: Path) -> Path:
    """Make the run directory `path` (new_inline_path), under torchrun, srun or mpirun.

    First it removes those that ranks of earlier runs on this host left when every rank was
    killed outright (srun ends a step with SIGKILL on a second Ctrl-C): no peer was left to.
    """
    sweep_abandoned_inline()
    path.mkdir(mode=0o700)  # as mkdtemp does: this user's alone, and an error if it exists
    return path


# The removers' scripts (rank/remover.py): the directory, "$1"; `exit 0` last, as in rank/remover.sh.
_REMOVER_SCRIPT = 'exec 3<&0; { read -r _ <&3; rm -rf -- "$1"; exit 0; } &'
# A launcher's run directory, unless it is one whose logs the launcher kept on purpose (keep_logs:
# logs/ alone, the spec gone): a launcher killed outright leaves its spec, or nothing at all.
_LAUNCHER_REMOVER_SCRIPT = (
    f'exec 3<&0; {{ read -r _ <&3; if [ -e "$1/{SPEC_FILE}" ] || [ ! -d "$1/{LOGS_DIR}" ]; then '
    'rm -rf -- "$1"; fi; exit 0; } &'
)


def remove_once_this_process_is_gone(path: Path, unless_logs_kept: bool = False) -> int | None:
    """Have `path` removed when this process ends, even if it is killed outright (SIGKILL): by a
    remover (rank/remover.py). `unless_logs_kept`: a launcher's run directory, left where keep_logs
    kept it (the launcher killed outright leaves it whole: removed). Returns the handle that
    remover.release takes once the directory's fate is settled (None: no remover could start)."""
    script = _LAUNCHER_REMOVER_SCRIPT if unless_logs_kept else _REMOVER_SCRIPT
    return remover.start(script, ["ddpcheck-remover", str(path)])


def sweep_abandoned_inline() -> None:
    """Remove the inline run directories whose rank (the pid in the name) is gone."""
    for path in Path(tempfile.gettempdir()).glob(f"{INLINE_PREFIX}*-*"):
        pid = path.name[len(INLINE_PREFIX) :].split("-", 1)[0]
        if pid.isdigit() and state_of(int(pid)) is ProcState.GONE:  # a zombie, or another user's, stays
            shutil.rmtree(path, ignore_errors=True)


def inline_dirs_of(pid: int) -> list[Path]:
    """The run directories an inline rank with this pid made (a stopped rank cannot remove its own)."""
    return list(Path(tempfile.gettempdir()).glob(f"{INLINE_PREFIX}{pid}-*"))


def compile_cache_env(run_dir: Path) -> dict[str, str]:
    """Keep torch's compile cache (created by an optimizer's first step) inside the run directory.

    Otherwise it lands in $TMPDIR/torchinductor_$USER and outlives the run.
    """
    if "TORCHINDUCTOR_CACHE_DIR" in os.environ:
        return {}
    return {"TORCHINDUCTOR_CACHE_DIR": str(run_dir / INDUCTOR_DIR)}


def write_spec(run_dir: str | Path, spec: RunSpec) -> None:
    _write(Path(run_dir) / SPEC_FILE, json.dumps(spec.to_dict()))


def read_spec(run_dir: str | Path) -> RunSpec:
    return RunSpec.from_dict(json.loads((Path(run_dir) / SPEC_FILE).read_text()))


def status_dir(run_dir: str | Path) -> Path:
    return Path(run_dir) / STATUS_DIR


def logs_dir(run_dir: str | Path) -> Path:
    return Path(run_dir) / LOGS_DIR


def flight_dir(run_dir: str | Path) -> Path:
    return Path(run_dir) / FLIGHT_DIR


def request_flight_dumps(run_dir: str | Path) -> None:
    """Ask every rank of this node to dump its flight recorder (the watchdog, on a stall)."""
    flight_dir(run_dir).mkdir(exist_ok=True)
    (flight_dir(run_dir) / FLIGHT_REQUEST).touch()


def flight_requested(run_dir: str | Path) -> bool:
    return (flight_dir(run_dir) / FLIGHT_REQUEST).exists()


def flight_dump_path(run_dir: str | Path, rank: int) -> Path:
    return flight_dir(run_dir) / f"{FLIGHT_PREFIX}{rank}"


def write_flight_dump(run_dir: str | Path, rank: int, dump: bytes) -> None:
    """A rank's dump, whole or not at all: the watchdog may read it, or kill the rank, at any moment."""
    path = flight_dump_path(run_dir, rank)
    # Its name must not end in digits: find_dumps takes such a name's digits for a rank.
    tmp = path.with_name(f".{path.name}.{os.getpid()}.partial")
    tmp.write_bytes(dump)
    os.replace(tmp, path)


# Rank 0's report, kept in its own process too: an inline rank 0 (under torchrun, srun or mpirun)
# is also the process that prints it, and its run directory may be gone by then (its launcher's
# SIGTERM removes it at once: mpirun's SIGKILL follows a second later, or as soon as another
# rank exits).
_kept: dict[str, str] = {}


def write_rank0_report(run_dir: str | Path, report: Report) -> None:
    text = json.dumps(report.to_dict(), default=str)
    _kept[str(run_dir)] = text
    with contextlib.suppress(FileNotFoundError):  # an inline run directory removed on SIGTERM
        _write(Path(run_dir) / REPORT_FILE, text)


def read_rank0_report(run_dir: str | Path) -> Report | None:
    """Rank 0's report, if it wrote one (in this process, or in a rank's, to the run directory)."""
    text = _kept.get(str(run_dir))
    if text is None:
        path = Path(run_dir) / REPORT_FILE
        if not path.exists():
            return None
        text = path.read_text()
    return report_from_dict(json.loads(text))


def write_verdict(run_dir: str | Path, verdict: str, host: str) -> None:
    _write(Path(run_dir) / VERDICT_FILE, json.dumps({"verdict": verdict, "host": host}))


def read_verdict(run_dir: str | Path) -> tuple[Verdict, str] | None:
    """(verdict, host of rank 0) as rank 0 shared them with every node, if it did."""
    path = Path(run_dir) / VERDICT_FILE
    if not path.exists():
        return None
    shared = json.loads(path.read_text())
    return Verdict(shared["verdict"]), shared["host"]


def stderr_tail(run_dir: Path, local_rank: int, lines: int = 12) -> str:
    """The last lines of a rank's stderr, when that rank ran on this node."""
    for path in sorted(logs_dir(run_dir).glob(f"*/attempt_*/{local_rank}/stderr.log")):
        text = path.read_text(errors="replace").strip().splitlines()
        return "\n".join(text[-lines:])
    return ""


def keep_logs(run_dir: Path) -> Path | None:
    """Keep the rank logs of a run that could not complete, even empty ones; drop the rest.

    A hang writes nothing, yet its logs are where one looks next. None only when no rank
    ever started (no log file at all): there is nothing to read, so nothing is kept.
    """
    logs = logs_dir(run_dir)
    if not logs.is_dir() or not any(logs.rglob("*.log")):
        return None
    for target in run_dir.iterdir():
        if target.name == LOGS_DIR:
            continue
        if target.is_dir():
            shutil.rmtree(target, ignore_errors=True)
        else:
            target.unlink(missing_ok=True)
    return run_dir


def _write(path: Path, text: str) -> None:
    tmp = path.with_suffix(f".tmp{os.getpid()}")  # ranks of one node may write the same file
    tmp.write_text(text)
    os.replace(tmp, path)
