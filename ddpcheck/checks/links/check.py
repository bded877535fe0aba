"""`ddpcheck links`: every pair of ranks measured, the slow GPU, host or cable named.

measure() runs on every rank: the round-robin plan (schedule.py) says whom it exchanges
with in each round; all pairs of a round exchange at once, both directions at once
(batched isend/irecv, as training traffic does), then a small round trip gives the
latency. Each rank returns only its own links: what it sends grows with its own links,
not with the world. judge() runs on rank 0 over plain data and compares each link with
its peers (outliers.py): intra-node links with intra-node links, inter-node with inter-node.
"""

from __future__ import annotations

import os
import statistics
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

import numpy as np

from ddpcheck.checks.links import LinksOptions
from ddpcheck.checks.links.columns import FAIL, PASS, STATUSES, LinkColumns, rank_columns
from ddpcheck.checks.links.fit import Pacer, budget_findings
from ddpcheck.checks.links.outliers import Findings, SlowLink, SlowRank, find_slow_links
from ddpcheck.checks.links.schedule import INTER, INTRA, Round, link_plan, nodes_of
from ddpcheck.checks.links.tables import link_tables
from ddpcheck.rank.rankmap import judge_rank_map
from ddpcheck.report.model import Check, Report, Status
from ddpcheck.report.naming import counted, describe_ranks, hosts_of, node_labels, node_of, span, where

if TYPE_CHECKING:
    from ddpcheck.rank.context import RankContext


FINDINGS_SHOWN = 6
LATENCY_BYTES = 4  # one float32: the round trip measures the path, not the bandwidth
LATENCY_TRIPS = 20  # at least; the least of them is quoted, so more trips only sharpen it

# What a slow component usually is, by the kind of link and what is slow.
CAUSE = {
    (INTER, "host"): "its NIC, cable or switch port",
    (INTER, "rank"): "the NIC or rail of that GPU",
    (INTER, "link"): "that path through the fabric: a cable, a switch port or a route",
    (INTRA, "host"): "its NVLink/NVSwitch fabric or PCIe (on CPU ranks: an overloaded host)",
    (INTRA, "rank"): "its GPU's NVLink or PCIe lanes (on CPU ranks: its core or its process)",
    (INTRA, "link"): "that GPU pair's lanes (a downtrained NVLink or PCIe link)",
}


# ---------------------------------------------------------------- measure
def passes_for(device_type: str) -> int:
    """How many times the whole plan runs; each link's samples are pooled over the passes.

    On CPU ranks a burst of load elsewhere on the host slows whichever links are measured at
    that moment (docs/links.md); three passes spread every link over three moments, and the
    median of the pooled samples ignores one bad one. A GPU's links do not share a scheduler.
    """
    return 1 if device_type == "cuda" else 3


def measure(ctx: RankContext, opts: LinksOptions) -> dict[str, Any]:
    # The node layout is tiny and every rank needs it to compute the same plan.
    layout = ctx.all_gather_object((ctx.host, int(os.environ.get("GROUP_RANK", "0")), ctx.local_rank))
    rounds = link_plan(nodes_of([tuple(x) for x in layout]))
    return measure_plan(ctx, rounds, opts, passes_for(ctx.device.type))


