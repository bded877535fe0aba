"""Judging flight-recorder dumps: which rank did not arrive, which ranks called another collective.

Pure: RankTraces in, Checks and a table out; `postmortem` judges a dead job's dumps with it, and
`watch` and `attach` a hang's (`with_flight_recorders`). Per process group, the ranks that left a dump
are compared twice:

- did every rank arrive? Each rank's last enqueued collective (`pg_status`). The ranks
  whose last is lowest are the culprits: the others wait for them inside a later collective.
- did they agree? Walking the collectives every rank still holds in its ring buffer by
  sequence id, the first one whose operation, input sizes or dtypes differ between ranks
  is a collective mismatch; the ranks outside the largest agreeing set are named.

Point-to-point operations (send/recv, `is_p2p`) are not compared: the two sides of one
legitimately differ. A rank of the world that left no dump is named lost.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

from ddpcheck.failure.collectives import DEFAULT_GROUP, named_collective, with_last_collectives
from ddpcheck.failure.flight import (
    SCHEDULED,
    STATEFUL_BACKENDS,
    FrEntry,
    RankTrace,
    describe,
    dtype_name,
    group_order,
    nbytes,
)
from ddpcheck.report.model import Check, Report, Status, Table
from ddpcheck.report.naming import hosts_known, span
from ddpcheck.report.units import human_bytes

# Collectives whose ranks legitimately pass inputs of different sizes: only the op and dtypes must agree.
_SIZES_MAY_DIFFER = ("all_to_all", "alltoall", "scatter", "gather")

LAST_COLLECTIVES_COLUMNS = {
    "rank": "rank",
    "group": "group",
    "seq_id": "last #",
    "op": "collective",
    "size": "size",
    "dtype": "dtype",
    "state": "state",
    "where": "called at",
}


@dataclass
class Judgement:
    """What the dumps say: the checks (culprits in `ranks`), each rank's last collective, the world."""

    checks: list[Check] = field(default_factory=list)
    table: Table | None = None
    world_size: int = 0


def world_size_of(traces: dict[int, RankTrace], given: int | None = None) -> int:
    """The job's world: as given, else the default group's members in a dump, else the highest rank seen."""
    dumped = (
        len(trace.pg_config[DEFAULT_GROUP]) for trace in traces.values() if DEFAULT_GROUP in trace.pg_config
    )
    return max(given or 0, max(traces, default=-1) + 1, *dumped)


def members(pg: str, traces: dict[int, RankTrace], world_size: int) -> list[int]:
    """The group's ranks: from a dump's pg_config, or (gloo's dumps name none) the whole world for
    the default group and the ranks that dumped it for the others."""
    for trace in traces.values():
        if trace.pg_config.get(pg):
            return sorted(trace.pg_config[pg])
    if pg == DEFAULT_GROUP:
        return list(range(world_size))
    return sorted(rank for rank, trace in traces.items() if pg in trace.groups())


def judge(
    traces: dict[int, RankTrace], world_size: int | None = None, hosts: dict[int, str] | None = None
) -> Judgement:
    """The dumps of one job judged; `world_size` when known beyond what the dumps say, `hosts` by rank."""
    hosts = hosts or {}
    world = world_size_of(traces, world_size)
    judgement = Judgement(world_size=world)
    if not traces:
        return judgement
    lost = sorted(set(range(world)) - set(traces))
    name = "every rank left a dump"
    if lost:
        detail = (
            f"no flight-recorder dump from {span(lost)} of {world}: lost (ended before it could "
            "dump: killed, crashed, or its launcher ended it when another rank died)"
        )
        judgement.checks.append(Check(name, Status.ERROR, detail, ranks=lost, hosts=hosts_known(lost, hosts)))
    else:
        judgement.checks.append(Check(name, Status.PASS, f"all {world} ranks"))
    groups = sorted({pg for trace in traces.values() for pg in trace.groups()}, key=group_order)
    for pg in groups:
        ranks = [r for r in members(pg, traces, world) if r in traces]
        if not ranks:
            continue
        label = _label(pg, traces)
        judgement.checks.append(_arrival(pg, label, ranks, traces, hosts))
        judgement.checks.append(_agreement(pg, label, ranks, traces, hosts))
    judgement.table = last_collectives(traces, lost)
    return judgement


