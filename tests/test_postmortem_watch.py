"""`ddpcheck postmortem` on what `ddpcheck watch` keeps, pure: hand-made watch directories.

The records are the agent's (`DIR/processes/PID.{start,exception,fatal,term,exit}`), read with
the one reader watch uses (failure/exits.py). A job that did not end by itself is never passed:
a rank ended by SIGTERM, a fatal signal, or without any trace is named with where it was. A
folder holding no job's traces is refused (exit 2); a dump that recorded nothing is a skip.
The real runs (watch over torchrun, then postmortem) are in test_postmortem_watch_runs.py.
"""

from __future__ import annotations

import ast
import json
import os
import socket
import time
from pathlib import Path

import pytest

from ddpcheck.checks.postmortem.check import NothingToRead, examine
from ddpcheck.checks.watch import agent
from ddpcheck.checks.watch.judge import Exit, RankView, judge_crash
from ddpcheck.failure import exits
from ddpcheck.failure.exits import first_sentence
from ddpcheck.failure.process_records import process_file
from ddpcheck.failure.rank_env import RANK_VARIABLES
from ddpcheck.report.formats.json import write as write_json
from ddpcheck.report.model import Check, Report, Status
from tests.support.fr_dumps import dump, entry, write_pickle

TORCH = "/usr/lib/python3.11/site-packages/torch"
TRAIN = "/home/me/train.py"
LOAD_BATCH = [("load_batch", TRAIN, 42), ("main", TRAIN, 78)]
BACKWARD = [
    ("_engine_run_backward", f"{TORCH}/autograd/graph.py", 979),
    ("backward", f"{TORCH}/autograd/__init__.py", 395),
    ("train_step", TRAIN, 56),
    ("main", TRAIN, 79),
]
ENDS = "the ranks ended by themselves"
# torch's own out-of-memory message (CUDACachingAllocator), as torch 2.11 words it on an H200.
OOM = (
    "CUDA out of memory. Tried to allocate 20.00 GiB. GPU 0 has a total capacity of 139.80 GiB of which "
    "118.52 GiB is free. Including non-PyTorch memory, this process has 21.27 GiB memory in use. Of the "
    "allocated memory 20.00 GiB is allocated by PyTorch, and 1.25 MiB is reserved by PyTorch but "
    "unallocated. If reserved but unallocated memory is large try setting "
    "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See documentation for "
    "Memory Management  (https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)"
)
# torchrun's failure summary, as its ChildFailedError says it (the launcher's exception record).
SUMMARY = """
============================================================
train.py FAILED
------------------------------------------------------------
Failures:
  <NO_OTHER_FAILURES>
------------------------------------------------------------
Root Cause (first observed failure):
[0]:
  time      : 2026-12-04_18:16:36
  host      : node0
  rank      : 1 (local_rank: 1)
  exitcode  : -9 (pid: 202)
  error_file: <N/A>
  traceback : Signal 9 (SIGKILL) received by PID 202
============================================================"""


def faulthandler_text(frames: list[tuple[str, str, int]]) -> str:
    lines = ["Current thread 0x00007f3edb602b80 (most recent call first):"]
    lines += [f'  File "{file}", line {line} in {function}' for function, file, line in frames]
    return "\n".join(lines) + "\n"


