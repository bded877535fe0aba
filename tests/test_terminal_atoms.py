"""At 80 columns no number with its unit, path or command is split across lines (README: no number cut).

Every command's report, golden (tests/golden/reports) and real (one fresh run of each command,
a watched job that hangs and one that crashes, and postmortem over the hang's dumps), rendered
as `ddpcheck ... | cat` in an 80-column terminal shows it: every such atom in a table cell, a
check's detail or a note must appear whole on one rendered line.
"""

from __future__ import annotations

import io
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from rich.console import Console

from ddpcheck.checks.watch.judge import Exit, RankView, judge_crash
from ddpcheck.commands import COMMANDS
from ddpcheck.failure.stacks import Frame
from ddpcheck.report import table_layout, terminal
from ddpcheck.report.model import Check, Report, Status, Table, read_report
from tests.support.saved_reports import (
    Saved,
    saved_reports_fixture,  # noqa: F401 (the fixture `saved_reports`)
)

GOLDEN = Path(__file__).parent / "golden" / "reports"
GOLDEN_REPORTS = sorted(p.name for p in GOLDEN.glob("*.json") if not p.name.endswith(".show.json"))
FRESH = ["allreduce", "train", "profile", "env", "collectives", "links", "devices"]
TRAIN_JOB = str(Path(__file__).resolve().parent / "support" / "train_job.py")

# What a reader takes whole, found here independently of ddpcheck/report/fold.py.
PATH = re.compile(r"[^\s()\[\],;]*/[^\s()\[\],;]+")
QUANTITY = re.compile(r"\d[\d.,]* (?:[KMG]iB|B|GB/s|ms|s)\b")
COMMAND = re.compile(r"ddpcheck [a-z]+ /\S+")
WORD = re.compile(r"\S+")  # a platform string, a checksum: no word is cut either


def rendered(report: Report, verbose: bool = False) -> list[str]:
    out = io.StringIO()
    console = Console(width=80, file=out, color_system=None, highlight=False, soft_wrap=False)
    terminal.render_report(report, console, verbose=verbose)
    return out.getvalue().splitlines()


def shown_tables(report: Report, verbose: bool) -> list[Table]:
    """The tables the terminal shows: not the stderr panels (quoted output, folded as it came), nor a
    detail table without --verbose."""
    command = COMMANDS.get(report.command)
    hidden = set() if verbose or command is None else set(command.details)
    return [t for t in report.tables if t.name != "stderr" and t.name not in hidden]


def texts(report: Report, verbose: bool) -> list[str]:
    out = [c.detail for c in report.checks] + list(report.notes)
    for table in shown_tables(report, verbose):
        # As the terminal writes each value (a float to 4 significant figures).
        out += [table_layout.cell(row.get(key)).plain for row in table.rows for key in table.columns]
    return out


def short_values(report: Report, verbose: bool) -> list[str]:
    """Table cells that are one short value with a number in it: 'exited 1', '16.2 KiB', '2 / 2 / 2'."""
    return [
        str(row[key])
        for table in shown_tables(report, verbose)
        for row in table.rows
        for key in table.columns
        if isinstance(row.get(key), str) and len(row[key]) <= 16 and re.search(r"\d", row[key])
    ]


def assert_atoms_whole(report: Report) -> None:
    for verbose in (False, True):
        lines = rendered(report, verbose)
        body = [line for line in lines if not re.match(r"(PASS|FAIL|ERROR)  ddpcheck ", line)]
        # Wider only where one word is: a path longer than the line, whole for the terminal to wrap.
        assert not [line for line in body if len(line) > 80 and " " in line.strip()], "\n".join(lines)
        found = (
            rx.findall(text) for text in texts(report, verbose) for rx in (PATH, QUANTITY, COMMAND, WORD)
        )
        atoms = {atom for atoms in found for atom in atoms} | set(short_values(report, verbose))
        for atom in atoms:
            if len(atom) > 72 and " " in atom:  # longer than any line can hold: broken at its spaces
                continue
            assert any(atom in line for line in lines), (atom, "\n".join(lines))


@pytest.mark.parametrize("name", GOLDEN_REPORTS)
def test_a_golden_report_keeps_its_atoms_whole(name: str) -> None:
    assert_atoms_whole(read_report(str(GOLDEN / name)))


@pytest.mark.parametrize("name", FRESH)
def test_a_fresh_report_keeps_its_atoms_whole(saved_reports: dict[str, Saved], name: str) -> None:
    assert_atoms_whole(read_report(str(saved_reports[name].json)))


def test_sizes_and_states_stay_on_one_line_and_an_empty_column_takes_no_room() -> None:
    """postmortem's size '16.2 KiB' and a failure table's 'exited 1', in tables too wide for 80 columns."""
    columns = {"rank": "rank", "group": "group", "seq": "last #", "op": "collective", "size": "size",
               "dtype": "dtype", "state": "state", "where": "called at"}  # fmt: skip
    rows = [{"rank": r, "group": "0 (default_pg)", "seq": 10, "op": "all_reduce_coalesced",
             "size": "16.2 KiB", "dtype": "float32", "state": "exited 1", "where": ""}
            for r in range(3)]  # fmt: skip
    report = Report("postmortem", tables=[Table("last", "Each rank's last collective", columns, rows)])
    lines = rendered(report)
    assert sum("16.2 KiB" in line for line in lines) == 3 and sum("exited 1" in line for line in lines) == 3
    assert not any("called" in line for line in lines), "\n".join(lines)  # no dump held a stack


