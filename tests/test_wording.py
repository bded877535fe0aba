"""Issue 40's wording: help that reads as written, usage errors that say how to fix them."""

from __future__ import annotations

import io

import pytest
from rich.console import Console

from ddpcheck.checks.watch.judge import Exit, RankView, judge_crash
from ddpcheck.report import terminal
from ddpcheck.report.model import Check, Report, Status
from ddpcheck.report.units import human_bytes
from tests.conftest import assert_usage_error
from tests.support.saved_reports import run_ddpcheck


@pytest.mark.integration
def test_watch_help_lists_its_examples_one_a_line_and_no_other_commands_words() -> None:
    shown = run_ddpcheck("watch", "--help").stdout
    assert " | " not in shown and "collectives" not in shown, shown
    assert "\n    ddpcheck watch --hang-after 120 -- python train.py\n" in shown, shown


@pytest.mark.integration
def test_an_unknown_option_guesses_only_near_names(ddpcheck, scratch) -> None:
    run = ddpcheck("allreduce", "--bogus")
    assert_usage_error(run, scratch)
    said = "ddpcheck: error: no such option --bogus; ddpcheck allreduce --help lists them"
    assert run.stderr.strip() == said
    run = ddpcheck("allreduce", "--verbos")
    assert "(did you mean --verbose?)" in run.stderr, run.stderr


@pytest.mark.integration
def test_a_jobs_option_without_the_double_dash_says_where_it_goes(ddpcheck, scratch) -> None:
    run = ddpcheck("watch", "--hang-after", "3", "torchrun", "--nproc-per-node", "2", "x.py")
    assert_usage_error(run, scratch)
    fixed = "put -- before the job, so that its options reach it: ddpcheck watch --hang-after 3 -- torchrun"
    assert f"{fixed} --nproc-per-node 2 x.py" in run.stderr, run.stderr


@pytest.mark.integration
def test_postmortem_of_a_file_says_it_is_a_file(ddpcheck, scratch, tmp_path) -> None:
    (tmp_path / "f").write_text("x")
    run = ddpcheck("postmortem", str(tmp_path / "f"))
    assert_usage_error(run, scratch)
    assert run.stderr.strip().endswith("f: is a file, not a directory"), run.stderr


def test_watch_names_its_kept_directory_for_what_it_holds() -> None:
    out = io.StringIO()
    report = Report("watch", checks=[Check("hang", Status.ERROR, "x")], log_dir="/tmp/ddpcheck-watch-x")
    terminal.render_report(report, Console(file=out, width=120, color_system=None))
    assert "the watch directory (dumps, stacks) kept in /tmp/ddpcheck-watch-x" in out.getvalue()
    assert "rank logs" not in out.getvalue()


def test_a_job_whose_program_never_started_says_so_with_its_stderr() -> None:
    never = RankView(0, "node1", 100, exit=Exit(1.0, "ended", code=2))
    output = "python: can't open file '/home/me/nope.py': [Errno 2] No such file or directory\n"
    (check,) = judge_crash([never], output, 2).checks
    assert check.detail == (
        "the job's program could not start: python: can't open file '/home/me/nope.py': [Errno 2] No such "
        "file or directory; rank 0 (host node1, pid 100) exited with code 2, without a Python exception"
    )
    (check,) = judge_crash([never], "", 2).checks  # nothing said: as before
    assert check.detail.startswith("rank 0 (host node1, pid 100) failed first: exited with code 2")


def test_a_size_split_into_blocks_reads_in_the_unit_of_its_neighbours() -> None:
    """collectives' 'at' column: all_gather's 1M split over 3 ranks beside sendrecv's 1M."""
    assert [human_bytes(n) for n in (1048572, 1024**3 - 3, 1000000, 4092)] == [
        "1.0M",
        "1.0G",
        "1000000B",
        "4092B",
    ]
    assert human_bytes(1048572, exact=True) == "1048572B"  # a baseline's figure labels tell them apart