def record(
    watch_dir: Path,
    pid: int,
    rank: int | None,
    *,
    start: bool = True,
    ppid: int = 100,
    argv: tuple[str, ...] = ("python", "-u", TRAIN),
    host: str = "node0",
    began: float = 1000.0,
    exception: tuple[str, str, list[tuple[str, str, int]]] | None = None,
    fatal: str = "",
    term: str = "",
    exited: bool = False,
) -> None:
    """One process's records as the agent writes them: `fatal` and `term` exist from the start, empty."""
    folder = watch_dir / "processes"
    folder.mkdir(parents=True, exist_ok=True)
    if start:
        data = {"rank": rank, "local_rank": rank, "host": host, "pid": pid, "ppid": ppid,
                "argv": list(argv), "time": began}  # fmt: skip
        (folder / f"{pid}.start").write_text(json.dumps(data))
    (folder / f"{pid}.fatal").write_text(fatal)
    (folder / f"{pid}.term").write_text(term)
    if exception is not None:
        kind, message, frames = exception
        data = {"type": kind, "message": message, "traceback": f"Traceback ...\n{kind}: {message}\n",
                "frames": [{"function": f, "file": p, "line": n} for f, p, n in reversed(frames)],
                "time": began + 10}  # fmt: skip
        (folder / f"{pid}.exception").write_text(json.dumps(data))
    if exited:
        (folder / f"{pid}.exit").write_text(json.dumps({"time": began + 11}))


def launcher(watch_dir: Path, pid: int = 100, message: str = "Process 100 got signal: 15") -> None:
    kind = "ChildFailedError" if "FAILED" in message else "SignalException"
    frames = [
        ("_run_code", "<frozen runpy>", 88),
        ("_invoke_run", f"{TORCH}/distributed/elastic/agent.py", 9),
    ]
    record(watch_dir, pid, None, ppid=1, argv=("python", "-m", "torch.distributed.run", TRAIN),
           exception=(kind, message, frames), exited=True)  # fmt: skip


def ended(report: Report) -> Check:
    return next(c for c in report.checks if c.name == ENDS)


# ---------------------------------------------------------------- one reader, both sides
def test_watch_and_postmortem_read_the_records_with_one_reader_named_as_the_agent_writes_them() -> None:
    # postmortem reads watch's directory without importing watch: the reader is the failure side's.
    folder = Path(exits.__file__).parents[1] / "checks" / "postmortem"
    for source in folder.glob("*.py"):
        tree = ast.parse(source.read_text())
        imported = [n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)]
        imported += [a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names]
        assert not [m for m in imported if m.startswith("ddpcheck.checks.watch")], source.name


# ---------------------------------------------------------------- a hang watch ended
def test_a_hang_watch_ended_names_the_rank_outside_the_collective_with_where_it_was(tmp_path: Path) -> None:
    launcher(tmp_path)
    record(tmp_path, 201, 0, term=faulthandler_text(BACKWARD))
    record(tmp_path, 202, 1, term=faulthandler_text(LOAD_BATCH))
    report = examine(tmp_path)
    check = ended(report)
    assert (check.status, check.ranks, check.hosts) == (Status.ERROR, [1], ["node0"])
    assert check.detail.startswith(
        f"rank 1 (host node0, pid 202) ended by SIGTERM while in load_batch ({TRAIN}:42)"
    )
    assert f"rank 0 was waiting in backward at train_step ({TRAIN}:56), ended by SIGTERM too" in check.detail
    assert "did not end by itself" in check.detail
    assert report.verdict.exit_code == 3
    rows = {r["pid"]: r for r in report.table("processes").rows}
    assert set(rows) == {201, 202}  # the launcher is not a rank: its SIGTERM is not judged
    assert (rows[202]["ended"], rows[202]["where"], rows[202]["named"]) == (
        "ended by SIGTERM",
        f"load_batch ({TRAIN}:42)",
        True,
    )


def test_ranks_stuck_in_the_same_place_are_all_named(tmp_path: Path) -> None:
    """The CPU case of issue 38: both ranks asleep in their data loading, every dump alike."""
    launcher(tmp_path)
    for pid, rank in ((201, 0), (202, 1)):
        record(tmp_path, pid, rank, term=faulthandler_text(LOAD_BATCH))
    write_pickle(tmp_path / "nccl_trace_rank_0", dump([entry(1), entry(2)]))
    write_pickle(tmp_path / "nccl_trace_rank_1", dump([entry(1), entry(2)]))
    report = examine(tmp_path)
    check = ended(report)
    assert (check.status, check.ranks) == (Status.ERROR, [0, 1])
    assert check.detail.startswith(
        f"ranks 0, 1 (host node0, pids 201, 202) ended by SIGTERM while in load_batch ({TRAIN}:42)"
    )
    # The dumps alone call it healthy (every rank at #2): the records are what say otherwise.
    arrived = next(c for c in report.checks if c.name.endswith("every rank arrived"))
    assert arrived.status is Status.PASS
    assert report.verdict.exit_code == 3


