"""A report file that cannot be written costs that file, never the run: verdict, tables and exit code stand.

For real: a tmpfs of 64 KiB filled to the brim (the up-front check's empty probe file still fits,
the report does not: ENOSPC mid-write, as on a full disk), and /sys, where even root creates
nothing (os.access says yes to root there, so the old up-front check let the run start).
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import Run, assert_nothing_left, assert_usage_error

pytestmark = pytest.mark.integration

GOLDEN = Path(__file__).resolve().parent / "golden" / "reports"
STRAGGLERS = Path(__file__).resolve().parent / "fixtures" / "gloo_stragglers" / "rank2_slower"
LOST = "ddpcheck: could not write the "


@pytest.fixture
def full(tmp_path: Path) -> Iterator[Path]:
    """A directory on a 64 KiB tmpfs with no byte left; unmounted after."""
    where = tmp_path / "full"
    where.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(where)], capture_output=True, text=True
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.strip() or mounted.returncode}")
    try:
        fd = os.open(where / "fill", os.O_CREAT | os.O_WRONLY)
        try:
            while os.write(fd, b"\0" * 4096):
                pass
        except OSError:
            pass  # ENOSPC: full to the brim
        finally:
            os.close(fd)
        yield where
    finally:
        subprocess.run(["umount", str(where)], check=True)


def assert_kept_the_run(run: Run, verdict: str, code: int, full: Path, lost: list[str]) -> None:
    """The verdict and the checks on stdout, the verdict's exit code, one stderr line per lost file, and
    nothing half-written (no r.json.tmp123, no probe) left where they were to go."""
    assert run.code == code, run.stdout + run.stderr
    assert "Traceback" not in run.stdout + run.stderr and "internal error" not in run.stderr
    lines = run.stdout.strip().splitlines()
    assert lines[-1].startswith(f"{verdict}  ddpcheck "), run.stdout
    assert any(line.split()[:2] == ["check", "status"] for line in lines), run.stdout  # the checks table
    said = [line for line in run.stderr.splitlines() if line.startswith(LOST)]
    assert len(said) == len(lost), run.stderr
    for path in lost:
        assert sum(f" to {full / path}: No space left on device" in line for line in said) == 1, run.stderr
    assert sorted(p.name for p in full.iterdir()) == ["fill"]


def test_a_run_whose_files_cannot_be_written_keeps_its_verdict(ddpcheck, scratch: Path, full: Path) -> None:
    # A planted wrong sum: a FAIL with a culprit host, so the hostlist too has something to write.
    files = {
        "--json": "r.json",
        "--junit": "r.xml",
        "--html": "r.html",
        "--prom": "r.prom",
        "--hostlist": "h",
    }
    args = [arg for flag, name in files.items() for arg in (flag, str(full / name))]
    run = ddpcheck("allreduce", "--nproc", "2", "--inject", "corrupt@1", *args)
    assert_kept_the_run(run, "FAIL", 1, full, list(files.values()))
    assert_nothing_left(scratch)


def test_a_passing_run_that_loses_its_report_still_passes(ddpcheck, scratch: Path, full: Path) -> None:
    run = ddpcheck("allreduce", "--nproc", "2", "--json", str(full / "r.json"))
    assert_kept_the_run(run, "PASS", 0, full, ["r.json"])
    assert_nothing_left(scratch)


@pytest.mark.parametrize(
    ("args", "verdict", "code"),
    [
        (["show", str(GOLDEN / "allreduce.json")], "FAIL", 1),
        (["compare", str(GOLDEN / "links.json"), str(GOLDEN / "links.json")], "PASS", 0),
        (["postmortem", str(STRAGGLERS)], "PASS", 0),
    ],
    ids=["show", "compare", "postmortem"],
)
def test_commands_that_read_saved_files_keep_their_verdict(
    ddpcheck, full: Path, args: list[str], verdict: str, code: int
) -> None:
    files = {"--json": "r.json", "--junit": "r.xml", "--html": "r.html"}
    run = ddpcheck(*args, *(arg for flag, name in files.items() for arg in (flag, str(full / name))))
    assert_kept_the_run(run, verdict, code, full, list(files.values()))


@pytest.mark.parametrize(
    ("flag", "name"),
    [
        ("--json", "r.json"),
        ("--junit", "r.xml"),
        ("--html", "r.html"),
        ("--prom", "r.prom"),
        ("--hostlist", "h"),
    ],
)
def test_a_directory_where_nothing_can_be_created_is_refused_before_the_run(
    ddpcheck, scratch: Path, flag: str, name: str
) -> None:
    """os.access says yes to root in /sys: the directory is really tried instead."""
    run = ddpcheck("allreduce", "--nproc", "2", flag, f"/sys/{name}")
    assert_usage_error(run, scratch)
    assert f"{flag} /sys/{name}: cannot create a file in /sys" in run.stderr


def test_a_saved_report_shown_into_sys_is_refused_up_front(ddpcheck, scratch: Path) -> None:
    run = ddpcheck("show", str(GOLDEN / "allreduce.json"), "--json", "/sys/r.json")
    assert_usage_error(run, scratch)
