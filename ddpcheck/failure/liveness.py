"""Pure: when a rank counts as frozen, and which rank stopped beating, judged against its peers' beats.

On a busy machine every heartbeat is late, and a watcher that was itself held up sees every
rank's beat as old at once. What tells a stopped rank from a slow machine is that its beat
counter stood still while its peers' counters went on: a rank is stopped when a peer beat
`STOPPED_AFTER_BEATS` times since its own counter last moved. Nothing here reads a clock.

The rules over a seen status (`frozen`, `silent`, `died`, `is_culprit`) are written
here once, for every watcher: the launcher's monitor, an inline rank, the failure judges.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from ddpcheck.failure.stages import DONE
from ddpcheck.failure.statuses import RankStatus, SeenStatus

HEARTBEAT_INTERVAL_S = 0.5
# Four missed beats: long enough to survive a loaded machine, short enough for a verdict in seconds.
FROZEN_AFTER_S = 4 * HEARTBEAT_INTERVAL_S + 1.0

# Six beats of a peer (3 s at one beat per 0.5 s) with none of its own: long enough that a rank
# whose threads wait a moment for a core is not blamed, short enough to be known well before
# any --timeout ends the collective.
STOPPED_AFTER_BEATS = 6

# What a watcher reads of one rank: its beat counter and its stage counter (a change of
# either is a sign of life).
Counters = tuple[int, int]


class BeatTracker:
    """Every rank's counters as a watcher saw them, one observation after another.

    For each rank it keeps the peers' beat counters at the last observation where that rank's
    own counters had moved: what a peer beat since then is what the rank missed.
    """

    def __init__(self) -> None:
        self._last: dict[int, Counters] = {}
        self._first_beats: dict[int, int] = {}
        self._peers_when_moved: dict[int, dict[int, int]] = {}
        self._moved: set[int] = set()
        self._moved_at: dict[int, float] = {}

    def see(self, counters: Mapping[int, Counters], at: float = 0.0) -> None:
        """One observation at `at` (the watcher's own clock): every rank's (beats, stage seq) read
        then; ranks absent are unchanged."""
        beats = {rank: c[0] for rank, c in {**self._last, **counters}.items()}  # one per observation,
        self._moved = set()  # shared by the ranks that moved in it: linear in the ranks, not quadratic
        for rank, now in counters.items():
            self._first_beats.setdefault(rank, now[0])
            if self._last.get(rank) != now:
                self._peers_when_moved[rank] = beats
                self._moved.add(rank)
                self._moved_at[rank] = at
        self._last.update(counters)

    def ages(self, now: float) -> dict[int, float]:
        """Per rank, how long before `now` (the clock `see` was given) its counters last moved."""
        return {rank: now - at for rank, at in self._moved_at.items()}

    def missed(self) -> dict[int, int]:
        """Per rank, the most beats any one peer made since the rank's own counters last moved."""
        beats = {rank: c[0] for rank, c in self._last.items()}
        return {
            rank: 0
            if rank in self._moved
            else missed_beats(rank, beats, self._peers_when_moved[rank], self._first_beats)
            for rank in self._last
        }


def counters(records: Mapping[int, RankStatus]) -> dict[int, Counters]:
    """What liveness compares of each rank's status record: its beat and stage counters."""
    return {rank: (record.beats, record.seq) for rank, record in records.items()}


def missed_beats(
    rank: int, beats_now: Mapping[int, int], beats_then: Mapping[int, int], first_beats: Mapping[int, int]
) -> int:
    """The most beats one peer of `rank` made between `beats_then` (when `rank` last moved) and now.

    A peer first seen after that moment counts from the counter it was first seen with.
    """
    return max(
        (
            now - beats_then.get(peer, first_beats.get(peer, now))
            for peer, now in beats_now.items()
            if peer != rank
        ),
        default=0,
    )


def beat_stopped(status: SeenStatus) -> bool:
    """Against its peers where a watcher counted their beats (`missed_beats`: a peer beat
    STOPPED_AFTER_BEATS times while this rank beat none), else by its heartbeat's age."""
    if "missed_beats" in status:
        return status["missed_beats"] >= STOPPED_AFTER_BEATS
    return status.get("heartbeat_age_s", 0) > FROZEN_AFTER_S


def frozen(status: SeenStatus) -> bool:
    """Stopped (SIGSTOP), or its beats stopped."""
    return status.get("proc_state") == "stopped" or beat_stopped(status)


def died(status: SeenStatus) -> bool:
    """Its process is gone mid-run (before the run's last stage), without an error of its own."""
    return status["proc_state"] == "exited" and not status.get("error") and status.get("stage") != DONE


def silent(status: SeenStatus) -> bool:
    """Stopped, or frozen; a rank that said why its beats end (it gave up, or finished) is neither."""
    if status["proc_state"] == "stopped":
        return True
    if status["proc_state"] == "exited" or status.get("error") or status.get("stage") == DONE:
        return False
    return beat_stopped(status)


def is_culprit(status: SeenStatus) -> bool:
    """Stopped beating: dead (its process is gone mid-run, without an error of its own), stopped,
    or frozen (a peer beat STOPPED_AFTER_BEATS times while it beat none, and it never said why)."""
    return died(status) or silent(status)


def culprits(statuses: Mapping[int, SeenStatus], besides: int | None = None) -> list[int]:
    """The ranks, `besides` aside (the watcher's own), that stopped beating (is_culprit), whatever
    source they were read from (statuses.StatusSource)."""
    return [rank for rank, status in statuses.items() if rank != besides and is_culprit(status)]


@dataclass
class Stall:
    """What a watcher saw when no rank moved for the bound: the input of explain.judge_stall.

    `statuses` are annotated (statuses.seen): each rank's record plus its process state and
    heartbeat age as seen without mixing two hosts' clocks.
    """

    statuses: dict[int, SeenStatus]
    waited_s: float | None
    world_size: int
    elapsed_s: float | None = None
