"""`ddpcheck --help` loads Typer and the declarations, nothing more (docs/performance.md#start-up)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

# The modules of a bare `import typer`, then those after `ddpcheck --help` ran in the same kind of process.
TYPER = "import json, sys, typer; print(json.dumps(sorted(sys.modules)))"
HELP = (
    "import contextlib, io, json, sys\n"
    "from ddpcheck.cli import app\n"
    "with contextlib.redirect_stdout(io.StringIO()):\n"
    "    app(['--help'], prog_name='ddpcheck', standalone_mode=False)\n"
    "print(json.dumps(sorted(sys.modules)))"
)
# ddpcheck's own modules that only a run needs: the report's schema and writers, the renderers; and
# the launcher side with the output options, which load with the first command built, not with the list.
WORK = (
    "ddpcheck.report.model",
    "ddpcheck.report.terminal",
    "ddpcheck.report.html",
    "ddpcheck.report.outputs",
    "ddpcheck.launcher",
)
# The same by their name's end: the work, and the charts a declaration names by string (checks/<cmd>/).
WORK_ENDS = (".check", ".harness", ".judge", ".launch", ".terminal", ".html")


def _modules(code: str) -> set[str]:
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    return set(json.loads(done.stdout))


@pytest.mark.integration
def test_help_imports_nothing_beyond_typer_and_the_declarations() -> None:
    # Each module more costs --help its import (torch: seconds; the report's schema: json, xml, platform).
    extra = _modules(HELP) - _modules(TYPER)
    foreign = sorted(m for m in extra if not m.startswith(("ddpcheck", "typer", "encodings")))
    assert foreign == [], f"--help imports {foreign}: import them inside the function that needs them"
    work = sorted(m for m in extra if m.startswith(WORK) or m.endswith(WORK_ENDS))
    assert work == [], f"--help imports {work}: import them inside the function that needs them"
