"""Pure: `ddpcheck watch`'s judge pinned word for word at its edges (mutation testing).

Synthetic rank views, no process started. Which rank a hang names (stopped in either of
/proc's letters, outside a collective even when most ranks are, the odd place among ranks
outside any collective, another collective called from the same line, never a rank whose
stack could not be read), which rank a crash names (the first by time; the first of the
followers when every rank only followed), how each end is said, the table of every rank, and
what one watcher sends the others. tests/test_watch_judge.py has the first examples of each.
"""

from __future__ import annotations

import json

from ddpcheck.checks.watch.judge import (
    Exit,
    RankView,
    judge_crash,
    judge_success,
)
from ddpcheck.checks.watch.judge import (
    first_failed as first_failure,
)
from ddpcheck.failure.flight import parse_trace
from ddpcheck.failure.flight_judge import with_flight_recorders
from ddpcheck.failure.hangs import view_from_dict, view_to_dict
from ddpcheck.failure.stacks import Frame, Stack
from ddpcheck.report.model import Check, Status
from tests.support.fr_dumps import dump, entry
from tests.test_watch_judge import ALL_REDUCE, BACKWARD, SLEEPING, TORCH, TRAIN, judge_hang

C10D = f"{TORCH}/distributed/distributed_c10d.py"
CHECKPOINT = (Frame("save_checkpoint", TRAIN, 90), Frame("main", TRAIN, 80))
RAISED_AT = (Frame("train_step", TRAIN, 47), Frame("main", TRAIN, 79))
AT_59 = "train_step (/home/me/train.py:59)"
AT_42 = "load_batch (/home/me/train.py:42)"
AT_47 = "train_step (/home/me/train.py:47)"
HANG_AFTER = " (--hang-after 5 s)"


def via_helper(op: str) -> Stack:
    """A collective called through the job's own helper, one line for every op (train.py:30)."""
    return (
        Frame(op, C10D, 3000),
        Frame("wrapper", f"{TORCH}/distributed/c10d_logger.py", 83),
        Frame("sync", TRAIN, 30),
        Frame("main", TRAIN, 79),
    )


def view(
    rank: int,
    stack: Stack | None = ALL_REDUCE,
    state: str = "S",
    exit: Exit | None = None,
    host: str = "node1",
) -> RankView:
    return RankView(rank, host, 100 + rank, state=state, stack=stack, exit=exit)


def hang(*views: RankView) -> Check:
    (check,) = judge_hang(list(views), silent_s=6.4, hang_after=5).checks
    return check


def raised(at: float, message: str = "ValueError: planted") -> Exit:
    return Exit(at, "exception", exception=message, stack=RAISED_AT)


# ---------------------------------------------------------------- how a rank's end is said
def test_each_way_a_rank_ends_is_said_in_its_own_words() -> None:
    """A code of 0 or more is an exit code, below 0 a signal (named when known); none: no word of it."""
    said = {
        Exit(1, "exception", exception="ValueError: planted"): "ValueError: planted",
        Exit(
            1, "fatal", fatal="Fatal Python error: Segmentation fault"
        ): "Fatal Python error: Segmentation fault",
        Exit(1, "fatal"): "a fatal signal",
        Exit(1, "terminated"): "ended by SIGTERM (the launcher tearing the job down)",
        Exit(1, "exited"): "exited normally",
        Exit(1, "ended", code=-9): "killed by SIGKILL",
        Exit(1, "ended", code=-77): "killed by signal 77",
        Exit(1, "ended", code=0): "exited with code 0, without a Python exception",
        Exit(1, "ended", code=3): "exited with code 3, without a Python exception",
        Exit(1, "ended"): "ended without a Python exception or a fatal-error trace (SIGKILL, or os._exit)",
    }
    assert {exit.describe(): words for exit, words in said.items()} == {w: w for w in said.values()}


