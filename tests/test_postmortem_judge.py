"""Pure: postmortem's judge of flight-recorder dumps, pinned word for word at each of its edges.

Built from synthetic dumps (tests/support/fr_dumps.py), no process started: who is behind
(one rank or several, one place or several, none enqueued yet), which side of a mismatch is
named (the majority whatever its ranks' numbers, or every side without one), the world a
dump's members give, each group's label and order, the last-collectives table row by row, and
the line a hang finding gains. tests/test_postmortem.py has the first examples of each.
"""

from __future__ import annotations

from typing import Any

from ddpcheck.failure.collectives import last_collective_line, with_last_collectives
from ddpcheck.failure.flight import RankTrace, parse_trace
from ddpcheck.failure.flight_judge import (
    LAST_COLLECTIVES_COLUMNS,
    judge,
    last_collectives,
    world_size_of,
)
from ddpcheck.report.model import Check, Status
from tests.support.fr_dumps import dump, entry, nccl_dump

SIZE = "(1.0 KiB float32, [256])"  # what describe() says of entry()'s default tensor


def called(seq: int, op: str = "all_reduce") -> str:
    """How a finding names entry(seq)'s collective, with the job's line that called it."""
    return f"{op} #{seq} {SIZE} at train.py:10 in step"


def traces(*dumps: dict[str, Any]) -> dict[int, RankTrace]:
    return {rank: parse_trace(data, rank=rank) for rank, data in enumerate(dumps)}


def healthy(last: int, **kwargs: Any) -> dict[str, Any]:
    return dump([entry(seq, **kwargs) for seq in range(1, last + 1)])


def check(checks: list[Check], name: str) -> Check:
    return next(c for c in checks if c.name == name)


ARRIVED = "group 0 (default_pg): every rank arrived"
AGREED = "group 0 (default_pg): ranks called the same collectives"


# ---------------------------------------------------------------- the world and the lost ranks
def test_no_dumps_make_an_empty_world_and_no_finding() -> None:
    """No dump and no world given: a world of 0, not 1; a world given is kept."""
    assert world_size_of({}) == 0 and world_size_of({}, 3) == 3
    judged = judge({})
    assert (judged.world_size, judged.checks, judged.table) == (0, [], None)


def test_the_default_groups_members_give_a_world_beyond_the_highest_rank_that_dumped() -> None:
    """NCCL's dumps name the default group's four members: the two above the last dump are lost,
    said with how many there were, and only their host is named."""
    found = {r: parse_trace(nccl_dump(r, world=4, last=3), rank=r) for r in (0, 1)}
    judged = judge(found, hosts={0: "node-a", 1: "node-a", 2: "node-b", 3: "node-b"})
    assert judged.world_size == 4
    assert judged.checks[0] == Check(
        "every rank left a dump",
        Status.ERROR,
        "no flight-recorder dump from ranks 2, 3 of 4: lost (ended before it could dump: killed, "
        "crashed, or its launcher ended it when another rank died)",
        ranks=[2, 3],
        hosts=["node-b"],
    )


def test_every_rank_arrived_and_agreed_is_said_with_the_world_the_call_and_the_ids_compared() -> None:
    """Three ranks at #4: the last collective with the line that called it, and the ids held by all."""
    judged = judge(traces(healthy(4), healthy(4), healthy(4)))
    assert judged.checks == [
        Check("every rank left a dump", Status.PASS, "all 3 ranks"),
        Check(ARRIVED, Status.PASS, f"the last collective of ranks 0-2: {called(4)}"),
        Check(AGREED, Status.PASS, "ranks 0-2 agree on #1-#4"),
    ]
    # One collective held by all is one id; a dump without frames (the JSON form) names no line.
    bare = entry(1)
    del bare["frames"]
    judged = judge(traces(dump([bare]), dump([bare])))
    assert check(judged.checks, ARRIVED).detail == f"the last collective of ranks 0, 1: all_reduce #1 {SIZE}"
    assert check(judged.checks, AGREED).detail == "ranks 0, 1 agree on #1"


# ---------------------------------------------------------------- who did not arrive
def test_one_rank_behind_at_the_first_collective_and_two_ranks_waiting_in_the_next() -> None:
    """'its' for one rank behind, 'wait' for two waiting; a rank whose last is #1 is at #1, not none."""
    arrived = check(judge(traces(healthy(2), healthy(1), healthy(2)), hosts={1: "node-b"}).checks, ARRIVED)
    assert arrived == Check(
        ARRIVED,
        Status.ERROR,
        f"rank 1 never called {called(2)}: its last collective is {called(1)}; "
        f"ranks 0, 2 wait in {called(2)}",
        ranks=[1],
        hosts=["node-b"],
    )


