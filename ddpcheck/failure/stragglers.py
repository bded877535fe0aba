"""Stragglers: the rank that slows a running job, judged from samples of its ranks' flight recorders.

Pure: samples in (what each rank's flight recorder held when `ddpcheck watch` asked, taken again
and again), verdicts out; no process, no sampling loop, no torch. docs/stragglers.md explains
the rule; in short:

- Every process group is judged alone (a pipeline's stages reach their own groups' collectives at
  different times by design); a group of one rank is skipped.
- For each collective #k that every member holds, with #k-1 before it also held by every member,
  each rank's ARRIVAL at #k is placed on one timeline per collective, and its WORK before #k is
  its arrival minus its release from #k-1. The timeline, by estimator:
  - `gpu` (NCCL with TORCH_NCCL_ENABLE_TIMING=1, every member's entries carry `duration_ms`):
    a collective's kernels end together on every member, so a rank's arrival is that common end
    minus its own duration, a difference on its own GPU's clock: no clock is compared with another.
    The release is the end of #k-1, one period (the members' median interval between their
    enqueues of #k-1 and #k, each on its own clock) before the end of #k.
  - `enqueue` (gloo, NCCL without timing): each rank's `time_created_ns`, on one clock: ranks of
    one host share it; ranks of different hosts are compared only with their clocks' offsets
    (watch's team measures them: checks/watch/clocks.py); without them each host's ranks are
    compared among themselves.
    The release is the last arrival at #k-1 (a blocking collective ends when its last member
    arrives; its transfer, not recorded, counts as work).
  The interval between a rank's consecutive enqueues is NOT used: on every rank it is, on
  average, the same (each waits in #k-1 until the last arrives), whoever is slow.
- At each collective a rank is "late" when its work is at least MARGIN x the median of its
  peers' (and later than them by MIN_LAG_S); a rank late at PERSISTENCE of the window's
  collectives is named. Its lag (work minus its peers' median) and the share of the window its
  peers spent waiting for it are the figures.
"""

from __future__ import annotations

import math
import statistics
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ddpcheck.failure.flight import RankTrace, parse_dump
from ddpcheck.report.model import Check, Status, Table

# A rank is late at a collective when its work before it is at least MARGIN x its peers' median:
# healthy ranks within +-9% of each other can never reach it ((1.09 / 0.91) < 1.2), a rank 30%
# slower does at every collective while the jitter stays within +-3% (1.3 x 0.97 / 1.03 > 1.2).
MARGIN = 1.2
# ...and later than its peers' median by at least this: below a fifth of a millisecond, the OS's
# scheduling noise on a loaded host is as large as the lag, and such a lag costs the job little.
MIN_LAG_S = 2e-4
# A rank is named when late at >= 60% of the window's collectives: a healthy rank is late at a
# few percent of them (each of N is the last ~1/N of the time, and rarely by the margin); a rank
# 30% slower with +-10% jitter is late at ~90% of them, so a window of 20 names it every time.
PERSISTENCE = 0.6
# The window: the collectives of the last minute (the "of the last 60 s": a verdict follows
# a change within about a minute)...
WINDOW_S = 60.0
# ...but never fewer than the last 20 (a job of 10-s steps would have 6 a minute: too few for a
# fraction to mean anything)...
WINDOW_MIN = 20
# ...and a group with fewer than 10 judged collectives is not judged at all (SKIP: too few).
MIN_COLLECTIVES = 10
# The heat map's time buckets, at most (the whole watched run, a column per bucket).
HEAT_BUCKETS = 60

GPU = "gpu"  # the estimators: arrival from NCCL's per-collective GPU duration
ENQUEUE = "enqueue"  # arrival from the enqueue time, on one clock
ALIGNED = "aligned"  # ...on several hosts' clocks, aligned by their measured offsets
ESTIMATORS = {  # how the check's detail says which was used
    GPU: "from NCCL's GPU time in each collective (duration_ms)",
    ENQUEUE: "from enqueue times (time_created_ns) on one clock",
    ALIGNED: "from enqueue times (time_created_ns), the hosts' clocks aligned by measured offsets",
}