def test_a_table_whose_paths_cannot_fit_becomes_records_with_every_path_whole() -> None:
    path = "/home/someone/projects/a-long-project-name/training/train_main.py:56"
    rows = [{"rank": r, "host": f"node{r}", "pid": 1000 + r, "state": "sleeping", "where": f"step ({path})"}
            for r in range(2)]  # fmt: skip
    columns = {"rank": "rank", "host": "host", "pid": "pid", "state": "state", "where": "where"}
    lines = rendered(Report("watch", tables=[Table("ranks", "Every rank of the job", columns, rows)]))
    assert sum(path in line for line in lines) == 2, "\n".join(lines)
    assert any(re.search(r"rank 1 +host node1 +pid 1001", line) for line in lines), "\n".join(lines)
    assert max(len(line) for line in lines) <= 80


def test_a_note_keeps_its_command_on_one_line() -> None:
    note = "flight-recorder dumps of 3 ranks: ddpcheck postmortem /tmp/ddpcheck-watch-oh95m24j"
    lines = rendered(Report("watch", checks=[Check("hang", Status.ERROR, "x")], notes=[note]))
    assert "ddpcheck postmortem /tmp/ddpcheck-watch-oh95m24j" in lines, "\n".join(lines)


def test_a_detail_keeps_a_size_with_its_unit() -> None:
    detail = ("rank 2 never called all_reduce #10 (1.0 KiB float32, [264]): its last collective is "
              "all_reduce #9 (4 B float32, [1]); ranks 0, 1 wait in all_reduce #10 "
              "(16.2 KiB float32)")  # fmt: skip
    for width in range(40, 81):
        out = io.StringIO()
        console = Console(width=width, file=out, color_system=None)
        terminal.render_report(Report("postmortem", checks=[Check("group 0", Status.ERROR, detail)]), console)
        lines = out.getvalue().splitlines()
        for atom in ("(1.0 KiB", "(4 B", "(16.2 KiB"):
            assert any(atom in line for line in lines), (width, atom, "\n".join(lines))


def test_a_rank_that_only_lost_its_peer_says_so() -> None:
    gloo = "RuntimeError: [/__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:534] Connection"
    stack = (Frame("train_step", "/home/me/train.py", 47),)
    views = [
        RankView(0, "node1", 100, exit=Exit(10.2, "exception", exception=f"{gloo} closed by peer [::1]:80")),
        RankView(1, "node1", 101, exit=Exit(10.0, "exception", exception="ValueError: planted", stack=stack)),
    ]
    rows = judge_crash(views, "", 1).table("ranks").rows
    assert [row["state"] for row in rows] == [
        "RuntimeError: connection closed by peer",
        "ValueError: planted",
    ]


# ------------------------------------------------------------------ real watch and postmortem reports
def _watch(tmp_path: Path, fault: str, name: str) -> tuple[Path, subprocess.CompletedProcess]:
    report = tmp_path / f"{name}.json"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "COLUMNS": "80", "TMPDIR": str(tmp_path),
           "TRAIN_JOB_FAULT": fault, "TRAIN_JOB_STEPS": "6"}  # fmt: skip
    job = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "3",
           "--shutdown-timeout", "5", TRAIN_JOB]  # fmt: skip
    argv = [sys.executable, "-m", "ddpcheck", "watch", "--hang-after", "5", "--json", str(report), "--", *job]
    proc = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=180)
    assert report.exists(), proc.stdout[-2000:] + proc.stderr[-2000:]
    return report, proc


@pytest.mark.integration
def test_real_watch_and_postmortem_reports_keep_their_atoms_whole(tmp_path: Path) -> None:
    hang, proc = _watch(tmp_path, "sleep@2:step2", "hang")
    watch_dir = read_report(str(hang)).log_dir
    assert watch_dir and proc.returncode == 3
    # The command to copy, whole on its line as the terminal printed it (pytest's long tmp path may
    # not fit 80 columns: then the path, whole, on a line of its own).
    command = f"ddpcheck postmortem {watch_dir}"
    said = command if len(command) <= 80 else watch_dir
    assert any(line.endswith(said) for line in proc.stdout.splitlines()), proc.stdout
    crash, _ = _watch(tmp_path, "raise@2:step2", "crash")
    postmortem = tmp_path / "postmortem.json"
    argv = [sys.executable, "-m", "ddpcheck", "postmortem", watch_dir, "--json", str(postmortem)]
    subprocess.run(argv, capture_output=True, text=True, timeout=60, env={**os.environ, "COLUMNS": "80"})
    for path in (hang, crash, postmortem):
        assert_atoms_whole(read_report(str(path)))
    states = [row["state"] for row in read_report(str(crash)).table("ranks").rows]
    assert "RuntimeError: connection closed by peer" in states, states
    for leftover in tmp_path.glob("ddpcheck-watch-*"):
        subprocess.run(["rm", "-rf", str(leftover)], check=True)


def test_a_header_takes_two_lines_at_most_when_there_is_room() -> None:
    """The failure table's 'in stage (s)' read 'in' / 'stage' / '(s)' at 80 columns."""
    lines = rendered(read_report(str(GOLDEN / "crash.json")))
    assert any(re.search(r"\bin stage\s", line) for line in lines), "\n".join(lines)
    assert any(re.search(r"\bheartbeat\s", line) for line in lines), "\n".join(lines)