def test_two_ranks_behind_and_the_others_at_two_places_the_furthest_first() -> None:
    """'their' for two ranks behind; the waiting ranks by where they wait, the furthest ahead first,
    each 'waits' alone; the ranks behind are not among those waiting."""
    arrived = check(judge(traces(healthy(5), healthy(3), healthy(3), healthy(4))).checks, ARRIVED)
    assert arrived.ranks == [1, 2]
    assert arrived.detail == (
        f"ranks 1, 2 never called {called(4)}: their last collective is {called(3)}; "
        f"rank 0 waits in {called(5)}; rank 3 waits in {called(4)}"
    )


def test_a_member_that_never_called_the_groups_first_collective_is_behind_it() -> None:
    """The pair group's members come from the dump's pg_config (0 and 2): rank 2 holds none of its
    collectives, so it never called #1 (was: 'never called none'); rank 1 is no member."""
    config = {
        "0": {"name": "0", "desc": "default_pg", "ranks": "[0, 1, 2]"},
        "1": {"name": "1", "desc": "pair", "ranks": "[0, 2]"},
    }
    pair = {"pg": ("1", "pair"), "pg_id": 1}
    rank0 = dump([entry(1), entry(1, **pair)], pg_config=config)
    judged = judge(traces(rank0, healthy(1), healthy(1)))
    assert check(judged.checks, "group 1 (pair): every rank arrived") == Check(
        "group 1 (pair): every rank arrived",
        Status.ERROR,
        f"rank 2 never called {called(1)}: its last collective is none (no collective in this group yet); "
        f"rank 0 waits in {called(1)}",
        ranks=[2],
    )


# ---------------------------------------------------------------- who called another collective
def test_the_majority_is_the_larger_side_even_when_the_odd_rank_is_rank_0() -> None:
    """Rank 0 alone with a bigger tensor: it is named (not ranks 1, 2), the majority said first."""
    odd = dump([entry(1, sizes=[[512]])])
    judged = judge(traces(odd, healthy(1), healthy(1)), hosts={0: "node-a", 1: "node-b", 2: "node-b"})
    assert check(judged.checks, AGREED) == Check(
        AGREED,
        Status.FAIL,
        f"collective mismatch at #1 (another size): ranks 1, 2 called all_reduce #1 {SIZE}; "
        "rank 0 called all_reduce #1 (2.0 KiB float32, [512])",
        ranks=[0],
        hosts=["node-a"],
    )


def test_without_a_majority_every_side_is_named_with_its_host() -> None:
    odd = dump([entry(1, op="broadcast")])
    judged = judge(traces(healthy(1), odd), hosts={0: "node-a", 1: "node-b"})
    assert check(judged.checks, AGREED) == Check(
        AGREED,
        Status.FAIL,
        f"collective mismatch at #1 (another operation): rank 0 called all_reduce #1 {SIZE}; "
        f"rank 1 called broadcast #1 {SIZE} (no majority: any of them may be the one that is wrong)",
        ranks=[0, 1],
        hosts=["node-a", "node-b"],
    )


def test_ranks_holding_no_collective_in_common_are_not_compared() -> None:
    """Rank 0's ring buffer moved on to #5-#6 while rank 1 stood at #2: nothing to compare."""
    judged = judge(traces(dump([entry(5), entry(6)]), healthy(2)))
    assert check(judged.checks, AGREED) == Check(
        AGREED, Status.PASS, "no collective held by all of ranks 0, 1 to compare"
    )


