"""--html: the page's content and size, and its usage errors (no browser here: test_html_browser.py)."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

from ddpcheck.report.model import report_from_dict
from tests.conftest import Run, assert_usage_error
from tests.support.saved_reports import (
    Saved,
    run_ddpcheck,
    saved_reports_fixture,  # noqa: F401 (the fixture `saved_reports`)
)
from tests.support.synthetic_reports import collectives_report, links_report, watch_report

pytest.importorskip("matplotlib", reason="--html needs matplotlib: pip install 'ddpcheck[html]'")

from ddpcheck.report.html import render_html

NETWORK = re.compile(
    r"(?:https?|wss?|ftp)://(?!www\.w3\.org/)", re.I
)  # the SVG namespace is a name, not a fetch


CHART = re.compile(r'<svg[^>]*class="chart"')


def _self_contained(page: str) -> None:
    assert "<script" not in page and "<link" not in page and "@import" not in page
    assert not re.search(r"url\((?!#)", page)  # url(#clip) refers inside the page; nothing else may
    assert not NETWORK.search(page), NETWORK.search(page)
    assert "Content-Security-Policy" in page and "default-src 'none'" in page


def test_links_64_ranks_is_small_and_names_the_slow_link() -> None:
    report = links_report(64, per_host=8, slow=(13, 42))
    page = render_html(report)
    size = len(page.encode())
    assert size < 1_000_000, size
    _self_contained(page)
    # The slow link: in the list under the heat map, and as hover text on its cell.
    assert "slow: rank 13 (host gpu02) → rank 42 (host gpu06)" in page
    assert re.search(r"<title>slow: rank 13 \(host gpu02\) → rank 42", page)
    # Exactly one slow cell among 4032 links: no false alarm from the noise.
    assert page.count("<title>slow: ") == 1
    # The matrix under the chart holds every link's bandwidth.
    bad = next(r for r in report.table("links").rows if (r["src"], r["dst"]) == (13, 42))
    assert f">{bad['gbps']:g}<" in page


def test_links_without_a_slow_link_says_so() -> None:
    page = render_html(links_report(8, per_host=4, slow=None))
    assert "no link is slower than the threshold" in page and "<title>slow: " not in page
    # Up to 16 ranks every cell has its hover text.
    assert page.count("<title>rank ") == 8 * 7


def test_collectives_draws_one_line_per_op_and_the_baseline() -> None:
    page = render_html(collectives_report(8, corrupt=3))
    _self_contained(page)
    for op in ("all_reduce", "all_gather", "reduce_scatter", "broadcast", "reduce", "all_to_all", "sendrecv"):
        assert f">{op}<" in page  # legend and table
    assert "all_reduce (baseline)" in page and "baseline busbw (GB/s)" in page
    assert "all_gather: wrong elements at" in page


def test_same_report_same_page_but_the_time_it_was_written(saved_reports: dict[str, Saved]) -> None:
    report = report_from_dict(json.loads(saved_reports["profile"].json.read_text()))
    first, second = (re.sub(r"on \d{4}-\d\d-\d\dT[\d:+-]+", "", render_html(report)) for _ in range(2))
    assert first == second


@pytest.mark.parametrize("name", ["allreduce", "train", "profile", "env", "collectives", "links", "devices"])
def test_each_commands_page(saved_reports: dict[str, Saved], name: str) -> None:
    saved = saved_reports[name]
    page = saved.html.read_text()
    _self_contained(page)
    verdict = saved.stdout.strip().splitlines()[-1]
    assert '<h1 id="verdict" class="' in page and verdict.replace("'", "&#x27;") in page
    assert len(CHART.findall(page)) == (0 if name == "env" else 1)
    for axis in {
        "allreduce": ("message size", "bus bandwidth (GB/s)"),
        "train": ("step", "loss"),
        "profile": ("median time per steady-state step (ms)", "rank"),
        "env": (),
        "collectives": ("message size", "bus bandwidth (GB/s)"),
        "links": ("destination rank", "source rank"),
        "devices": ("matrix products (TFLOP/s, best pass)", "rank"),
    }[name]:
        assert axis in page
    assert len(page.encode()) < 1_000_000


@pytest.mark.integration
def test_html_is_checked_before_anything_is_launched(tmp_path: Path, scratch: Path) -> None:
    # A matplotlib that cannot be imported, as on an install without the [html] extra.
    fake = tmp_path / "no-matplotlib"
    (fake / "matplotlib").mkdir(parents=True)
    (fake / "matplotlib" / "__init__.py").write_text("raise ImportError('No module named matplotlib')\n")
    hidden = {
        "PYTHONPATH": os.pathsep.join([str(fake), os.environ.get("PYTHONPATH", "")]),
        "TMPDIR": str(scratch),
    }
    page = str(tmp_path / "page.html")
    for args in (
        ["allreduce", "--nproc", "2", "--html", page],
        ["train", "--nproc", "2", "--html", page],
        ["profile", "--nproc", "2", "--html", page],
        ["env", "--html", page],
        ["show", str(tmp_path / "whatever.json"), "--html", page],
    ):
        proc = run_ddpcheck(*args, env=hidden)
        assert_usage_error(Run(proc.returncode, proc.stdout, proc.stderr, None, 0.0), scratch)
        assert "pip install 'ddpcheck[html]'" in proc.stderr
        assert not Path(page).exists()
    # Without --html the same install runs: the library is needed only for the page.
    proc = run_ddpcheck("--help", env=hidden)
    assert proc.returncode == 0 and "--html" not in proc.stdout


@pytest.mark.integration
@pytest.mark.parametrize(
    "html, says",
    [("-", "needs a file path"), ("{tmp}/missing/page.html", "does not exist"), ("{tmp}", "is a directory")],
)
def test_bad_html_path(tmp_path: Path, scratch: Path, html: str, says: str) -> None:
    proc = run_ddpcheck(
        "allreduce", "--nproc", "2", "--html", html.format(tmp=tmp_path), env={"TMPDIR": str(scratch)}
    )
    assert_usage_error(Run(proc.returncode, proc.stdout, proc.stderr, None, 0.0), scratch)
    assert says in proc.stderr


def test_a_non_finite_loss_and_a_straggler_are_drawn(saved_reports: dict[str, Saved]) -> None:
    """Saved reports carry NaN as "nan": the loss line has a gap, not a crash; a straggler is marked."""
    train = json.loads(saved_reports["train"].json.read_text())
    for row in train["tables"]["loss"][2:]:
        row["loss_rank1"] = "nan"
    train["checks"] = [
        {**c, "status": "FAIL", "ranks": [1]} if c["name"] == "loss descent" else c for c in train["checks"]
    ]
    train["verdict"] = "fail"
    page = render_html(report_from_dict(train))
    assert "rank 1: " in page and ", nan, nan" in page  # the hover text of rank 1's line
    assert len(CHART.findall(page)) == 1
    profile = json.loads(saved_reports["profile"].json.read_text())
    for check in profile["checks"]:
        if check["name"] == "stragglers":
            check.update(status="WARN", ranks=[1], hosts=["vm"], detail="rank 1 on host vm: 1.8x the others")
    page = render_html(report_from_dict(profile))
    assert "rank 1 (straggler)" in page and ">straggler<" in page
    assert "rank 0 (straggler)" not in page


def test_watch_draws_the_heat_map_of_lag_with_the_named_rank_outlined() -> None:
    """watch --html: from real gloo dumps (rank 2 sleeping 1.3x), a ranks x time map of lag, rank 2's row
    outlined with its hover text, the per-rank figures beside it; a healthy job's map outlines nobody."""
    report = watch_report("rank2_slower")
    page = render_html(report)
    _self_contained(page)
    assert len(CHART.findall(page)) == 1
    assert "Lag behind peers over time, group 0 (default_pg), 4 ranks" in page
    assert "lag behind peers (ms)" in page and "time in the watched run, buckets (" in page
    assert page.count("<title>named: ") == 1  # the one outlined row, with its hover text
    assert "<title>named: rank 2 (vm) slows group 0 (default_pg)</title>" in page
    assert "slows the job: rank 2 (vm)" in page  # the list under the map
    # The map's rows are the report's: 4 ranks, each with a cell per bucket.
    rows = report.table("straggler_lag").rows
    assert [r["rank"] for r in rows] == [0, 1, 2, 3] and [r["named"] for r in rows] == [
        False,
        False,
        True,
        False,
    ]
    healthy = render_html(watch_report("healthy"))
    assert len(CHART.findall(healthy)) == 1 and "<title>named: " not in healthy
    assert "no rank slows the job" in healthy