# ---------------------------------------------------------------- which rank a hang names
def test_ranks_stopped_in_either_letter_are_named_and_the_waiters_listed() -> None:
    """/proc says T (SIGSTOP) or t (stopped by a tracer): both are stopped, stack or none."""
    check = hang(view(0), view(1, None, state="T"), view(2, state="t"), view(3))
    stopped = "is stopped (state T: SIGSTOP, or a debugger)"
    assert check == Check(
        "hang",
        Status.ERROR,
        f"no rank made progress for 6 s: rank 1 (host node1, pid 101) {stopped}; "
        f"rank 2 (host node1, pid 102) {stopped}; ranks 0, 3 were waiting in all_reduce at {AT_59}"
        + HANG_AFTER,
        ranks=[1, 2],
        hosts=["node1"],
    )


def test_ranks_outside_any_collective_are_named_even_when_they_are_most() -> None:
    """Three ranks in their data loader, one in all_reduce waiting for them: the three are named
    (not the one, as a majority count would), and the one 'was' waiting."""
    check = hang(view(0, SLEEPING), view(1, SLEEPING), view(2, SLEEPING, host="node2"), view(3))
    assert (check.name, check.ranks, check.hosts) == ("hang", [0, 1, 2], ["node1", "node2"])
    assert check.detail == (
        f"no rank made progress for 6 s: rank 0 (host node1, pid 100) is in {AT_42}; "
        f"rank 1 (host node1, pid 101) is in {AT_42}; rank 2 (host node2, pid 102) is in {AT_42}; "
        f"rank 3 was waiting in all_reduce at {AT_59}" + HANG_AFTER
    )


def test_among_ranks_outside_any_collective_the_odd_place_is_named() -> None:
    """No rank waits in a collective: the majority's place is the norm, not every rank named."""
    check = hang(view(0, SLEEPING), view(1, CHECKPOINT), view(2, SLEEPING))
    assert (check.name, check.ranks) == ("hang", [1])
    assert check.detail == (
        "no rank made progress for 6 s: rank 1 (host node1, pid 101) is in save_checkpoint "
        "(/home/me/train.py:90)" + HANG_AFTER
    )


def test_waiters_in_two_collectives_are_listed_with_both_calls() -> None:
    check = hang(view(0, SLEEPING), view(1, ALL_REDUCE), view(2, BACKWARD))
    assert check.ranks == [0]
    assert check.detail.endswith(
        f"; ranks 1, 2 were waiting in all_reduce at {AT_59}, backward at train_step (/home/me/train.py:56)"
        + HANG_AFTER
    )


def test_a_rank_whose_stack_could_not_be_read_is_not_blamed_for_it() -> None:
    """py-spy read no stack of rank 1 (not stopped): nobody differs; its place is said as such."""
    check = hang(view(0), view(1, None), view(2))
    assert (check.name, check.ranks) == ("hang", [])
    assert check.detail == (
        "no rank made progress for 6 s, and no rank differs from the others: every rank is in "
        f"(no Python stack), {AT_59} (a rank outside the job, or a deadlock every rank shares); "
        f"ranks 0, 2 were waiting in all_reduce at {AT_59}" + HANG_AFTER
    )
    none_read = hang(view(0, None), view(1, None))
    assert none_read.ranks == [] and "every rank is in (no Python stack) (a rank outside" in none_read.detail


def test_another_collective_called_from_the_same_line_is_a_mismatch() -> None:
    """One helper line calls every collective: the call, not the line, tells rank 1 apart."""
    check = hang(
        view(0, via_helper("all_reduce")), view(1, via_helper("broadcast")), view(2, via_helper("all_reduce"))
    )
    assert check == Check(
        "collective mismatch",
        Status.ERROR,
        "a collective mismatch (the ranks wait in different collectives): no rank made progress for 6 s: "
        "rank 1 (host node1, pid 101) is in broadcast at sync (/home/me/train.py:30); "
        "ranks 0, 2 were waiting in all_reduce at sync (/home/me/train.py:30)" + HANG_AFTER,
        ranks=[1],
        hosts=["node1"],
    )