# ---------------------------------------------------------------- groups: their labels and order
def test_groups_are_judged_by_number_then_by_name_each_labelled_by_a_description_it_has() -> None:
    """Groups 0, 2, 10 and 'dp' in that order (not as text: 0, 10, 2); group 2's description from
    rank 1's entries where rank 0's have none; 'undefined' and none at all are no description.
    Each rank's table rows follow the same order."""

    def groups(desc_of_2: str) -> dict[str, Any]:
        return dump([
            entry(1),
            entry(1, pg=("2", desc_of_2), pg_id=2),
            entry(1, pg=("10", "undefined"), pg_id=10),
            entry(1, pg=("dp", ""), pg_id=3),
        ])  # fmt: skip

    judged = judge(traces(groups(""), groups("tp")))
    labels = ["group 0 (default_pg)", "group 2 (tp)", "group 10", "group dp"]
    assert [c.name for c in judged.checks] == ["every rank left a dump"] + [
        f"{label}: {what}"
        for label in labels
        for what in ("every rank arrived", "ranks called the same collectives")
    ]
    assert judged.table is not None
    assert [(row["rank"], row["group"]) for row in judged.table.rows] == [
        (rank, group) for rank in (0, 1) for group in ("0", "2", "10", "dp")
    ]


# ---------------------------------------------------------------- the last-collectives table
def test_each_ranks_last_collective_row_by_row() -> None:
    """A row with its bytes, shape, each dtype once, state and line; a lost rank's row; a dtype of
    no known size ('?'); no frames (no line); a last collective no longer held (its number only)."""
    two_dtypes = entry(2, sizes=[[2], [3], [1]])
    two_dtypes["input_dtypes"] = ["Float", "Long", "Float"]
    odd = entry(1, pg=("1", "x"), pg_id=1, dtype="Weird", state="completed")
    del odd["frames"]
    rank2 = dump(
        [entry(2), odd],
        pg_status={"0": {"last_enqueued_collective": 3}, "1": {"last_enqueued_collective": 1}},
    )
    found = {0: parse_trace(dump([entry(1), two_dtypes]), rank=0), 2: parse_trace(rank2, rank=2)}
    table = last_collectives(found, lost=[1])
    assert (table.name, table.title) == ("last_collectives", "Each rank's last collective, by process group")
    assert table.columns == LAST_COLLECTIVES_COLUMNS and table.columns is not LAST_COLLECTIVES_COLUMNS
    assert table.rows == [
        {"rank": 0, "group": "0", "seq_id": 2, "op": "all_reduce", "size": "36 B", "bytes": 36,
         "shape": [[2], [3], [1]], "dtype": "float32/int64", "state": "scheduled",
         "where": "train.py:10 in step"},
        {"rank": 1, "group": "", "seq_id": None, "op": "(no dump)"},
        {"rank": 2, "group": "0", "seq_id": 3},
        {"rank": 2, "group": "1", "seq_id": 1, "op": "all_reduce", "size": "?", "bytes": None,
         "shape": [[256]], "dtype": "weird", "state": "completed", "where": ""},
    ]  # fmt: skip


# ---------------------------------------------------------------- what a hang finding gains
def test_a_ranks_last_collective_line_names_only_the_ranks_elsewhere_in_the_group() -> None:
    """Rank 1 at #4 like rank 0 is not said; a rank without the group is not 'at #-1'; one that
    enqueued nothing is where a rank with no collective is; a last collective no longer held is
    named by its number alone."""
    assert last_collective_line(traces(healthy(4), healthy(4), healthy(3)), 0) == (
        f"last collective: {called(4)}; rank 2 at #3 (all_reduce)"
    )
    assert last_collective_line(traces(healthy(3), dump([])), 0) == f"last collective: {called(3)}"
    none_yet = dump([], pg_status={"0": {"last_enqueued_collective": -1}})
    assert last_collective_line(traces(dump([]), none_yet, healthy(3)), 0) == (
        "last collective: none (no collective in this group yet); rank 2 at #3 (all_reduce)"
    )
    moved_on = dump([entry(s) for s in (1, 2)], pg_status={"0": {"last_enqueued_collective": 7}})
    assert (
        last_collective_line(traces(healthy(2), moved_on), 0) == f"last collective: {called(2)}; rank 1 at #7"
    )


def test_a_hang_finding_gains_each_named_ranks_line_and_nothing_when_none_is_named() -> None:
    flight = traces(healthy(4), healthy(3), healthy(3))
    two = Check("hang", Status.ERROR, "ranks 1, 2 are behind", ranks=[1, 2])
    line = f"last collective: {called(3)}; rank 0 at #4 (all_reduce)"
    assert with_last_collectives(two, flight).detail == (
        f"ranks 1, 2 are behind; rank 1's {line}; rank 2's {line}"
    )
    nobody = Check("hang", Status.ERROR, "every rank is in the same place")
    assert with_last_collectives(nobody, flight).detail == "every rank is in the same place"
