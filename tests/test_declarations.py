"""Each command's declaration is the one place that knows it: what it names exists and is used.

Pure: imports the declarations and the modules they name, starts no process.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import importlib
import inspect
import re
from pathlib import Path

import pytest

from ddpcheck.command import RANKED_COMMANDS, load
from ddpcheck.commands import COMMANDS
from ddpcheck.rank.faults import Faults
from ddpcheck.report.baseline import SETUP_NAMES
from ddpcheck.report.figures import FigureKind

ROOT = Path(__file__).resolve().parent.parent
# Judged outside any command: the launcher's reading of the ranks' heartbeats.
SIDE_JUDGES = {"ddpcheck/failure/liveness.py", "ddpcheck/failure/hangs.py", "ddpcheck/rank/agreement.py"}


def path_of(module: str) -> str:
    return module.replace(".", "/") + ".py"


def only_mutate() -> list[str]:
    """pyproject.toml's [tool.mutmut] only_mutate (read by hand: tomllib is Python 3.11's)."""
    text = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    section = text.partition("[tool.mutmut]")[2]
    listed = re.search(r"^only_mutate = \[(.*?)\]", section, re.S | re.M)
    assert listed, "pyproject.toml's [tool.mutmut] has no only_mutate"
    return re.findall(r'"([^"]+)"', listed.group(1))


def test_the_mutation_list_names_every_declared_judge_and_nothing_else() -> None:
    patterns = only_mutate()
    judged = {path_of(judge) for command in COMMANDS.values() for judge in command.judges} | SIDE_JUDGES
    missing = [path for path in judged if not (ROOT / path).is_file()]
    assert not missing, f"declared judges that are no file: {missing}"
    unlisted = [path for path in judged if not any(fnmatch.fnmatch(path, p) for p in patterns)]
    assert not unlisted, f"pyproject.toml's only_mutate leaves out: {unlisted}"
    sources = {str(p.relative_to(ROOT)) for p in (ROOT / "ddpcheck").rglob("*.py")}
    mutated = {path for path in sources if any(fnmatch.fnmatch(path, p) for p in patterns)}
    assert mutated == judged, f"only_mutate matches what no declaration calls a judge: {mutated - judged}"


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_what_a_declaration_names_exists(name: str) -> None:
    command = COMMANDS[name]
    for table, chart in command.charts.items():
        assert callable(load(chart)), f"{name}: the chart of {table}"
    for maker in command.html_charts:
        assert callable(importlib.import_module(maker).charts), f"{name}: {maker}"
    assert issubclass(load(command.fault_actions), Faults), f"{name}: {command.fault_actions}"
    for reference in (command.figures, command.metrics):
        if reference:
            assert inspect.isfunction(load(reference)), f"{name}: {reference}"
    fields = {f.name for f in dataclasses.fields(command.options)}
    for setup in command.setup:
        assert setup.fields[-1] in fields, f"{name}: setup {setup.key} reads no option of {name}"
        assert SETUP_NAMES[setup.key] == setup.label


def test_every_figure_kind_depends_on_setup_keys_that_exist() -> None:
    for command in COMMANDS.values():
        if command.figures is None:
            continue
        module = importlib.import_module(command.figures.partition(":")[0])
        for kind in vars(module).values():
            if isinstance(kind, FigureKind):
                unknown = set(kind.needs) - SETUP_NAMES.keys()
                assert not unknown, f"{command.name}: {kind.name} needs {unknown}"


def test_a_rank_finds_whether_its_command_runs_as_ranks_from_its_declaration_alone() -> None:
    # RANKED_COMMANDS loads checks/<name>/ only: every ranked command is declared there.
    assert {name for name in COMMANDS if name in RANKED_COMMANDS} == {
        name for name, command in COMMANDS.items() if command.ranked
    }
    assert "collective" not in RANKED_COMMANDS and "network" not in RANKED_COMMANDS  # no command
