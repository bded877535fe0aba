"""Regenerate completions/ddpcheck.{bash,zsh,fish}: `python -m ddpcheck.completions [DIR]`.

The scripts are what `_DDPCHECK_COMPLETE=source_<shell> ddpcheck` prints (Typer's own).
They hold no option names: at each TAB they call `ddpcheck` back, so they complete what
the installed version offers. They change only when Typer's templates do, and
tests/test_completions.py says so when they drift.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

SHELLS = ("bash", "zsh", "fish")
# The source tree's completions/ (the generator is a tool for this repository).
DEFAULT_DIR = Path(__file__).resolve().parent.parent / "completions"


def completion_script(shell: str) -> str:
    """The script Typer prints for `shell`, with one trailing newline."""
    env = {**os.environ, "_DDPCHECK_COMPLETE": f"source_{shell}"}
    # A subprocess, as a shell would run it: the completion source command exits the process.
    proc = subprocess.run(
        [sys.executable, "-m", "ddpcheck"], env=env, capture_output=True, text=True, check=True
    )
    return proc.stdout.strip() + "\n"


def write_all(directory: Path = DEFAULT_DIR) -> list[Path]:
    directory.mkdir(parents=True, exist_ok=True)
    written = []
    for shell in SHELLS:
        path = directory / f"ddpcheck.{shell}"
        path.write_text(completion_script(shell), encoding="utf-8")
        written.append(path)
    return written


def main(argv: list[str]) -> int:
    for path in write_all(Path(argv[0]) if argv else DEFAULT_DIR):
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
