"""Every command's page opened in a real headless Chromium: it renders, fetches nothing, logs no
error, every chart drew, and the verdict and the named ranks are on the page."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support import headless
from tests.support.saved_reports import (
    Saved,
    saved_reports_fixture,  # noqa: F401 (the fixture `saved_reports`)
)
from tests.support.synthetic_reports import collectives_report, links_report, watch_report

pytest.importorskip("matplotlib", reason="--html needs matplotlib: pip install 'ddpcheck[html]'")

from ddpcheck.report.html import render_html
from ddpcheck.report.html import write as write_html

# Every test here starts processes (the real command, a shell, a browser).
pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def browser() -> Iterator[headless.Browser]:
    why = headless.unavailable()
    if why:
        pytest.skip(f"no headless browser: {why}")
    try:
        opened = headless.Browser()
    except (OSError, headless.BrowserError) as exc:
        pytest.skip(f"{headless.CHROMIUM} cannot start here: {exc}")
    with opened:
        yield opened


# For every heat-map cell with hover text: is that cell what the pointer is over at its centre?
HOVER = """(() => Array.from(document.querySelectorAll('svg.chart g[id^="link-"] > title')).map(t => {
  const cell = t.parentElement;
  cell.scrollIntoView({block: 'center', inline: 'center'});
  const box = cell.getBoundingClientRect();
  const hit = document.elementFromPoint(box.x + box.width / 2, box.y + box.height / 2);
  return [t.textContent, Boolean(hit && hit.closest('g[id^="link-"]') === cell)];
}))()"""


def _open(browser: headless.Browser, path: Path, hovers: int = 0, also: str = "null") -> headless.Page:
    """The page opened and checked; `also`, a script of the test's own, evaluated there (page.also)."""
    page = browser.open(path)
    try:
        # Loaded, asked for nothing but itself (its inline images are data: URIs), and quiet.
        assert page.verdict, "the page did not render a verdict"
        requests = page.requests()
        assert requests[0] == page.url
        assert all(url == page.url or url.startswith("data:") for url in requests), requests
        assert page.errors() == []
        # Every chart drew: a box on the page, with shapes in it.
        for chart in page.charts:
            assert chart["width"] > 100 and chart["height"] > 100 and chart["shapes"] > 5, chart
        # The heat map's hover text is reachable: each titled cell is what the pointer meets there.
        cells = page.evaluate(HOVER)
        assert len(cells) == hovers and all(hit for _, hit in cells), cells
        page.hover_texts = [text for text, _ in cells]
        page.also = page.evaluate(also)
        return page
    finally:
        page.close()


EXPECTED_ON_PAGE = {
    "allreduce": ["classic all_reduce", "data integrity", "rank 1 on host", "Bus bandwidth by message size"],
    "train": ["Loss per step on every rank, and in one process", "weight equality", "1 process"],
    "profile": ["Where each rank's step goes", "stragglers", "exposed communication"],
    "env": ["Checks"],
    "collectives": [
        "all_gather",
        "reduce_scatter",
        "sendrecv",
        "rank 1 on host",
        "Bus bandwidth by message size",
    ],
    "links": ["link bandwidth", "rank 1 on host"],
    "devices": ["product rate by rank", "results agree", "rank 2 on host"],
}


@pytest.mark.parametrize("name", ["allreduce", "train", "profile", "env", "collectives", "links", "devices"])
def test_each_commands_page_in_a_browser(
    browser: headless.Browser, saved_reports: dict[str, Saved], name: str
) -> None:
    saved = saved_reports[name]
    page = _open(
        browser, saved.html, 3 * 2 if name == "links" else 0
    )  # a 3-rank map: every link has hover text
    verdict = saved.stdout.strip().splitlines()[-1]
    assert " ".join(page.verdict.split()) == " ".join(verdict.split())  # the terminal's verdict line
    assert len(page.charts) == (0 if name == "env" else 1)
    for text in EXPECTED_ON_PAGE[name]:
        assert text in page.text, text
    report = json.loads(saved.json.read_text())
    for check in report["checks"]:
        assert check["name"] in page.text
        if (
            check["status"] != "PASS"
            and check["ranks"]
            and name == "profile"
            and check["name"] == "stragglers"
        ):
            assert "straggler" in page.text  # marked on the chart


