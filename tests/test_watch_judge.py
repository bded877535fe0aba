"""`ddpcheck watch`'s judge, pure: synthetic rank stacks and exits, no process started."""

from __future__ import annotations

from ddpcheck.checks.watch.judge import (
    COMMAND,
    Exit,
    RankView,
    judge_crash,
)
from ddpcheck.checks.watch.judge import (
    first_failed as first_failure,
)
from ddpcheck.checks.watch.progress import Progress
from ddpcheck.failure import hangs
from ddpcheck.failure.flight import parse_trace
from ddpcheck.failure.flight_judge import with_flight_recorders
from ddpcheck.failure.launchers import launcher_exit_codes
from ddpcheck.failure.stacks import Frame, parse_dump, parse_faulthandler
from tests.support.fr_dumps import dump, entry

TORCH = "/usr/lib/python3.11/site-packages/torch"
TRAIN = "/home/me/train.py"
ALL_REDUCE = (
    Frame("all_reduce", f"{TORCH}/distributed/distributed_c10d.py", 3252),
    Frame("wrapper", f"{TORCH}/distributed/c10d_logger.py", 83),
    Frame("train_step", TRAIN, 59),
    Frame("main", TRAIN, 79),
)
BACKWARD = (
    Frame("_engine_run_backward", f"{TORCH}/autograd/graph.py", 979),
    Frame("backward", f"{TORCH}/autograd/__init__.py", 395),
    Frame("train_step", TRAIN, 56),
    Frame("main", TRAIN, 79),
)
SLEEPING = (Frame("load_batch", TRAIN, 42), Frame("main", TRAIN, 78))


def judge_hang(views: list[RankView], silent_s: float, hang_after: float):
    """watch's hang verdict as watcher.py asks it: failure/hangs.py's judge, in watch's report."""
    return hangs.judge_hang(views, silent_s, hang_after, command=COMMAND)


def view(rank: int, stack=ALL_REDUCE, state: str = "S", exit: Exit | None = None) -> RankView:
    return RankView(rank, "node1", 100 + rank, state=state, stack=stack, exit=exit)


def test_the_rank_asleep_in_its_data_loader_is_named_and_the_waiters_are_not() -> None:
    report = judge_hang([view(0), view(1), view(2, SLEEPING), view(3)], silent_s=6, hang_after=5)
    (check,) = report.checks
    assert (check.name, check.ranks, check.hosts) == ("hang", [2], ["node1"])
    assert "rank 2 (host node1, pid 102) is in load_batch (/home/me/train.py:42)" in check.detail
    assert "ranks 0, 1, 3 were waiting in all_reduce at train_step (/home/me/train.py:59)" in check.detail
    assert report.verdict.exit_code == 3


def test_a_stopped_rank_is_named_even_with_no_stack() -> None:
    report = judge_hang([view(0), view(1, None, state="T"), view(2)], silent_s=6, hang_after=5)
    (check,) = report.checks
    assert (check.name, check.ranks) == ("hang", [1]) and "is stopped (state T" in check.detail


def test_the_minority_in_another_collective_is_a_mismatch() -> None:
    report = judge_hang([view(0, BACKWARD), view(1, ALL_REDUCE), view(2, BACKWARD)], silent_s=6, hang_after=5)
    (check,) = report.checks
    assert (check.name, check.ranks) == ("collective mismatch", [1])


def test_every_rank_in_the_same_place_blames_nobody() -> None:
    (check,) = judge_hang([view(0), view(1), view(2)], silent_s=6, hang_after=5).checks
    assert check.ranks == [] and "no rank differs" in check.detail


def test_a_single_rank_is_named_where_it_is() -> None:
    (check,) = judge_hang([view(0, SLEEPING)], silent_s=6, hang_after=5).checks
    assert check.ranks == [0] and "is in load_batch (/home/me/train.py:42)" in check.detail


