"""--junit: the JUnit XML that CI test reporters (GitHub, GitLab, Jenkins, Azure) read."""

from __future__ import annotations

import datetime
import importlib.metadata
import platform
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from ddpcheck import __version__
from ddpcheck.report.formats.junit import to_junit
from ddpcheck.report.formats.junit import write as write_junit
from ddpcheck.report.model import Check, Report, Status, Table
from tests.conftest import assert_nothing_left

# ----------------------------------------------------- a structural checker
# The common ground of the Ant/Jenkins (junit-10.xsd) and Surefire schemas, which is what
# the reporters parse; written out here because tests download nothing.
SUITES_ATTRS = ({"tests", "failures", "errors", "time"}, {"name", "skipped", "disabled"})
SUITE_ATTRS = (
    {"name", "tests", "failures", "errors", "time", "timestamp", "hostname"},
    {"skipped", "disabled", "id", "package"},
)
CASE_ATTRS = ({"name", "classname", "time"}, {"assertions", "status", "file", "line"})
OUTCOMES = {"failure", "error", "skipped"}
# testsuite children, in the order the schema requires.
SUITE_ORDER = {"properties": 0, "testcase": 1, "system-out": 2, "system-err": 3}
CASE_ORDER = {"failure": 0, "error": 0, "skipped": 0, "system-out": 1, "system-err": 2}


def _attrs(element: ET.Element, spec: tuple[set[str], set[str]]) -> None:
    required, optional = spec
    missing = required - element.attrib.keys()
    unknown = element.attrib.keys() - required - optional
    assert not missing, f"<{element.tag}> lacks {sorted(missing)}"
    assert not unknown, f"<{element.tag}> has attributes no schema knows: {sorted(unknown)}"


def _count(element: ET.Element, name: str) -> int:
    value = element.get(name, "0")
    assert value.isdigit(), f"<{element.tag} {name}={value!r}> is not a count"
    return int(value)


def _seconds(element: ET.Element) -> float:
    value = float(element.get("time", "nan"))
    assert value >= 0, f"<{element.tag} time={element.get('time')!r}>"
    return value


def _in_order(element: ET.Element, order: dict[str, int], once: set[str]) -> None:
    tags = [child.tag for child in element]
    assert set(tags) <= order.keys(), f"<{element.tag}> holds {sorted(set(tags) - order.keys())}"
    ranks = [order[tag] for tag in tags]
    assert ranks == sorted(ranks), f"<{element.tag}> children out of schema order: {tags}"
    for tag in once:
        assert tags.count(tag) <= 1, f"<{element.tag}> holds {tags.count(tag)} <{tag}>"


def assert_junit_schema(root: ET.Element) -> None:
    """Raise AssertionError where `root` departs from what JUnit readers accept."""
    assert root.tag == "testsuites", root.tag
    _attrs(root, SUITES_ATTRS)
    totals = dict.fromkeys(("tests", "failures", "errors", "skipped"), 0)
    for suite in root:
        assert suite.tag == "testsuite", suite.tag
        _attrs(suite, SUITE_ATTRS)
        _seconds(suite)
        datetime.datetime.fromisoformat(suite.get("timestamp", ""))
        _in_order(suite, SUITE_ORDER, {"properties", "system-out", "system-err"})
        for prop in suite.iterfind("properties/*"):
            assert prop.tag == "property", prop.tag
            _attrs(prop, ({"name", "value"}, set()))
            assert prop.get("name"), "a property without a name"
        cases = suite.findall("testcase")
        outcomes: dict[str, int] = dict.fromkeys(OUTCOMES, 0)
        for case in cases:
            _attrs(case, CASE_ATTRS)
            _seconds(case)
            _in_order(case, CASE_ORDER, {"system-out", "system-err"})
            found = [child for child in case if child.tag in OUTCOMES]
            assert len(found) <= 1, f"testcase {case.get('name')!r} has {len(found)} outcomes"
            for outcome in found:
                outcomes[outcome.tag] += 1
                if outcome.tag in ("failure", "error"):
                    _attrs(outcome, ({"message", "type"}, set()))
                else:
                    _attrs(outcome, (set(), {"message"}))
        counts = {key: _count(suite, key) for key in totals}
        expected = {
            "tests": len(cases),
            "failures": outcomes["failure"],
            "errors": outcomes["error"],
            "skipped": outcomes["skipped"],
        }
        assert counts == expected, f"suite counts {counts} but its test cases give {expected}"
        for key in totals:
            totals[key] += counts[key]
    assert {key: _count(root, key) for key in totals} == totals