def measure_plan(ctx: RankContext, rounds: list[Round], opts: LinksOptions, passes: int) -> dict[str, Any]:
    """This rank's links, measured round by round (`passes` times over), as judge() reads them.

    With --budget the later rounds' warm-up, each round's iterations and round trips, and the
    passes after the first are cut to fit (fit.py); every round runs: every link is measured.
    """
    import torch

    assert opts.size is not None and opts.iters is not None and opts.warmup is not None
    send = torch.full((opts.size,), ctx.rank % 251, dtype=torch.uint8, device=ctx.device)
    ping = torch.zeros(LATENCY_BYTES // 4, dtype=torch.float32, device=ctx.device)
    buffers = _Buffers(send, torch.empty_like(send), ping)
    pacer = Pacer(ctx, *_per_pass(opts, passes, ctx.budget is not None))
    samples: dict[int, _Samples] = {}
    steps, step = passes * len(rounds), 0
    while step < steps:
        if step and step % len(rounds) == 0 and not pacer.next_pass_fits:
            break  # another pass does not fit: every link has been measured at least once
        rnd = rounds[step % len(rounds)]
        label = f"round {step % len(rounds) + 1}/{len(rounds)}: {rnd.kind}-node links"
        if passes > 1:
            label += f", pass {step // len(rounds) + 1}/{passes}"
        ctx.stage(f"measure: links {label}")
        ctx.progress(step, steps, label)  # after the stage, which clears the previous progress
        left = (steps - step, len(rounds) - step % len(rounds), len(rounds))
        _measure_round(ctx, rnd, buffers, pacer, left, samples)
        step += 1
    ctx.barrier()
    ctx.progress(steps, steps, "done")
    passes_run = -(-step // len(rounds)) if rounds else passes
    # Columns, not a dict per link: rank 0 receives millions of them (docs/links.md).
    return {
        "size_bytes": opts.size,
        "rounds": len(rounds),
        "passes": passes_run,
        "links": rank_columns([link.row(peer) for peer, link in sorted(samples.items())]),
        **({"budget": pacer.account(passes, passes_run, opts.warmup)} if ctx.budget else {}),
    }


def _per_pass(opts: LinksOptions, passes: int, budgeted: bool) -> tuple[int, int, int]:
    """Each round's warm-up, timed exchanges and round trips in one pass: --iters in all, rounded up."""
    assert opts.iters is not None and opts.warmup is not None
    iters = -(-opts.iters // passes)
    trips = -(-max(opts.iters, LATENCY_TRIPS) // passes)
    if not budgeted:
        return opts.warmup, iters, trips
    # The warm-up's last exchange is what each round is projected from: at least one. Round trips
    # beyond LATENCY_TRIPS only sharpen the least of them, and on a busy host each costs far more
    # than a hot exchange foretells.
    return max(opts.warmup, 1), iters, min(trips, -(-LATENCY_TRIPS // passes))


@dataclass(frozen=True)
class _Buffers:
    send: Any  # this rank's bytes, the same every exchange: the peer checks them
    recv: Any
    ping: Any  # the round trips' message


@dataclass
class _Samples:
    """One link's measurements, pooled over the passes."""

    kind: str
    recv: list[float] = field(default_factory=list)
    passes: list[float] = field(default_factory=list)  # each pass's median
    trips: list[float] = field(default_factory=list)
    wrong: int = 0  # bytes received that the peer did not send

    def row(self, peer: int) -> dict[str, Any]:
        return {
            "peer": peer,
            "kind": self.kind,
            "recv_s": statistics.median(self.recv),
            "best_pass_recv_s": min(self.passes),
            "latency_s": min(self.trips),
            "wrong": self.wrong,
        }


def _measure_round(
    ctx: RankContext,
    rnd: Round,
    buffers: _Buffers,
    pacer: Pacer,
    left: tuple[int, int, int],
    samples: dict[int, _Samples],
) -> None:
    """One round on this rank, in three phases, each begun together by every rank, so that the pairs
    of a round run at the same time and one pair's warm-up never overlaps another's timing."""
    peer = rnd.partner(ctx.rank)
    began = time.perf_counter()
    ctx.barrier()
    warm = pacer.warmup
    hint = _warm_up(ctx, peer, buffers.send, buffers.recv, warm) if peer is not None else 0.0
    iters, trips = pacer.fit(*left, hint)
    ctx.barrier()
    timing = time.perf_counter()
    timed = _time_exchange(ctx, peer, buffers.send, buffers.recv, iters, hint) if peer is not None else None
    exchanges_s = time.perf_counter() - timing
    ctx.barrier()
    tripping = time.perf_counter()
    if peer is not None and timed is not None:
        link = samples.setdefault(peer, _Samples(rnd.kind))
        link.recv += timed[0]
        link.passes.append(statistics.median(timed[0]))
        link.trips.append(_time_round_trip(ctx, peer, buffers.ping, trips))
        link.wrong += int((buffers.recv != peer % 251).sum().item())
    done = time.perf_counter()
    pacer.spent(done - began, warm * hint, exchanges_s, done - tripping, iters, trips)


def _ops(peer: int, send: Any, recv: Any) -> list[Any]:
    import torch.distributed as dist

    return [dist.P2POp(dist.isend, send, peer), dist.P2POp(dist.irecv, recv, peer)]


def _warm_up(ctx: RankContext, peer: int, send: Any, recv: Any, warmup: int) -> float:
    """Untimed exchanges (the first one also connects the pair); the last one's seconds."""
    import torch.distributed as dist

    seconds = 0.0
    for _ in range(warmup):
        began = time.perf_counter()
        for work in dist.batch_isend_irecv(_ops(peer, send, recv)):
            work.wait()
        ctx.sync()
        seconds = time.perf_counter() - began
        ctx.tick()
    return seconds


def _time_exchange(
    ctx: RankContext, peer: int, send: Any, recv: Any, iters: int, hint: float
) -> tuple[list[float], list[float]]:
    """Seconds per exchange: until the peer's bytes are here (the peer -> this rank direction,
    on this rank's clock), and until both directions are done.

    On CPU each exchange is timed alone with perf_counter (the caller takes the median, robust
    to a descheduled rank); on GPUs CUDA events around all of them give one mean for both.
    """
    import torch
    import torch.distributed as dist

    ops = _ops(peer, send, recv)
    if ctx.device.type == "cuda":
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(iters):
            ctx.faults.slowlink(hint)
            for work in dist.batch_isend_irecv(ops):
                work.wait()
            ctx.tick()
        end.record()
        end.synchronize()
        seconds = start.elapsed_time(end) / 1e3 / iters
        return [seconds], [seconds]
    recv_times, exchange_times = [], []
    for _ in range(iters):
        began = time.perf_counter()
        ctx.faults.slowlink(hint)  # inside the timed region: the injected slowness is measured
        posted = time.perf_counter()
        works = dist.batch_isend_irecv(ops)
        works[1].wait()
        arrived = time.perf_counter()
        works[0].wait()
        done = time.perf_counter()
        hint = done - posted  # the exchange's own time, without the injected wait
        recv_times.append(arrived - began)
        exchange_times.append(done - began)
        ctx.tick()
    return recv_times, exchange_times


def _time_round_trip(ctx: RankContext, peer: int, ping: Any, iters: int) -> float:
    """One-way latency: half the shortest round trip of a 4-byte message.

    The shortest, not the mean as osu_latency quotes: on a busy host every wake-up of a
    descheduled rank adds to a round trip, noise only ever adds, and a slow path is slow on
    every trip.
    """
    import torch.distributed as dist

    first = ctx.rank < peer
    trips, hint = [], 0.0
    for _ in range(iters + 1):  # the first round trip is a warm-up
        began = time.perf_counter()
        if not first:
            dist.recv(ping, peer)
        waited = time.perf_counter()
        ctx.faults.slowlink(hint)  # inside the round trip: the injected slowness is measured
        slept = time.perf_counter() - waited
        dist.send(ping, peer)
        if first:
            dist.recv(ping, peer)
        ctx.sync()
        trips.append(time.perf_counter() - began)
        hint = trips[-1] - slept  # the round trip's own time, without the injected wait
        ctx.tick()
    return min(trips[1:]) / 2


# ---------------------------------------------------------------- judge
def judge(data: list[dict[str, Any]], identities: list[dict[str, Any]], opts: LinksOptions) -> Report:
    assert opts.threshold is not None
    links = LinkColumns.from_rank_data(data)
    kinds = {k: links.inter == (k == INTER) for k in (INTRA, INTER)}
    kinds = {k: mask for k, mask in kinds.items() if mask.any()}
    bandwidth, latency = {}, {}
    for kind, mask in kinds.items():
        src, dst = links.src[mask], links.dst[mask]
        # A single link is named only when even its fastest pass was slow: a burst of load that
        # starved one pair for a moment does not last through three passes; a slow cable does.
        bandwidth[kind] = find_slow_links(src, dst, links.gbps[mask], opts.threshold, links.best_gbps[mask])
        speed = np.maximum(links.latency_us[mask], 1e-3)
        latency[kind] = find_slow_links(src, dst, np.divide(1, speed, out=speed), opts.threshold)
    counts = {k: int(m.sum()) for k, m in kinds.items()}
    report = Report(command="links")
    report.checks.append(judge_rank_map(identities))
    report.checks.append(_judge_data(links, identities))
    report.checks.append(
        _judge_speed("link bandwidth", bandwidth, counts, identities, opts.threshold, "gbps")
    )
    latency_check = _judge_speed("link latency", latency, counts, identities, opts.threshold, "latency")
    if latency_check.status == Status.FAIL and all(i.get("device", "cpu") == "cpu" for i in identities):
        # On CPU ranks a 4-byte round trip is mostly the scheduler waking a rank: worth a look,
        # not a failed run.
        latency_check = replace(latency_check, status=Status.WARN)
    report.checks.append(latency_check)
    _annotate(links, kinds, bandwidth, latency, latency_check.status, len(identities))
    if opts.min_gbps is not None:
        report.checks.append(_judge_floor(links, identities, opts.min_gbps))
    culprits = {r for c in report.checks if c.status == Status.FAIL for r in c.ranks}
    rounds = counted(data[0]["rounds"], "round") + (
        f" x {data[0]['passes']} passes" if data[0].get("passes", 1) > 1 else ""
    )
    report.tables += link_tables(links, identities, data[0]["size_bytes"], rounds, culprits)
    budget = budget_findings(data[0].get("budget"))
    if budget:
        report.checks.append(budget[0])
        report.tables.append(budget[1])
    return report


def _annotate(
    links: LinkColumns,
    kinds: dict[str, np.ndarray],
    bandwidth: dict[str, Findings],
    latency: dict[str, Findings],
    latency_status: Status,
    world: int,
) -> None:
    """Each link's ratio to its kind's reference median, and the verdict of the findings that name it."""
    references = {INTRA: np.nan, INTER: np.nan}
    for kind, found in bandwidth.items():
        # With one pair only there is no reference: compare with the median of everything measured.
        reference = found.reference.median if found.reference else float(np.median(links.gbps[kinds[kind]]))
        references[kind] = reference if reference > 0 else np.nan
    # Each link against its kind's reference, every link at once (NaN where there is none).
    ratio = np.divide(links.gbps, references[INTER])
    intra = ~links.inter
    ratio[intra] = links.gbps[intra] / references[INTRA]
    links.ratio = np.round(ratio, 3, out=ratio)
    links.status = np.full(len(links), PASS, dtype=np.int8)
    slow_latency = sorted(set().union(*(_blamed(f) for f in latency.values())))
    if slow_latency:  # then the latency check failed (or warns, on CPU ranks)
        links.status[links.index_of(slow_latency, world)] = STATUSES.index(latency_status.value)
    slow_bandwidth = sorted(set().union(*(_blamed(f) for f in bandwidth.values())))
    if slow_bandwidth:
        links.status[links.index_of(slow_bandwidth, world)] = FAIL
    links.status[links.wrong != 0] = FAIL
    links.round_figures()


def _blamed(found: Findings) -> set[tuple[int, int]]:
    return {p for s in found.ranks for p in s.slow} | {(link.src, link.dst) for link in found.links}


def _judge_data(links: LinkColumns, identities: list[dict[str, Any]]) -> Check:
    bad = np.flatnonzero(links.wrong)
    if not len(bad):
        return Check(
            "link data", Status.PASS, f"every byte of {counted(len(links), 'transfer')} arrived intact"
        )
    pairs = [[int(links.src[i]), int(links.dst[i])] for i in bad]
    wrong = links.wrong[bad[:FINDINGS_SHOWN]].tolist()
    text = ", ".join(f"{s} → {d}: {w:,} wrong bytes" for (s, d), w in zip(pairs, wrong, strict=False))
    ranks = sorted({r for pair in pairs for r in pair})
    return Check(
        "link data",
        Status.FAIL,
        f"bytes changed in transit ({text})",
        ranks,
        hosts_of(ranks, identities),
        pairs,
    )


def _fmt(value: float, measure: str) -> str:
    """A speed as the user reads it: GB/s, or (for latency, judged as 1/latency) microseconds."""
    if measure == "gbps":
        return f"{value:.3g} GB/s"
    return f"{1 / value:.3g} us"


def _judge_speed(
    name: str,
    findings: dict[str, Findings],
    counts: dict[str, int],
    identities: list[dict[str, Any]],
    threshold: float,
    measure: str,
) -> Check:
    parts: list[str] = []
    ranks: list[int] = []
    pairs: list[list[int]] = []
    for kind, found in findings.items():
        parts += _rank_findings(kind, found.ranks, identities, measure)
        parts += _link_findings(kind, found.links, identities, measure)
        ranks += [s.rank for s in found.ranks] + [r for link in found.links for r in (link.src, link.dst)]
        pairs += [list(p) for p in sorted(_blamed(found))]
    if parts:
        shown = "; ".join(parts[:FINDINGS_SHOWN]) + (
            f"; and {len(parts) - FINDINGS_SHOWN} more" if len(parts) > FINDINGS_SHOWN else ""
        )
        ranks = sorted(set(ranks))
        return Check(name, Status.FAIL, shown, ranks, hosts_of(ranks, identities), pairs)
    summary, comparable = [], False
    for kind, found in findings.items():
        count = counts[kind]
        if found.reference is None or count < 3:
            summary.append(
                f"{kind}-node: one pair of ranks, nothing to compare it with (--min-gbps sets a floor)"
            )
            continue
        comparable = True
        spread = found.reference.sigma / found.reference.median if found.reference.median else 0.0
        summary.append(
            f"{kind}-node: {counted(count, 'link')}, median {_fmt(found.reference.median, measure)} "
            f"(spread {spread:.0%}), none {'below' if measure == 'gbps' else 'above'} "
            f"{threshold if measure == 'gbps' else 1 / threshold:.3g} x the median"
        )
    return Check(name, Status.PASS if comparable else Status.SKIP, "; ".join(summary))


def _rank_findings(
    kind: str, slow: list[SlowRank], identities: list[dict[str, Any]], measure: str
) -> list[str]:
    """One phrase per slow host (when every rank of a node is slow) or per slow rank."""
    if not slow:  # a healthy fleet: no pass over its ranks
        return []
    by_node: dict[tuple[str, int], list[SlowRank]] = defaultdict(list)
    for s in slow:
        by_node[node_of(identities[s.rank])].append(s)
    node_sizes = Counter(node_of(ident) for ident in identities)
    labels = node_labels(identities)
    parts = []
    for node, found in by_node.items():
        whole = len(found) == node_sizes[node] and (kind == INTER or len(found) > 1)
        median = statistics.median(s.median for s in found)
        reference = statistics.median(s.reference for s in found)
        direction = {s.direction for s in found}
        way = "from" if direction == {"out"} else "into" if direction == {"in"} else "of"
        kind_words = "" if kind == INTER else "intra-node "
        if whole:
            who = f"host {labels[node]}"
            if len(found) > 1:
                who += f" ({span([s.rank for s in found])})"
            every = "every " if all(len(s.slow) == s.total for s in found) else "most "
            links = "link" if every == "every " else "links"
            parts.append(
                f"{every}{kind_words}{links} {way} {who}: {_fmt(median, measure)} against a median of "
                f"{_fmt(reference, measure)}: {CAUSE[(kind, 'host')]}"
            )
            continue
        for s in found:
            ways = {"out": " (sending)", "in": " (receiving)", "both": " (both ways)"}[s.direction]
            parts.append(
                f"{where(s.rank, identities)}: {len(s.slow)} of its {s.total} {kind}-node links slow{ways}, "
                f"{_fmt(s.median, measure)} against a median of {_fmt(s.reference, measure)}: "
                f"{CAUSE[(kind, 'rank')]}"
            )
    return parts


def _link_findings(
    kind: str, slow: list[SlowLink], identities: list[dict[str, Any]], measure: str
) -> list[str]:
    """One phrase per slow link; both directions of a pair in one."""
    by_pair: dict[tuple[int, int], list[SlowLink]] = defaultdict(list)
    for link in slow:
        by_pair[(min(link.src, link.dst), max(link.src, link.dst))].append(link)
    parts = []
    for (a, b), found in by_pair.items():
        arrow, (s, d) = ("↔", (a, b)) if len(found) == 2 else ("→", (found[0].src, found[0].dst))
        hosts = f"{identities[s]['host']} {arrow} {identities[d]['host']}"
        value = min(link.value for link in found)
        parts.append(
            f"link {s} {arrow} {d} (host {hosts}, {kind}-node): {_fmt(value, measure)} against a median of "
            f"{_fmt(found[0].reference, measure)}: {CAUSE[(kind, 'link')]}"
        )
    return parts


def _judge_floor(links: LinkColumns, identities: list[dict[str, Any]], floor: float) -> Check:
    below = np.flatnonzero(links.gbps < floor)
    if not len(below):
        slowest = links.row(int(np.argmin(links.gbps)), identities)
        return Check(
            "bandwidth floor",
            Status.PASS,
            f"every link >= --min-gbps {floor:g} (slowest {slowest['gbps']:.3g} GB/s, "
            f"{slowest['src']} → {slowest['dst']})",
        )
    below = below[np.argsort(links.gbps[below], kind="stable")]
    low = [links.row(i, identities) for i in below[:FINDINGS_SHOWN]]
    text = ", ".join(
        f"{r['src']} → {r['dst']} ({r['src_host']} → {r['dst_host']}) {r['gbps']:.3g} GB/s" for r in low
    )
    more = f" and {len(below) - FINDINGS_SHOWN} more" if len(below) > FINDINGS_SHOWN else ""
    ranks = np.union1d(links.src[below], links.dst[below]).tolist()
    named = describe_ranks(ranks, identities) if len(ranks) <= FINDINGS_SHOWN else counted(len(ranks), "rank")
    return Check(
        "bandwidth floor",
        Status.FAIL,
        f"{counted(len(below), 'link')} below --min-gbps {floor:g}: {text}{more} (touching {named})",
        ranks,
        hosts_of(ranks, identities),
        [[int(links.src[i]), int(links.dst[i])] for i in below],
    )