def test_a_watch_report_without_samples_draws_no_heat_map() -> None:
    report = watch_report("healthy")
    report.tables = [t for t in report.tables if t.name != "straggler_lag"]
    assert CHART.findall(render_html(report)) == []


def test_a_crash_report_escapes_what_ranks_wrote() -> None:
    """An exit-3 report quotes a rank's stderr: shown as text, never as markup or script."""
    from ddpcheck.report.model import Check, Report, Status, Table

    hostile = "RuntimeError: <script>alert(1)</script> at [/path/pair.cc:553] & more"
    report = Report(
        command="allreduce",
        checks=[Check("rank crashed", Status.ERROR, hostile, [1], ["vm"])],
        tables=[Table("stderr", "stderr", {}, [{"rank": 1, "host": "vm", "stderr_tail": hostile}])],
        world={"size": 2, "backend": "gloo", "device": "cpu"},
        log_dir="/tmp/ddpcheck-run",
    )
    page = render_html(report)
    _self_contained(page)
    assert '<h1 id="verdict" class="error">ERROR' in page
    assert page.count("&lt;script&gt;alert(1)&lt;/script&gt;") == 2  # the check, the tail
    assert "rank 1 on vm: last lines of stderr" in page and "rank logs kept in /tmp/ddpcheck-run" in page


def test_options_are_shown_as_the_command_line_writes_them() -> None:
    from ddpcheck.report.html.page import _meta
    from ddpcheck.report.model import Report

    report = Report(
        "collectives", [], options={"ops": ["all_reduce", "all_gather"], "min_busbw": None, "iters": 2}
    )
    meta = _meta(report)
    assert "options: ops=all_reduce,all_gather, iters=2" in meta
    assert "None" not in meta and "[" not in meta
