"""Terminal output: colour only on a terminal without NO_COLOR, plain text elsewhere, --quiet, the chart."""

from __future__ import annotations

import io
import json
import os
import re
import select
import signal
import struct
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ddpcheck.checks.sweep.terminal import render_bandwidth_chart
from ddpcheck.launcher.progress import LaunchProgress
from ddpcheck.report import terminal as render
from ddpcheck.report.model import Check, Report, Status, Table

SMALL = ("allreduce", "--nproc", "2", "--sizes", "1K:4K", "--iters", "1")
ESC = "\x1b"
# Variables that force or forbid colour, or fix the width: the tests set what they need.
TERMINAL_VARS = ("NO_COLOR", "FORCE_COLOR", "TTY_COMPATIBLE", "TTY_INTERACTIVE", "CLICOLOR_FORCE", "COLUMNS")


def clean_env(scratch: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in TERMINAL_VARS}
    env.update(TMPDIR=str(scratch), OMP_NUM_THREADS="1", TERM="xterm-256color")
    env.update(extra)
    return env


def run_piped(args: tuple[str, ...], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "ddpcheck", *args], capture_output=True, text=True, env=env, timeout=240
    )


def run_on_terminal(args: tuple[str, ...], env: dict[str, str], timeout: float = 240) -> tuple[int, str]:
    """Run with stdout and stderr on a pseudo-terminal, 200 columns wide; return (code, output)."""
    import fcntl
    import termios

    controller, terminal = os.openpty()
    fcntl.ioctl(terminal, termios.TIOCSWINSZ, struct.pack("HHHH", 50, 200, 0, 0))
    proc = subprocess.Popen(
        [sys.executable, "-m", "ddpcheck", *args],
        stdin=subprocess.DEVNULL,
        stdout=terminal,
        stderr=terminal,
        env=env,
        start_new_session=True,
    )
    os.close(terminal)
    chunks = []
    deadline = time.monotonic() + timeout
    try:
        # Read as it comes: a full pseudo-terminal buffer would block the writer.
        while time.monotonic() < deadline:
            ready, _, _ = select.select([controller], [], [], 1.0)
            if not ready:
                continue
            try:
                chunk = os.read(controller, 65536)
            except OSError:  # EIO: every writer has closed the terminal
                break
            if not chunk:
                break
            chunks.append(chunk)
        else:
            os.killpg(proc.pid, signal.SIGTERM)
            pytest.fail(f"ddpcheck {' '.join(args)} on a terminal ran past {timeout} s")
        code = proc.wait(timeout=30)
    finally:
        os.close(controller)
    return code, b"".join(chunks).decode("utf-8", "replace").replace("\r\n", "\n")


def lines_of(text: str) -> list[str]:
    return [line.rstrip() for line in text.splitlines() if line.strip()]


# ------------------------------------------------------------ real runs
@pytest.mark.integration
def test_piped_output_is_plain_draws_the_chart_after_the_table_and_announces_the_files(
    scratch: Path, tmp_path: Path
) -> None:
    report, junit = tmp_path / "r.json", tmp_path / "r.xml"
    proc = run_piped((*SMALL, "--json", str(report), "--junit", str(junit)), clean_env(scratch))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert ESC not in proc.stdout
    assert ESC not in proc.stderr
    out = lines_of(proc.stdout)
    titles = [next(i for i, line in enumerate(out) if line.startswith(t)) for t in (
        "all_reduce bandwidth", "busbw by message size", "Checks",
    )]  # fmt: skip
    assert titles == sorted(titles), "the chart comes after the bandwidth table, before the checks"
    chart = out[titles[1] + 1 : titles[2]]
    assert [line.split()[0] for line in chart] == ["1K", "2K", "4K"]
    assert all(line.endswith("GB/s") for line in chart)
    assert any("█" in line for line in chart)
    # A path longer than the rest of the line stands whole on a line of its own (report/fold.py).
    tail = "\n".join(out[-5:]).replace(" to\n", " to ")
    assert f"wrote the JSON report to {report}\nwrote the JUnit report to {junit}\n" in tail + "\n"
    verdict = out[-1]
    assert verdict.startswith("PASS  ddpcheck allreduce (2 ranks, gloo, cpu)")


