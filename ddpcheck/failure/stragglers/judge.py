"""The straggler judge: samples in, a frozen Judgement out (who slows each group, by how much); no words.

Its thresholds are the module's constants, which docs/stragglers.md explains.
"""

from __future__ import annotations

import statistics
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from enum import Enum, auto

from ddpcheck.failure.flight import group_order
from ddpcheck.failure.stragglers.samples import Sample
from ddpcheck.failure.stragglers.timeline import (
    Arrivals,
    Estimator,
    Gathered,
    arrivals,
    gather,
    peer_medians,
)
from ddpcheck.failure.stragglers.why import Looks, Why, explain

# Each threshold's why and the figures that chose it: docs/stragglers.md, "The rule and its thresholds".
# NAMED: its peers' wait for it is this share of the window more than their wait for their median peer.
WAIT_SHARE = 0.1
# LATE at a collective (evidence, not the gate): its work at least this times its peers' median...
MARGIN = 1.2
# ...and later by this; a wait under it (the OS's scheduling noise) is not counted in the share either.
MIN_LAG_S = 2e-4
# The window: the collectives of the last minute...
WINDOW_S = 60.0
# ...but never fewer than the last 20...
WINDOW_MIN = 20
# ...and a group with fewer judged collectives is not judged at all (SKIP: too few).
MIN_COLLECTIVES = 10
# The whole job slowed: its collectives this many times further apart since a change than before it...
SLOWED_BY = 1.3
TRIM = 0.1  # ...each side's mean with its tenth at each end left out (a hiccup moves neither)
# Why a named rank is slow is read over its window, but never less than this (early in a run).
MIN_EXPLAINED_S = 2.0
# The heat map's time buckets, at most (the whole watched run, a column per bucket).
HEAT_BUCKETS = 60


class Skip(Enum):
    """Why a group (or one host's ranks of it) was not judged."""

    SINGLE_RANK = auto()
    ALONE_ON_HOST = auto()  # by enqueue time, without clock offsets, no other rank on its host
    TOO_FEW = auto()  # fewer than min_collectives held by every rank


class Unjudged(Enum):
    """Why nothing at all was judged."""

    NO_SAMPLE = auto()
    NO_COLLECTIVES = auto()  # p2p operations only, or none
    SINGLE_RANKS = auto()  # every group has a single rank
    SKIPPED = auto()  # each for its own reason


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
    estimator: Estimator
    why: tuple[Why, ...] = ()  # each named rank's, where the watcher saw it (why.py)


@dataclass(frozen=True)
class RankFigures:
    """One rank of a judged group, over the window: its medians, its peers' wait for it, lateness."""

    rank: int
    host: str
    work_s: float  # its work before a collective (median)
    lag_s: float  # how much later than its peers' median it arrived (median)
    wait_share: float  # the share of the window its peers spent waiting for it: the gate
    late: int  # the window's collectives it was late at (evidence: by MARGIN and MIN_LAG_S)
    named: bool
    own_past: float | None = None  # its latest work over its first (None: too few collectives for both)


@dataclass(frozen=True)
class Slowdown:
    """A group's collectives further apart since a change than before it: the job slowed, every rank."""

    factor: float  # after over before
    since_seq: int  # the first collective after the change
    since_s: float  # when, since the first collective compared
    before_s: float  # the mean time between collectives before (trimmed)
    after_s: float  # ...and since


@dataclass(frozen=True)
class HeatMap:
    """Ranks x time buckets of lag for one group, over the whole watched run (the HTML page draws it).

    lag_s[i][j]: the mean over bucket j's collectives of how much later than its peers' median
    ranks[i] arrived (0 when it was not later), None when the bucket holds no collective.
    """

    ranks: list[int]
    hosts: list[str]
    bucket_s: float
    lag_s: list[list[float | None]]


@dataclass(frozen=True)
class GroupJudgement:
    """One process group (or, by enqueue time without clock offsets, one host's ranks of it)."""

    group: str
    group_desc: str
    host: str | None  # set when only this host's ranks of the group were compared
    ranks: Sequence[int]
    estimator: Estimator | None
    collectives: int = 0  # in the window
    window_s: float = 0.0
    verdict: StragglerVerdict | None = None
    figures: tuple[RankFigures, ...] = ()
    heat: HeatMap | None = None
    skipped: Skip | None = None
    compared: int = 0  # collectives held by every rank (a group skipped as TOO_FEW: how few)
    slowdown: Slowdown | None = None
    ends_s: Mapping[int, float] = field(default_factory=dict)  # each rank's last judged enqueue, its clock


