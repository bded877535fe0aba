"""Pure tests and integration tests, told apart by a rule and kept apart by a guard.

A test is `integration` when it asks for a fixture that starts processes (a real ddpcheck
run, the real Slurm, the saved reports of real runs), or when its module or the test itself
is marked so; every other test is pure, and `python -m pytest -m "not integration"` runs only
those, in seconds (mutmut runs them too, once per mutant).

The rule could drift as tests are added, so a pure test that starts a process anyway
(subprocess, fork, posix_spawn, multiprocessing) fails at once and says how to mark it.
The guard covers the set-up and the call of a test, not its teardown: a module-scoped
fixture of an integration test (the Slurm daemons) is torn down after whichever test of the
module comes last.
"""

from __future__ import annotations

import multiprocessing.process
import os
import subprocess
import sys
from collections.abc import Callable, Generator
from typing import Any

import pytest

# Fixtures that start processes: any test that asks for one, directly or through another fixture.
PROCESS_FIXTURES = frozenset({"ddpcheck", "slurm", "saved_reports", "saved", "run_probe", "dead_job"})

MARK = "integration"
# Marks that mean a test starts processes: network namespaces with `ip`, GPU runs.
PROCESS_MARKS = (MARK, "netns", "gpu")

# Library code allowed to start a process inside a pure test: matplotlib lists the system's
# fonts with `fc-list` the first time a process imports it with a cold font cache.
ALLOWED_CALLERS = (os.path.join("matplotlib", "font_manager.py"),)

_pure_item: pytest.Item | None = None


def _called_from_allowed() -> bool:
    frame = sys._getframe(2)
    while frame is not None:
        if frame.f_code.co_filename.endswith(ALLOWED_CALLERS):
            return True
        frame = frame.f_back
    return False


def is_integration(item: pytest.Item) -> bool:
    if any(item.get_closest_marker(mark) is not None for mark in PROCESS_MARKS):
        return True
    return bool(PROCESS_FIXTURES & set(getattr(item, "fixturenames", ())))


def mark_integration(items: list[pytest.Item]) -> None:
    """pytest_collection_modifyitems: the `integration` mark on every test the rule names."""
    for item in items:
        if is_integration(item) and item.get_closest_marker(MARK) is None:
            item.add_marker(MARK)


def _refused(original: Callable[..., Any], what: str) -> Callable[..., Any]:
    def guarded(*args: Any, **kwargs: Any) -> Any:
        if _pure_item is not None and not _called_from_allowed():
            pytest.fail(
                f"{_pure_item.nodeid} is a pure test but started a process ({what}): "
                f"mark it `@pytest.mark.{MARK}` (or add its fixture to purity.PROCESS_FIXTURES)",
                pytrace=True,
            )
        return original(*args, **kwargs)

    return guarded


_PATCHES = [
    (subprocess.Popen, "_execute_child", "subprocess"),
    (os, "fork", "os.fork"),
    (os, "posix_spawn", "os.posix_spawn"),
    (os, "posix_spawnp", "os.posix_spawnp"),
    (multiprocessing.process.BaseProcess, "start", "multiprocessing"),
]


def install_guard() -> None:
    """Once, at start-up: the process-starting calls refuse while a pure test runs."""
    for owner, name, what in _PATCHES:
        original = getattr(owner, name, None)
        if original is not None and not getattr(original, "_purity_guard", False):
            guarded = _refused(original, what)
            guarded._purity_guard = True  # type: ignore[attr-defined]
            setattr(owner, name, guarded)


@pytest.hookimpl(wrapper=True)
def guard_phase(item: pytest.Item) -> Generator[None, Any, Any]:
    """pytest_runtest_setup and pytest_runtest_call: a pure test runs with the guard up."""
    global _pure_item
    _pure_item = None if is_integration(item) else item
    try:
        return (yield)
    finally:
        _pure_item = None
