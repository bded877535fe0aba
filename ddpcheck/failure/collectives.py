"""Where each rank's collectives stand in its flight-recorder dump, said in one line."""

from __future__ import annotations

from collections import defaultdict

from ddpcheck.failure.flight import RankTrace, describe
from ddpcheck.report.model import Check
from ddpcheck.report.naming import span

DEFAULT_GROUP = "0"  # the name torch gives the default process group


def named_collective(pg: str, seq: int, ranks: list[int], traces: dict[int, RankTrace]) -> str:
    """'#4 all_reduce (...) at train.py:60 in main', from the first of `ranks` that still holds it."""
    if seq < 1:
        return "none (no collective in this group yet)"
    for r in ranks:
        call = traces[r].collectives(pg).get(seq)
        if call is not None:
            frame = call.user_frame()
            return describe(call) + (f" at {frame}" if frame else "")
    return f"#{seq}"


def last_collective_line(traces: dict[int, RankTrace], rank: int, pg: str = DEFAULT_GROUP) -> str | None:
    """'last collective: all_reduce #12 (1.0 MiB float32, [262144]); ranks 0, 1 at #13 (all_reduce)':
    one rank's last collective in a group, with where the others are; None without the rank's dump."""
    trace = traces.get(rank)
    if trace is None:
        return None
    seq = trace.last_enqueued(pg) if pg in trace.groups() else -1
    text = f"last collective: {named_collective(pg, seq, [rank], traces)}"
    others: dict[int, list[int]] = defaultdict(list)
    for r, t in sorted(traces.items()):
        if r != rank and pg in t.groups() and t.last_enqueued(pg) != seq:
            others[t.last_enqueued(pg)].append(r)
    for at, ranks in sorted(others.items()):
        call = traces[ranks[0]].collectives(pg).get(at)
        text += f"; {span(ranks)} at #{at}" + (f" ({call.op})" if call else "")
    return text


def with_last_collectives(hang: Check, flight: dict[int, RankTrace]) -> Check:
    """The hang finding with each culprit's last collective from its flight-recorder dump, and where
    the others are ("rank 1's last collective: all_reduce #3 (...); rank 0 at #4"). A culprit that
    left no dump (frozen, stopped) is said as such, with the collective the others wait in."""
    if not flight:
        return hang
    said = [f"rank {r}'s {line}" for r in hang.ranks if (line := last_collective_line(flight, r))]
    silent = [r for r in hang.ranks if r not in flight]
    if silent and not said:
        other = min(flight)
        line = last_collective_line(flight, other)
        if line:
            said.append(f"{span(silent)} left no flight-recorder dump; rank {other}'s {line}")
    if said:
        hang.detail = f"{hang.detail}; {'; '.join(said)}"
    return hang
