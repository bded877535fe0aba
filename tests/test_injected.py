"""A planted fault (--inject) is said in every output, saved and shown again, and is never a baseline."""

from __future__ import annotations

import io
import json
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from rich.console import Console

from ddpcheck.report.formats.junit import to_junit
from ddpcheck.report.model import Check, Report, Status, report_from_dict
from ddpcheck.report.terminal import render_report
from tests.conftest import assert_usage_error

GOLDEN = Path(__file__).parent / "golden" / "reports"
LINE = "injected faults: slowlink@1 (planted with --inject: not a hardware fault)"


def planted(*faults: str) -> Report:
    report = Report(command="links", checks=[Check("slow links", Status.FAIL, "rank 1 is slow", [1])])
    report.world = {"size": 3, "backend": "gloo", "device": "cpu"}
    report.injected = list(faults)
    return report


def terminal(report: Report, quiet: bool = False) -> str:
    out = io.StringIO()
    render_report(report, Console(file=out, width=200, color_system=None), quiet=quiet)
    return out.getvalue()


def test_the_json_carries_the_faults_and_loads_them_again() -> None:
    data = planted("slowlink@1").to_dict()
    assert data["injected"] == ["slowlink@1"]
    assert report_from_dict(json.loads(json.dumps(data))).injected == ["slowlink@1"]
    assert report_from_dict(planted("slowlink@1").to_dict()).injected == ["slowlink@1"]
    assert planted().to_dict()["injected"] == []


def test_a_report_from_before_injected_loads_as_none_planted() -> None:
    data = planted().to_dict()
    del data["injected"]
    assert report_from_dict(data).injected == []
    saved = json.loads((GOLDEN / "links.json").read_text())
    assert "injected" not in saved and report_from_dict(saved).injected == []


def test_the_terminal_says_it_even_when_quiet() -> None:
    for quiet in (False, True):
        assert LINE in terminal(planted("slowlink@1"), quiet=quiet)
    assert "injected faults" not in terminal(planted())


def test_junit_has_the_property_and_the_line() -> None:
    suite = to_junit(planted("slowlink@1", "crash@2:gather")).find("testsuite")
    props = {p.get("name"): p.get("value") for p in suite.find("properties")}
    assert props["injected"] == "slowlink@1, crash@2:gather"
    assert "planted with --inject" in suite.find("system-out").text
    none = to_junit(planted()).find("testsuite")
    assert "injected" not in {p.get("name") for p in none.find("properties")}
    ET.tostring(suite)  # well-formed


def test_the_html_page_has_a_banner() -> None:
    pytest.importorskip("matplotlib")
    from ddpcheck.report.html import render_html

    page = render_html(planted("slowlink@1"))
    assert f'<p id="injected" class="injected">{LINE}</p>' in page
    assert 'id="injected"' not in render_html(planted())


def _save(tmp_path: Path, name: str, injected: list[str] | None) -> Path:
    data = json.loads((GOLDEN / "profile.json").read_text())
    if injected is not None:
        data["injected"] = injected
    path = tmp_path / name
    path.write_text(json.dumps(data))
    return path


def test_show_and_compare_keep_saying_it(ddpcheck, tmp_path: Path) -> None:
    old = _save(tmp_path, "old.json", ["corrupt@1"])
    new = _save(tmp_path, "new.json", None)
    shown = ddpcheck("show", str(old), "--quiet")
    assert "injected faults: corrupt@1 (planted with --inject: not a hardware fault)" in shown.stdout
    compared = ddpcheck("compare", str(old), str(new), "--json", str(tmp_path / "c.json"))
    report = json.loads((tmp_path / "c.json").read_text())
    assert report["injected"] == ["corrupt@1"]
    assert any(
        n.startswith(f"OLD ({old}) had faults planted with --inject: corrupt@1") for n in report["notes"]
    )
    assert "injected faults: corrupt@1" in compared.stdout


def test_a_baseline_with_planted_faults_is_refused(ddpcheck, scratch, tmp_path: Path) -> None:
    bad = _save(tmp_path, "planted.json", ["corrupt@1"])
    run = ddpcheck("allreduce", "--nproc", "2", "--baseline", str(bad))
    assert_usage_error(run, scratch)
    assert "faults planted with --inject (corrupt@1)" in run.stderr and str(bad) in run.stderr
