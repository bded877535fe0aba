"""The one result every command produces: its schema (Status, Check, Table, Report) and its reading.

Data only: no terminal output here (report/terminal.py), no file format (report/formats/) and
no torch, so the launcher can build and read reports without importing it.
"""

from __future__ import annotations

import enum
import json
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


@dataclass
class Check:
    """One verdict row: what was checked, how it went, and who is at fault."""

    name: str
    status: Status
    detail: str = ""
    ranks: list[int] = field(default_factory=list)
    hosts: list[str] = field(default_factory=list)
    links: list[list[int]] = field(default_factory=list)  # [sender, receiver] pairs at fault

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "name": self.name,
            "status": self.status.value,
            "detail": self.detail,
            "ranks": list(self.ranks),
            "hosts": list(self.hosts),
        }
        if self.links:
            out["links"] = [list(link) for link in self.links]
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Check:
        return cls(
            name=data["name"],
            status=Status(data["status"]),
            detail=data.get("detail", ""),
            ranks=list(data.get("ranks", [])),
            hosts=list(data.get("hosts", [])),
            links=[list(link) for link in data.get("links", [])],
        )


@dataclass
class Table:
    """A named list of rows; `columns` maps row keys to headers for the terminal.

    JSON carries every key of every row; the terminal shows only `columns`, as one
    table per value of `group_by` when set (one bandwidth table per collective, say,
    while the JSON keeps them all in one list); `{group}` in the title names the value.
    """

    name: str
    title: str
    columns: dict[str, str]
    rows: list[dict[str, Any]] = field(default_factory=list)
    group_by: str | None = None

    def groups(self) -> list[tuple[str, list[dict[str, Any]]]]:
        """(title, rows) per group, in the order the rows come; the whole table when not grouped."""
        if not self.group_by:
            return [(self.title, self.rows)]
        grouped: dict[Any, list[dict[str, Any]]] = {}
        for row in self.rows:
            value = row.get(self.group_by)
            # A report edited by hand may hold anything there: group by its text then.
            key = value if isinstance(value, (str, int, float, type(None))) else str(value)
            grouped.setdefault(key, []).append(row)
        return [(self.title.replace("{group}", str(value)), rows) for value, rows in grouped.items()]

    def meta(self) -> dict[str, Any]:
        """How the terminal shows the table: what a saved report needs to be shown again."""
        out: dict[str, Any] = {"title": self.title, "columns": dict(self.columns)}
        if self.group_by:
            out["group_by"] = self.group_by
        return out


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
    injected: list[str] = field(default_factory=list)  # --inject faults as given: planted, not hardware

    def injected_line(self) -> str | None:
        """The one line every output shows when the run had faults planted on purpose."""
        if not self.injected:
            return None
        return f"injected faults: {', '.join(self.injected)} (planted with --inject: not a hardware fault)"

    @property
    def written_elsewhere(self) -> bool:
        """A stand-in: world["report_on"] names where the whole report is printed and written (rank 0's
        host, or 0 for a watch team's task 0), and this process says one line."""
        return self.world.get("report_on") is not None

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

    def rows(self, name: str) -> list[dict[str, Any]]:
        """The rows of the table of that name; none when the report has no such table."""
        found = self.table(name)
        return found.rows if found else []

    def failing(self) -> list[Check]:
        return [c for c in self.checks if c.status in (Status.FAIL, Status.ERROR)]

    def warnings(self) -> list[Check]:
        return [c for c in self.checks if c.status is Status.WARN]

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
            # Beside `tables`, not in it: scripts read `tables` as {name: rows}. With these,
            # a saved report can be shown again exactly as it ran (`ddpcheck show`).
            "table_meta": {t.name: t.meta() for t in self.tables},
            "options": self.options,
            "notes": self.notes,
            "log_dir": self.log_dir,
            "injected": list(self.injected),
        }


class NotAReport(ValueError):
    """The data is not a ddpcheck report; the message says what is wrong, in one line."""


def report_from_dict(data: Any) -> Report:
    """A saved JSON report (`--json`) as a Report, after checking that it is one.

    Reports written before `table_meta` existed still load: each table is titled by its name and
    shows every key of its rows. Reports written before `injected` existed had no faults planted
    as far as they say: `[]`.
    """
    if not isinstance(data, dict) or "ddpcheck" not in data:
        raise NotAReport("not a ddpcheck report (no top-level 'ddpcheck' version)")
    for key, kind in (("command", str), ("checks", list), ("tables", dict)):
        if not isinstance(data.get(key), kind):
            raise NotAReport(f"not a ddpcheck report ('{key}' is missing or not a {kind.__name__})")
    if data.get("verdict") not in {v.value for v in Verdict}:
        raise NotAReport(f"not a ddpcheck report (verdict {data.get('verdict')!r})")
    try:
        checks = [Check.from_dict(c) for c in data["checks"]]
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise NotAReport(f"not a ddpcheck report (a check is malformed: {exc})") from None
    injected = data.get("injected") or []
    if not isinstance(injected, list) or not all(isinstance(f, str) for f in injected):
        raise NotAReport("not a ddpcheck report ('injected' is not a list of faults)")
    meta = data.get("table_meta") or {}
    tables = []
    for name, rows in data["tables"].items():
        if not isinstance(rows, list) or not all(isinstance(r, dict) for r in rows):
            raise NotAReport(f"not a ddpcheck report (table '{name}' is not a list of rows)")
        found = meta.get(name) if isinstance(meta, dict) else None
        found = found if isinstance(found, dict) else {}
        columns = found.get("columns")
        if not isinstance(columns, dict):
            columns = {k: k for row in rows for k in row}
        group_by = found.get("group_by")
        group_by = group_by if isinstance(group_by, str) else None
        tables.append(Table(name, str(found.get("title", name)), dict(columns), rows, group_by=group_by))
    try:
        report = Report(
            command=data["command"],
            checks=checks,
            tables=tables,
            world=dict(data.get("world") or {}),
            ranks=list(data.get("ranks") or []),
            options=dict(data.get("options") or {}),
            notes=[str(n) for n in data.get("notes") or []],
            elapsed_s=float(data.get("elapsed_s") or 0.0),
            log_dir=data.get("log_dir"),
            injected=list(injected),
        )
    except (TypeError, ValueError) as exc:
        raise NotAReport(f"not a ddpcheck report (malformed: {exc})") from None
    if report.verdict.value != data["verdict"]:
        raise NotAReport(
            f"inconsistent report: verdict '{data['verdict']}' but its checks say '{report.verdict.value}'"
        )
    return report


def read_report(path: str) -> Report:
    """Load and check a saved report file; NotAReport (one line) when it is none."""
    try:
        with open(path, encoding="utf-8") as handle:
            data = json.load(handle)
    except json.JSONDecodeError as exc:
        raise NotAReport(f"not a ddpcheck report (not JSON: {exc.msg} at line {exc.lineno})") from None
    except UnicodeDecodeError:
        raise NotAReport("not a ddpcheck report (not text)") from None
    except OSError as exc:
        raise NotAReport(f"cannot read it: {exc.strerror}") from None
    return report_from_dict(data)