# ----------------------------------------------------------- unit tests
def sample_report() -> Report:
    checks = [
        Check("classic all_reduce", Status.PASS, "every rank holds sum(0..3) = 6"),
        Check("data integrity", Status.FAIL, "1K: 40 wrong; rank 1 makes the sum wrong", [1], ["nodeB"]),
        Check("hang", Status.ERROR, "rank 3 never reached stage 'join'", [3], ["nodeB"]),
        Check("GPU topology", Status.SKIP, "no GPUs"),
        Check("stragglers", Status.WARN, "rank 2 is 1.4x slower than the median", [2], ["nodeB"]),
    ]
    return Report(
        command="allreduce",
        checks=checks,
        world={
            "size": 4,
            "backend": "gloo",
            "device": "cpu",
            "nodes": 2,
            "hosts": ["nodeA", "nodeB"],
            "torch": "2.13.0+cpu",
            "cuda": None,
            "nccl": None,
        },
        options={"iters": 3, "dtype": "float32", "min_busbw": None},
        elapsed_s=12.3456,
    )


def cases(root: ET.Element) -> dict[str, ET.Element]:
    return {case.get("name", ""): case for case in root.iter("testcase")}


def properties(root: ET.Element) -> dict[str, str]:
    return {p.get("name", ""): p.get("value", "") for p in root.iter("property")}


def roundtrip(report: Report, tmp_path: Path) -> ET.Element:
    """Write the file as the CLI does and parse it back, as a reporter would."""
    path = tmp_path / "report.xml"
    write_junit(report, str(path))
    assert path.read_text(encoding="utf-8").startswith("<?xml")
    return ET.parse(path).getroot()


def test_the_file_has_the_structure_ci_reporters_read(tmp_path: Path) -> None:
    root = roundtrip(sample_report(), tmp_path)
    assert_junit_schema(root)
    (suite,) = root
    assert suite.get("name") == "ddpcheck.allreduce"
    assert {c.get("classname") for c in suite.iter("testcase")} == {"ddpcheck.allreduce"}


def test_counts_follow_the_statuses(tmp_path: Path) -> None:
    root = roundtrip(sample_report(), tmp_path)
    for element in (root, root[0]):
        counts = {k: element.get(k) for k in ("tests", "failures", "errors", "skipped")}
        assert counts == {"tests": "5", "failures": "1", "errors": "1", "skipped": "1"}


def test_a_failure_carries_the_detail_and_the_culprits(tmp_path: Path) -> None:
    case = cases(roundtrip(sample_report(), tmp_path))["data integrity"]
    (failure,) = case
    assert failure.tag == "failure"
    assert failure.get("type") == "FAIL"
    message = failure.get("message", "")
    # Some reporters show only the message attribute: the culprits belong there too.
    assert "1K: 40 wrong" in message
    assert "ranks: 1" in message
    assert "nodeB" in message
    assert "1K: 40 wrong" in (failure.text or "")
    assert "ranks: 1; hosts: nodeB" in (failure.text or "")


def test_a_check_that_could_not_complete_is_an_error(tmp_path: Path) -> None:
    case = cases(roundtrip(sample_report(), tmp_path))["hang"]
    (error,) = case
    assert error.tag == "error"
    assert error.get("type") == "ERROR"
    assert "never reached stage 'join'" in error.get("message", "")
    assert "ranks: 3" in error.get("message", "")