def test_a_tie_blames_nobody() -> None:
    (check,) = judge_hang([view(0, BACKWARD), view(1, ALL_REDUCE)], silent_s=6, hang_after=5).checks
    assert check.ranks == []


def raised(at: float, message: str = "ValueError: planted") -> Exit:
    return Exit(
        at, "exception", exception=message, stack=(Frame("train_step", TRAIN, 47), Frame("main", TRAIN, 79))
    )


def test_the_first_crash_by_time_is_named_not_the_launchers_teardown() -> None:
    views = [
        view(0, exit=Exit(10.2, "terminated", stack=ALL_REDUCE)),
        view(1, exit=raised(10.0)),
        view(2, exit=Exit(10.1, "terminated")),
    ]
    report = judge_crash(views, "", 1)
    (check,) = report.checks
    assert (check.name, check.ranks) == ("crash", [1])
    assert (
        "rank 1 (host node1, pid 101) failed first: ValueError: planted, in train_step (/home/me/train.py:47)"
        in (check.detail)
    )
    assert "ranks 0, 2 ended by the launcher's SIGTERM" in check.detail
    assert report.table("traceback").rows[0] == {"function": "train_step", "file": TRAIN, "line": 47}


def test_a_peer_gone_error_earlier_than_the_kill_it_follows_is_not_blamed() -> None:
    """A rank's 'Connection closed by peer' may be timed before the watcher saw the killed rank gone."""
    closed = raised(10.0, "RuntimeError: [pair.cc:553] Connection closed by peer [127.0.0.1]:4000")
    views = [
        view(0, exit=closed),
        view(1, exit=Exit(10.3, "ended", code=-9)),
        view(2, exit=Exit(10.5, "terminated")),
    ]
    first, _ = first_failure(views)
    assert first is not None and first.rank == 1
    (check,) = judge_crash(views, "", 1).checks
    assert check.ranks == [1] and "killed by SIGKILL" in check.detail


def test_an_abort_receiving_a_differently_sized_collective_is_a_mismatch() -> None:
    aborted = Exit(5.0, "fatal", fatal="Fatal Python error: Aborted", stack=ALL_REDUCE)
    views = [view(0, exit=Exit(5.1, "terminated", stack=ALL_REDUCE)), view(1, exit=aborted), view(2)]
    output = "terminate called ... Received data size doesn't match expected size\n"
    (check,) = judge_crash(views, output, 1).checks
    assert check.name == "collective mismatch" and check.ranks == [1]
    assert "rank 0: all_reduce at train_step (/home/me/train.py:59)" in check.detail


def test_launchers_summaries_give_each_ranks_end() -> None:
    torchrun = "  rank      : 2 (local_rank: 2)\n  exitcode  : -9 (pid: 1234)\n"
    mpirun = "mpirun noticed that process rank 1 with PID 0 on node vm exited on signal 6 (Aborted)."
    srun = "srun: error: vm: task 0: Killed"
    assert launcher_exit_codes(torchrun + mpirun + "\n" + srun) == {2: -9, 1: -6, 0: -9}


def test_progress_is_output_or_a_changed_stack_and_a_first_sample_is_not() -> None:
    progress = Progress(last=0.0)
    progress.sample(0, ALL_REDUCE, now=3.0)
    assert progress.silent_for(6.0) == 6.0  # the first sample compares with nothing
    progress.sample(0, ALL_REDUCE, now=4.0)
    assert progress.silent_for(6.0) == 6.0
    progress.sample(0, BACKWARD, now=5.0)
    assert progress.silent_for(6.0) == 1.0
    progress.progressed(5.5)
    assert progress.silent_for(6.0) == 0.5


