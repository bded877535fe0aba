"""One timeline per collective: when each rank arrived, how long it worked before, how late it was.

The samples' records are gathered once per (group, seq_id) and rank; then for each collective #k
held by every rank compared, with #k-1 before it, each rank's arrival is placed on one timeline
(by the estimator, see the package's docstring) and its work is its arrival minus its release
from #k-1.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from ddpcheck.failure.stragglers.samples import Sample
from ddpcheck.failure.text_enum import TextEnum


class Estimator(TextEnum):
    """Where a rank's arrival at a collective is read from."""

    GPU = "gpu"  # NCCL's per-collective GPU duration
    ENQUEUE = "enqueue"  # the enqueue time, on one clock
    ALIGNED = "aligned"  # ...on several hosts' clocks, aligned by their measured offsets


@dataclass(frozen=True)
class Record:
    """One rank's record of one collective, merged over the samples that held it."""

    op: str
    created_ns: int
    duration_ms: float | None


@dataclass(frozen=True)
class Gathered:
    records: dict[str, dict[int, dict[int, Record]]]  # group -> rank -> seq_id -> record
    descs: dict[str, str]
    hosts: dict[int, str]
    offsets_ns: dict[int, int]


def gather(samples: Sequence[Sample]) -> Gathered:
    """Every collective seen, once per (group, seq_id) and rank: a ring buffer sampled twice holds the
    same entries twice. The latest sample's record wins (an NCCL entry completes between samples)."""
    records: dict[str, dict[int, dict[int, Record]]] = {}
    descs: dict[str, str] = {}
    hosts: dict[int, str] = {}
    offsets: dict[int, list[int]] = {}
    for sample in samples:
        hosts.update({rank: str(host) for rank, host in sample.hosts.items() if host})
        for rank, offset in sample.clock_offsets_ns.items():
            offsets.setdefault(rank, []).append(int(offset))
        for rank, trace in sample.traces.items():
            for c in trace.entries:
                if c.is_p2p or c.time_created_ns is None:
                    continue
                held = records.setdefault(c.pg, {}).setdefault(rank, {})
                old = held.get(c.seq_id)
                duration = old.duration_ms if c.duration_ms is None and old is not None else c.duration_ms
                held[c.seq_id] = Record(c.op, c.time_created_ns, duration)
                descs.setdefault(c.pg, c.pg_desc)
    # The median of each rank's measured offsets: one slow answer does not move it.
    medians = {rank: round(statistics.median(found)) for rank, found in offsets.items()}
    return Gathered(records, descs, hosts, medians)


@dataclass(frozen=True)
class Arrivals:
    """Collective #seq with #seq-1 before it, held by every rank compared."""

    seq: int
    op: str
    at_s: float  # when, on its ranks' own clocks (the median), since the first compared collective
    period_s: float  # from #seq-1 to #seq (the median over its ranks, each on its own clock)
    arrival: dict[int, float]  # on one timeline per collective: only differences between ranks count
    work: dict[int, float]  # arrival minus the release from #seq-1
    lag: dict[int, float]  # how much later than its peers' median each rank arrived (= its work minus theirs)

    def late(self, rank: int, margin: float, min_lag_s: float) -> bool:
        """The rank's work was at least `margin` x its peers' median, and later by `min_lag_s`."""
        peers = self.work[rank] - self.lag[rank]  # their median work
        return peers > 0 and self.work[rank] >= margin * peers and self.lag[rank] >= min_lag_s

    def waited(self, ranks: Sequence[int]) -> float:
        """How long the other ranks (their median) waited here for `ranks`: from their median arrival
        to the latest of `ranks`' arrivals, 0 when that was before. Whether a rank later still made
        them wait longer does not matter: they could not go on before `ranks` arrived."""
        if len(ranks) == 1:
            return max(0.0, self.lag[ranks[0]])
        others = [a for r, a in self.arrival.items() if r not in ranks]
        if not others:
            return 0.0
        return max(0.0, max(self.arrival[r] for r in ranks) - statistics.median(others))


def peer_medians(values: Mapping[int, float]) -> dict[int, float]:
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


def arrivals(
    ranks: list[int], held: dict[int, dict[int, Record]], estimator: Estimator, offsets: Mapping[int, int]
) -> list[Arrivals]:
    common = set.intersection(*(set(held[r]) for r in ranks))
    seqs = sorted(k for k in common if k - 1 in common)
    if estimator == Estimator.GPU:
        seqs = [k for k in seqs if all(held[r][k].duration_ms is not None for r in ranks)]
    out: list[Arrivals] = []
    for k in seqs:
        before = {r: held[r][k - 1] for r in ranks}
        now = {r: held[r][k] for r in ranks}
        period = statistics.median(now[r].created_ns - before[r].created_ns for r in ranks) / 1e9
        if estimator == Estimator.GPU:
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
        peers = peer_medians(arrival)
        at = statistics.median(now[r].created_ns - held[r][seqs[0]].created_ns for r in ranks) / 1e9
        out.append(
            Arrivals(
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
