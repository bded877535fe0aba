"""The house keeps its plan: six sides, one declaration per command, no import circle, no arrow up."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

from ddpcheck.command import Command, parameters
from ddpcheck.commands import COMMANDS

PACKAGE = Path(__file__).resolve().parent.parent / "ddpcheck"
DOCS = PACKAGE.parent / "docs"
ROOT_MODULES = {"__init__", "__main__", "cli", "command", "commands", "completions", "errors", "torch_compat"}
# Top to bottom: preflight() runs the checks' pieces inside the user's own job, the commands start
# runs, the launcher starts ranks, ranks and the launcher explain a failure, and all of them build
# reports. A side imports only the sides below it (the root: anyone).
SIDES = ("preflight", "checks", "launcher", "rank", "failure", "report")


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports(path: Path, modules: set[str]) -> set[str]:
    """The ddpcheck modules a module imports anywhere (functions too), leaving out TYPE_CHECKING blocks."""
    found: set[str] = set()

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and _is_type_checking(node):
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names if alias.name in modules)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""  # the project imports absolutely (ruff's isort keeps it so)
            for alias in node.names:
                candidate = f"{base}.{alias.name}"
                found.add(candidate if candidate in modules else base)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(ast.parse(path.read_text()))
    return {m for m in found if m in modules}


def _graph() -> dict[str, set[str]]:
    paths = {_module_name(p): p for p in PACKAGE.rglob("*.py")}
    modules = set(paths)
    return {name: _imports(path, modules) - {name} for name, path in paths.items()}


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}
    stack: list[str] = []

    def walk(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph[node]):
            if nxt not in graph:
                continue
            if state.get(nxt) == 1:
                return [*stack[stack.index(nxt) :], nxt]
            if nxt not in state and (found := walk(nxt)):
                return found
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (found := walk(node)):
            return found
    return None


def test_no_module_imports_itself_round_a_circle() -> None:
    graph = _graph()
    assert "ddpcheck.cli" in graph and "ddpcheck.checks.sweep.judge" in graph  # the walk sees the house
    assert _cycle(graph) is None, " -> ".join(_cycle(graph) or [])


def test_the_cycle_finder_finds_one() -> None:
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set()}) is None


def test_the_root_holds_only_what_every_side_uses() -> None:
    modules = {p.stem for p in PACKAGE.glob("*.py")}
    folders = {p.name for p in PACKAGE.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    assert modules == ROOT_MODULES and len(modules) <= 8
    assert folders == set(SIDES)


def _side(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if len(parts) > 2 and parts[1] in SIDES else None


def _upward(graph: dict[str, set[str]]) -> list[str]:
    arrows = []
    for module, imported in sorted(graph.items()):
        for target in sorted(imported):
            low, high = _side(module), _side(target)
            if low and high and SIDES.index(high) < SIDES.index(low):
                arrows.append(f"{module} -> {target}")
    return arrows


def test_no_side_imports_a_side_above_it() -> None:
    assert _upward(_graph()) == []


def test_the_arrow_finder_finds_one_up() -> None:
    graph = {"ddpcheck.rank.harness": {"ddpcheck.launcher.plan", "ddpcheck.report.model", "ddpcheck.errors"}}
    assert _upward(graph) == ["ddpcheck.rank.harness -> ddpcheck.launcher.plan"]


def test_every_command_declares_itself_once_and_has_a_docs_page() -> None:
    for name, command in COMMANDS.items():
        assert isinstance(command, Command) and command.name == name
        assert (DOCS / f"{name}.md").exists(), f"docs/{name}.md"
        names = [p.name for p in parameters(command.options)]
        assert len(names) == len(set(names)), f"{name} declares an option twice: {names}"
        module = command.module()  # the implementation it names exists and does the work
        if command.ranked:
            assert callable(module.measure) and callable(module.judge), name
        else:
            assert callable(module.run), name
        if command.measures:
            assert command.figures is not None, f"{name} has a family but no figures"


@pytest.mark.integration
def test_declarations_load_neither_torch_nor_the_work() -> None:
    # `ddpcheck --help` reads every declaration: none may import torch or a check's implementation.
    code = (
        "import sys, ddpcheck.commands as c\n"
        "heavy = ('.check', '.harness', '.sweep.sweep')\n"
        "heavy = [m for m in sys.modules if m == 'torch' or m.endswith(heavy)]\n"
        "print(','.join(heavy))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


# Where a shared file may name a command, and why; every other naming of one fails the test below.
NAMES_ALLOWED = {
    # `compare` is a report-side command: a baseline refuses its report.
    ("ddpcheck/report/baseline.py", "compare"),
    # Every ranked run is refused first by env's judges of the setting (checks/env/refusals.py).
    ("ddpcheck/cli.py", "env"),
    # Words that are also command names: a column of the hosts table, a check's field, `scontrol show`.
    ("ddpcheck/rank/rankmap.py", "devices"),
    ("ddpcheck/report/model.py", "links"),
    ("ddpcheck/launcher/drain.py", "show"),
    # preflight() reads each GPU's health with `devices`' NVML reader and judge (docs/preflight.md).
    ("ddpcheck/preflight/judge.py", "devices"),
}


def _commands_named(source: str, names: set[str]) -> set[str]:
    """The commands a module names: a string equal to one's name, or its folder imported or referred to."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            texts = [node.value]
        elif isinstance(node, ast.ImportFrom):
            texts = [f"{node.module}.{alias.name}" for alias in node.names]
        elif isinstance(node, ast.Import):
            texts = [alias.name for alias in node.names]
        else:
            continue
        for text in texts:
            dotted = f"{text}."
            found |= {
                name
                for name in names
                if text == name or dotted.startswith((f"ddpcheck.checks.{name}.", f"ddpcheck.checks.{name}:"))
            }
    return found


