"""A thousand ranks: the judges name the same culprits, the terminal and the page stay readable, the
JSON keeps every row. Pure: synthetic rank data (tests/support/scale_data.py) fed to the real judges."""

from __future__ import annotations

import io
import statistics

from hypothesis import given, settings
from hypothesis import strategies as st
from rich.console import Console

from ddpcheck.checks.devices import DevicesOptions
from ddpcheck.checks.devices import judge as devices
from ddpcheck.checks.profile import ProfileOptions
from ddpcheck.checks.profile.judge import _median_without, straggler_ratios
from ddpcheck.checks.profile.judge import judge as judge_profile
from ddpcheck.report.rows import SHOWN_ROWS, shown_rows
from ddpcheck.report.terminal import render_report
from tests.support import scale_data

RANKS = 1024


def _identities(n: int = RANKS) -> list[dict]:
    return scale_data.rank_identities(scale_data.hosts_of_fleet(n // 8), 8)


def _screen(report) -> str:
    console = Console(file=io.StringIO(), width=160, color_system=None, highlight=False)
    render_report(report, console)
    return console.file.getvalue()  # type: ignore[attr-defined]


def test_long_tables_show_the_failing_rows_then_the_first_and_the_last() -> None:
    rows = [{"i": i, "status": "FAIL" if i in (500, 700) else "PASS"} for i in range(1000)]
    assert [r["i"] for r in shown_rows(rows, 6)] == [0, 1, 500, 700, 998, 999]
    assert shown_rows(rows[:SHOWN_ROWS]) == rows[:SHOWN_ROWS]  # up to 64 rows: every one, as before


@settings(deadline=None)  # the machine is shared: an example held up past 200 ms is no failure
@given(st.lists(st.sampled_from([0.5, 1.0, 1.0, 2.0, 3.25, 7.0]), min_size=2, max_size=12))
def test_the_median_of_the_others_is_the_one_statistics_gives(values: list[float]) -> None:
    ordered = sorted(values)
    for i, value in enumerate(values):
        assert _median_without(ordered, value) == statistics.median(values[:i] + values[i + 1 :])


def test_a_straggler_among_a_thousand_ranks_is_the_one_named() -> None:
    data = scale_data.profile_data(RANKS)
    for step in data[777]["steps"]:
        step["forward"] *= 3
    medians = [{"compute": 1.0}] * 3
    assert straggler_ratios(medians) == [1.0, 1.0, 1.0]
    report = judge_profile(data, _identities(), ProfileOptions(hidden=4096, batch=32, steps=10, warmup=2))
    stragglers = next(c for c in report.checks if c.name == "stragglers")
    assert stragglers.ranks == [777] and stragglers.hosts == ["gpu-a098"]
    steps = report.table("steps")
    assert steps is not None
    kept = {r["rank"] for r in steps.rows}
    assert len(kept) == 64 and {0, 777} <= kept and f"64 of {RANKS:,} ranks" in steps.title
    per_rank = report.table("per_rank")
    assert per_rank is not None and len(per_rank.rows) == RANKS  # the JSON keeps every rank's medians


def test_a_slow_gpu_among_a_thousand_is_named_shown_first_and_the_rest_counted() -> None:
    data = scale_data.devices_data(RANKS)
    for one in data[901]["passes"]:
        one["gemm"] = {k: v / 3 for k, v in one["gemm"].items()}
    report = devices.judge(data, _identities(), DevicesOptions().for_device("cuda"))
    compute = next(c for c in report.checks if c.name == "compute")
    assert compute.ranks == [901] and compute.hosts == ["gpu-a113"]
    table = report.table("devices")
    assert table is not None and len(table.rows) == RANKS
    screen = _screen(report)
    assert f"showing 64 of {RANKS:,} rows" in screen
    assert len(screen.splitlines()) < 600
    assert "   901 " in screen  # the failing rank is among the rows shown
    assert f"(the 64 slowest or failing of {RANKS:,} ranks)" in " ".join(screen.split())  # its chart
    from ddpcheck.report.html import render_html
    from ddpcheck.report.html.page import HTML_ROWS

    page = render_html(report)
    assert len(page) < 2_000_000 and "of 1,024 ranks; every rank in the JSON report" in page
    assert f"showing {HTML_ROWS} of {RANKS:,} rows" in page and 'id="device-901"' in page