# ---------------------------------------------------------------- a crash
def test_a_crash_names_the_rank_that_raised_and_excuses_the_peer_it_took_down(tmp_path: Path) -> None:
    """What watch keeps after a crash: records only, no dump, no log (refused before: 'nothing to read')."""
    launcher(tmp_path, message=SUMMARY.replace("-9 (pid: 202)", "1 (pid: 202)"))
    record(tmp_path, 201, 0, exited=True,
           exception=("RuntimeError", "[../gloo/transport/tcp/pair.cc:553] Connection closed by peer "
                      "[127.0.0.1]:16305. This is typically caused by a remote worker crashing. Check the "
                      "logs of the remote worker before reporting an error. GLHF!", BACKWARD))  # fmt: skip
    record(tmp_path, 202, 1, exited=True,
           exception=("ValueError", "planted failure at step 2", [("train_step", TRAIN, 52)]))  # fmt: skip
    report = examine(tmp_path)
    check = ended(report)
    assert (check.status, check.ranks) == (Status.ERROR, [1])
    assert check.detail.startswith(
        f"rank 1 (host node0, pid 202): ValueError: planted failure at step 2, in train_step ({TRAIN}:52)"
    )
    assert (
        "rank 0 (host node0, pid 201): RuntimeError: Connection closed by peer [127.0.0.1]:16305, in "
        f"train_step ({TRAIN}:56) (a peer had gone first)"
    ) in check.detail
    skipped = next(c for c in report.checks if c.name == "flight-recorder dumps")
    assert skipped.status is Status.SKIP
    assert report.verdict.exit_code == 3


def test_an_out_of_memory_crash_is_said_by_its_first_sentence_and_kept_whole(tmp_path: Path) -> None:
    record(tmp_path, 300, 0, exited=True, exception=("OutOfMemoryError", OOM, [("train_step", TRAIN, 12)]))
    report = examine(tmp_path)
    check = ended(report)
    assert check.ranks == [0] and "OutOfMemoryError: CUDA out of memory, in train_step" in check.detail
    assert "Tried to allocate" not in check.detail
    (row,) = report.table("processes").rows
    assert row["exception"] == f"OutOfMemoryError: {OOM}"  # the whole message stays in the JSON


def test_a_rank_with_no_record_of_its_end_ended_without_a_trace(tmp_path: Path) -> None:
    record(tmp_path, 201, 0, exited=True)
    record(tmp_path, 202, 1)  # started, then nothing: no exception, no faulthandler trace, no exit mark
    check = ended(examine(tmp_path))
    assert (check.status, check.ranks) == (Status.ERROR, [1])
    assert check.detail == (
        "rank 1 (host node0, pid 202): ended without a trace (killed, e.g. SIGKILL, or the OOM killer)"
    )


def test_the_launchers_summary_gives_a_traceless_end_its_signal(tmp_path: Path) -> None:
    launcher(tmp_path, message=SUMMARY)
    record(tmp_path, 201, 0, term=faulthandler_text(BACKWARD))
    record(tmp_path, 202, 1)
    check = ended(examine(tmp_path))
    assert check.ranks == [1] and check.detail.startswith("rank 1 (host node0, pid 202): killed by SIGKILL")
    assert "rank 0 ended by SIGTERM after it (the job torn down)" in check.detail