@dataclass(frozen=True)
class Sample:
    """What every rank's flight recorder held when the watcher asked, at `wall_s` (the watcher's clock).

    `durations_ms`: per rank, (group, seq_id) -> the entry's `duration_ms` (NCCL with timing on),
    which RankTrace's Collective does not keep; `sample_from_dumps` fills it from the raw dumps.
    `clock_offsets_ns`: per rank, its clock minus the watcher's, where the caller measured it
    (absent: ranks of different hosts are not compared by enqueue time).
    """

    wall_s: float
    traces: Mapping[int, RankTrace]
    hosts: Mapping[int, str] = field(default_factory=dict)
    durations_ms: Mapping[int, Mapping[tuple[str, int], float]] = field(default_factory=dict)
    clock_offsets_ns: Mapping[int, int] = field(default_factory=dict)


def durations_of(raw: Mapping[str, Any]) -> dict[tuple[str, int], float]:
    """A raw dump's (group, seq_id) -> duration_ms, for the collectives that have one (NCCL, timing on)."""
    out: dict[tuple[str, int], float] = {}
    for entry in raw.get("entries") or []:
        duration = entry.get("duration_ms")
        if duration is None or entry.get("is_p2p"):
            continue
        group = entry.get("process_group") or ("",)
        out[(str(group[0]), int(entry.get("collective_seq_id", 0)))] = float(duration)
    return out


def sample_from_dumps(
    wall_s: float,
    dumps: Mapping[int, Mapping[str, Any]],
    hosts: Mapping[int, str] | None = None,
    clock_offsets_ns: Mapping[int, int] | None = None,
) -> Sample:
    """A Sample from each rank's raw dump (the unpickled dict). Raises NotADump as parse_dump does."""
    return Sample(
        wall_s=wall_s,
        traces={rank: parse_dump(raw, rank=rank) for rank, raw in dumps.items()},
        hosts=dict(hosts or {}),
        durations_ms={rank: durations_of(raw) for rank, raw in dumps.items()},
        clock_offsets_ns=dict(clock_offsets_ns or {}),
    )


@dataclass(frozen=True)
class StragglerVerdict:
    """The rank(s) that slow one process group, and by how much, over the window judged."""

    ranks: tuple[int, ...]
    hosts: tuple[str, ...]  # the named ranks' hosts, each once, in rank order ("" unknown: left out)
    group: str  # the process group's name ("0" the default group)
    group_desc: str  # "default_pg", or new_group(group_desc=...)
    op: str  # the collective its peers waited at the longest, summed over the window
    lag_s: float  # the median, over the window, of how much later than its peers' median it arrived
    peers_wait_share: float  # the share of the window its peers spent waiting for it (0..1)
    window_s: float  # the window's wall time
    collectives: int  # collectives in the window
    estimator: str  # GPU or ENQUEUE

    @property
    def key(self) -> tuple[str, tuple[int, ...]]:
        """What must change for the verdict to be said again: the group and the ranks named."""
        return (self.group, self.ranks)


@dataclass(frozen=True)
class HeatMap:
    """Ranks x time buckets of lag for one group, over the whole watched run (the HTML page draws it).

    lag_s[i][j]: the mean over bucket j's collectives of how much later than its peers' median
    ranks[i] arrived (0 when it was not later), None when the bucket holds no collective.
    """

    group: str
    ranks: list[int]
    hosts: list[str]
    bucket_s: float
    lag_s: list[list[float | None]]


@dataclass
class GroupJudgement:
    """One process group (or, by enqueue time without clock offsets, one host's ranks of it)."""

    group: str
    group_desc: str
    host: str | None  # set when only this host's ranks of the group were compared
    ranks: list[int]
    estimator: str | None
    collectives: int = 0  # in the window
    window_s: float = 0.0
    verdict: StragglerVerdict | None = None
    rows: list[dict[str, Any]] = field(default_factory=list)
    heat: HeatMap | None = None
    skipped: str | None = None  # why it was not judged

    @property
    def label(self) -> str:
        where = f" on host {self.host}" if self.host else ""
        return f"group {_group_name(self.group, self.group_desc)}{where}"


@dataclass
class Judgement:
    """Every group judged; `reason` says why nothing could be (then the check is SKIP)."""

    groups: list[GroupJudgement] = field(default_factory=list)
    reason: str | None = None

    @property
    def verdicts(self) -> list[StragglerVerdict]:
        return [g.verdict for g in self.groups if g.verdict is not None]

    @property
    def judged(self) -> list[GroupJudgement]:
        return [g for g in self.groups if g.skipped is None]

    def heat_maps(self) -> list[HeatMap]:
        return [g.heat for g in self.judged if g.heat is not None]


