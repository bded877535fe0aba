"""The watch directory, and the job's environment: the diagnostics a hang or crash needs, switched on.

Nothing of the user's code is edited: everything is an environment variable, and the in-process
agent (agent.py) is started by a sitecustomize on a PYTHONPATH entry put first.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Mapping
from pathlib import Path

from ddpcheck.checks.watch import agent
from ddpcheck.errors import UsageError
from ddpcheck.failure.process_records import PROCESSES

INRANK = str(Path(__file__).resolve().parent / "inrank")  # holds the sitecustomize.py
FR_BUFFER_ENTRIES = "2000"  # collectives each rank's flight recorder keeps (torch's own default when on)
NCCL_LOGS = "nccl"  # NCCL_DEBUG_FILE's folder in the watch directory


def make_watch_dir(path: str | None) -> tuple[Path, bool]:
    """(the watch directory, whether watch made it fresh): --dir, or a new one in TMPDIR."""
    if path is None:
        made = Path(tempfile.mkdtemp(prefix="ddpcheck-watch-"))
    else:
        made = Path(path)  # not a file: WatchOptions.validate refused one
        try:
            made.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise UsageError(f"--dir {path}: cannot create it ({exc.strerror})") from None
    for sub in (PROCESSES, NCCL_LOGS, agent.SAMPLES):
        (made / sub).mkdir(exist_ok=True)
    for stale in (agent.DUMP_REQUEST, agent.SAMPLE_REQUEST):  # a --dir used before: not this job's
        (made / stale).unlink(missing_ok=True)
    return made, path is None


def job_environment(base: Mapping[str, str], watch_dir: Path, nccl_info: bool) -> dict[str, str]:
    """The environment the job runs in: the caller's, with the diagnostics switched on."""
    env = dict(base)
    path = env.get("PYTHONPATH")
    env.update({
        agent.WATCH_DIR_VARIABLE: str(watch_dir),
        "PYTHONPATH": os.pathsep.join([INRANK, *filter(None, [path])]),
        "PYTHONFAULTHANDLER": "1",
        # The flight recorder: each rank's last collectives, dumped as <prefix><rank>.
        "TORCH_FR_DUMP_TEMP_FILE": str(watch_dir / agent.DUMP_PREFIX),
        "TORCH_NCCL_DUMP_ON_TIMEOUT": "1",
        "TORCH_NCCL_DEBUG_INFO_PIPE_FILE": str(watch_dir / agent.DEBUG_PIPE_PREFIX),
        "NCCL_DEBUG": "INFO" if nccl_info else env.get("NCCL_DEBUG", "WARN"),
        "NCCL_DEBUG_FILE": str(watch_dir / NCCL_LOGS / "%h.%p.log"),
    })  # fmt: skip
    env.setdefault("TORCH_FR_BUFFER_SIZE", FR_BUFFER_ENTRIES)
    return env