# ---------------------------------------------------------------- which rank a crash names
def test_no_rank_seen_to_fail_names_nobody() -> None:
    assert first_failure([view(0), view(1)]) == (None, [])
    report = judge_crash([view(0), view(1)], "", 1)
    assert report.checks == [
        Check(
            "crash",
            Status.ERROR,
            "the job exited with code 1 and no rank was seen to fail "
            "(it failed before any rank started, or its launcher did)",
        )
    ]
    assert [row["rank"] for row in report.table("ranks").rows] == [0, 1]


def test_when_every_rank_only_followed_the_first_by_time_is_named_and_the_rest_follow_it() -> None:
    gone = raised(10.1, "RuntimeError: Connection reset by peer")
    views = [
        view(0, exit=Exit(10.3, "terminated")),
        view(1, exit=gone),
        view(2, exit=Exit(10.2, "terminated")),
    ]
    assert first_failure(views) == (views[1], [views[2], views[0]])
    (check,) = judge_crash(views, "", 1).checks
    assert check.detail == (
        f"rank 1 (host node1, pid 101) failed first: RuntimeError: Connection reset by peer, in {AT_47}; "
        "ranks 0, 2 ended after it (ranks 0, 2 ended by the launcher's SIGTERM)"
    )


def test_only_the_followers_the_launcher_ended_are_said_ended_by_it() -> None:
    views = [
        view(0, exit=raised(10.0), host="node0"),
        view(1, exit=raised(10.1, "RuntimeError: Connection closed by peer")),
        view(2, exit=Exit(10.2, "terminated")),
    ]
    (check,) = judge_crash(views, "", 1).checks
    assert check == Check(
        "crash",
        Status.ERROR,
        f"rank 0 (host node0, pid 100) failed first: ValueError: planted, in {AT_47}; "
        "ranks 1, 2 ended after it (rank 2 ended by the launcher's SIGTERM)",
        ranks=[0],
        hosts=["node0"],
    )


def test_a_rank_killed_without_a_trace_is_placed_where_it_was_last_seen() -> None:
    """No stack of its end: the last sampled stack says where; no traceback table then."""
    report = judge_crash([view(0), view(1, SLEEPING, exit=Exit(10.0, "ended", code=-9))], "", 137)
    (check,) = report.checks
    assert check.detail == f"rank 1 (host node1, pid 101) failed first: killed by SIGKILL, in {AT_42}"
    assert [table.name for table in report.tables] == ["ranks"]
    (unseen,) = judge_crash([view(0, None, exit=Exit(1.0, "ended"))], "", 1).checks
    assert unseen.detail.endswith("in (no Python stack)")


def test_an_exception_is_a_crash_whatever_the_jobs_output_says_of_a_mismatch() -> None:
    """Only an abort (a fatal signal) is read as a mismatch from the job's output, not an exception."""
    output = "Received data size doesn't match expected size\n"
    (check,) = judge_crash([view(0, exit=raised(1.0)), view(1)], output, 1).checks
    assert (check.name, check.ranks) == ("crash", [0])


def test_a_mismatch_says_where_every_rank_was_by_its_end_its_stack_or_its_last_sample() -> None:
    """Rank 0: its end's stack, not the later sample; rank 2: its last sample; rank 3: its stack
    before any sample; rank 4, never seen: left out."""
    views = [
        RankView(0, "node1", 100, stack=BACKWARD, exit=Exit(5.1, "terminated", stack=ALL_REDUCE)),
        RankView(
            1, "node1", 101, exit=Exit(5.0, "fatal", fatal="Fatal Python error: Aborted", stack=ALL_REDUCE)
        ),
        RankView(2, "node1", 102, stack=None, samples=[ALL_REDUCE, BACKWARD, SLEEPING]),
        RankView(3, "node1", 103, stack=CHECKPOINT, samples=[SLEEPING]),
        RankView(4, "node1", 104, stack=None),
    ]
    (check,) = judge_crash(views, "Received data size doesn't match expected size\n", 1).checks
    assert check.name == "collective mismatch" and check.ranks == [1]
    assert check.detail == (
        "a collective mismatch: the ranks called a collective with different sizes; "
        f"rank 1 (host node1, pid 101) aborted receiving it (Fatal Python error: Aborted, in {AT_59}); "
        f"where every rank was: rank 0: all_reduce at {AT_59}; rank 1: all_reduce at {AT_59}; "
        f"rank 2: {AT_42}; rank 3: save_checkpoint (/home/me/train.py:90)"
    )