# ---------------------------------------------------------------- gathering the samples
@dataclass(frozen=True)
class _Seen:
    """One rank's record of one collective, merged over the samples that held it."""

    op: str
    created_ns: int
    duration_ms: float | None


@dataclass
class _Gathered:
    records: dict[str, dict[int, dict[int, _Seen]]]  # group -> rank -> seq_id -> record
    descs: dict[str, str]
    hosts: dict[int, str]
    offsets_ns: dict[int, int]


def _gather(samples: Sequence[Sample]) -> _Gathered:
    """Every collective seen, once per (group, seq_id) and rank: a ring buffer sampled twice holds the
    same entries twice. The latest sample's record wins (an NCCL entry completes between samples)."""
    records: dict[str, dict[int, dict[int, _Seen]]] = {}
    descs: dict[str, str] = {}
    hosts: dict[int, str] = {}
    offsets: dict[int, list[int]] = {}
    for sample in samples:
        hosts.update({rank: str(host) for rank, host in sample.hosts.items() if host})
        for rank, offset in sample.clock_offsets_ns.items():
            offsets.setdefault(rank, []).append(int(offset))
        for rank, trace in sample.traces.items():
            timed = sample.durations_ms.get(rank, {})
            for c in trace.entries:
                if c.is_p2p or c.time_created_ns is None:
                    continue
                duration = timed.get((c.pg, c.seq_id), getattr(c, "duration_ms", None))
                held = records.setdefault(c.pg, {}).setdefault(rank, {})
                old = held.get(c.seq_id)
                if duration is None and old is not None:
                    duration = old.duration_ms
                held[c.seq_id] = _Seen(c.op, c.time_created_ns, None if duration is None else float(duration))
                descs.setdefault(c.pg, c.pg_desc)
    # The median of each rank's measured offsets: one slow answer does not move it.
    medians = {rank: round(statistics.median(found)) for rank, found in offsets.items()}
    return _Gathered(records, descs, hosts, medians)


# ---------------------------------------------------------------- one collective, every rank
@dataclass(frozen=True)
class _Collective:
    """Collective #seq with #seq-1 before it, held by every rank compared."""

    seq: int
    op: str
    at_s: float  # when, on its ranks' own clocks (the median), since the first compared collective
    period_s: float  # from #seq-1 to #seq (the median over its ranks, each on its own clock)
    arrival: dict[int, float]  # on one timeline per collective: only differences between ranks count
    work: dict[int, float]  # arrival minus the release from #seq-1
    lag: dict[int, float]  # how much later than its peers' median each rank arrived (= its work minus theirs)

    def late(self, rank: int) -> bool:
        """The rank's work was at least MARGIN x its peers' median, and later by MIN_LAG_S."""
        peers = self.work[rank] - self.lag[rank]  # their median work
        return peers > 0 and self.work[rank] >= MARGIN * peers and self.lag[rank] >= MIN_LAG_S

    def waited(self, ranks: Sequence[int]) -> float:
        """How long the other ranks (their median) waited for `ranks` here: 0 unless one of them was last."""
        last = max(self.arrival, key=self.arrival.__getitem__)
        if last not in ranks:
            return 0.0
        if len(ranks) == 1:
            return max(0.0, self.lag[last])
        others = [a for r, a in self.arrival.items() if r not in ranks]
        return max(0.0, self.arrival[last] - statistics.median(others)) if others else 0.0


def _peer_medians(values: Mapping[int, float]) -> dict[int, float]:
    """Each key's median of the OTHER keys' values, for all keys in O(n log n) (not n medians of n)."""
    order = sorted(values, key=values.__getitem__)
    ranked = [values[k] for k in order]
    m = len(ranked) - 1  # the peers of each

    def without(i: int, j: int) -> float:  # the j-th smallest once the i-th smallest is left out
        return ranked[j] if j < i else ranked[j + 1]

    out = {}
    for i, key in enumerate(order):
        half = m // 2
        out[key] = without(i, half) if m % 2 else (without(i, half - 1) + without(i, half)) / 2
    return out