def _arrival(
    pg: str, label: str, ranks: list[int], traces: dict[int, RankTrace], hosts: dict[int, str]
) -> Check:
    """The ranks furthest behind in the group. Under NCCL a rank has arrived at #k when #k's kernel
    started there: the CPU runs ahead of a stream that may be stuck (a kernel that never ends, a
    host wait), so enqueued is not enough. Gloo's entries stay `scheduled`: there enqueued counts."""
    name = f"{label}: every rank arrived"
    stateful = any(traces[r].backend_of(pg) in STATEFUL_BACKENDS for r in ranks)
    reached = {r: traces[r].last_started(pg) if stateful else traces[r].last_enqueued(pg) for r in ranks}
    top, bottom = max(reached.values()), min(reached.values())
    stuck = [r for r in ranks if stateful and reached[r] == bottom and _stuck_before(traces[r], pg, bottom)]
    if top == bottom and not (stuck and len(ranks) == 1):
        said = "started by" if stateful else "of"
        detail = f"the last collective {said} {span(ranks)}: {named_collective(pg, top, ranks, traces)}"
        return Check(name, Status.PASS, detail)
    behind = [r for r in ranks if reached[r] == bottom]
    absent = [r for r in behind if r not in stuck]
    waiting = [r for r in ranks if reached[r] > bottom]
    parts = [_stuck_said(pg, bottom, stuck, traces)] if stuck else []
    if absent:
        parts.append(_never_called(pg, bottom, absent, waiting, traces))
    inside = " (its kernel started)" if stateful else ""
    for seq in sorted({reached[r] for r in waiting}, reverse=True):
        there = [r for r in waiting if reached[r] == seq]
        verb = "waits" if len(there) == 1 else "wait"
        parts.append(f"{span(there)} {verb} in {named_collective(pg, seq, there, traces)}{inside}")
    return Check(name, Status.ERROR, "; ".join(parts), ranks=behind, hosts=hosts_known(behind, hosts))


def _never_called(
    pg: str, last: int, behind: list[int], waiting: list[int], traces: dict[int, RankTrace]
) -> str:
    missed = max(last + 1, 1)  # a group's first collective is #1; none enqueued yet is -1
    whose = "its" if len(behind) == 1 else "their"
    return (
        f"{span(behind)} never called {named_collective(pg, missed, waiting, traces)}: "
        f"{whose} last collective is {named_collective(pg, last, behind, traces)}"
    )


def _stuck_before(trace: RankTrace, pg: str, reached: int) -> bool:
    """The rank enqueued the collective after the last one it reached, and its kernel never started."""
    following = trace.collectives(pg).get(max(reached + 1, 1))
    return following is not None and following.state == SCHEDULED


def _stuck_said(pg: str, reached: int, stuck: list[int], traces: dict[int, RankTrace]) -> str:
    seq = max(reached + 1, 1)
    whose = "its" if len(stuck) == 1 else "their"
    enqueued = named_collective(pg, seq, stuck, traces)
    return (
        f"{span(stuck)} enqueued {enqueued} but {whose} kernel never started: "
        f"{whose} GPU stream is stuck before it (a kernel that never ends, or a wait on the host)"
    )


