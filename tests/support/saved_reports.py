"""One small real run of each command, saved with --json and --html, shared by the HTML and show tests.

Session-scoped: the runs cost most of these tests' time, and every assertion about a saved
report, its page and `ddpcheck show` reads the same four.
"""

from __future__ import annotations

import fcntl
import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.conftest import assert_nothing_left

# The runs: small, and each one shows what its page must: a culprit, a loss curve, phases.
RUNS = {
    "allreduce": ["allreduce", "--nproc", "2", "--sizes", "1K:64K", "--inject", "corrupt@1"],
    "train": ["train", "--nproc", "2", "--hidden", "64"],
    "profile": ["profile", "--nproc", "2", "--hidden", "256", "--steps", "4", "--warmup", "1"],
    "env": ["env"],
    "devices": ["devices", "--nproc", "3", "--size", "128", "--iters", "4", "--inject", "sdc@2"],
    "links": ["links", "--nproc", "3", "--inject", "slowlink@1"],
    "collectives": [
        "collectives",
        "--nproc",
        "3",
        "--sizes",
        "1K:2K",
        "--ops",
        "all_gather,reduce_scatter,sendrecv",
        "--inject",
        "corrupt@1",
    ],
}


@dataclass
class Saved:
    name: str
    code: int
    stdout: str
    stderr: str
    json: Path
    html: Path


def run_ddpcheck(
    *args: str, env: dict[str, str] | None = None, timeout: float = 240
) -> subprocess.CompletedProcess:
    full_env = {**os.environ, "OMP_NUM_THREADS": "1", "COLUMNS": "200", **(env or {})}
    return subprocess.run(
        [sys.executable, "-m", "ddpcheck", *args],
        capture_output=True,
        text=True,
        env=full_env,
        timeout=timeout,
    )


# Each test module that imports the fixture gets its own definition of it, so session scope alone
# would run the commands once per module: the runs are kept here, once per session.
_SAVED: dict[str, Saved] = {}
INDEX = "saved.json"


@pytest.fixture(scope="session", name="saved_reports")
def saved_reports_fixture(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Saved]:
    pytest.importorskip("matplotlib", reason="--html needs matplotlib: pip install 'ddpcheck[html]'")
    if _SAVED:
        return _SAVED
    if os.environ.get("PYTEST_XDIST_WORKER") is None:
        _SAVED.update(_run_all(tmp_path_factory.mktemp("wt16-saved")))
        return _SAVED
    # pytest -n: the first worker to ask runs them, into the session's directory (every worker's
    # base directory is in it); the others wait on the lock and read what it saved.
    out = tmp_path_factory.getbasetemp().parent / "saved-reports"
    out.mkdir(exist_ok=True)
    with (out / "lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        index = out / INDEX
        if index.exists():
            saved = {name: Saved(**{**fields, "json": Path(fields["json"]), "html": Path(fields["html"])})
                     for name, fields in json.loads(index.read_text()).items()}  # fmt: skip
        else:
            saved = _run_all(out)
            as_text = {
                name: {**vars(one), "json": str(one.json), "html": str(one.html)}
                for name, one in saved.items()
            }
            index.write_text(json.dumps(as_text))
    _SAVED.update(saved)
    return _SAVED


def _run_all(out: Path) -> dict[str, Saved]:
    scratch = out / "tmp"
    scratch.mkdir()
    saved = {}
    for name, args in RUNS.items():
        began = time.monotonic()
        json_path, html_path = out / f"{name}.json", out / f"{name}.html"
        proc = run_ddpcheck(
            *args, "--json", str(json_path), "--html", str(html_path), env={"TMPDIR": str(scratch)}
        )
        assert json_path.exists() and html_path.exists(), proc.stdout + proc.stderr
        saved[name] = Saved(name, proc.returncode, proc.stdout, proc.stderr, json_path, html_path)
        print(f"{name}: {time.monotonic() - began:.1f} s")
    assert_nothing_left(scratch)
    return saved