# ---------------------------------------------------------------- the report: every rank's row
def test_every_ranks_row_in_rank_order_from_its_end_or_its_last_stack() -> None:
    """The row of a rank that ended is read from its end's stack; eight frames at most; the
    named rank marked; the report's world and ranks as seen (ranks in the order given)."""
    deep = tuple(Frame(f"f{i}", TRAIN, i) for i in range(7)) + ALL_REDUCE[:2]  # nine frames
    views = [
        RankView(2, "node1", 102, state="gone", exit=Exit(10.2, "terminated")),
        RankView(0, "node0", 100, stack=ALL_REDUCE, exit=raised(10.0)),
        RankView(1, "node1", 101, state="T", stack=deep),
    ]
    report = judge_crash(views, "", 1)
    assert (report.command, report.world) == ("watch", {"size": 3, "nodes": 2})
    assert report.ranks == [
        {"rank": 2, "local_rank": None, "host": "node1", "pid": 102},
        {"rank": 0, "local_rank": None, "host": "node0", "pid": 100},
        {"rank": 1, "local_rank": None, "host": "node1", "pid": 101},
    ]
    table = report.table("ranks")
    assert table is not None and (table.title, table.columns) == (
        "Every rank of the job",
        {
            "rank": "rank",
            "host": "host",
            "pid": "pid",
            "state": "state",
            "in": "waiting in",
            "where": "where",
        },
    )
    assert table.rows == [
        {"rank": 0, "host": "node0", "pid": 100, "state": "ValueError: planted", "in": "", "where": AT_47,
         "frames": [f.to_dict() for f in RAISED_AT], "named": True},
        {"rank": 1, "host": "node1", "pid": 101, "state": "stopped", "in": "all_reduce",
         "where": "f0 (/home/me/train.py:0)", "frames": [f.to_dict() for f in deep[:8]], "named": False},
        {"rank": 2, "host": "node1", "pid": 102,
         "state": "ended by SIGTERM (the launcher tearing the job down)", "in": "", "where": "", "frames": [],
         "named": False},
    ]  # fmt: skip
    assert report.table("traceback") is not None
    traceback = report.table("traceback")
    assert (traceback.title, traceback.columns, traceback.rows) == (
        "Where rank 0 failed (innermost first)",
        {"function": "function", "file": "file", "line": "line"},
        [
            {"function": "train_step", "file": TRAIN, "line": 47},
            {"function": "main", "file": TRAIN, "line": 79},
        ],
    )


def test_a_ranks_state_in_words_and_its_end_on_one_line_of_at_most_60_characters() -> None:
    states = {
        "T": "stopped",
        "t": "stopped",
        "R": "running",
        "S": "sleeping",
        "D": "in the kernel",
        "gone": "gone",
    }
    views = [view(r, state=state) for r, state in enumerate(states)]
    assert [row["state"] for row in judge_success(views, 1.0).table("ranks").rows] == list(states.values())
    ends = {
        "E" * 60: "E" * 60,
        "E" * 61: "E" * 57 + "...",
        "ValueError: first line\nsecond line": "ValueError: first line",
        "": "",  # an exception that said nothing
    }
    views = [view(r, exit=Exit(1.0, "exception", exception=text)) for r, text in enumerate(ends)]
    assert [row["state"] for row in judge_success(views, 1.0).table("ranks").rows] == list(ends.values())


