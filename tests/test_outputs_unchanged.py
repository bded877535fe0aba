"""Every command's help, and the JSON, JUnit and terminal forms of saved reports, as they were.

tests/golden/ holds `--help` of every command and real runs of each command (a pass, a
planted corruption, a slow link, a hang, a crash, a comparison) saved with --json, with what
`ddpcheck show` printed and wrote for each when they were taken. A change of the house must
leave all of it identical: the help texts and the report files are what scripts and users read.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.support.saved_reports import run_ddpcheck

# Every test here starts processes (the real command, a shell, a browser).
pytestmark = pytest.mark.integration

GOLDEN = Path(__file__).parent / "golden"
COMMANDS = ["env", "allreduce", "collectives", "train", "profile", "links", "devices", "show", "compare"]
COMMANDS += ["watch", "postmortem", "attach"]
REPORTS = ["allreduce", "train", "profile", "env", "links", "collectives", "hang", "crash", "compare"]


@pytest.mark.parametrize("command", ["", *COMMANDS])
def test_help_is_unchanged(command: str) -> None:
    args = [command, "--help"] if command else ["--help"]
    shown = run_ddpcheck(*args)
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout == (GOLDEN / "help" / f"{command or 'ddpcheck'}.txt").read_text()


def _junit(text: str) -> str:
    # When it was written and where: the only parts of a JUnit file that are not the report's.
    text = re.sub(r'timestamp="[^"]*"', 'timestamp="T"', text)
    return re.sub(r'hostname="[^"]*"', 'hostname="H"', text)


@pytest.mark.parametrize("name", REPORTS)
def test_saved_report_outputs_are_unchanged(name: str) -> None:
    saved = GOLDEN / "reports" / f"{name}.json"
    as_json = run_ddpcheck("show", str(saved), "--json", "-")
    assert as_json.stdout == (GOLDEN / "reports" / f"{name}.show.json").read_text()
    as_junit = run_ddpcheck("show", str(saved), "--junit", "-")
    assert _junit(as_junit.stdout) == _junit((GOLDEN / "reports" / f"{name}.show.xml").read_text())
    on_terminal = run_ddpcheck("show", str(saved))
    assert on_terminal.stdout + on_terminal.stderr == (GOLDEN / "reports" / f"{name}.show.out").read_text()
    assert as_json.returncode == as_junit.returncode == on_terminal.returncode
