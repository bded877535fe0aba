"""Ranks start whatever the working directory holds, and a rank that dies before its first stage says why.

Run from the folder above a clone, `./ddpcheck/` once hid the installed package from every rank
(`python -m` puts the working directory first on the import path): each rank died on import and
the report showed no reason, since a rank's stderr was found only through its first status.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import Run, assert_nothing_left

pytestmark = pytest.mark.integration

# Started by its path, as a console script is: its own folder, not the working directory, is first
# on the launcher's import path. SAFE_PATH_FLAG "0" takes the Python 3.10 form of the rank's argv.
LAUNCHER = """
import os, sys
from ddpcheck.launcher import launch
if os.environ.get("SAFE_PATH_FLAG") == "0":
    launch.rank_argv.__defaults__ = (False,)
from ddpcheck.__main__ import main
sys.argv[0] = "ddpcheck"
main()
"""

# Put first on the ranks' PYTHONPATH: a rank (not the launcher: elastic sets TORCHELASTIC_RUN_ID for
# its workers only) writes a reason and dies before it imports anything of ddpcheck's.
DIES_ON_START = """
import os, sys
if "TORCHELASTIC_RUN_ID" in os.environ and os.environ.get("LOCAL_RANK") == "1":
    sys.stderr.write("rank start-up failed: the cluster image lacks libfoo.so.3\\n")
    sys.stderr.flush()
    os._exit(1)
"""


@pytest.fixture
def above_a_clone(tmp_path: Path) -> Path:
    """A folder holding a `ddpcheck/` package that is not ddpcheck (the clone's root, or a stray copy)."""
    folder = tmp_path / "home"
    (folder / "ddpcheck").mkdir(parents=True)
    (folder / "ddpcheck" / "__init__.py").write_text(
        'raise ImportError("the ddpcheck/ folder was imported")\n'
    )
    return folder


def run_from(folder: Path, scratch: Path, *args: str, env: dict[str, str] | None = None) -> Run:
    launcher = scratch.parent / "bin" / "ddpcheck_cli.py"
    launcher.parent.mkdir(exist_ok=True)
    launcher.write_text(LAUNCHER)
    report_path = scratch.parent / "report.json"
    full_env = {**os.environ, "TMPDIR": str(scratch), "OMP_NUM_THREADS": "1", "COLUMNS": "200", **(env or {})}
    proc = subprocess.run(
        [sys.executable, str(launcher), *args, "--json", str(report_path)],
        cwd=folder,
        capture_output=True,
        text=True,
        env=full_env,
        timeout=240,
    )
    report = json.loads(report_path.read_text()) if report_path.exists() else None
    return Run(proc.returncode, proc.stdout, proc.stderr, report, 0.0)


@pytest.mark.parametrize("safe_path_flag", ["1", "0"], ids=["-P", "python3.10"])
def test_ranks_import_the_installed_package_from_a_folder_holding_ddpcheck(
    above_a_clone: Path, scratch: Path, safe_path_flag: str
) -> None:
    run = run_from(
        above_a_clone, scratch, "allreduce", "--nproc", "2", env={"SAFE_PATH_FLAG": safe_path_flag}
    )
    assert run.code == 0, run.stdout + run.stderr
    assert "the ddpcheck/ folder was imported" not in run.stdout + run.stderr
    assert run.report is not None and run.report["verdict"] == "pass"
    assert_nothing_left(scratch, run)


def test_a_rank_that_dies_before_its_first_stage_shows_its_stderr(
    above_a_clone: Path, scratch: Path, tmp_path: Path
) -> None:
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(DIES_ON_START)
    path = os.pathsep.join(filter(None, [str(site), os.environ.get("PYTHONPATH")]))
    run = run_from(above_a_clone, scratch, "allreduce", "--nproc", "2", env={"PYTHONPATH": path})
    assert run.code == 3, run.stdout + run.stderr
    crash = run.check("rank crashed")
    assert crash["ranks"] == [1] and "before it reported any stage" in crash["detail"]
    tails = {row["rank"]: row["stderr_tail"] for row in run.table("stderr")}
    assert "the cluster image lacks libfoo.so.3" in tails[1]
    assert "the cluster image lacks libfoo.so.3" in run.stdout  # the terminal's stderr panel too
    assert_nothing_left(scratch, run)
