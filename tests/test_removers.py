"""A remover at work still looks one until its directory is gone.

Tests and users wait for the removers of a TMPDIR to end, then take what is left for a leak.
dash execs the last command of a background subshell: a remover whose last command was its
`rm -rf` became a plain `rm` process, and a directory still being removed read as left behind
(test_arrival, 2 of 12 runs side by side with another test).
"""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest

from ddpcheck.rank import arrival, remover, rundir
from tests.conftest import removers_of


def _many_files(directory: Path, count: int = 20000) -> None:
    directory.mkdir()
    for i in range(count):  # enough that rm takes a while (~0.3 s here)
        (directory / f"f{i}").touch()


def _seen_without_a_remover(scratch: Path, directory: Path) -> list[float]:
    """Moments the directory (or what it was renamed to) existed with no remover of `scratch` alive."""
    seen, start, deadline = [], time.monotonic(), time.monotonic() + 60
    while time.monotonic() < deadline:
        alive = bool(removers_of(scratch))  # first: a remover ends only after its removal
        left = list(scratch.glob(f"{directory.name}*"))
        if left and not alive:
            seen.append(round(time.monotonic() - start, 3))
        if not left and not alive:
            break
    return seen


@pytest.mark.integration
def test_the_job_directory_remover_is_one_until_the_directory_is_gone(tmp_path: Path) -> None:
    directory = tmp_path / f"{arrival.JOB_PREFIX}big"
    _many_files(directory)
    no_pid = str(2**22 + 17)  # its rank long gone, nobody left here: it removes at once
    name = arrival.REMOVER_NAME
    script = ["sh", "-c", arrival.remover_script(), name, str(directory), no_pid, no_pid, "RANK"]
    subprocess.run(script, stdin=subprocess.DEVNULL, timeout=20)  # returns once it is in the background
    assert _seen_without_a_remover(tmp_path, directory) == []
    assert not list(tmp_path.iterdir())


@pytest.mark.integration
def test_the_run_directory_remover_is_one_until_the_directory_is_gone(tmp_path: Path) -> None:
    directory = tmp_path / "ddpcheck-run-big"
    _many_files(directory)
    handle = rundir.remove_once_this_process_is_gone(directory)
    assert handle is not None
    remover.release(handle)  # as if this process had ended
    assert _seen_without_a_remover(tmp_path, directory) == []
    assert not list(tmp_path.iterdir())