def test_skip_warn_and_pass(tmp_path: Path) -> None:
    found = cases(roundtrip(sample_report(), tmp_path))
    (skipped,) = found["GPU topology"]
    assert skipped.tag == "skipped"
    assert skipped.get("message") == "no GPUs"
    # A warning passes (the exit code is 0) but keeps its reason and culprits in system-out.
    warn = found["stragglers"]
    assert [child.tag for child in warn] == ["system-out"]
    assert "WARN: rank 2 is 1.4x slower" in (warn[0].text or "")
    assert "ranks: 2" in (warn[0].text or "")
    assert not any(child.tag in OUTCOMES for child in found["classic all_reduce"])


def test_time_and_timestamp(tmp_path: Path) -> None:
    root = roundtrip(sample_report(), tmp_path)
    suite = root[0]
    assert root.get("time") == suite.get("time") == "12.346"
    assert all(float(c.get("time", "")) >= 0 for c in suite.iter("testcase"))
    stamp = datetime.datetime.fromisoformat(suite.get("timestamp", ""))
    assert stamp.tzinfo is not None  # unambiguous across CI machines' time zones
    # The run began elapsed_s before the file was written.
    began = datetime.datetime.now().astimezone() - datetime.timedelta(seconds=12.3456)
    assert abs((stamp - began).total_seconds()) < 300


def test_properties_name_the_world_and_the_versions(tmp_path: Path) -> None:
    props = properties(roundtrip(sample_report(), tmp_path))
    assert props["command"] == "allreduce"
    assert props["verdict"] == "error"
    assert props["world_size"] == "4"
    assert props["backend"] == "gloo"
    assert props["device"] == "cpu"
    assert props["nodes"] == "2"
    assert props["hosts"] == "nodeA, nodeB"
    assert props["torch_version"] == "2.13.0+cpu"
    assert props["python_version"] == platform.python_version()
    assert props["ddpcheck_version"] == __version__
    assert props["option.iters"] == "3"
    assert props["option.dtype"] == "float32"
    # Unknown values are left out rather than written as "None".
    assert "cuda_version" not in props
    assert "option.min_busbw" not in props
    assert "None" not in props.values()


def test_a_report_without_rank_versions_names_the_installed_torch(tmp_path: Path) -> None:
    # The launcher's report after a crash has only what the plan knew.
    report = Report("train", [Check("rank crashed", Status.ERROR, "boom", [1])], world={"size": 2})
    props = properties(roundtrip(report, tmp_path))
    assert props["torch_version"] == importlib.metadata.version("torch")
    assert props["world_size"] == "2"


def test_rank_stderr_goes_with_the_check_that_names_the_rank(tmp_path: Path) -> None:
    report = Report(
        "train",
        [
            Check("rank crashed", Status.ERROR, "rank 1 raised", [1], ["h"]),
            Check("rank crashed", Status.ERROR, "rank 2 was killed", [2], ["h"]),
        ],
        tables=[
            Table(
                "stderr",
                "tails",
                {"rank": "rank"},
                [{"rank": 1, "host": "h", "stderr_tail": "Traceback ...\nRuntimeError: boom"}],
            )
        ],
        log_dir="/tmp/ddpcheck-logs",
    )
    root = roundtrip(report, tmp_path)
    assert_junit_schema(root)
    found = cases(root)
    # Reporters key test cases by name: two crashes stay two test cases.
    assert set(found) == {"rank crashed", "rank crashed #2"}
    assert "RuntimeError: boom" in (found["rank crashed"].findtext("system-err") or "")
    assert found["rank crashed #2"].find("system-err") is None
    assert "/tmp/ddpcheck-logs" in (root[0].findtext("system-out") or "")
    assert properties(root)["log_dir"] == "/tmp/ddpcheck-logs"