@pytest.mark.integration
def test_quiet_pass_prints_only_the_verdict(scratch: Path) -> None:
    proc = run_piped((*SMALL, "--quiet"), clean_env(scratch))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (line,) = proc.stdout.splitlines()
    # 1 skip: "expected bandwidth", no expectation for CPU ranks (ddpcheck/checks/sweep/expected.py)
    assert line.startswith("PASS  ddpcheck allreduce (2 ranks, gloo, cpu): 5 pass, 1 skip in ")
    assert proc.stderr == ""


@pytest.mark.integration
def test_a_reader_that_leaves_early_costs_the_rest_of_the_report_not_the_verdict(scratch: Path) -> None:
    """`ddpcheck env | head -0`: the exit code is still the verdict's (rich's own exit 1 read as FAIL)."""
    read, write = os.pipe()
    os.close(read)  # the reader is gone before the first line: every write meets a broken pipe
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "ddpcheck", "env"], stdout=write, stderr=subprocess.PIPE,
            env=clean_env(scratch), timeout=120,
        )  # fmt: skip
    finally:
        os.close(write)
    assert proc.returncode == 0 and proc.stderr == b"", proc.stderr


# Three "ranks" that start saying their lines at one moment, each line a rank's failure line's length.
SAYER = """import sys, time
from ddpcheck.errors import say
while time.time() < float(sys.argv[2]):
    pass
for i in range(500):
    say(f"ddpcheck: rank {sys.argv[1]} line {i} " + "x" * 600)
"""


@pytest.mark.integration
def test_the_lines_of_ranks_sharing_one_stderr_never_run_into_each_other() -> None:
    """Under torchrun, srun and mpirun the ranks share their launcher's stderr. Said with print (the
    text and the newline two writes), 30 to 260 of these 1,500 lines ran into another rank's in
    each of 5 tries; under a bursty load rank 1's "failed" line was glued to rank 0's (a test
    looking for it failed)."""
    read, write = os.pipe()
    start_at = str(time.time() + 1.5)  # after every interpreter has started
    procs = [
        subprocess.Popen([sys.executable, "-u", "-c", SAYER, str(rank), start_at], stderr=write)
        for rank in range(3)
    ]
    os.close(write)
    with os.fdopen(read) as said:
        lines = said.read().splitlines()
    assert [proc.wait(timeout=60) for proc in procs] == [0, 0, 0]
    assert len(lines) == 1500
    run_together = [
        line[:80] for line in lines if not re.fullmatch(r"ddpcheck: rank \d line \d+ x{600}", line)
    ]
    assert run_together == []


@pytest.mark.integration
def test_quiet_fail_prints_the_failing_checks_then_the_verdict(scratch: Path, tmp_path: Path) -> None:
    report_path = tmp_path / "report.json"
    args = (*SMALL, "-q", "--inject", "corrupt@1", "--json", str(report_path))
    proc = run_piped(args, clean_env(scratch))
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert ESC not in proc.stdout + proc.stderr
    report = json.loads(report_path.read_text())
    assert report["injected"] == ["corrupt@1"]
    failing = [c["name"] for c in report["checks"] if c["status"] == "FAIL"]
    *failures, injected, verdict = lines_of(proc.stdout)
    assert [line.split(":")[0] for line in failures] == [f"FAIL {name}" for name in failing]
    # A planted fault says so, quiet too.
    assert injected.startswith("injected faults: corrupt@1 (planted with --inject: not a hardware fault)")
    assert all("rank 1" in line for line in failures)
    assert verdict.startswith("FAIL  ddpcheck allreduce (2 ranks, gloo, cpu)")
    assert "classic all_reduce: rank 1" in verdict
    assert "busbw" not in proc.stdout  # no tables, no chart