def _agreement(
    pg: str, label: str, ranks: list[int], traces: dict[int, RankTrace], hosts: dict[int, str]
) -> Check:
    name = f"{label}: ranks called the same collectives"
    held = {r: traces[r].collectives(pg) for r in ranks}
    common = sorted(set.intersection(*(set(h) for h in held.values())))
    for seq in common:
        calls = {r: held[r][seq] for r in ranks}
        sets: dict[tuple, list[int]] = defaultdict(list)
        for r, call in calls.items():
            sets[_compared(call)].append(r)
        if len(sets) == 1:
            continue
        ordered = sorted(sets.values(), key=lambda rs: (-len(rs), rs))
        majority = ordered[0] if len(ordered[0]) > len(ordered[1]) else []
        culprits = sorted(r for r in ranks if r not in majority)
        said = "; ".join(f"{span(rs)} called {describe(calls[rs[0]])}" for rs in ordered)
        what = _difference(calls[ordered[0][0]], calls[ordered[1][0]])
        detail = f"collective mismatch at #{seq} ({what}): {said}"
        if not majority:
            detail += " (no majority: any of them may be the one that is wrong)"
        return Check(name, Status.FAIL, detail, ranks=culprits, hosts=hosts_known(culprits, hosts))
    if not common:
        return Check(name, Status.PASS, f"no collective held by all of {span(ranks)} to compare")
    held_ids = f"#{common[0]}" if len(common) == 1 else f"#{common[0]}-#{common[-1]}"
    return Check(name, Status.PASS, f"{span(ranks)} agree on {held_ids}")


def _compared(call: FrEntry) -> tuple:
    op, sizes, dtypes = call.signature()
    return (op, () if any(word in op for word in _SIZES_MAY_DIFFER) else sizes, dtypes)


def _difference(a: FrEntry, b: FrEntry) -> str:
    if a.op != b.op:
        return "another operation"
    if a.input_dtypes != b.input_dtypes:
        return "another dtype"
    return "another size"


def _label(pg: str, traces: dict[int, RankTrace]) -> str:
    descs = (e.pg_desc for t in traces.values() for e in t.entries if e.pg == pg)
    desc = next((d for d in descs if d not in ("", "undefined")), "")
    return f"group {pg} ({desc})" if desc else f"group {pg}"


def last_collectives(traces: dict[int, RankTrace], lost: list[int]) -> Table:
    """Each rank's last collective in each group it dumped; a lost rank's row says it left no dump."""
    rows: list[dict] = []
    for rank in sorted(set(traces) | set(lost)):
        trace = traces.get(rank)
        if trace is None:
            rows.append({"rank": rank, "group": "", "seq_id": None, "op": "(no dump)"})
            continue
        for pg in sorted(trace.groups(), key=group_order):
            seq = trace.last_enqueued(pg)
            call = trace.collectives(pg).get(seq)
            row: dict = {"rank": rank, "group": pg, "seq_id": seq}
            if call is not None:
                size = nbytes(call)
                frame = call.user_frame()
                row |= {
                    "op": call.op,
                    "size": human_bytes(size, amount=True) if size is not None else "?",
                    "bytes": size,
                    "shape": call.input_sizes,
                    "dtype": "/".join(dict.fromkeys(dtype_name(d) for d in call.input_dtypes)),
                    "state": call.state,
                    "where": str(frame) if frame else "",
                }
            rows.append(row)
    return Table(
        "last_collectives",
        "Each rank's last collective, by process group",
        dict(LAST_COLLECTIVES_COLUMNS),
        rows,
    )


def with_flight_recorders(
    report: Report, traces: dict[int, RankTrace], hosts: dict[int, str], world_size: int
) -> Report:
    """A hang's finding with what the ranks' flight recorders say: each culprit's last collective and,
    where the stacks named nobody (every rank waits in the same call), the ranks whose collective
    sequence is behind the others' (they never called the collective the others wait in)."""
    hang = next((c for c in report.checks if c.status is Status.ERROR), None)
    if hang is None or not traces:
        return report
    if not hang.ranks:
        checks = judge(traces, world_size=world_size, hosts=hosts).checks
        arrivals = (c for c in checks if c.name.endswith("every rank arrived"))
        behind = next((c for c in arrivals if c.status is Status.ERROR and c.ranks), None)
        if behind is not None:
            hang.ranks, hang.hosts = list(behind.ranks), list(behind.hosts)
            hang.detail += f"; the flight recorders: {behind.detail}"
    with_last_collectives(hang, traces)
    return report
