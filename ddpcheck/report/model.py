"""The one result every command produces, and its JSON and JUnit forms.

Data only: no terminal output here (that is render.py) and no torch, so the
launcher can build and read reports without importing it.
"""

from __future__ import annotations

import datetime
import enum
import importlib.metadata
import json
import math
import os
import platform
import re
import socket
import sys
import xml.etree.ElementTree as ET
from collections.abc import Callable
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

    def to_dict(self) -> dict[str, Any]:
        return {**self.meta(), "rows": self.rows}

    @classmethod
    def from_dict(cls, name: str, data: dict[str, Any]) -> Table:
        return cls(
            name=name,
            title=data["title"],
            columns=data["columns"],
            rows=data["rows"],
            group_by=data.get("group_by"),
        )


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
            # Beside `tables`, not in it: scripts read `tables` as {name: rows}. With these,
            # a saved report can be shown again exactly as it ran (`ddpcheck show`).
            "table_meta": {t.name: t.meta() for t in self.tables},
            "options": self.options,
            "notes": self.notes,
            "log_dir": self.log_dir,
            "injected": list(self.injected),
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
            injected=list(data.get("injected") or []),
        )


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


def counted(n: int, noun: str) -> str:
    """'1 rank', '2 ranks': a count and its noun, for details and verdict lines."""
    return f"{n} {noun}{'' if n == 1 else 's'}"


# What the terminal and the HTML page show of a long table: the rows that are not PASS first,
# then the first and last rows, in their order; the JSON report keeps every row. 64: no report of up to
# 64 ranks loses a row, and a screen of a thousand-node run stays a screen.
SHOWN_ROWS = 64


def shown_rows(rows: list[dict[str, Any]], limit: int = SHOWN_ROWS) -> list[dict[str, Any]]:
    """At most `limit` rows, in their order: every row whose status is not PASS, then the first and
    the last rows in turn (a long loss table keeps its first and its last steps)."""
    if len(rows) <= limit:
        return rows
    keep = set([i for i, r in enumerate(rows) if r.get("status") not in (None, "PASS")][:limit])
    head, tail = 0, len(rows) - 1
    while len(keep) < limit:
        keep.add(head)
        head += 1
        if len(keep) < limit:
            keep.add(tail)
            tail -= 1
    return [rows[i] for i in sorted(keep)]


Row = dict[str, Any]


def worst_rows(
    rows: list[Row], limit: int, named: Callable[[Row], bool], badness: Callable[[Row], float]
) -> list[Row]:
    """At most `limit` rows, in their order: every named one first, then the worst by `badness`."""
    if len(rows) <= limit:
        return rows
    flagged = [i for i, r in enumerate(rows) if named(r)][:limit]
    rest = sorted((i for i, r in enumerate(rows) if not named(r)), key=lambda i: -badness(rows[i]))
    keep = set(flagged) | set(rest[: limit - len(flagged)])
    return [rows[i] for i in sorted(keep)]


def left_out_line(shown: int, total: int) -> str:
    """The one line that says a table was cut, and where the rest is."""
    return (
        f"showing {shown:,} of {total:,} rows (any not passing, then the first and last); "
        "every row is in the JSON report"
    )


def all_of(n: int, noun: str) -> str:
    """'the one rank', 'both ranks', 'all 4 ranks'."""
    if n == 1:
        return f"the one {noun}"
    return f"both {noun}s" if n == 2 else f"all {n} {noun}s"


def _finite(value: Any) -> Any:
    """NaN and infinities as strings: JSON has no such numbers, and strict parsers (jq) reject them.

    A faulty GPU that returns NaN must still give a readable report.
    """
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value


def write_json(report: Report, path: str) -> None:
    """Write the report as JSON; '-' means standard output."""
    text = json.dumps(_finite(report.to_dict()), indent=2, default=str, allow_nan=False) + "\n"
    if path == "-":
        sys.stdout.write(text)
        sys.stdout.flush()
        return
    _write_atomically(path, text)


