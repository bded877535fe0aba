"""The one result every command produces, and its JSON and JUnit forms.

Data only: no terminal output here (that is render.py) and no torch, so the
launcher can build and read reports without importing it.
"""

from __future__ import annotations

import enum
import json
import os
import socket
import sys
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from typing import Any

from ddpcheck import __version__


class Status(str, enum.Enum):
    PASS = "PASS"
    WARN = "WARN"
    FAIL = "FAIL"
    ERROR = "ERROR"  # the check could not complete: a crash, a hang, a failed launch
    SKIP = "SKIP"


class Verdict(str, enum.Enum):
    PASS = "pass"
    FAIL = "fail"
    ERROR = "error"

    @property
    def exit_code(self) -> int:
        return {Verdict.PASS: 0, Verdict.FAIL: 1, Verdict.ERROR: 3}[self]


EXIT_USAGE = 2
EXIT_INTERRUPTED = 130


@dataclass
class Check:
    """One verdict row: what was checked, how it went, and who is at fault."""

    name: str
    status: Status
    detail: str = ""
    ranks: list[int] = field(default_factory=list)
    hosts: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "status": self.status.value,
            "detail": self.detail,
            "ranks": list(self.ranks),
            "hosts": list(self.hosts),
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Check:
        return cls(
            name=data["name"],
            status=Status(data["status"]),
            detail=data.get("detail", ""),
            ranks=list(data.get("ranks", [])),
            hosts=list(data.get("hosts", [])),
        )


@dataclass
class Table:
    """A named list of rows; `columns` maps row keys to headers for the terminal.

    JSON carries every key of every row; the terminal shows only `columns`.
    """

    name: str
    title: str
    columns: dict[str, str]
    rows: list[dict[str, Any]] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {"title": self.title, "columns": dict(self.columns), "rows": self.rows}

    @classmethod
    def from_dict(cls, name: str, data: dict[str, Any]) -> Table:
        return cls(name=name, title=data["title"], columns=data["columns"], rows=data["rows"])


@dataclass
class Report:
    command: str
    checks: list[Check] = field(default_factory=list)
    tables: list[Table] = field(default_factory=list)
    world: dict[str, Any] = field(default_factory=dict)
    ranks: list[dict[str, Any]] = field(default_factory=list)
    options: dict[str, Any] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    elapsed_s: float = 0.0
    log_dir: str | None = None

    @property
    def verdict(self) -> Verdict:
        statuses = {c.status for c in self.checks}
        if Status.ERROR in statuses:
            return Verdict.ERROR
        if Status.FAIL in statuses:
            return Verdict.FAIL
        return Verdict.PASS

    def table(self, name: str) -> Table | None:
        return next((t for t in self.tables if t.name == name), None)

    def failing(self) -> list[Check]:
        return [c for c in self.checks if c.status in (Status.FAIL, Status.ERROR)]

    def to_dict(self) -> dict[str, Any]:
        return {
            "ddpcheck": __version__,
            "command": self.command,
            "verdict": self.verdict.value,
            "elapsed_s": round(self.elapsed_s, 3),
            "world": self.world,
            "ranks": self.ranks,
            "checks": [c.to_dict() for c in self.checks],
            "tables": {t.name: t.rows for t in self.tables},
            "options": self.options,
            "notes": self.notes,
            "log_dir": self.log_dir,
        }

    def to_transport(self) -> dict[str, Any]:
        """The form rank 0 hands to the launcher: to_dict plus table titles and columns."""
        data = self.to_dict()
        data["tables"] = {t.name: t.to_dict() for t in self.tables}
        return data

    @classmethod
    def from_transport(cls, data: dict[str, Any]) -> Report:
        return cls(
            command=data["command"],
            checks=[Check.from_dict(c) for c in data["checks"]],
            tables=[Table.from_dict(n, t) for n, t in data["tables"].items()],
            world=data.get("world", {}),
            ranks=data.get("ranks", []),
            options=data.get("options", {}),
            notes=data.get("notes", []),
            elapsed_s=data.get("elapsed_s", 0.0),
            log_dir=data.get("log_dir"),
        )


def write_json(report: Report, path: str) -> None:
    """Write the report as JSON; '-' means standard output."""
    text = json.dumps(report.to_dict(), indent=2, default=str) + "\n"
    if path == "-":
        sys.stdout.write(text)
        sys.stdout.flush()
        return
    _write_atomically(path, text)


def to_junit(report: Report) -> ET.Element:
    """One <testcase> per check, in the shape CI test reporters read."""
    failures = sum(c.status == Status.FAIL for c in report.checks)
    errors = sum(c.status == Status.ERROR for c in report.checks)
    skipped = sum(c.status == Status.SKIP for c in report.checks)
    elapsed = f"{report.elapsed_s:.3f}"
    suites = ET.Element(
        "testsuites",
        name="ddpcheck",
        tests=str(len(report.checks)),
        failures=str(failures),
        errors=str(errors),
        skipped=str(skipped),
        time=elapsed,
    )
    suite = ET.SubElement(
        suites,
        "testsuite",
        name=f"ddpcheck.{report.command}",
        tests=str(len(report.checks)),
        failures=str(failures),
        errors=str(errors),
        skipped=str(skipped),
        time=elapsed,
        hostname=socket.gethostname(),
    )
    props = ET.SubElement(suite, "properties")
    world = report.world
    for key in ("size", "backend", "device", "nodes", "torch", "cuda", "nccl"):
        if world.get(key) is not None:
            ET.SubElement(props, "property", name=key, value=str(world[key]))
    ET.SubElement(props, "property", name="ddpcheck", value=__version__)
    for check in report.checks:
        case = ET.SubElement(
            suite, "testcase", classname=f"ddpcheck.{report.command}", name=check.name, time="0"
        )
        culprits = _culprit_text(check)
        if check.status in (Status.FAIL, Status.ERROR):
            tag = "failure" if check.status == Status.FAIL else "error"
            element = ET.SubElement(case, tag, message=check.detail or check.status.value)
            element.set("type", check.status.value)
            element.text = "\n".join(x for x in (check.detail, culprits) if x)
        elif check.status == Status.SKIP:
            ET.SubElement(case, "skipped", message=check.detail)
        elif check.detail or culprits:
            out = ET.SubElement(case, "system-out")
            out.text = "\n".join(x for x in (f"{check.status.value}: {check.detail}", culprits) if x)
    return suites


def write_junit(report: Report, path: str) -> None:
    tree = ET.ElementTree(to_junit(report))
    ET.indent(tree)
    text = ET.tostring(tree.getroot(), encoding="unicode", xml_declaration=True) + "\n"
    if path == "-":
        sys.stdout.write(text)
        return
    _write_atomically(path, text)


def _culprit_text(check: Check) -> str:
    parts = []
    if check.ranks:
        parts.append("ranks: " + ", ".join(map(str, check.ranks)))
    if check.hosts:
        parts.append("hosts: " + ", ".join(check.hosts))
    return "; ".join(parts)


def _write_atomically(path: str, text: str) -> None:
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "w", encoding="utf-8") as handle:
        handle.write(text)
    os.replace(tmp, path)