@dataclass(frozen=True)
class Judgement:
    """Every group judged; `unjudged` says why nothing could be (then the check is SKIP)."""

    groups: Sequence[GroupJudgement] = ()
    unjudged: Unjudged | None = None
    requests: int | None = None  # NO_SAMPLE of a watched run: the requests no rank answered

    @property
    def verdicts(self) -> list[StragglerVerdict]:
        return [g.verdict for g in self.groups if g.verdict is not None]

    @property
    def slowdowns(self) -> list[tuple[GroupJudgement, Slowdown]]:
        """The judged groups that slowed as a whole, nobody named in them."""
        return [(g, g.slowdown) for g in self.judged if g.slowdown is not None and g.verdict is None]

    @property
    def judged(self) -> list[GroupJudgement]:
        return [g for g in self.groups if g.skipped is None]


def judge(samples: Sequence[Sample]) -> Judgement:
    """Every process group of the samples judged: who slows it, over the last window."""
    if not samples:
        return Judgement(unjudged=Unjudged.NO_SAMPLE)
    gathered = gather(samples)
    if not gathered.records:
        return Judgement(unjudged=Unjudged.NO_COLLECTIVES)
    groups: list[GroupJudgement] = []
    for pg in sorted(gathered.records, key=group_order):
        groups += _judge_group(pg, gathered)
    unjudged = None
    if all(g.skipped for g in groups):
        unjudged = Unjudged.SINGLE_RANKS if all(len(g.ranks) < 2 for g in groups) else Unjudged.SKIPPED
    return Judgement(groups, unjudged)


def explained(judgement: Judgement, looks: Mapping[int, Looks]) -> Judgement:
    """Each verdict with why its ranks are slow, from what the watcher saw of every rank (why.py)."""
    if not judgement.verdicts or not looks:
        return judgement
    groups = []
    for g in judgement.groups:
        v = g.verdict
        if v is not None:
            peers = [r for r in g.ranks if r not in v.ranks]
            window_s = max(v.window_s, MIN_EXPLAINED_S)
            why = tuple(explain(r, peers, looks, window_s, g.ends_s) for r in v.ranks)
            g = replace(g, verdict=replace(v, why=why))
        groups.append(g)
    return replace(judgement, groups=groups)


def _judge_group(pg: str, gathered: Gathered) -> list[GroupJudgement]:
    held = gathered.records[pg]
    desc = gathered.descs.get(pg, "")
    members = sorted(held)
    if len(members) < 2:
        return [GroupJudgement(pg, desc, None, members, None, skipped=Skip.SINGLE_RANK)]

    def unit(
        host: str | None, ranks: list[int], estimator: Estimator, offsets: Mapping[int, int]
    ) -> GroupJudgement:
        found = arrivals(ranks, held, estimator, offsets)
        ends = {r: held[r][found[-1].seq].created_ns / 1e9 for r in ranks} if found else {}
        return _judge_unit(
            GroupJudgement(pg, desc, host, ranks, estimator, ends_s=ends), found, gathered.hosts
        )

    if all(any(s.duration_ms is not None for s in held[r].values()) for r in members):
        return [unit(None, members, Estimator.GPU, {})]
    by_host: dict[str, list[int]] = {}
    for rank in members:
        by_host.setdefault(gathered.hosts.get(rank, ""), []).append(rank)
    if all(r in gathered.offsets_ns for r in members):
        estimator = Estimator.ALIGNED if len(by_host) > 1 else Estimator.ENQUEUE
        return [unit(None, members, estimator, gathered.offsets_ns)]
    if len(by_host) == 1:
        return [unit(None, members, Estimator.ENQUEUE, {})]
    units = [
        unit(host or "?", ranks, Estimator.ENQUEUE, {})
        for host, ranks in sorted(by_host.items())
        if len(ranks) >= 2
    ]
    alone = sorted(r for ranks in by_host.values() if len(ranks) == 1 for r in ranks)
    if alone:
        units.append(GroupJudgement(pg, desc, None, alone, Estimator.ENQUEUE, skipped=Skip.ALONE_ON_HOST))
    return units


def _judge_unit(unit: GroupJudgement, found: list[Arrivals], hosts: Mapping[int, str]) -> GroupJudgement:
    ranks = list(unit.ranks)
    heat = _heat(ranks, hosts, found, HEAT_BUCKETS) if found else None
    if len(found) < MIN_COLLECTIVES:
        return replace(unit, heat=heat, skipped=Skip.TOO_FEW, compared=len(found))
    window = _window(found)
    window_s = sum(c.period_s for c in window)
    late = {r: sum(c.late(r, MARGIN, MIN_LAG_S) for c in window) for r in ranks}
    share = {r: _share(sum(_waited(c, [r]) for c in window), window_s) for r in ranks}
    typical = peer_medians(share)  # what each rank's peers cost the group: jitter makes everyone wait
    named = tuple(r for r in ranks if share[r] - typical[r] >= WAIT_SHARE - 1e-12)
    # A rank's own past: its work over the last window_min collectives against its first window_min's.
    first, last = found[:WINDOW_MIN], found[-WINDOW_MIN:]
    if len(found) < 2 * WINDOW_MIN:
        first = last = []
    figures = tuple(
        RankFigures(
            rank=rank,
            host=hosts.get(rank, ""),
            work_s=statistics.median(c.work[rank] for c in window),
            lag_s=statistics.median(c.lag[rank] for c in window),
            wait_share=share[rank],
            late=late[rank],
            named=rank in named,
            own_past=_ratio([c.work[rank] for c in first], [c.work[rank] for c in last]),
        )
        for rank in ranks
    )
    verdict = _verdict(unit, named, window, window_s, hosts) if named else None
    return replace(
        unit,
        collectives=len(window),
        window_s=window_s,
        verdict=verdict,
        figures=figures,
        heat=heat,
        compared=len(found),
        slowdown=_slowdown(found),
    )


