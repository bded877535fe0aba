"""The collective judge's rules, pinned one by one on synthetic data (pure, milliseconds).

What the bandwidth table reports (the slowest rank's time, algbw, busbw, who saw wrong
elements), when a sender, a receiver or a link is named and how the detail says it, and the
verdict at each threshold. tests/test_collectives.py runs the same judge end to end.
"""

from __future__ import annotations

from typing import Any

import pytest

from ddpcheck.checks.sweep.judge import (
    UNLOCALISED,
    Attribution,
    attribute,
    bandwidth_rows,
    bandwidth_table,
    culprit_text,
    describe_attribution,
    judge_bandwidth,
    judge_data,
    peak,
)
from ddpcheck.report.model import Status
from tests.test_collectives import identities, observed_pairs, op_data


def timed(seconds: list[float], wrong: list[int], size_bytes: int = 12_000_000) -> list[dict[str, Any]]:
    """One size measured by len(seconds) ranks: rank r took seconds[r] and saw wrong[r] wrong elements."""
    return [
        {"sizes": [{"size_bytes": size_bytes, "count": size_bytes // 4, "seconds": s, "wrong": w}]}
        for s, w in zip(seconds, wrong, strict=True)
    ]


# ------------------------------------------------------------------ bandwidth rows
def test_a_row_reports_the_slowest_rank_and_nccl_tests_bandwidths() -> None:
    (row,) = bandwidth_rows("all_gather", timed([1e-3, 4e-3, 2e-3], [0, 2, 3]), "float32")
    assert row == {
        "op": "all_gather",
        "size_bytes": 12_000_000,
        "size": "11.4M",
        "count": 3_000_000,
        "dtype": "float32",
        "time_us": 4000.0,  # the slowest rank's
        "algbw_gbps": 3.0,  # 12 MB in 4 ms
        "busbw_gbps": 2.0,  # x (n-1)/n for all_gather
        "wrong": 5,
        "wrong_ranks": [1, 2],
    }


def test_a_row_keeps_two_decimals_of_microseconds_and_three_of_gigabytes() -> None:
    (row,) = bandwidth_rows("sendrecv", timed([1.23456e-6, 1e-7], [0, 0], size_bytes=1000), "float32")
    assert row["time_us"] == 1.23
    assert row["algbw_gbps"] == round(1000 / 1.23456e-6 / 1e9, 3) == 0.81
    assert row["wrong"] == 0 and row["wrong_ranks"] == []


def test_a_time_of_zero_reads_as_no_bandwidth_and_one_rank_moves_no_bus_traffic() -> None:
    (instant,) = bandwidth_rows("all_reduce", timed([0.0, 0.0], [0, 0]), "float32")
    assert (instant["algbw_gbps"], instant["busbw_gbps"]) == (0.0, 0.0)
    # sendrecv's factor is 1 whatever the world: one rank alone still reports no bus traffic.
    (alone,) = bandwidth_rows("sendrecv", timed([4e-3], [0]), "bfloat16")
    assert (alone["algbw_gbps"], alone["busbw_gbps"], alone["dtype"]) == (3.0, 0.0, "bfloat16")


def test_every_size_is_its_own_row_and_the_peak_is_the_highest_busbw() -> None:
    data = [
        {
            "sizes": [
                {"size_bytes": 4000, "count": 1000, "seconds": 1e-3, "wrong": 0},
                {"size_bytes": 8000, "count": 2000, "seconds": 1e-3, "wrong": r},
                {"size_bytes": 16000, "count": 4000, "seconds": 1e-2, "wrong": 0},
            ]
        }
        for r in range(2)
    ]
    rows = bandwidth_rows("all_reduce", data, "float32")
    assert [(r["size_bytes"], r["wrong"], r["wrong_ranks"]) for r in rows] == [
        (4000, 0, []),
        (8000, 1, [1]),
        (16000, 0, []),
    ]
    assert peak(rows)["size_bytes"] == 8000
    table = bandwidth_table("bandwidth", "{group} bandwidth", rows, group_by="op")
    assert (table.name, table.title, table.group_by, table.rows) == (
        "bandwidth",
        "{group} bandwidth",
        "op",
        rows,
    )
    assert table.columns == {
        "size": "size",
        "count": "count",
        "time_us": "time (us)",
        "algbw_gbps": "algbw (GB/s)",
        "busbw_gbps": "busbw (GB/s)",
        "wrong": "#wrong",
    }
    assert bandwidth_table("b", "t", rows).group_by is None


# ------------------------------------------------------------------ attribution
def test_the_ranks_at_fault_are_every_sender_receiver_and_link_end_once_in_order() -> None:
    found = Attribution(senders=[5], receivers=[1], links=[(3, 0), (5, 4)])
    assert found.ranks == [0, 1, 3, 4, 5]
    assert Attribution().ranks == [] and Attribution().everywhere is False


def test_one_rank_alone_is_never_everything_wrong_everywhere() -> None:
    # Its own block wrong is a bad sender, not a collective that fails everywhere.
    found = attribute("all_gather", op_data("all_gather", 1, {(0, 0): 2}))
    assert (found.everywhere, found.senders, found.wrong) == (False, [0], {(0, 0): 4})


def test_wrong_elements_add_up_over_sizes_per_sender_and_receiver() -> None:
    found = attribute("all_to_all", op_data("all_to_all", 4, {(1, 2): 3, (0, 2): 1}))
    assert found.wrong == {(1, 2): 6, (0, 2): 2}  # two sizes each
    assert found.links == [(0, 2), (1, 2)]


def test_a_sender_wrong_on_all_but_one_receiver_is_not_named_a_sender() -> None:
    wrong = {(3, k): 2 for k in (0, 1)}  # rank 2 received rank 3's block right
    found = attribute("all_gather", op_data("all_gather", 4, wrong))
    assert (found.senders, found.receivers, found.links) == ([], [], [(3, 0), (3, 1)])
    assert not found.everywhere


def test_a_receiver_wrong_from_all_but_one_sender_is_not_named_a_receiver() -> None:
    wrong = {(s, 3): 2 for s in (0, 1)}  # what rank 2 sent rank 3 came through right
    found = attribute("all_gather", op_data("all_gather", 4, wrong))
    assert (found.senders, found.receivers, found.links) == ([], [], [(0, 3), (1, 3)])


def test_a_receiver_is_judged_only_by_senders_not_already_named() -> None:
    # Rank 0 sends wrong to everyone; rank 3 also receives wrong from the two others.
    wrong = {(0, k): 1 for k in (1, 2, 3)} | {(1, 3): 1, (2, 3): 1}
    found = attribute("all_gather", op_data("all_gather", 4, wrong))
    assert (found.senders, found.receivers, found.links) == ([0], [3], [])
    # With rank 3 wrong from only one other sender, one sender is no proof: a link.
    found = attribute("all_gather", op_data("all_gather", 4, {(0, k): 1 for k in (1, 2, 3)} | {(1, 3): 1}))
    assert (found.senders, found.receivers, found.links) == ([0], [], [(1, 3)])


def test_everything_wrong_everywhere_needs_every_pair_the_collective_carries() -> None:
    pairs = observed_pairs("all_gather", 3)
    assert attribute("all_gather", op_data("all_gather", 3, dict.fromkeys(pairs, 1))).everywhere
    missing_one = dict.fromkeys(sorted(pairs)[1:], 1)
    assert not attribute("all_gather", op_data("all_gather", 3, missing_one)).everywhere


# ------------------------------------------------------------------ how the fault is said
IDS = identities(6, hosts=2)  # ranks 0-2 on h0, 3-5 on h1


def test_a_sender_wrong_on_every_receiver_is_said_with_how_many_and_how_many_elements() -> None:
    both = Attribution(senders=[4], wrong={(4, 0): 1000, (4, 1): 234})
    assert describe_attribution(both, IDS, 3) == (
        "rank 4 on host h1 sent wrong data: both other ranks that received it saw it wrong "
        "(1,234 elements in all)"
    )
    three = Attribution(senders=[1], wrong={(1, 0): 1, (1, 2): 1, (1, 3): 1, (1, 1): 1})
    assert describe_attribution(three, IDS, 4) == (
        "rank 1 on host h0 sent wrong data: all 3 other ranks that received it saw it wrong "
        "(4 elements in all)"
    )


def test_a_sender_with_its_own_copy_wrong_or_one_receiver_is_said_so() -> None:
    own = Attribution(senders=[2], wrong={(2, 2): 5, (2, 0): 1})
    assert describe_attribution(own, IDS, 2) == (
        "rank 2 on host h0 sent wrong data: its own copy was already wrong (6 elements in all)"
    )
    one = Attribution(senders=[2], wrong={(2, 0): 5})
    assert describe_attribution(one, IDS, 2) == (
        "rank 2 on host h0 sent wrong data: the rank that received it saw it wrong (5 elements in all)"
    )


def test_receivers_and_links_are_said_after_senders_joined_by_semicolons() -> None:
    found = Attribution(senders=[0], receivers=[5], links=[(1, 3), (4, 4)], wrong={(0, 5): 2})
    assert describe_attribution(found, IDS, 6) == (
        "rank 0 on host h0 sent wrong data: the rank that received it saw it wrong (2 elements in all); "
        "rank 5 on host h1 received wrong data from every sender; "
        "only the data on rank 1 on host h0 -> rank 3 on host h1, rank 4 on host h1's own block "
        "(its local copy) was wrong: the link, or those two ends"
    )


def test_at_most_eight_links_are_listed_and_the_rest_counted() -> None:
    links = [(s, k) for s in range(6) for k in range(6) if s != k]  # 30
    text = describe_attribution(Attribution(links=links[:9]), IDS, 6)
    assert text.count(" -> ") == 8 and text.endswith(
        "rank 1 on host h0 -> rank 3 on host h1 and 1 more was wrong: the link, or those two ends"
    )
    eight = describe_attribution(Attribution(links=links[:8]), IDS, 6)
    assert eight.count(" -> ") == 8 and " more" not in eight


def test_two_ranks_say_a_ring_cannot_tell_sender_from_receiver_only_when_nothing_else_is_named() -> None:
    link = Attribution(links=[(1, 0)])
    assert describe_attribution(link, IDS, 2).endswith(
        "; with 2 ranks one receiver cannot tell a bad sender from a bad receiver"
    )
    assert "cannot tell" not in describe_attribution(link, IDS, 3)
    named = Attribution(senders=[0], links=[(1, 0)], wrong={(0, 0): 1})
    assert "cannot tell" not in describe_attribution(named, IDS, 2)
    received = Attribution(receivers=[1], links=[(1, 0)])
    assert "cannot tell" not in describe_attribution(received, IDS, 2)


def test_everything_wrong_is_said_alone() -> None:
    found = Attribution(senders=[0], everywhere=True, wrong={(0, 1): 1})
    assert describe_attribution(found, IDS, 2) == (
        "every block on every rank was wrong: the collective itself fails, not one rank"
    )
    assert describe_attribution(Attribution(), IDS, 2) == ""


def test_a_localised_reduction_names_its_ranks_with_the_right_verb() -> None:
    assert culprit_text([], IDS) == UNLOCALISED
    assert (
        culprit_text([4], IDS)
        == "localised by re-running on subgroups: rank 4 on host h1 makes the sum wrong"
    )
    assert culprit_text([3, 4, 5], IDS) == (
        "localised by re-running on subgroups: every rank of host h1 (ranks 3-5) make the sum wrong"
    )


# ------------------------------------------------------------------ verdicts
def judged(op_name: str, data: list[dict[str, Any]], ids: list[dict[str, Any]]):
    return judge_data(op_name, op_name, bandwidth_rows(op_name, data, "float32"), data, ids)


def test_clean_data_passes_with_what_was_compared() -> None:
    check = judged("all_gather", op_data("all_gather", 3), identities(3))
    counts = [r["count"] for r in bandwidth_rows("all_gather", op_data("all_gather", 3), "float32")]
    assert check.status == Status.PASS and check.ranks == [] and check.links == []
    assert check.detail == f"2 sizes, {sum(counts):,} elements per rank compared exactly, 0 wrong"


def test_a_rooted_collective_says_when_not_every_root_was_checked() -> None:
    ids = identities(20)
    check = judged("broadcast", op_data("broadcast", 20), ids)
    assert check.status == Status.PASS
    assert check.detail.endswith(" 0 wrong (from 15 of 20 roots; a longer sweep turns through more)")
    assert "roots" not in judged("broadcast", op_data("broadcast", 8), identities(8)).detail
    assert "roots" not in judged("all_gather", op_data("all_gather", 20), ids).detail


def test_a_failure_lists_at_most_six_sizes_with_their_wrong_counts() -> None:
    data = [
        {
            "sizes": [
                {
                    "size_bytes": 4096 * (i + 1),
                    "count": 1024,
                    "seconds": 1e-3,
                    "wrong": 1000 * (r + i),
                    "wrong_from": {},
                    "variants": [0],
                }
                for i in range(8)
            ],
        }
        for r in range(2)
    ]
    check = judged("all_reduce", data, identities(2))
    assert check.status == Status.FAIL
    assert check.detail == (
        "wrong elements after all_reduce (4K: 1,000 wrong, 8K: 3,000 wrong, 12K: 5,000 wrong, "
        "16K: 7,000 wrong, 20K: 9,000 wrong, 24K: 11,000 wrong)"
    )
    assert check.ranks == [0, 1] and check.hosts == ["h0"]


def test_an_unlocalised_reduction_names_the_ranks_that_saw_wrong_values() -> None:
    data = op_data("all_reduce", 4, {(0, 1): 2, (0, 3): 2})
    data[0]["unlocalised"] = True
    check = judged("all_reduce", data, identities(4, hosts=2))
    assert check.status == Status.FAIL and check.ranks == [1, 3] and check.hosts == ["h0", "h1"]
    assert check.detail.endswith(f"; {UNLOCALISED}")
    # Neither localised nor said to be unlocalisable: no claim either way.
    del data[0]["unlocalised"]
    assert "localise" not in judged("all_reduce", data, identities(4)).detail


def test_a_localised_reduction_names_its_culprits_not_the_ranks_that_saw_it() -> None:
    data = op_data("reduce", 4, {(0, 1): 2})
    data[0]["culprits"] = [2, 3]
    check = judged("reduce", data, identities(4, hosts=2))
    assert check.ranks == [2, 3] and check.hosts == ["h1"] and check.links == []
    assert check.detail.endswith(
        "; localised by re-running on subgroups: every rank of host h1 (ranks 2, 3) make the sum wrong"
    )


def test_a_mover_names_the_link_its_ends_and_their_hosts() -> None:
    check = judged("all_to_all", op_data("all_to_all", 4, {(1, 2): 5}), identities(4, hosts=2))
    assert check.status == Status.FAIL
    assert check.ranks == [1, 2] and check.hosts == ["h0", "h1"] and check.links == [[1, 2]]
    assert check.detail == (
        "wrong elements after all_to_all (1K: 5 wrong, 2K: 5 wrong); only the data on "
        "rank 1 on host h0 -> rank 2 on host h1 was wrong: the link, or those two ends"
    )


def test_a_mover_with_nobody_to_blame_falls_back_to_the_ranks_that_saw_wrong_values() -> None:
    # Wrong elements counted but none attributed to a sender: name who saw them.
    data = op_data("all_gather", 3)
    data[2]["sizes"][0]["wrong"] = 4
    check = judged("all_gather", data, identities(3))
    assert check.status == Status.FAIL and check.ranks == [2] and check.links == []


@pytest.mark.parametrize(
    ("busbw", "floor", "status", "detail"),
    [
        (2.0, None, Status.PASS, "peak busbw 2.000 GB/s at 11.4M"),
        (2.0, 2.0, Status.PASS, "peak busbw 2.000 GB/s at 11.4M (>= --min-busbw 2)"),
        (2.0, 2.5, Status.FAIL, "peak busbw 2.000 GB/s at 11.4M, below --min-busbw 2.5 GB/s"),
    ],
)
def test_the_bandwidth_floor_is_judged_on_the_peak(
    busbw: float, floor: float | None, status: Status, detail: str
) -> None:
    rows = [
        {"size": "1K", "busbw_gbps": 0.5},
        {"size": "11.4M", "busbw_gbps": busbw},
        {"size": "4K", "busbw_gbps": 1.0},
    ]
    check = judge_bandwidth("all_gather", rows, 2, floor)
    assert (check.name, check.status, check.detail) == ("all_gather", status, detail)


def test_one_rank_has_no_bandwidth_to_judge_and_says_why() -> None:
    check = judge_bandwidth("all_gather", [{"size": "1K", "busbw_gbps": 0.0}], 1, 5.0)
    assert check.status == Status.SKIP
    assert check.detail == "one rank: no traffic, so no bandwidth to measure (run 2 or more ranks)"


# ------------------------------------------------------------------ what the mutants showed unpinned
def test_bandwidths_keep_their_units_exactly() -> None:
    # A petabyte in a second: 1e6 GB/s to the third decimal pins the divisor; one second is 1e6 us.
    (row,) = bandwidth_rows("sendrecv", timed([1.0, 0.5], [0, 0], size_bytes=10**15), "float32")
    assert (row["time_us"], row["algbw_gbps"], row["busbw_gbps"]) == (1_000_000.0, 1_000_000.0, 1_000_000.0)
    (row,) = bandwidth_rows("sendrecv", timed([1e-3, 1e-3], [0, 0], size_bytes=1_234_567), "float32")
    assert row["algbw_gbps"] == 1.235


def test_a_row_without_variants_or_per_sender_counts_reads_as_root_0_with_nothing_wrong() -> None:
    data = op_data("broadcast", 3, {(0, 1): 2, (0, 2): 2})
    for rank in data:
        for row in rank["sizes"]:
            del row["variants"]
    found = attribute("broadcast", data)
    assert (found.senders, found.links) == ([0], [])  # root 0 sent to 1 and 2: both saw it wrong
    for rank in data:
        for row in rank["sizes"]:
            del row["wrong_from"]
    assert attribute("broadcast", data) == Attribution()


def test_two_ranks_wrong_in_every_block_blame_the_collective() -> None:
    wrong = dict.fromkeys(observed_pairs("all_gather", 2), 1)
    assert attribute("all_gather", op_data("all_gather", 2, wrong)).everywhere


def test_every_verdict_carries_its_check_name_and_a_reduction_keeps_its_sizes() -> None:
    assert judge_data("gather", "all_gather", [], op_data("all_gather", 2), identities(2)).name == "gather"
    assert judge_bandwidth("ring", [{"size": "1K", "busbw_gbps": 0.0}], 1, None).name == "ring"
    data = op_data("all_reduce", 2, {(0, 1): 2})
    data[0]["culprits"] = [1]
    check = judge_data(
        "sum", "all_reduce", bandwidth_rows("all_reduce", data, "float32"), data, identities(2)
    )
    assert check.name == "sum" and check.detail == (
        "wrong elements after all_reduce (1K: 2 wrong, 2K: 2 wrong); "
        "localised by re-running on subgroups: rank 1 on host h0 makes the sum wrong"
    )