def test_a_job_that_ran_to_completion_says_how_many_ranks_and_how_long() -> None:
    """One rank at least: a job that ended before any rank was seen is '1 rank' (was '1 ranks')."""
    expected = {3: "3 ranks", 1: "1 rank", 0: "1 rank"}
    for n, ranks in expected.items():
        report = judge_success([view(r) for r in range(n)], 12.34)
        assert report.checks == [
            Check("job", Status.PASS, f"the job ran to completion: {ranks}, exit 0, 12.3 s")
        ]
        assert len(report.tables) == (1 if n else 0)


# ---------------------------------------------------------------- the flight recorders' evidence
def _traces(last: dict[int, int]) -> dict:
    return {r: parse_trace(dump([entry(s) for s in range(1, n + 1)]), rank=r) for r, n in last.items()}


def test_the_flight_recorders_name_the_rank_behind_appended_to_the_hang_as_it_was() -> None:
    report = judge_hang([view(0), view(1), view(2)], silent_s=6, hang_after=5)
    before = report.checks[0].detail
    with_flight_recorders(report, _traces({0: 5, 1: 4, 2: 5}), {}, world_size=3)
    at = "(1.0 KiB float32, [256]) at train.py:10 in step"
    assert report.checks[0].detail == (
        f"{before}; the flight recorders: rank 1 never called all_reduce #5 {at}: its last collective is "
        f"all_reduce #4 {at}; ranks 0, 2 wait in all_reduce #5 {at}; "
        f"rank 1's last collective: all_reduce #4 {at}; ranks 0, 2 at #5 (all_reduce)"
    )


def test_a_lost_dump_is_no_rank_behind_and_a_report_without_an_error_is_left_alone() -> None:
    """Every rank that dumped is at #4 but rank 2 left no dump: nobody is named from that alone."""
    report = judge_hang([view(0), view(1), view(2)], silent_s=6, hang_after=5)
    before = report.checks[0].detail
    with_flight_recorders(report, _traces({0: 4, 1: 4}), {}, world_size=3)
    assert (report.checks[0].ranks, report.checks[0].detail) == ([], before)
    done = judge_success([view(0), view(1)], 1.0)
    assert with_flight_recorders(done, _traces({0: 4, 1: 3}), {}, world_size=2).checks == [
        Check("job", Status.PASS, "the job ran to completion: 2 ranks, exit 0, 1.0 s")
    ]


# ---------------------------------------------------------------- what one watcher tells the others
def test_a_view_goes_to_another_watcher_and_back_unchanged() -> None:
    """Every field, through JSON (what the store carries); an end's missing stack reads as none;
    samples that held no frames are dropped."""
    full = RankView(
        3, "node2", 303, state="S", stack=ALL_REDUCE,
        exit=Exit(9.5, "exception", code=1, exception="ValueError: x", traceback="Traceback ...",
                  fatal="", stack=SLEEPING),
        samples=[BACKWARD, SLEEPING],
    )  # fmt: skip
    sent = view_to_dict(full)
    frames = [f.to_dict() for f in ALL_REDUCE]
    assert sent == {
        "rank": 3, "host": "node2", "pid": 303, "state": "S", "stack": frames,
        "samples": [[f.to_dict() for f in BACKWARD], [f.to_dict() for f in SLEEPING]],
        "exit": {"time": 9.5, "kind": "exception", "code": 1, "exception": "ValueError: x",
                 "traceback": "Traceback ...", "fatal": "", "stack": [f.to_dict() for f in SLEEPING]},
    }  # fmt: skip
    assert view_from_dict(json.loads(json.dumps(sent))) == full
    bare = RankView(0, "node1", 100)
    assert view_to_dict(bare)["stack"] is None and view_to_dict(bare)["exit"] is None
    assert view_from_dict(json.loads(json.dumps(view_to_dict(bare)))) == bare
    odd = view_to_dict(RankView(1, "node1", 101, exit=Exit(1.0, "ended", code=-9)))
    odd["exit"]["stack"] = None
    odd["samples"] = [None, [], [f.to_dict() for f in SLEEPING]]
    back = view_from_dict(odd)
    assert back.exit is not None and back.exit.stack == () and back.samples == [SLEEPING]