def _collectives(
    ranks: list[int], held: dict[int, dict[int, _Seen]], estimator: str, offsets: Mapping[int, int]
) -> list[_Collective]:
    common = set.intersection(*(set(held[r]) for r in ranks))
    seqs = sorted(k for k in common if k - 1 in common)
    if estimator == GPU:
        seqs = [k for k in seqs if all(held[r][k].duration_ms is not None for r in ranks)]
    out: list[_Collective] = []
    for k in seqs:
        before = {r: held[r][k - 1] for r in ranks}
        now = {r: held[r][k] for r in ranks}
        period = statistics.median(now[r].created_ns - before[r].created_ns for r in ranks) / 1e9
        if estimator == GPU:
            # A collective ends together on every member: the end of #k-1 is the timeline's origin,
            # the release; #k ends one period later, and a rank arrived its own duration before that.
            # The release is the end itself: the transfer is not counted as work.
            arrival = {r: period - (now[r].duration_ms or 0.0) / 1e3 for r in ranks}
            release = 0.0
        else:
            # One clock: the release from #k-1 is its last arrival (its transfer, unknown, counts as work).
            base = before[ranks[0]].created_ns - offsets.get(ranks[0], 0)  # in ints: no precision lost
            arrival = {r: (now[r].created_ns - offsets.get(r, 0) - base) / 1e9 for r in ranks}
            release = max((before[r].created_ns - offsets.get(r, 0) - base) / 1e9 for r in ranks)
        peers = _peer_medians(arrival)
        at = statistics.median(now[r].created_ns - held[r][seqs[0]].created_ns for r in ranks) / 1e9
        out.append(
            _Collective(
                seq=k,
                op=now[ranks[0]].op,
                at_s=at,
                period_s=period,
                arrival=arrival,
                work={r: arrival[r] - release for r in ranks},
                lag={r: arrival[r] - peers[r] for r in ranks},
            )
        )
    return out


def _window(collectives: list[_Collective]) -> list[_Collective]:
    """The collectives of the last WINDOW_S seconds, or the last WINDOW_MIN when those are fewer."""
    end = collectives[-1].at_s
    recent = [c for c in collectives if c.at_s >= end - WINDOW_S]
    return recent if len(recent) >= WINDOW_MIN else collectives[-WINDOW_MIN:]


def needed(collectives: int) -> int:
    """How many of a window's collectives a rank must be late at to be named."""
    return math.ceil(PERSISTENCE * collectives - 1e-9)


# ---------------------------------------------------------------- judging
def judge(samples: Sequence[Sample]) -> Judgement:
    """Every process group of the samples judged: who slows it, over the last window."""
    if not samples:
        return Judgement(reason="no flight-recorder sample was taken")
    gathered = _gather(samples)
    if not gathered.records:
        return Judgement(
            reason="the job ran no collectives: nothing to compare (p2p operations are not judged)"
        )
    groups: list[GroupJudgement] = []
    for pg in sorted(gathered.records, key=_group_order):
        groups += _judge_group(pg, gathered)
    judgement = Judgement(groups)
    if not judgement.judged:
        reasons = list(dict.fromkeys(f"{g.label}: {g.skipped}" for g in groups))
        if all(len(g.ranks) < 2 for g in groups):
            judgement.reason = "every process group has a single rank: nobody to compare with"
        else:
            judgement.reason = "; ".join(reasons)
    return judgement


def _judge_group(pg: str, gathered: _Gathered) -> list[GroupJudgement]:
    held = gathered.records[pg]
    desc = gathered.descs.get(pg, "")
    members = sorted(held)
    if len(members) < 2:
        return [
            GroupJudgement(pg, desc, None, members, None, skipped="a single rank: nobody to compare with")
        ]
    timed = all(any(s.duration_ms is not None for s in held[r].values()) for r in members)
    if timed:
        return [_judge_unit(pg, desc, None, members, held, GPU, {}, gathered.hosts)]
    by_host: dict[str, list[int]] = {}
    for rank in members:
        by_host.setdefault(gathered.hosts.get(rank, ""), []).append(rank)
    if all(r in gathered.offsets_ns for r in members):
        estimator = ALIGNED if len(by_host) > 1 else ENQUEUE
        return [_judge_unit(pg, desc, None, members, held, estimator, gathered.offsets_ns, gathered.hosts)]
    if len(by_host) == 1:
        return [_judge_unit(pg, desc, None, members, held, ENQUEUE, {}, gathered.hosts)]
    units = [
        _judge_unit(pg, desc, host or "?", ranks, held, ENQUEUE, {}, gathered.hosts)
        for host, ranks in sorted(by_host.items())
        if len(ranks) >= 2
    ]
    alone = [r for ranks in by_host.values() if len(ranks) == 1 for r in ranks]
    if alone:
        units.append(
            GroupJudgement(
                pg,
                desc,
                None,
                sorted(alone),
                ENQUEUE,
                skipped=f"rank{'s' if len(alone) > 1 else ''} {_ranks_text(sorted(alone))} alone on "
                "their host and no clock offsets measured: enqueue times of different hosts' clocks "
                "are not compared",
            )
        )
    return units