def _trimmed_mean(values: Sequence[float]) -> float:
    ordered = sorted(values)
    cut = int(len(ordered) * TRIM)
    kept = ordered[cut : len(ordered) - cut] or ordered
    return sum(kept) / len(kept)


def _ratio(before: Sequence[float], after: Sequence[float]) -> float | None:
    """after's trimmed mean over before's, None with fewer than min_collectives either side."""
    if min(len(before), len(after)) < MIN_COLLECTIVES:
        return None
    base = _trimmed_mean(before)
    return _trimmed_mean(after) / base if base > 0 else None


def _slowdown(found: list[Arrivals]) -> Slowdown | None:
    """Where the time between collectives stepped up (the split that best fits two levels, by least
    squares), when since then it is slowed_by times what it was before."""
    found = found[MIN_COLLECTIVES:]  # a job's setup: DDP's broadcasts and barriers, back to back
    periods = [c.period_s for c in found]
    least = max(MIN_COLLECTIVES, len(periods) // 5)  # a level is a fifth of them at least
    if len(periods) < 2 * least:
        return None
    total = sum(periods)
    best, split, head = -1.0, least, sum(periods[:least])
    for s in range(least, len(periods) - least + 1):
        # Two levels fit best where the split's explained sum of squares is largest.
        fit = head * head / s + (total - head) ** 2 / (len(periods) - s)
        if fit > best:
            best, split = fit, s
        head += periods[s]
    before, after = _trimmed_mean(periods[:split]), _trimmed_mean(periods[split:])
    if before <= 0 or after < SLOWED_BY * before:
        return None
    return Slowdown(after / before, found[split].seq, found[split].at_s, before, after)


def _verdict(
    unit: GroupJudgement,
    named: tuple[int, ...],
    window: list[Arrivals],
    window_s: float,
    hosts: Mapping[int, str],
) -> StragglerVerdict:
    waits = Counter[str]()
    for c in window:
        waits[c.op] += _waited(c, named)
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
    return StragglerVerdict(
        ranks=named,
        hosts=tuple(dict.fromkeys(hosts[r] for r in named if hosts.get(r))),
        group=unit.group,
        group_desc=unit.group_desc,
        op=op,
        lag_s=statistics.median(lags),
        peers_wait_share=_share(sum(waits.values()), window_s),
        window_s=window_s,
        collectives=len(window),
        estimator=unit.estimator,  # type: ignore[arg-type]  # every unit judged has one
    )


def _window(found: list[Arrivals]) -> list[Arrivals]:
    """The collectives of the last window_s seconds, or the last window_min when those are fewer."""
    end = found[-1].at_s
    recent = [c for c in found if c.at_s >= end - WINDOW_S]
    return recent if len(recent) >= WINDOW_MIN else found[-WINDOW_MIN:]


def _waited(c: Arrivals, ranks: Sequence[int]) -> float:
    """The peers' wait for `ranks` at one collective, counted from MIN_LAG_S on: a lag under it is
    the OS's scheduling noise, which a job of millisecond steps would otherwise add up to a share."""
    wait = c.waited(ranks)
    return wait if wait >= MIN_LAG_S else 0.0


def _share(part: float, whole: float) -> float:
    return min(1.0, part / whole) if whole > 0 else 0.0


def _heat(ranks: list[int], hosts: Mapping[int, str], found: list[Arrivals], most: int) -> HeatMap:
    start, end = found[0].at_s, found[-1].at_s
    buckets = min(most, len(found))
    bucket_s = (end - start) / buckets if end > start else 1.0
    sums = [[0.0] * buckets for _ in ranks]
    counts = [0] * buckets
    for c in found:
        j = min(int((c.at_s - start) / bucket_s), buckets - 1)
        counts[j] += 1
        for i, rank in enumerate(ranks):
            sums[i][j] += max(0.0, c.lag[rank])
    cells = [[s / n if n else None for s, n in zip(row, counts, strict=True)] for row in sums]
    return HeatMap(list(ranks), [hosts.get(r, "") for r in ranks], bucket_s, cells)