def test_text_from_rank_logs_cannot_break_the_xml(tmp_path: Path) -> None:
    # Escapes, NULs and undecodable bytes (surrogates) are not allowed in XML 1.0.
    hostile = 'rank 1: \x1b[31mred\x1b[0m <&> "quoted" \x00 \udcff tab\tend'
    report = Report("allreduce", [Check(f"odd {hostile}", Status.FAIL, hostile, [1])])
    root = roundtrip(report, tmp_path)
    assert_junit_schema(root)
    (failure,) = root.iter("failure")
    for text in (failure.get("message", ""), failure.text or ""):
        assert '<&> "quoted"' in text
        assert "red" in text
        assert "\x1b" not in text
        assert "tab\tend" in text


def test_a_passing_run_and_an_empty_detail(tmp_path: Path) -> None:
    report = Report("env", [Check("a", Status.PASS), Check("b", Status.FAIL)], elapsed_s=0.5)
    root = roundtrip(report, tmp_path)
    assert_junit_schema(root)
    assert cases(root)["a"].find("system-out") is None
    (failure,) = root.iter("failure")
    assert failure.get("message") == "FAIL"
    report.checks.pop()
    assert properties(to_junit(report))["verdict"] == "pass"


def test_dash_writes_to_stdout(capsys: pytest.CaptureFixture[str]) -> None:
    write_junit(sample_report(), "-")
    assert_junit_schema(ET.fromstring(capsys.readouterr().out))


def test_the_checker_rejects_what_reporters_would(tmp_path: Path) -> None:
    root = roundtrip(sample_report(), tmp_path)
    root[0].set("failures", "0")
    with pytest.raises(AssertionError, match="suite counts"):
        assert_junit_schema(root)
    root = roundtrip(sample_report(), tmp_path)
    next(root.iter("failure")).attrib.pop("message")
    with pytest.raises(AssertionError, match="lacks"):
        assert_junit_schema(root)
    root = roundtrip(sample_report(), tmp_path)
    root[0].append(root[0].find("properties"))  # type: ignore[arg-type]
    with pytest.raises(AssertionError, match="out of schema order"):
        assert_junit_schema(root)


# ----------------------------------------------------------- end to end
def test_allreduce_writes_a_junit_report(ddpcheck, scratch: Path, tmp_path: Path) -> None:
    path = tmp_path / "allreduce.xml"
    run = ddpcheck("allreduce", "--nproc", "2", "--sizes", "1K", "--iters", "1", "--junit", str(path))
    assert run.code == 0, run.stdout + run.stderr
    root = ET.parse(path).getroot()
    assert_junit_schema(root)
    assert run.report is not None
    assert [c.get("name") for c in root.iter("testcase")] == [c["name"] for c in run.report["checks"]]
    assert root.get("failures") == root.get("errors") == "0"
    props = properties(root)
    assert props["world_size"] == "2"
    assert props["backend"] == "gloo"
    assert props["torch_version"] == run.report["world"]["torch"]
    assert_nothing_left(scratch, run)


def test_a_corrupting_rank_is_a_failure_naming_it(ddpcheck, scratch: Path, tmp_path: Path) -> None:
    path = tmp_path / "allreduce.xml"
    run = ddpcheck(
        "allreduce", "--nproc", "2", "--sizes", "1K", "--iters", "1", "--inject", "corrupt@1",
        "--junit", str(path),
    )  # fmt: skip
    assert run.code == 1, run.stdout + run.stderr
    root = ET.parse(path).getroot()
    assert_junit_schema(root)
    failures = {case.get("name"): case.find("failure") for case in root.iter("testcase")}
    failed = {name for name, failure in failures.items() if failure is not None}
    assert failed == {c["name"] for c in run.failing()}
    assert "classic all_reduce" in failed
    for name in failed:
        message = failures[name].get("message", "")  # type: ignore[union-attr]
        assert "ranks: 1" in message, message
    assert properties(root)["verdict"] == "fail"
    assert_nothing_left(scratch, run)