def test_py_spy_and_faulthandler_stacks_are_read_innermost_first() -> None:
    dump = '[{"thread_name": "MainThread", "frames": [{"name": "f", "filename": "/a.py", "line": 5}]}]'
    assert parse_dump(dump) == (Frame("f", "/a.py", 5),)
    text = 'Current thread 0x1 (most recent call first):\n  File "/a.py", line 5 in inner\n'
    text += '  File "/a.py", line 6 in <module>\n'
    assert parse_faulthandler(text) == (Frame("inner", "/a.py", 5), Frame("<module>", "/a.py", 6))


AGENT_THREAD = """Fatal Python error: Aborted

Thread 0x00007f08e2c4e6c0 (most recent call first):
  File "/x/ddpcheck/checks/watch/agent.py", line 105 in _wait_for_dump_request
  File "/py/threading.py", line 982 in run
"""


def test_a_fatal_signal_is_placed_in_the_thread_it_struck_not_in_the_watch_agent() -> None:
    """faulthandler lists the newest thread first: under watch, the agent's own. Read as the struck
    thread, every fatal signal of a job's main thread was placed in ddpcheck's agent.py."""
    text = (
        AGENT_THREAD
        + '\nCurrent thread 0x2 (most recent call first):\n  File "/job.py", line 6 in <module>\n'
    )
    assert parse_faulthandler(text) == (Frame("<module>", "/job.py", 6),)


def test_a_fatal_signal_in_a_native_thread_is_placed_where_the_main_thread_was() -> None:
    """A gloo worker of torch's aborting (no Python frame): the main thread, listed last, says where."""
    text = (
        "Fatal Python error: Aborted\n\nCurrent thread 0x1 (most recent call first):\n  <no Python frame>\n\n"
    )
    text += AGENT_THREAD + '\nThread 0x3 (most recent call first):\n  File "/train.py", line 80 in main\n'
    assert parse_faulthandler(text) == (Frame("main", "/train.py", 80),)


# ---------------------------------------------------------------- the flight recorders' evidence
def _traces(last: dict[int, int]) -> dict:
    """Each rank's dump with all_reduces #1..last[rank] enqueued (gloo's layout)."""
    return {r: parse_trace(dump([entry(s) for s in range(1, n + 1)]), rank=r) for r, n in last.items()}


def test_a_hang_every_stack_shares_is_pinned_on_the_rank_whose_collectives_are_behind() -> None:
    report = judge_hang([view(0), view(1), view(2)], silent_s=6, hang_after=5)
    hosts = {0: "node1", 1: "node1", 2: "node2"}
    with_flight_recorders(report, _traces({0: 5, 1: 4, 2: 5}), hosts, world_size=3)
    (check,) = report.checks
    assert (check.ranks, check.hosts) == ([1], ["node1"])
    assert "the flight recorders: rank 1 never called all_reduce #5" in check.detail
    assert "rank 1's last collective: all_reduce #4" in check.detail


def test_a_named_rank_gains_its_last_collective_and_keeps_its_name() -> None:
    report = judge_hang([view(0), view(1), view(2, SLEEPING)], silent_s=6, hang_after=5)
    with_flight_recorders(report, _traces({0: 3, 1: 3, 2: 2}), {}, world_size=3)
    (check,) = report.checks
    assert check.ranks == [2] and "is in load_batch" in check.detail
    assert "rank 2's last collective: all_reduce #2" in check.detail and "ranks 0, 1 at #3" in check.detail


def test_without_dumps_or_when_they_agree_the_hang_stays_as_the_stacks_said() -> None:
    alone = judge_hang([view(0), view(1), view(2)], silent_s=6, hang_after=5)
    before = alone.checks[0].detail
    with_flight_recorders(alone, {}, {}, world_size=3)
    assert alone.checks[0].detail == before and alone.checks[0].ranks == []
    agreeing = judge_hang([view(0), view(1), view(2)], silent_s=6, hang_after=5)
    with_flight_recorders(agreeing, _traces({0: 4, 1: 4, 2: 4}), {}, world_size=3)
    assert agreeing.checks[0].ranks == [] and "never called" not in agreeing.checks[0].detail