def test_a_fatal_signal_is_named_with_where_it_struck(tmp_path: Path) -> None:
    record(tmp_path, 201, 0, exited=True)
    fatal = "Fatal Python error: Aborted\n\n" + faulthandler_text([("all_reduce", TRAIN, 60)])
    record(tmp_path, 202, 1, fatal=fatal)
    check = ended(examine(tmp_path))
    assert check.ranks == [1]
    assert (
        check.detail
        == f"rank 1 (host node0, pid 202): Fatal Python error: Aborted, in all_reduce ({TRAIN}:60)"
    )


def test_every_rank_that_exited_normally_passes_and_a_data_loader_worker_is_not_a_rank(
    tmp_path: Path,
) -> None:
    record(tmp_path, 201, 0, exited=True)
    record(tmp_path, 202, 1, exited=True)
    record(tmp_path, 203, 1, ppid=202, term=faulthandler_text(LOAD_BATCH))  # rank 1's worker, ended by it
    report = examine(tmp_path)
    check = ended(report)
    assert (check.status, check.detail) == (Status.PASS, "every rank (2) exited normally")
    assert [r["pid"] for r in report.table("processes").rows] == [201, 202]
    assert report.verdict.exit_code == 0


def test_a_rank_still_running_is_said_so_not_taken_for_killed(tmp_path: Path) -> None:
    """watch --keep leaves a hung job running: its records have no end yet."""
    record(tmp_path, 201, 0, exited=True)
    record(tmp_path, os.getpid(), 1, host=socket.gethostname(), began=time.time())
    check = ended(examine(tmp_path))
    assert (check.status, check.ranks) == (Status.WARN, [])
    assert check.detail == "rank 1 still running"


def test_a_directory_kept_before_start_records_falls_back_to_what_is_there(tmp_path: Path) -> None:
    """No .start: the launcher's summary maps a pid to its rank; the others are processes of the job."""
    launcher(tmp_path, message=SUMMARY)
    (tmp_path / "processes" / "100.start").unlink()
    record(tmp_path, 201, None, start=False, term=faulthandler_text(BACKWARD))
    record(tmp_path, 202, None, start=False)
    check = ended(examine(tmp_path))
    assert check.ranks == [1] and check.detail.startswith("rank 1 (pid 202): killed by SIGKILL")
    only = tmp_path / "alone"
    record(only, 301, None, start=False, exception=("OutOfMemoryError", OOM, [("step", TRAIN, 3)]))
    check = ended(examine(only))  # one process, no launcher: a plain `python train.py`, rank 0
    assert check.ranks == [0] and "rank 0 (pid 301): OutOfMemoryError: CUDA out of memory, in" in check.detail
    two = tmp_path / "two"
    record(two, 401, None, start=False, term=faulthandler_text(LOAD_BATCH))
    record(two, 402, None, start=False, term=faulthandler_text(LOAD_BATCH))
    check = ended(examine(two))
    assert check.status is Status.ERROR and check.ranks == []
    assert check.detail.startswith(
        f"a process of the job (pid 401) ended by SIGTERM while in load_batch ({TRAIN}:42)"
    )


# ---------------------------------------------------------------- no job's traces, nothing recorded
def reports_dir(tmp_path: Path) -> Path:
    """What a user's folder of saved reports holds: two ddpcheck JSON reports and two text files."""
    folder = tmp_path / "reports"
    folder.mkdir()
    for name in ("allreduce", "env"):
        write_json(
            Report(command=name, checks=[Check("x", Status.PASS, "fine")]), str(folder / f"{name}.json")
        )
    (folder / "notes.txt").write_text("ran allreduce on node07 at 10:00; all fine\nbusbw 40 GB/s\n")
    (folder / "allreduce.txt").write_text("PASS  ddpcheck allreduce (2 ranks, gloo, cpu): 3 pass in 4.1 s\n")
    return folder


def test_a_folder_with_no_jobs_traces_is_refused_not_passed(tmp_path: Path) -> None:
    with pytest.raises(NothingToRead, match=r"no job's traces here: .*the 2 text files read hold no rank"):
        examine(reports_dir(tmp_path))


