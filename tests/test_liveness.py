"""Pure: a rank stopped beating when its peers beat on without it, whatever the clock says.

failure/liveness.py's rule at its boundary (a peer's STOPPED_AFTER_BEATS - 1 beats vs
STOPPED_AFTER_BEATS), a watcher that was itself held up (every counter moved at once: nobody
blamed), a stage change as a sign of life, and postmortem.judge_inline reading the rule from
inline's annotated statuses: old heartbeats on a busy machine name nobody; beats missed do.
"""

from __future__ import annotations

from ddpcheck.failure.explain import judge_inline
from ddpcheck.failure.liveness import (
    FROZEN_AFTER_S,
    STOPPED_AFTER_BEATS,
    BeatTracker,
    Stall,
    beat_stopped,
    counters,
    is_culprit,
    missed_beats,
)
from ddpcheck.failure.statuses import RankStatus


def watched(*observations: dict[int, tuple[int, int]]) -> dict[int, int]:
    tracker = BeatTracker()
    for observation in observations:
        tracker.see(observation)
    return tracker.missed()


def beating(ranks: range, beats: int, still: dict[int, int] | None = None) -> dict[int, tuple[int, int]]:
    """Every rank at `beats` (stage seq 5), except those in `still`, held at their own count."""
    return {r: ((still or {}).get(r, beats), 5) for r in ranks}


def test_a_rank_is_stopped_once_a_peer_beat_the_threshold_without_it() -> None:
    start = beating(range(3), 10)
    just_below = beating(range(3), 10 + STOPPED_AFTER_BEATS - 1, still={2: 10})
    at = beating(range(3), 10 + STOPPED_AFTER_BEATS, still={2: 10})
    assert watched(start, just_below) == {0: 0, 1: 0, 2: STOPPED_AFTER_BEATS - 1}
    assert not beat_stopped({"missed_beats": STOPPED_AFTER_BEATS - 1})
    assert watched(start, just_below, at)[2] == STOPPED_AFTER_BEATS
    assert beat_stopped({"missed_beats": STOPPED_AFTER_BEATS})


def test_a_watcher_held_up_blames_nobody_when_every_counter_moved() -> None:
    """The watcher saw nothing for 30 beats (a busy machine): every rank moved meanwhile."""
    assert watched(beating(range(3), 10), beating(range(3), 40)) == {0: 0, 1: 0, 2: 0}
    # A slow rank that still beats, one beat to its peers' twenty, is not stopped either.
    slow = [beating(range(3), 10 + 20 * i, still={1: 10 + i}) for i in range(4)]
    assert watched(*slow)[1] == 0


def test_the_most_beats_of_any_one_peer_count_so_two_stopped_ranks_are_both_named() -> None:
    start = beating(range(3), 10)
    later = beating(range(3), 10 + STOPPED_AFTER_BEATS, still={1: 10, 2: 10})
    assert watched(start, later) == {0: 0, 1: STOPPED_AFTER_BEATS, 2: STOPPED_AFTER_BEATS}


def test_a_stage_change_is_a_sign_of_life() -> None:
    start = beating(range(2), 10)
    stage_moved = {0: (10 + STOPPED_AFTER_BEATS, 5), 1: (10, 6)}
    assert watched(start, stage_moved)[1] == 0


def test_a_peer_first_seen_late_counts_from_its_first_count() -> None:
    """A peer known when the rank last moved counts from then, one seen later from its first count,
    one in neither counts nothing; the most of any one peer is the answer, whichever it is."""
    assert missed_beats(1, {0: 30, 1: 3, 2: 9}, {0: 24, 1: 3}, {2: 4}) == 6  # the peer known then
    assert missed_beats(1, {0: 30, 1: 3, 2: 9}, {0: 27, 1: 3}, {0: 1, 2: 2}) == 7  # the late peer
    assert missed_beats(1, {0: 30, 1: 3, 2: 9}, {1: 3}, {}) == 0  # neither: no beats to count
    assert missed_beats(0, {0: 7}, {0: 7}, {}) == 0  # alone: nobody to compare with


def test_the_tracker_counts_a_late_peer_from_the_beat_count_it_was_first_seen_with() -> None:
    """Rank 1 stops before rank 2 is first seen (at 20 beats, stage seq 5): what rank 1 missed is
    rank 2's beats since then (7), more than rank 0's (3); not since zero, nor its stage seq."""
    first = {0: (10, 5), 1: (10, 5)}
    rank_2_appears = {0: (12, 5), 1: (10, 5), 2: (20, 5)}
    later = {0: (13, 5), 2: (27, 5)}  # rank 1 absent from this read: unchanged
    assert watched(first, rank_2_appears, later) == {0: 0, 1: 7, 2: 0}


def test_counters_are_each_records_beats_and_stage_seq() -> None:
    """What the watchdog and inline feed the tracker from the ranks' status records."""
    records = {
        0: RankStatus(0, 0, 0, "h", None, 100, beats=12, seq=3, stage="measure"),
        4: RankStatus(4, 0, 1, "h", None, 104, beats=9, seq=8),
    }
    assert counters(records) == {0: (12, 3), 4: (9, 8)}


# ------------------------------------------------------------------ judge_inline reads the rule
def status(rank: int, age: float = 0.2, missed: int = 0, **extra) -> dict:
    return {"rank": rank, "host": "h", "pid": 100 + rank, "stage": "measure: 1K", "seq": 5,
            "proc_state": "running", "heartbeat_age_s": age, "missed_beats": missed, "error": None,
            **extra}  # fmt: skip


def test_old_heartbeats_on_a_busy_machine_name_nobody_but_missed_beats_do() -> None:
    late = FROZEN_AFTER_S + 2  # every record old: the machine was busy, every rank still beats
    busy = {r: status(r, age=late) for r in range(3)}
    check = judge_inline(Stall(busy, 10.0, 3), "Timed out waiting 10000ms", 0)
    assert "every rank is alive and stuck" in check.detail
    assert not any(is_culprit(s) for s in busy.values())
    just_below = {**busy, 2: status(2, age=late, missed=STOPPED_AFTER_BEATS - 1)}
    assert "every rank is alive and stuck" in judge_inline(Stall(just_below, 10.0, 3), "Timed out", 0).detail
    at = {**busy, 2: status(2, age=late, missed=STOPPED_AFTER_BEATS)}
    named = judge_inline(Stall(at, 10.0, 3), "Timed out", 0)
    assert (named.name, named.ranks) == ("hang", [2]) and is_culprit(at[2])
    assert (
        f"is frozen: no heartbeat for {late:.0f} s (a peer beat {STOPPED_AFTER_BEATS} times" in named.detail
    )
    assert "ranks 0, 1 were waiting for it" in named.detail


def test_a_rank_that_said_why_its_beats_end_is_not_blamed_for_them() -> None:
    gave_up = status(1, missed=50, error="RuntimeError: Timed out waiting 10000ms")
    done = status(1, missed=50, stage="done")
    for quiet in (gave_up, done):
        assert not is_culprit(quiet)
        statuses = {0: status(0), 1: quiet, 2: status(2, missed=STOPPED_AFTER_BEATS)}
        assert judge_inline(Stall(statuses, 10.0, 3), "Timed out", 0).ranks == [2]
