"""What a rank says about itself (`RankStatus`) and what a watcher saw of it (`SeenStatus`).

A `RankStatus` is the record a rank publishes (rank/status_channel.py): its JSON form is the status
file and the store value, read back with `from_dict`. A watcher (the launcher's monitor, an
inline rank) adds what only it can see - the process state, the heartbeat's age, the beats
missed - and that annotated copy is what explain.py judges and what nodes share: a plain dict,
partial when it came from another node or an older ddpcheck, so every reader uses `.get`.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, Protocol, TypedDict, cast

from ddpcheck.failure import stages

if TYPE_CHECKING:
    from ddpcheck.failure.proc import ProcState


class StepProgress(TypedDict):
    """How far a rank is through its stage's steps, for the progress display."""

    done: int
    total: int
    label: str


@dataclass
class RankStatus:
    """What one rank says about itself; its JSON form is what every transport carries."""

    rank: int
    local_rank: int
    node: int
    host: str
    address: str | None
    pid: int
    stage: str = stages.LAUNCHED
    seq: int = 0  # counts stages, so ranks at the same point of a run agree on it
    stage_since: float = field(default_factory=time.time)
    heartbeat: float = field(default_factory=time.time)
    beats: int = 0  # counts heartbeats: a reader on another host sees it change without trusting our clock
    progress: StepProgress | None = None
    progress_seq: int = 0
    ticks: int = 0
    error: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def as_seen(self) -> SeenStatus:
        """Its fields as the start of what a watcher saw (the same keys, in the same order)."""
        return cast("SeenStatus", self.to_dict())

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RankStatus:
        known = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known})


class ExitInfo(TypedDict, total=False):
    """How a rank's process ended, as its launcher's agent reported it."""

    exitcode: int | None
    pid: int
    killed_by_ddpcheck: bool
    signal: str  # only for a process ended by a signal


# A rank's process as a watcher saw it (seen(): a zombie or a process gone is 'exited').
SeenState = Literal["running", "stopped", "exited"]


class SeenStatus(TypedDict, total=False):
    """A rank's status as a watcher saw it: `RankStatus.to_dict()` plus what only the watcher knows."""

    rank: int
    local_rank: int
    node: int
    host: str
    address: str | None
    pid: int
    stage: str
    seq: int
    stage_since: float
    heartbeat: float
    beats: int
    progress: StepProgress | None
    progress_seq: int
    ticks: int
    error: str | None
    proc_state: SeenState
    heartbeat_age_s: float
    in_stage_s: float | None  # None for a rank on another host: its clock is not ours
    missed_beats: int  # the most beats one peer made since this rank's counters last moved
    same_host: bool
    arrived: bool  # False: known only from its host's job directory, it never reached the store
    remote: bool  # published by another node's launcher
    exit: ExitInfo | None  # how it ended, as another node's launcher published it
    ranks_started: int  # rank 0's status only, for the progress display: how many ranks started


def seen(
    record: SeenStatus,
    state: ProcState,
    heartbeat_age_s: float,
    in_stage_s: float | None,
    **also: Any,
) -> SeenStatus:
    """The one annotator: a rank's record (`RankStatus.as_seen()`, or what its host's job directory
    says) plus what a watcher saw of it: its process's state, its heartbeat's age, how long it has
    been in its stage (None for a rank on another host: its clock is not ours), and `also`."""
    return cast(
        "SeenStatus",
        {
            **record,
            "proc_state": "exited" if state.ended else state.value,
            "heartbeat_age_s": round(max(heartbeat_age_s, 0.0), 1),
            "in_stage_s": None if in_stage_s is None else round(max(in_stage_s, 0.0), 1),
            **also,
        },
    )


class StatusSource(Protocol):
    """Where a watcher reads every rank's status, annotated; one implementation per transport:
    launcher/monitor.StatusFiles (the launcher's own ranks' status files), rank/inline.StoreStatuses
    (the store that torchrun, srun and mpirun ranks share), rank/here.HostDir (the host's job directory)."""

    def seen(self) -> dict[int, SeenStatus]: ...