@pytest.mark.parametrize(
    "text",
    [
        "[rank0]: step 1 loss 0.5\n",  # torch's rank prefix
        'Traceback (most recent call last):\n  File "t.py", line 1\nValueError: x\n',
        "node07:4242:4242 NCCL INFO Bootstrap : Using eth0\n",  # an NCCL debug file
    ],
)
def test_a_log_a_job_wrote_is_a_jobs_trace(tmp_path: Path, text: str) -> None:
    folder = reports_dir(tmp_path)
    (folder / "job.log").write_text(text)
    report = examine(folder)
    assert report.checks and "read 0 flight-recorder dump(s), 3 log" in report.notes[0]


def test_a_dump_that_recorded_nothing_is_a_skip_never_an_all_clear(tmp_path: Path) -> None:
    write_pickle(tmp_path / "nccl_trace_rank_0", dump([]))
    report = examine(tmp_path)
    (check,) = report.checks
    assert check.status is Status.SKIP and check.detail.startswith("nothing recorded: the 1 dump (ranks 0)")
    assert not [c for c in report.checks if c.status is Status.PASS]
    assert report.tables == []


# ---------------------------------------------------------------- watch's crash detail, cut
def test_a_long_exception_message_is_said_by_its_first_sentence() -> None:
    assert first_sentence(f"OutOfMemoryError: {OOM}") == "OutOfMemoryError: CUDA out of memory"
    assert first_sentence("ValueError: planted failure at step 2") == "ValueError: planted failure at step 2"
    assert first_sentence("\n=====\ntrain.py FAILED\n") == "====="
    long = "RuntimeError: " + "x" * 300
    assert first_sentence(long) == long[:197] + "..."
    # a dotted name or a number is no sentence's end
    text = "RuntimeError: torch.cuda failed on device 0.5 of " + "y" * 120 + ". Then more."
    assert first_sentence(text) == text[: -len(". Then more.")]


def test_watchs_crash_detail_cuts_torchs_out_of_memory_message_and_the_json_keeps_it() -> None:
    failure = Exit(5.0, "exception", exception=f"OutOfMemoryError: {OOM}", traceback="Traceback ...",
                   stack=(exits.Frame("train_step", TRAIN, 12),))  # fmt: skip
    report = judge_crash([RankView(0, "gpu01", 77, state="gone", exit=failure)], "", 1)
    (check,) = report.checks
    assert check.detail == (
        f"rank 0 (host gpu01, pid 77) failed first: OutOfMemoryError: CUDA out of memory, in train_step "
        f"({TRAIN}:12)"
    )
    (row,) = report.table("ranks").rows
    assert row["state"] == "OutOfMemoryError: CUDA out of memory"
    assert row["exception"] == f"OutOfMemoryError: {OOM}" and row["traceback"] == "Traceback ..."


def test_the_agents_start_record_is_read_back_as_who_the_process_is(tmp_path: Path, monkeypatch) -> None:
    (tmp_path / "processes").mkdir()
    monkeypatch.setenv("RANK", "3")
    monkeypatch.setenv("LOCAL_RANK", "1")
    agent._record_start(process_file(tmp_path, 4242, "start"))
    start = exits.start_of(tmp_path, 4242)
    assert start is not None
    assert (start.rank, start.host, start.ppid) == (3, socket.gethostname(), os.getppid())
    assert start.argv and abs(start.time - time.time()) < 60
    for name in (*RANK_VARIABLES, "LOCAL_RANK"):
        monkeypatch.delenv(name, raising=False)
    agent._record_start(process_file(tmp_path, 4243, "start"))  # torchrun itself: no rank
    launcher = exits.start_of(tmp_path, 4243)
    assert launcher is not None and launcher.rank is None
    assert exits.start_of(tmp_path, 4244) is None  # a directory kept before start records
