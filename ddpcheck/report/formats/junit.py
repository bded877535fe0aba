"""`--junit PATH`: one <testcase> per check, in the shape CI test reporters read ('-' = standard output)."""

from __future__ import annotations

import datetime
import importlib.metadata
import platform
import re
import socket
import xml.etree.ElementTree as ET
from typing import Any

from ddpcheck import __version__
from ddpcheck.commands import kept_line
from ddpcheck.report.formats.text import write_or_print
from ddpcheck.report.model import Check, Report, Status


def write(report: Report, path: str) -> None:
    """Write the report as JUnit XML; '-' means standard output."""
    tree = ET.ElementTree(to_junit(report))
    ET.indent(tree)
    write_or_print(path, ET.tostring(tree.getroot(), encoding="unicode", xml_declaration=True) + "\n")


def to_junit(report: Report) -> ET.Element:
    """One <testcase> per check, in the shape CI test reporters read.

    The common ground of the Ant/Jenkins/Surefire JUnit schemas that GitHub, GitLab,
    Jenkins and Azure reporters parse: <testsuites> holding one <testsuite> (counts,
    time, timestamp, hostname, <properties>), then one <testcase> per check with at
    most one <failure> (FAIL), <error> (ERROR: could not complete) or <skipped>.
    WARN has no JUnit form: it passes, and says why in <system-out>.
    """
    counts = {
        "tests": str(len(report.checks)),
        **{tag: str(sum(c.status == status for c in report.checks)) for tag, status in _COUNTED},
        "time": f"{report.elapsed_s:.3f}",
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
    tails = _stderr_tails(report)
    seen: dict[str, int] = {}
    for check in report.checks:
        # Reporters key test cases by name: two "rank crashed" rows must not merge into one.
        seen[check.name] = seen.get(check.name, 0) + 1
        name = check.name if seen[check.name] == 1 else f"{check.name} #{seen[check.name]}"
        case = ET.SubElement(
            suite, "testcase", classname=f"ddpcheck.{report.command}", name=_xml_safe(name), time="0"
        )
        _case_outcome(case, check, tails)
    notes = [
        *([report.injected_line()] if report.injected else []),
        *report.notes,
        *([kept_line(report.command, report.log_dir)] if report.log_dir else []),
    ]
    if notes:
        ET.SubElement(suite, "system-out").text = _xml_safe("\n".join(notes))
    return suites


_COUNTED = (("failures", Status.FAIL), ("errors", Status.ERROR), ("skipped", Status.SKIP))


def _stderr_tails(report: Report) -> dict[Any, str]:
    """Each rank's last stderr lines and Python stack, from the stderr table."""
    return {
        row.get("rank"): "\n\n".join(
            x for x in (row.get("stderr_tail"), row.get("stack") and f"Python stack:\n{row['stack']}") if x
        )
        for row in report.rows("stderr")
    }


def _case_outcome(case: ET.Element, check: Check, tails: dict[Any, str]) -> None:
    """A test case's <failure>, <error>, <skipped> or, for what passed, its <system-out>."""
    culprits = _culprit_text(check)
    if check.status in (Status.FAIL, Status.ERROR):
        tag = "failure" if check.status == Status.FAIL else "error"
        # Many reporters show only the message attribute: it names the culprits too.
        message = (check.detail or check.status.value) + (f" ({culprits})" if culprits else "")
        element = ET.SubElement(case, tag, message=_xml_safe(message), type=check.status.value)
        element.text = _xml_safe("\n".join(x for x in (check.detail, culprits) if x))
        stderr = "\n\n".join(f"rank {r}:\n{tails[r]}" for r in check.ranks if tails.get(r))
        if stderr:
            ET.SubElement(case, "system-err").text = _xml_safe(stderr)
    elif check.status == Status.SKIP:
        ET.SubElement(case, "skipped", message=_xml_safe(check.detail))
    elif check.detail or culprits:
        out = ET.SubElement(case, "system-out")
        out.text = _xml_safe("\n".join(x for x in (f"{check.status.value}: {check.detail}", culprits) if x))


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


# Rank logs can hold terminal escapes, NULs or undecodable bytes (surrogates): XML 1.0
# forbids them, and one of them makes the whole file unreadable to every reporter.
_ANSI = re.compile(r"\x1b(?:\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b]*(?:\x07|\x1b\\)?)")
_NOT_XML = re.compile("[^\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")


def _xml_safe(text: str) -> str:
    return _NOT_XML.sub("\ufffd", _ANSI.sub("", text))


def _culprit_text(check: Check) -> str:
    named = (("ranks", check.ranks), ("hosts", check.hosts))
    return "; ".join(f"{what}: {', '.join(map(str, who))}" for what, who in named if who)