# On a NO_COLOR terminal, the full output (the quiet one is the pipe's above: the same one line).
@pytest.mark.integration
@pytest.mark.parametrize("quiet", [False])
def test_no_color_on_a_terminal_is_plain_text(scratch: Path, quiet: bool) -> None:
    args = (*SMALL, "--quiet") if quiet else SMALL
    code, output = run_on_terminal(args, clean_env(scratch, NO_COLOR="1"))
    assert code == 0, output
    # Not only no colour: no bold, no cursor movement from the progress display either.
    assert ESC not in output, repr(output[:2000])
    if quiet:
        (line,) = lines_of(output)
        assert line.startswith("PASS  ddpcheck allreduce")
    else:
        assert "busbw by message size" in output
        assert lines_of(output)[-1].startswith("PASS  ddpcheck allreduce")


# ------------------------------------------------------------ in process
class FakeTerminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def sample_report(wrong: int = 0) -> Report:
    rows = [
        {"size": "1K", "busbw_gbps": 0.5, "wrong": 0},
        {"size": "2K", "busbw_gbps": 1.0, "wrong": wrong},
    ]
    table = Table("bandwidth", "all_reduce bandwidth", {"size": "size", "busbw_gbps": "busbw (GB/s)"}, rows)
    status = Status.FAIL if wrong else Status.PASS
    checks = [Check("data integrity", status, "2K: wrong" if wrong else "ok", [1] if wrong else [])]
    return Report("allreduce", checks, [table], world={"size": 2, "backend": "gloo", "device": "cpu"})


@pytest.fixture
def terminal(monkeypatch: pytest.MonkeyPatch) -> FakeTerminal:
    for name in TERMINAL_VARS:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("TERM", "xterm-256color")
    return FakeTerminal()


def console_on(stream: io.StringIO) -> render.Console:
    """make_console() as the CLI calls it, with `stream` as standard output.

    Patched only for the call: pytest puts its own sys.stdout back between fixtures and test.
    """
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(sys, "stdout", stream)
        return render.make_console()


@pytest.mark.parametrize(("no_color", "styled"), [(None, True), ("", True), ("1", False)])
def test_no_color_when_set_and_not_empty(
    terminal: FakeTerminal, monkeypatch: pytest.MonkeyPatch, no_color: str | None, styled: bool
) -> None:
    # no-color.org: NO_COLOR counts when it is present and not an empty string.
    if no_color is not None:
        monkeypatch.setenv("NO_COLOR", no_color)
    render.render_report(sample_report(wrong=3), console_on(terminal))
    assert (ESC in terminal.getvalue()) is styled
    assert "FAIL  ddpcheck allreduce" in re.sub(r"\x1b\[[0-9;]*m", "", terminal.getvalue())