def to_junit(report: Report) -> ET.Element:
    """One <testcase> per check, in the shape CI test reporters read.

    The common ground of the Ant/Jenkins/Surefire JUnit schemas that GitHub, GitLab,
    Jenkins and Azure reporters parse: <testsuites> holding one <testsuite> (counts,
    time, timestamp, hostname, <properties>), then one <testcase> per check with at
    most one <failure> (FAIL), <error> (ERROR: could not complete) or <skipped>.
    WARN has no JUnit form: it passes, and says why in <system-out>.
    """
    failures = sum(c.status == Status.FAIL for c in report.checks)
    errors = sum(c.status == Status.ERROR for c in report.checks)
    skipped = sum(c.status == Status.SKIP for c in report.checks)
    elapsed = f"{report.elapsed_s:.3f}"
    counts = {
        "tests": str(len(report.checks)),
        "failures": str(failures),
        "errors": str(errors),
        "skipped": str(skipped),
        "time": elapsed,
    }
    suites = ET.Element("testsuites", name="ddpcheck", **counts)
    # The report is written as the run ends: its start is now minus its length.
    started = datetime.datetime.now().astimezone() - datetime.timedelta(seconds=report.elapsed_s)
    suite = ET.SubElement(
        suites,
        "testsuite",
        name=f"ddpcheck.{report.command}",
        **counts,
        timestamp=started.isoformat(timespec="seconds"),
        hostname=socket.gethostname(),
        # Jenkins' schema wants both inside <testsuites>; other readers ignore them.
        id="0",
        package="ddpcheck",
    )
    props = ET.SubElement(suite, "properties")
    for name, value in _junit_properties(report):
        ET.SubElement(props, "property", name=name, value=_xml_safe(value))
    tails = {
        row.get("rank"): "\n\n".join(
            x for x in (row.get("stderr_tail"), row.get("stack") and f"Python stack:\n{row['stack']}") if x
        )
        for row in _rows(report, "stderr")
    }
    seen: dict[str, int] = {}
    for check in report.checks:
        # Reporters key test cases by name: two "rank crashed" rows must not merge into one.
        seen[check.name] = seen.get(check.name, 0) + 1
        name = check.name if seen[check.name] == 1 else f"{check.name} #{seen[check.name]}"
        case = ET.SubElement(
            suite, "testcase", classname=f"ddpcheck.{report.command}", name=_xml_safe(name), time="0"
        )
        culprits = _culprit_text(check)
        if check.status in (Status.FAIL, Status.ERROR):
            tag = "failure" if check.status == Status.FAIL else "error"
            # Many reporters show only the message attribute: it names the culprits too.
            message = check.detail or check.status.value
            if culprits:
                message += f" ({culprits})"
            element = ET.SubElement(case, tag, message=_xml_safe(message))
            element.set("type", check.status.value)
            element.text = _xml_safe("\n".join(x for x in (check.detail, culprits) if x))
            stderr = "\n\n".join(f"rank {r}:\n{tails[r]}" for r in check.ranks if tails.get(r))
            if stderr:
                ET.SubElement(case, "system-err").text = _xml_safe(stderr)
        elif check.status == Status.SKIP:
            ET.SubElement(case, "skipped", message=_xml_safe(check.detail))
        elif check.detail or culprits:
            out = ET.SubElement(case, "system-out")
            out.text = _xml_safe(
                "\n".join(x for x in (f"{check.status.value}: {check.detail}", culprits) if x)
            )
    notes = [
        *([report.injected_line()] if report.injected else []),
        *report.notes,
        *([f"rank logs kept in {report.log_dir}"] if report.log_dir else []),
    ]
    if notes:
        ET.SubElement(suite, "system-out").text = _xml_safe("\n".join(notes))
    return suites


def _junit_properties(report: Report) -> list[tuple[str, str]]:
    """What a CI reader needs to tell two runs apart: the world, the versions, the options."""
    world = report.world
    props: list[tuple[str, Any]] = [("command", report.command), ("verdict", report.verdict.value)]
    for key, name in (("size", "world_size"), ("backend", "backend"), ("device", "device")):
        props.append((name, world.get(key)))
    props.append(("nodes", world.get("nodes")))
    props.append(("hosts", ", ".join(world.get("hosts") or []) or None))
    # A report built by the launcher after a crash has no versions from the ranks: use ours.
    props.append(("torch_version", world.get("torch") or _installed_version("torch")))
    props.append(("cuda_version", world.get("cuda")))
    props.append(("nccl_version", world.get("nccl")))
    props.append(("python_version", platform.python_version()))
    props.append(("ddpcheck_version", __version__))
    props.append(("log_dir", report.log_dir))
    props.append(("injected", ", ".join(report.injected) or None))
    props += [(f"option.{k}", v) for k, v in report.options.items()]
    return [(name, str(value)) for name, value in props if value is not None]


def _installed_version(package: str) -> str | None:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return None


def _rows(report: Report, table: str) -> list[dict[str, Any]]:
    found = report.table(table)
    return found.rows if found else []


# Rank logs can hold terminal escapes, NULs or undecodable bytes (surrogates): XML 1.0
# forbids them, and one of them makes the whole file unreadable to every reporter.
_ANSI = re.compile(r"\x1b(?:\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b]*(?:\x07|\x1b\\)?)")
_NOT_XML = re.compile("[^\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")


def _xml_safe(text: str) -> str:
    return _NOT_XML.sub("\ufffd", _ANSI.sub("", text))


def write_junit(report: Report, path: str) -> None:
    tree = ET.ElementTree(to_junit(report))
    ET.indent(tree)
    text = ET.tostring(tree.getroot(), encoding="unicode", xml_declaration=True) + "\n"
    if path == "-":
        sys.stdout.write(text)
        sys.stdout.flush()
        return
    _write_atomically(path, text)


def _culprit_text(check: Check) -> str:
    parts = []
    if check.ranks:
        parts.append("ranks: " + ", ".join(map(str, check.ranks)))
    if check.hosts:
        parts.append("hosts: " + ", ".join(check.hosts))
    return "; ".join(parts)


def write_text(path: str, text: str) -> None:
    """Write a whole output file at once: a reader never sees half of it."""
    _write_atomically(path, text)


def _write_atomically(path: str, text: str) -> None:
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "w", encoding="utf-8") as handle:
        handle.write(text)
    os.replace(tmp, path)
