"""The suite's own configuration starts under either pytest-timeout that installs may bring.

pytest 9's `[tool.pytest]` table checks each option's declared type: pytest-timeout 2.4 declares
`timeout` a string, 2.5 a float, and each refuses the other's form. The timeout is therefore
passed on the command line (`--timeout=300` in `addopts`), which both versions read.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
VERSIONS = ("2.4.0", "2.5.0")


def test_the_timeout_is_given_where_every_plugin_version_reads_it() -> None:
    text = (ROOT / "pyproject.toml").read_text()
    table = text.split("[tool.pytest]", 1)[1].split("\n[", 1)[0]
    assert not re.search(r"^timeout\s*=", table, re.M), (
        "one pytest-timeout or the other refuses an ini `timeout`"
    )
    assert '"--timeout=300"' in table


@pytest.mark.integration
@pytest.mark.parametrize("version", VERSIONS)
def test_the_suite_collects_under_pytest_timeout(version: str, tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", str(venv)], check=True)
    python = venv / "bin" / "python"
    installed = subprocess.run(
        [
            str(python),
            "-m",
            "pip",
            "install",
            "-q",
            "--disable-pip-version-check",
            f"pytest-timeout=={version}",
        ],
        capture_output=True,
        text=True,
        timeout=240,
    )
    if installed.returncode != 0:
        pytest.skip(f"pytest-timeout {version} could not be installed: {installed.stderr.strip()[-200:]}")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "COV_"))}
    run = subprocess.run(
        [
            str(python),
            "-m",
            "pytest",
            "-p",
            "no:cacheprovider",
            "-n",
            "0",
            "-q",
            "tests/test_house.py",
            "-k",
            "circle",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    assert "expects a" not in run.stderr
    shown = subprocess.run(
        [str(python), "-c", "import importlib.metadata as m; print(m.version('pytest-timeout'))"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert shown.stdout.strip() == version