def _judge_unit(
    pg: str,
    desc: str,
    host: str | None,
    ranks: list[int],
    held: dict[int, dict[int, _Seen]],
    estimator: str,
    offsets: Mapping[int, int],
    hosts: Mapping[int, str],
) -> GroupJudgement:
    unit = GroupJudgement(pg, desc, host, ranks, estimator)
    collectives = _collectives(ranks, held, estimator, offsets)
    unit.heat = _heat(unit.label, ranks, hosts, collectives) if collectives else None
    if len(collectives) < MIN_COLLECTIVES:
        unit.skipped = (
            f"too few collectives held by every rank ({len(collectives)}, at least {MIN_COLLECTIVES} "
            "needed): the job was watched too briefly"
        )
        return unit
    window = _window(collectives)
    unit.collectives = len(window)
    unit.window_s = sum(c.period_s for c in window)
    late = {r: sum(c.late(r) for c in window) for r in ranks}
    named = tuple(r for r in ranks if late[r] >= needed(len(window)))
    for rank in ranks:
        unit.rows.append(
            {
                "group": unit.label,
                "rank": rank,
                "host": hosts.get(rank, ""),
                "work_s": statistics.median(c.work[rank] for c in window),
                "lag_s": statistics.median(c.lag[rank] for c in window),
                "wait_share": _share(sum(c.waited([rank]) for c in window), unit.window_s),
                "late": late[rank],
                "named": rank in named,
            }
        )
    if named:
        waits = Counter[str]()
        for c in window:
            waits[c.op] += c.waited(named)
        op = (
            max(waits, key=waits.__getitem__)
            if any(waits.values())
            else Counter(c.op for c in window).most_common(1)[0][0]
        )
        lags = [
            max(c.arrival[r] for r in named)
            - statistics.median(a for r, a in c.arrival.items() if r not in named)
            for c in window
        ]
        unit.verdict = StragglerVerdict(
            ranks=named,
            hosts=tuple(dict.fromkeys(hosts[r] for r in named if hosts.get(r))),
            group=pg,
            group_desc=desc,
            op=op,
            lag_s=statistics.median(lags),
            peers_wait_share=_share(sum(waits.values()), unit.window_s),
            window_s=unit.window_s,
            collectives=len(window),
            estimator=estimator,
        )
    return unit


def _share(part: float, whole: float) -> float:
    return min(1.0, part / whole) if whole > 0 else 0.0


def _heat(label: str, ranks: list[int], hosts: Mapping[int, str], collectives: list[_Collective]) -> HeatMap:
    start, end = collectives[0].at_s, collectives[-1].at_s
    buckets = min(HEAT_BUCKETS, len(collectives))
    bucket_s = (end - start) / buckets if end > start else 1.0
    sums = [[0.0] * buckets for _ in ranks]
    counts = [0] * buckets
    for c in collectives:
        j = min(int((c.at_s - start) / bucket_s), buckets - 1)
        counts[j] += 1
        for i, rank in enumerate(ranks):
            sums[i][j] += max(0.0, c.lag[rank])
    cells = [[s / n if n else None for s, n in zip(row, counts, strict=True)] for row in sums]
    return HeatMap(label, list(ranks), [hosts.get(r, "") for r in ranks], bucket_s, cells)


# ---------------------------------------------------------------- what the user sees
def stderr_line(verdict: StragglerVerdict) -> str:
    """The one line `watch` prints while the job runs, e.g. `ddpcheck watch: rank 5 (host b07) is
    slowing the job: its peers waited 31% of the last 60 s for it, at all_reduce`."""
    return f"ddpcheck watch: {_said(verdict)}"


def _said(v: StragglerVerdict) -> str:
    one = len(v.ranks) == 1
    who = f"rank {v.ranks[0]}" if one else f"ranks {_ranks_text(list(v.ranks))}"
    if v.hosts:
        who += f" (host{'' if len(v.hosts) == 1 else 's'} {', '.join(v.hosts)})"
    where = f" in group {_group_name(v.group, v.group_desc)}" if v.group != "0" else ""
    verb, their, them = ("is", "its", "it") if one else ("are", "their", "them")
    return (
        f"{who} {verb} slowing the job: {their} peers waited {v.peers_wait_share:.0%} of the last "
        f"{window_text(v.window_s, v.collectives)} for {them}, at {v.op}{where}"
    )