def _own_files(command: Command) -> set[Path]:
    """Where a command may be named: its folder, or (a command declared outside checks/) its two modules."""
    declared = next(
        module
        for name, module in sys.modules.items()
        if name.startswith("ddpcheck.") and getattr(module, "COMMAND", None) is command
    )
    modules = {declared.__name__, command.implementation}
    return {PACKAGE.parent / f"{module.replace('.', '/')}.py" for module in modules}


def test_a_command_is_named_only_by_its_declaration_its_folder_and_commands_py() -> None:
    names = set(COMMANDS)
    found = set()
    for path in sorted(PACKAGE.rglob("*.py")):
        where = str(path.relative_to(PACKAGE.parent))
        if where == "ddpcheck/commands.py":
            continue
        for name in _commands_named(path.read_text(), names):
            if path not in _own_files(COMMANDS[name]) and PACKAGE / "checks" / name not in path.parents:
                found.add((where, name))
    assert sorted(found - NAMES_ALLOWED) == [], "a shared file names a command: let its declaration say it"
    assert sorted(NAMES_ALLOWED - found) == [], "allowed, but no longer named there: take it off the list"


def test_the_naming_finder_finds_a_command() -> None:
    names = {"links", "watch"}
    assert _commands_named('ranked = {"links"}', names) == {"links"}
    assert _commands_named("from ddpcheck.checks.watch.judge import judge", names) == {"watch"}
    assert _commands_named("from ddpcheck.checks import watch", names) == {"watch"}
    assert _commands_named('chart = "ddpcheck.checks.links.terminal:render"', names) == {"links"}
    assert _commands_named('a = "linksys"; from ddpcheck.checks.watcher import x', names) == set()


# Loaded by their paths inside the user's job (watch's agent), whose Python may lack ddpcheck and torch.
LOADED_BY_PATH = (
    "failure/rank_env.py",
    "failure/process_records.py",
    "failure/recorders.py",
    "checks/watch/fingerprints.py",
)


@pytest.mark.parametrize("module", LOADED_BY_PATH)
def test_a_module_loaded_by_path_in_the_users_job_imports_only_the_standard_library(module: str) -> None:
    tree = ast.parse((PACKAGE / module).read_text())
    top = set()
    for node in tree.body:  # imports inside functions are the job's own (torch, when it has it)
        if isinstance(node, ast.Import):
            top |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            top.add(node.module.split(".")[0])
    assert top <= set(sys.stdlib_module_names) | {"__future__"}, top - set(sys.stdlib_module_names)