def test_links_and_collectives_pages_in_a_browser(browser: headless.Browser, tmp_path: Path) -> None:
    slow64 = "rank 13 (host gpu02) → rank 42 (host gpu06)"
    slow8 = "rank 2 (host gpu01) → rank 5 (host gpu02)"
    # Hover texts: a 64-rank map has one (its slow cell), an 8-rank map one per link.
    for name, report, named, hovers in (
        ("links64", links_report(64, per_host=8, slow=(13, 42)), [slow64], 1),
        ("links8", links_report(8, per_host=4, slow=(2, 5)), [slow8], 8 * 7),
        ("collectives", collectives_report(8, corrupt=3), ["all_gather: rank 3", "sendrecv"], 0),
    ):
        path = tmp_path / f"{name}.html"
        write_html(report, str(path))
        page = _open(browser, path, hovers)
        assert len(page.charts) == 1
        for text in named:
            assert text in page.text, (name, text)
        if name.startswith("links"):  # the slow cell's hover text names both ends
            assert any(t.startswith(f"slow: {named[0]}") for t in page.hover_texts), page.hover_texts


# The named rank's outlined row: is its hover text what the pointer meets anywhere on the row?
ROW_HOVER = """(() => Array.from(document.querySelectorAll('svg.chart g[id^="straggler-"] > title'))
  .map(t => {
    const row = t.parentElement;
    row.scrollIntoView({block: 'center', inline: 'center'});
    const box = row.getBoundingClientRect();
    const at = x => document.elementFromPoint(box.x + box.width * x, box.y + box.height / 2);
    const hits = [0.1, 0.5, 0.9].map(at);
    return [t.textContent, hits.every(hit => Boolean(hit && hit.closest('g[id^="straggler-"]') === row))];
  }))()"""


def test_watch_heat_map_in_a_browser(browser: headless.Browser, tmp_path: Path) -> None:
    """watch --html (real gloo dumps, rank 2 slowed 1.3x): the map drew, rank 2 is named under it, and
    its row's hover text is met anywhere along the row (an unfilled outline took the pointer only on
    its 1.5-px edge until the page gave it pointer events over its area)."""
    for job, named in (("rank2_slower", ["named: rank 2 (vm) slows group 0 (default_pg)"]), ("healthy", [])):
        path = tmp_path / f"{job}.html"
        write_html(watch_report(job), str(path))
        page = _open(browser, path, also=ROW_HOVER)
        assert len(page.charts) == 1, job
        assert "Lag behind peers over time, group 0 (default_pg), 4 ranks" in page.text
        assert ("slows the job: rank 2 (vm)" in page.text) == bool(named)
        assert page.also == [[text, True] for text in named], page.also


def test_a_page_that_fetches_is_caught(browser: headless.Browser, tmp_path: Path) -> None:
    """The browser checks can fail: a page that asks the network for an image and logs an error is seen."""
    page = render_html(links_report(4, per_host=2, slow=None))
    bad = page.replace(
        "</body>", '<img src="http://192.0.2.1/x.png"><script>console.error("boom")</script></body>'
    )
    guarded, bare = tmp_path / "guarded.html", tmp_path / "bare.html"
    guarded.write_text(bad)
    bare.write_text(re.sub(r'<meta http-equiv="Content-Security-Policy"[^>]*>', "", bad))
    for path in (guarded, bare):
        opened = browser.open(path)
        try:
            assert "http://192.0.2.1/x.png" in opened.requests()
            errors = " ".join(opened.errors())
            # With the page's policy the fetch and the script are blocked; without it they run.
            assert ("Content Security Policy" in errors) if path == guarded else ("boom" in errors)
        finally:
            opened.close()