# Below this a window is its WINDOW_MIN collectives, not a minute (early in a run): the line says so.
SHORT_WINDOW_S = 10.0


def window_text(window_s: float, collectives: int) -> str:
    """A window as a person says it: `60 s`; a short one with its collectives, `0.7 s (20 collectives)`."""
    if window_s >= SHORT_WINDOW_S:
        return _span(window_s)
    return f"{_span(window_s)} ({collectives} collective{'s' if collectives != 1 else ''})"


def _span(seconds: float) -> str:
    """A while in seconds, never milliseconds (a window is a while, not a latency): 60 s, 5.2 s, 0.05 s."""
    if round(seconds, 1) >= 10:  # 9.96 s is 10 s, not 10.0 s
        return f"{seconds:.0f} s"
    return f"{seconds:.1f} s" if seconds >= 0.1 else f"{seconds:.2g} s"


def rank_rows(judgement: Judgement) -> list[dict[str, Any]]:
    """The per-rank table's rows, every judged group's ranks: work per collective, lag, wait share."""
    return [row for g in judgement.judged for row in g.rows]


TABLE_COLUMNS = {
    "rank": "rank",
    "host": "host",
    "work_s": "work per collective (s)",
    "lag_s": "lag (s)",
    "wait_share": "peers' wait share",
    "named": "named",
}


def table(judgement: Judgement) -> Table | None:
    """The per-rank table for the report (one per group on the terminal), None when nothing was judged."""
    rows = rank_rows(judgement)
    if not rows:
        return None
    shown = [
        {
            **row,
            "work_s": round(row["work_s"], 6),
            "lag_s": round(row["lag_s"], 6),
            "wait_share": round(row["wait_share"], 4),
        }
        for row in rows
    ]
    return Table("stragglers", "Stragglers: {group}", dict(TABLE_COLUMNS), shown, group_by="group")


def check(judgement: Judgement) -> Check:
    """The report's `stragglers` check: WARN naming the ranks, PASS when none, SKIP with why not judged."""
    name = "stragglers"
    if judgement.reason is not None:
        return Check(name, Status.SKIP, judgement.reason)
    verdicts = judgement.verdicts
    skipped = [f"{g.label}: {g.skipped}" for g in judgement.groups if g.skipped]
    if verdicts:
        detail = "; ".join(
            f"{_said(v)} ({v.collectives} collectives of group {_group_name(v.group, v.group_desc)}, "
            f"lag {_seconds(v.lag_s)} each, {ESTIMATORS[v.estimator]})"
            for v in verdicts
        )
        ranks = sorted({r for v in verdicts for r in v.ranks})
        hosts = list(dict.fromkeys(h for v in verdicts for h in v.hosts))
        return Check(name, Status.WARN, detail + "".join(f"; not judged: {s}" for s in skipped), ranks, hosts)
    judged = judgement.judged
    per_group: dict[str, int] = {}  # one host's ranks of a group, or all of them: count it once
    for g in judged:
        per_group[g.group] = max(per_group.get(g.group, 0), g.collectives)
    collectives = sum(per_group.values())
    window = max(g.window_s for g in judged)
    apart = ", each host's ranks among themselves" if any(g.host for g in judged) else ""
    if any(g.estimator == ALIGNED for g in judged):
        apart = ", across hosts, their clocks aligned by measured offsets"
    detail = (
        f"no rank slows the job ({collectives} collectives of {len(per_group)} group"
        f"{'s' if len(per_group) != 1 else ''} compared{apart}, over {_span(window)})"
    )
    return Check(name, Status.PASS, detail + "".join(f"; not judged: {s}" for s in skipped))


def _group_name(pg: str, desc: str) -> str:
    return f"{pg} ({desc})" if desc and desc != pg else pg


def _group_order(pg: str) -> tuple[int, int | str]:
    return (0, int(pg)) if pg.isdigit() else (1, pg)


def _ranks_text(ranks: list[int]) -> str:
    return ", ".join(map(str, ranks))


def _seconds(value: float) -> str:
    if value >= 10:
        return f"{value:.0f} s"
    if value >= 1:
        return f"{value:.1f} s"
    return f"{value * 1e3:.1f} ms" if value >= 1e-3 else f"{value * 1e6:.0f} µs"
