"""What this host shows of an inline job's other ranks, before or beside the store they share.

Under torchrun, srun and mpirun a rank that froze or died before it reached the store left only its
file in the job's directory on its host (rank/arrival.py), and its process, which its launcher
started beside this one. Read by a rank that gives up, and by one its launcher stops (SIGTERM),
perhaps while it is still importing torch: so nothing here imports torch.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import time

import psutil

from ddpcheck.failure import stages
from ddpcheck.failure.liveness import STOPPED_AFTER_BEATS
from ddpcheck.failure.proc import ProcState, state_of
from ddpcheck.failure.statuses import SeenStatus, seen
from ddpcheck.rank import arrival

# How long a peer stays stopped after this rank is done before it is taken for stopped, not paused.
END_STOPPED_S = 1.0
# How long a rank that is done waits for the peers on its host to be done too (they left the last
# collective with it: a healthy one follows within milliseconds).
PEERS_DONE_S = 5.0
# The stages of a rank past the run's last collective.
_FINISHED = (stages.DONE, arrival.WRITING_REPORT, arrival.LEFT, arrival.TERMINATED)


class HostDir:
    """This host's job directory (rank/arrival.py) and the processes its launcher started, a
    StatusSource: the ranks of this job here, where each was before it reached the store, and whether
    its process is stopped, running or gone."""

    def seen(self) -> dict[int, SeenStatus]:
        if arrival.current is None:
            return {}
        presences = {**launcher_view(arrival.current), **arrival.read(arrival.current.dir)}
        return {rank: seen_of(presence) for rank, presence in presences.items()}


def seen_of(presence: arrival.RankFile) -> SeenStatus:
    """A rank known only from its host (its file, or its launcher's view of its process), as seen."""
    age = time.time() - presence.since
    terminated = presence.stage == arrival.TERMINATED
    # Its launcher ended it after another rank failed (said as a collateral error): ended, not lost.
    state = ProcState.GONE if terminated else presence.state
    record: SeenStatus = {
        "rank": presence.rank,
        "host": presence.host,
        "pid": presence.pid,
        "stage": stages.DONE if presence.stage == arrival.LEFT else presence.stage,
        "seq": 0,  # behind every rank that reached the store
        "beats": 0,
    }
    return seen(
        record,
        state,
        age,
        age,
        # A stopped process beats no more, whatever its peers did; a running one is judged by its stage.
        missed_beats=STOPPED_AFTER_BEATS if state is ProcState.STOPPED else 0,
        same_host=True,
        arrived=False,
        **({"error": TERMINATED_ERROR} if terminated else {}),
    )


def launcher_view(me: arrival.Arrival) -> dict[int, arrival.RankFile]:
    """The launcher's own view of this host: its other rank processes (arrival.siblings), each at
    stage 'starting' until its own file says more; a rank stopped or killed before it could write
    that file is still found so."""
    found: dict[int, arrival.RankFile] = {}
    host = socket.gethostname()
    for pid, rank in arrival.siblings(me.identity.rank_variable, me.launcher).items():
        with contextlib.suppress(psutil.Error):  # gone meanwhile
            if rank.isdigit():
                since = psutil.Process(pid).create_time()
                found[int(rank)] = arrival.RankFile(
                    int(rank), pid, host, arrival.STARTING, since, state_of(pid)
                )
    return found


def mark_stopped_by_launcher(statuses: dict[int, SeenStatus]) -> None:
    """Ranks the store knows whose file here says their launcher stopped them (SIGTERM, once another
    rank failed): their process ended without an error of their own, yet they are no culprit."""
    if arrival.current is None:
        return
    for rank, presence in arrival.read(arrival.current.dir).items():
        status = statuses.get(rank)
        if status is None or presence.stage != arrival.TERMINATED or status.get("error"):
            continue
        if status.get("pid") in (None, presence.pid):
            status["error"] = TERMINATED_ERROR


TERMINATED_ERROR = "SIGTERM: its launcher ended it once another rank failed"


def stopped_at_the_end(wait_s: float = PEERS_DONE_S) -> list[arrival.RankFile]:
    """This rank is done: wait (up to `wait_s`) for the peers on this host to be done too; those
    stopped (SIGSTOP) meanwhile for END_STOPPED_S on end are ended (SIGKILL) and returned.

    A rank stopped after the run's last collective blocks nobody, so nobody gives up on it, and its
    launcher would wait for it forever. A stop shorter than END_STOPPED_S (py-spy's sample) is not one.
    """
    if arrival.current is None:
        return []
    began = time.monotonic()
    stopped_since: dict[int, float] = {}
    while True:
        now = time.monotonic()
        pending = [
            p
            for p in arrival.read(arrival.current.dir).values()
            if p.pid != os.getpid() and not p.state.ended and p.stage not in _FINISHED
        ]
        stopped = [p for p in pending if p.state is ProcState.STOPPED]
        stopped_since = {p.pid: stopped_since.get(p.pid, now) for p in stopped}
        long_stopped = [p for p in stopped if now - stopped_since[p.pid] >= END_STOPPED_S]
        if len(long_stopped) == len(pending) or now - began >= wait_s:
            break  # every peer here is done or stopped for good; or this rank waited long enough
        time.sleep(0.05)
    for presence in long_stopped:
        with contextlib.suppress(OSError):
            os.kill(presence.pid, signal.SIGKILL)
    return sorted(long_stopped, key=lambda p: p.rank)


def speaks_for_this_host(me: int, ended: list[int]) -> bool:
    """Of the ranks still running here, the ones `ended` aside, this one has the lowest number: it says
    the one line for this host (the others end the same peers, silently)."""
    if arrival.current is None:
        return False
    present = [
        p.rank
        for p in arrival.read(arrival.current.dir).values()
        if p.state is ProcState.RUNNING and p.rank not in ended
    ]
    return me <= min(present, default=me)
