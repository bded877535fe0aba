"""Every command's terminal report fits 80 columns: nothing past the edge, no number cut or ellipsized.

Real saved reports (tests/golden/reports: a pass, a planted corruption, a slow link, a hang, a
crash, a comparison; and one fresh run of each command, devices included) rendered at width 80
into a plain console, as `ddpcheck ... | cat` in an 80-column terminal shows them.
"""

from __future__ import annotations

import io
import re
from pathlib import Path

import pytest
from rich.console import Console

from ddpcheck.commands import COMMANDS
from ddpcheck.report import terminal
from ddpcheck.report.model import Report, read_report
from ddpcheck.report.table_layout import cell, format_number
from tests.support.saved_reports import (
    Saved,
    run_ddpcheck,
    saved_reports_fixture,  # noqa: F401 (the fixture `saved_reports`)
)

GOLDEN = Path(__file__).parent / "golden" / "reports"
REPORTS = ["allreduce", "train", "profile", "env", "links", "collectives", "hang", "crash", "compare"]
FRESH = ["allreduce", "train", "profile", "env", "collectives", "links", "devices"]


def _rendered(report: Report, verbose: bool) -> list[str]:
    out = io.StringIO()
    console = Console(width=80, file=out, color_system=None, highlight=False, soft_wrap=False)
    terminal.render_report(report, console, verbose=verbose)
    return out.getvalue().splitlines()


def _shown_numbers(report: Report, verbose: bool) -> list[str]:
    """Every number a table shows, as the terminal writes it."""
    command = COMMANDS.get(report.command)
    details = command.details if command else {}
    shown = []
    for table in report.tables:
        if table.name in details and not verbose:
            continue
        for row in table.rows:
            for key in table.columns:
                value = row.get(key)
                if isinstance(value, (int, float)) and not isinstance(value, bool):
                    shown.append(cell(value).plain)
    return shown


def _assert_fits(report: Report) -> None:
    for verbose in (False, True):
        lines = _rendered(report, verbose)
        # The verdict line is one line for logs and grep; the terminal wraps it itself.
        body = [line for line in lines if not re.match(r"(PASS|FAIL|ERROR)  ddpcheck ", line)]
        too_long = [line for line in body if len(line) > 80]
        assert not too_long, "\n".join(too_long)
        assert not any("…" in line for line in lines), "\n".join(lines)
        text = "\n".join(lines)
        for number in _shown_numbers(report, verbose):
            # Whole, on one line, between spaces (never folded across two lines).
            assert re.search(rf"(^|\s){re.escape(number)}(\s|$)", text, re.M), (number, text)


@pytest.mark.parametrize("name", REPORTS)
def test_a_saved_report_fits_80_columns(name: str) -> None:
    _assert_fits(read_report(str(GOLDEN / f"{name}.json")))


@pytest.mark.parametrize("name", FRESH)
def test_a_fresh_report_fits_80_columns(saved_reports: dict[str, Saved], name: str) -> None:
    _assert_fits(read_report(str(saved_reports[name].json)))


def test_numbers_keep_four_significant_figures() -> None:
    assert [format_number(v) for v in (0.0029331234, 1787.76, 123456.7, 2.5e7, 4.1e-08, 0.0)] == [
        "0.002933",
        "1788",
        "123457",
        "2.5e+07",
        "4.1e-08",
        "0",
    ]


def test_collectives_lead_with_the_summary_and_the_checks() -> None:
    """The per-collective tables only with --verbose; without it, one line under the summary says so."""
    report = read_report(str(GOLDEN / "collectives.json"))
    plain = "\n".join(_rendered(report, verbose=False))
    assert "all_gather bandwidth" not in plain and "busbw by message size" not in plain
    note = "every collective's bandwidth by message size: with --verbose (-v), and in --json"
    assert plain.index("Peak bus bandwidth of every collective") < plain.index(note) < plain.index("Checks")
    verbose = "\n".join(_rendered(report, verbose=True))
    assert "all_gather bandwidth" in verbose and "sendrecv busbw by message size" in verbose
    assert note not in verbose


@pytest.mark.integration
def test_show_takes_verbose() -> None:
    saved = str(GOLDEN / "collectives.json")
    plain, verbose = run_ddpcheck("show", saved), run_ddpcheck("show", saved, "-v")
    assert plain.returncode == verbose.returncode == 1
    assert "reduce_scatter bandwidth" in verbose.stdout and "reduce_scatter bandwidth" not in plain.stdout
    assert run_ddpcheck("show", saved, "--verbose").stdout == verbose.stdout
