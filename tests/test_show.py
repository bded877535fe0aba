"""`ddpcheck show`: a saved report shown again as the run showed it; anything else is exit 2."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from ddpcheck.errors import UsageError
from ddpcheck.report import show as showing
from tests.conftest import Run, assert_usage_error
from tests.support.saved_reports import (
    Saved,
    run_ddpcheck,
    saved_reports_fixture,  # noqa: F401 (the fixture `saved_reports`)
)


def _lines(text: str) -> list[str]:
    # rich pads every table line to its width; what counts is the text. The JSON keeps the run's
    # time to the millisecond, so its tenth of a second can round the other way (2.9496 -> 2.950).
    # The run said where it wrote its --json and --html files; `show` writes none.
    return [
        re.sub(r" in \d+\.\d s\b", " in N s", line.rstrip())
        for line in text.splitlines()
        if not line.startswith("wrote the ")
    ]


@pytest.mark.parametrize("name", ["allreduce", "train", "profile", "env", "collectives", "links", "devices"])
def test_show_prints_what_the_run_printed(saved_reports: dict[str, Saved], name: str, tmp_path: Path) -> None:
    saved = saved_reports[name]
    shown = run_ddpcheck("show", str(saved.json))
    # Every table, chart, check and the verdict line, word for word; the exit code is the run's.
    assert _lines(shown.stdout) == _lines(saved.stdout), shown.stderr
    assert shown.returncode == saved.code
    quiet = run_ddpcheck("show", str(saved.json), "--quiet")
    assert quiet.returncode == saved.code
    assert _lines(quiet.stdout)[-1] == _lines(saved.stdout)[-1]  # the verdict line
    # --html adds a file, and on the terminal only the line that says where it went.
    page = tmp_path / f"{name}.html"
    with_html = run_ddpcheck("show", str(saved.json), "--html", str(page))
    assert f"wrote the HTML page to {page}" in with_html.stdout
    assert _lines(with_html.stdout) == _lines(shown.stdout) and with_html.returncode == saved.code
    assert page.read_text().startswith("<!DOCTYPE html>")


def test_the_runs_verdicts(saved_reports: dict[str, Saved]) -> None:
    """The saved runs are what the other tests need: a named culprit, and passing runs."""
    assert saved_reports["allreduce"].code == 1
    assert saved_reports["train"].code == 0
    assert saved_reports["profile"].code == 0
    report = json.loads(saved_reports["allreduce"].json.read_text())
    # `tables` stays {name: rows} for the scripts that read it; titles and columns sit beside it.
    assert isinstance(report["tables"]["bandwidth"], list)
    assert report["table_meta"]["bandwidth"]["columns"]["busbw_gbps"] == "busbw (GB/s)"
    assert report["table_meta"]["bandwidth"]["title"].startswith("all_reduce bandwidth")
    # A grouped table keeps its grouping, so that `show` prints one table per collective again.
    collectives = json.loads(saved_reports["collectives"].json.read_text())
    assert saved_reports["collectives"].code == 1
    assert collectives["table_meta"]["bandwidth"]["group_by"] == "op"


def test_show_json_round_trip(saved_reports: dict[str, Saved], tmp_path: Path) -> None:
    """`show --json` writes back the report it read: nothing is lost or invented on the way."""
    again = tmp_path / "again.json"
    run_ddpcheck("show", str(saved_reports["train"].json), "--json", str(again))
    before, after = json.loads(saved_reports["train"].json.read_text()), json.loads(again.read_text())
    assert after == before


def test_a_report_without_table_meta_still_shows(saved_reports: dict[str, Saved], tmp_path: Path) -> None:
    """Reports saved before table_meta existed: every table, titled by its name, all its keys."""
    old = json.loads(saved_reports["allreduce"].json.read_text())
    del old["table_meta"]
    path = tmp_path / "old.json"
    path.write_text(json.dumps(old))
    shown = run_ddpcheck("show", str(path))
    assert shown.returncode == 1
    assert "bandwidth" in shown.stdout and "busbw_gbps" in shown.stdout
    assert _lines(shown.stdout)[-1] == _lines(saved_reports["allreduce"].stdout)[-1]


def _variants(report: dict) -> dict[str, str]:
    bad_status = json.loads(json.dumps(report))
    bad_status["checks"][0]["status"] = "MAYBE"
    lying = json.loads(json.dumps(report))
    lying["verdict"] = "pass"
    rows_not_list = json.loads(json.dumps(report))
    rows_not_list["tables"]["bandwidth"] = "fast"
    no_version = {k: v for k, v in report.items() if k != "ddpcheck"}
    bad_time = {**report, "elapsed_s": "soon"}
    return {
        "text.json": "this is not JSON\n",
        "list.json": "[1, 2, 3]\n",
        "other.json": json.dumps({"name": "package.json", "version": "1.0"}),
        "no-version.json": json.dumps(no_version),
        "bad-status.json": json.dumps(bad_status),
        "lying.json": json.dumps(lying),
        "rows.json": json.dumps(rows_not_list),
        "time.json": json.dumps(bad_time),
    }


def test_not_a_report_is_one_line_and_exit_2(
    saved_reports: dict[str, Saved], tmp_path: Path, scratch: Path
) -> None:
    report = json.loads(saved_reports["allreduce"].json.read_text())
    paths = []
    for name, text in _variants(report).items():
        (tmp_path / name).write_text(text)
        paths.append(tmp_path / name)
    binary = tmp_path / "binary.json"
    binary.write_bytes(b"\xff\xfe\x00garbage")
    paths += [binary, tmp_path / "missing.json", tmp_path]
    # Each kind of bad file through the loader, in this process: one line naming the file.
    for path in paths:
        with pytest.raises(UsageError) as raised:
            showing.run(showing.ShowOptions(report_path=str(path)))
        message = str(raised.value)
        assert message.startswith(f"{path}: ") and "\n" not in message, message
    # And through the command, as users meet it: exit 2, one line, no traceback.
    for path in (tmp_path / "text.json", tmp_path / "lying.json", tmp_path / "missing.json"):
        proc = run_ddpcheck("show", str(path), env={"TMPDIR": str(scratch)})
        assert_usage_error(Run(proc.returncode, proc.stdout, proc.stderr, None, 0.0), scratch)
        assert str(path) in proc.stderr


@pytest.mark.integration
def test_show_needs_a_report(scratch: Path) -> None:
    proc = run_ddpcheck("show", env={"TMPDIR": str(scratch)})
    assert_usage_error(Run(proc.returncode, proc.stdout, proc.stderr, None, 0.0), scratch)
