"""Shell completions: the checked-in scripts match the app, bash completes, --install-completion works."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from ddpcheck.completions import SHELLS, completion_script, main

# Every test here starts processes (the real command, a shell, a browser).
pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parent.parent
COMPLETIONS = ROOT / "completions"
REGENERATE = "regenerate them with `python -m ddpcheck.completions` and commit completions/"

needs_bash = pytest.mark.skipif(shutil.which("bash") is None, reason="bash is not installed")


@pytest.fixture
def on_path(tmp_path: Path) -> dict[str, str]:
    """An environment whose `ddpcheck` is this source tree, wherever the package is installed.

    The scripts call `ddpcheck` back at every TAB, so it must be on PATH.
    """
    bindir = tmp_path / "bin"
    bindir.mkdir()
    shim = bindir / "ddpcheck"
    shim.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m ddpcheck "$@"\n')
    shim.chmod(0o755)
    env = {k: v for k, v in os.environ.items() if not k.startswith("_DDPCHECK")}
    env["PATH"] = f"{bindir}{os.pathsep}{env.get('PATH', '')}"
    env["PYTHONPATH"] = f"{ROOT}{os.pathsep}{env.get('PYTHONPATH', '')}"
    return env


@pytest.mark.parametrize("shell", SHELLS)
def test_checked_in_scripts_match_the_app(shell: str) -> None:
    path = COMPLETIONS / f"ddpcheck.{shell}"
    assert path.exists(), f"{path} is missing: {REGENERATE}"
    assert path.read_text(encoding="utf-8") == completion_script(shell), (
        f"{path.relative_to(ROOT)} differs from what `_DDPCHECK_COMPLETE=source_{shell} ddpcheck` "
        f"prints now (a Typer upgrade?): {REGENERATE}"
    )


def test_the_generator_writes_every_shell(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main([str(tmp_path)]) == 0
    printed = capsys.readouterr().out.splitlines()
    assert printed == [str(tmp_path / f"ddpcheck.{shell}") for shell in SHELLS]
    for shell in SHELLS:
        written = tmp_path / f"ddpcheck.{shell}"
        assert written.read_text() == (COMPLETIONS / f"ddpcheck.{shell}").read_text()


def _bash_complete(env: dict[str, str], script: Path, *words: str) -> list[str]:
    """What bash offers at TAB after `words` (the last one is the word being completed)."""
    program = f"""
source {script}
COMP_WORDS=({" ".join(f"'{w}'" for w in words)})
COMP_CWORD={len(words) - 1}
_ddpcheck_completion ddpcheck
printf '%s\\n' "${{COMPREPLY[@]}}"
"""
    proc = subprocess.run(
        ["bash", "--norc", "--noprofile", "-c", program],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    return [line for line in proc.stdout.splitlines() if line]


@needs_bash
@pytest.mark.parametrize(
    ("words", "expected"),
    [
        (("ddpcheck", "al"), ["allreduce"]),
        (("ddpcheck", "allreduce", "--dt"), ["--dtype"]),
        (("ddpcheck", "allreduce", "--backend", ""), ["auto", "nccl", "gloo"]),
        (("ddpcheck", "train", "--optimizer", "s"), ["sgd"]),
    ],
)
def test_bash_completes(on_path: dict[str, str], words: tuple[str, ...], expected: list[str]) -> None:
    assert _bash_complete(on_path, COMPLETIONS / "ddpcheck.bash", *words) == expected


@needs_bash
def test_bash_offers_every_command(on_path: dict[str, str]) -> None:
    offered = _bash_complete(on_path, COMPLETIONS / "ddpcheck.bash", "ddpcheck", "")
    assert {"env", "allreduce", "train", "profile"} <= set(offered)


@pytest.mark.parametrize(
    ("shell", "variables", "expected"),
    [
        ("bash", {"COMP_WORDS": "ddpcheck allreduce --dt", "COMP_CWORD": "2"}, "--dtype"),
        ("zsh", {"_TYPER_COMPLETE_ARGS": "ddpcheck al"}, "allreduce"),
        (
            "fish",
            {"_TYPER_COMPLETE_ARGS": "ddpcheck allreduce --dt", "_TYPER_COMPLETE_FISH_ACTION": "get-args"},
            "--dtype",
        ),
    ],
)
def test_the_callback_protocol_of_each_shell(
    on_path: dict[str, str], shell: str, variables: dict[str, str], expected: str
) -> None:
    # What each script runs at TAB, without the shell (zsh and fish may not be installed).
    env = {**on_path, **variables, "_DDPCHECK_COMPLETE": f"complete_{shell}"}
    proc = subprocess.run(
        [sys.executable, "-m", "ddpcheck"], capture_output=True, text=True, env=env, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    assert expected in proc.stdout


@needs_bash
def test_install_completion_for_bash(on_path: dict[str, str], tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    env = {**on_path, "HOME": str(home), "SHELL": "/bin/bash"}
    # Typer finds the shell among the parent processes: run it from bash (`; exit` keeps
    # bash from exec-ing ddpcheck in its place).
    proc = subprocess.run(
        ["bash", "--norc", "--noprofile", "-c", "ddpcheck --install-completion; exit $?"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    installed = home / ".bash_completions" / "ddpcheck.sh"
    assert str(installed) in proc.stdout
    assert installed.read_text().strip() == (COMPLETIONS / "ddpcheck.bash").read_text().strip()
    assert f"source '{installed}'" in (home / ".bashrc").read_text()
    # What a new shell reads: ~/.bashrc registers the completion, and it completes.
    assert _bash_complete(on_path, home / ".bashrc", "ddpcheck", "tr") == ["train"]