def test_the_progress_display_runs_only_on_a_real_terminal(
    terminal: FakeTerminal, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert LaunchProgress(console_on(terminal), enabled=True, ranks=2).enabled
    assert not LaunchProgress(console_on(terminal), enabled=False, ranks=2).enabled
    monkeypatch.setenv("NO_COLOR", "1")
    assert not LaunchProgress(console_on(terminal), enabled=True, ranks=2).enabled
    monkeypatch.delenv("NO_COLOR")
    monkeypatch.setenv("TERM", "dumb")
    assert not LaunchProgress(console_on(terminal), enabled=True, ranks=2).enabled


def test_forced_colour_on_a_pipe_gets_no_progress_display(monkeypatch: pytest.MonkeyPatch) -> None:
    # FORCE_COLOR (set by some CI systems) makes rich treat a pipe as a terminal; a live
    # display there would fill the log with cursor movements.
    for name in TERMINAL_VARS:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("FORCE_COLOR", "1")
    pipe = io.StringIO()
    console = console_on(pipe)
    assert console.is_terminal
    with LaunchProgress(console, enabled=True, ranks=2) as progress:
        assert not progress.enabled
        progress.update({"stage": "measure", "progress": {"label": "1K", "done": 1, "total": 3}})
    assert pipe.getvalue() == ""


def test_bars_are_proportional_to_busbw() -> None:
    out = io.StringIO()
    console = render.Console(file=out, width=120, color_system=None)
    table = sample_report().tables[0]
    render_bandwidth_chart(table, table.rows, console, width=40)
    bars = {line.split()[0]: line.count("█") for line in lines_of(out.getvalue())[1:]}
    assert bars == {"1K": 20, "2K": 40}


def test_quiet_in_process(terminal: FakeTerminal, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NO_COLOR", "1")
    render.render_report(sample_report(), console_on(terminal), quiet=True)
    render.render_report(sample_report(wrong=3), console_on(terminal), quiet=True)
    assert lines_of(terminal.getvalue()) == [
        "PASS  ddpcheck allreduce (2 ranks, gloo, cpu): 1 pass in 0.0 s",
        "FAIL data integrity: 2K: wrong",
        "FAIL  ddpcheck allreduce (2 ranks, gloo, cpu): 1 fail in 0.0 s - data integrity: rank 1",
    ]


def test_one_rank_is_one_rank(terminal: FakeTerminal, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NO_COLOR", "1")
    report = sample_report()
    report.world["size"] = 1
    render.render_report(report, console_on(terminal), quiet=True)
    assert lines_of(terminal.getvalue()) == ["PASS  ddpcheck allreduce (1 rank, gloo, cpu): 1 pass in 0.0 s"]


def test_a_watch_follower_says_one_line_and_leaves_the_report_to_task_0(terminal: FakeTerminal) -> None:
    # A watch team's task 1 stands in for task 0's report (report_on 0, as a node's for rank 0's host).
    detail = "the job hung; the report is task 0's (this is task 1)"
    report = Report("watch", [Check("watch", Status.ERROR, detail)], world={"report_on": 0})
    render.render_report(report, console_on(terminal))
    assert lines_of(terminal.getvalue()) == [f"ERROR  ddpcheck watch: {detail}"]


def test_details_quoting_brackets_are_not_rich_markup() -> None:
    """Rank errors quote paths like "[/src/gloo/pair.cc:553]"; rich must print them, not parse them."""
    import io

    from rich.console import Console

    from ddpcheck.report.model import Check, Report, Status, Table
    from ddpcheck.report.terminal import render_report

    detail = "rank 0 gave up ([/__w/pytorch/third_party/gloo/pair.cc:553] Connection closed by peer)"
    report = Report(command="allreduce", checks=[Check("hang [x]", Status.ERROR, detail, [1], ["[h]"])])
    report.tables.append(Table("stderr", "t", {}, [{"rank": 1, "host": "[/h]", "stderr_tail": "[/tail]"}]))
    out = io.StringIO()
    render_report(report, Console(file=out, width=300), quiet=False)
    assert "[/__w/pytorch/third_party/gloo/pair.cc:553]" in out.getvalue()
    assert "[/tail]" in out.getvalue()


@pytest.mark.integration
def test_a_terminal_gets_colour_and_the_sweep_progress_driven_by_the_launcher(scratch: Path) -> None:
    """The launcher reads rank 0's status file and draws the sweep's progress; ranks never print."""
    # Long enough (seconds) for several redraws of the display, even on a fast machine.
    args = ("allreduce", "--nproc", "2", "--sizes", "1K:8M", "--iters", "60")
    code, output = run_on_terminal(args, clean_env(scratch))
    assert code == 0, output
    sizes = 14  # 1K, 2K, ... 8M
    assert f"/{sizes}" in output  # the progress bar's "done/total" column
    assert "rank 0: " in output  # its description: what rank 0 is doing
    assert f"{ESC}[" in output
    assert "busbw by message size" in output


# ------------------------------------------------------------ the verdict line last; the progress on stderr
def test_the_progress_counts_the_planned_ranks(terminal: FakeTerminal) -> None:
    with LaunchProgress(console_on(terminal), enabled=True, ranks=4) as progress:
        progress._progress.refresh()
        assert "starting ranks" in terminal.getvalue() and "0/4" in terminal.getvalue()
        progress.update({"stage": "join", "ranks_started": 3})
        progress._progress.refresh()
        assert "rank 0: join" in terminal.getvalue() and "3/4 ranks started" in terminal.getvalue()
        progress.update({"stage": "measure", "progress": {"label": "4K", "done": 2, "total": 3}})
        progress._progress.refresh()
        assert "rank 0: 4K" in terminal.getvalue() and "2/3" in terminal.getvalue()
    assert "None" not in terminal.getvalue()


@pytest.mark.integration
def test_the_progress_is_drawn_on_stderr_when_stdout_is_a_pipe(scratch: Path) -> None:
    """`ddpcheck allreduce | tee log`: the display stays on the terminal, the pipe gets plain text."""
    import fcntl
    import termios

    controller, terminal = os.openpty()
    fcntl.ioctl(terminal, termios.TIOCSWINSZ, struct.pack("HHHH", 50, 200, 0, 0))
    args = ("allreduce", "--nproc", "2", "--sizes", "1K:8M", "--iters", "60")
    proc = subprocess.Popen(
        [sys.executable, "-m", "ddpcheck", *args],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=terminal,
        env=clean_env(scratch),
        start_new_session=True,
    )
    os.close(terminal)
    chunks = []
    try:
        while True:
            ready, _, _ = select.select([controller], [], [], 1.0)
            if not ready:
                if proc.poll() is not None:
                    break
                continue
            try:
                chunk = os.read(controller, 65536)
            except OSError:
                break
            if not chunk:
                break
            chunks.append(chunk)
        stdout = proc.communicate(timeout=240)[0].decode()
    finally:
        os.close(controller)
    shown = b"".join(chunks).decode("utf-8", "replace")
    assert proc.returncode == 0, stdout + shown
    assert "rank 0: " in shown and "/14" in shown  # the sweep's 14 sizes, on the terminal
    assert ESC not in stdout and lines_of(stdout)[-1].startswith("PASS  ddpcheck allreduce")


def test_the_verdict_is_the_last_line_after_the_kept_logs_and_the_files(
    terminal: FakeTerminal, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("NO_COLOR", "1")
    report = sample_report(wrong=3)
    report.log_dir = "/tmp/ddpcheck-x"
    render.render_report(report, console_on(terminal), wrote=["wrote the JSON report to r.json"])
    *_, wrote, kept, verdict = lines_of(terminal.getvalue())
    assert (wrote, kept) == ("wrote the JSON report to r.json", "rank logs kept in /tmp/ddpcheck-x")
    assert verdict.startswith("FAIL  ddpcheck allreduce")


def test_the_counts_come_in_one_order() -> None:
    statuses = [Status.SKIP, Status.WARN, Status.FAIL, Status.ERROR, Status.PASS, Status.PASS]
    report = Report("allreduce", [Check(f"c{i}", s, "") for i, s in enumerate(statuses)])
    assert ": 2 pass, 1 fail, 1 warn, 1 error, 1 skip in " in render.verdict_line(report).plain


def test_all_of_counts_right() -> None:
    from ddpcheck.report.naming import all_of

    assert [all_of(n, "rank") for n in (1, 2, 3)] == ["the one rank", "both ranks", "all 3 ranks"]


@pytest.mark.integration
def test_json_on_stdout_stays_pure(scratch: Path) -> None:
    proc = run_piped((*SMALL, "--json", "-"), clean_env(scratch))
    assert json.loads(proc.stdout)["command"] == "allreduce"
    assert lines_of(proc.stderr)[-1].startswith("PASS  ddpcheck allreduce") and "wrote" not in proc.stderr
