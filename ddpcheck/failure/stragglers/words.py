"""What the straggler judge's Judgement says: watch's stderr lines, the `stragglers` check and tables."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from ddpcheck.failure.stragglers.judge import (
    MIN_COLLECTIVES,
    GroupJudgement,
    Judgement,
    Skip,
    Slowdown,
    StragglerVerdict,
    Unjudged,
)
from ddpcheck.failure.stragglers.timeline import Estimator
from ddpcheck.failure.stragglers.why import Activity, Usage, Why
from ddpcheck.report.model import Check, Status, Table
from ddpcheck.report.naming import counted, listed

NAME = "stragglers"  # the check's and the per-rank table's name
HEAT = "straggler_lag"  # the report's table of the heat map's rows (JSON and HTML only)
WHY = "straggler_why"  # a row per named rank: where it was, what its process did, its GPU
SLOWDOWN = "straggler_slowdown"  # a row per group that slowed as a whole
ESTIMATED = {  # how the check's detail says which estimator was used
    Estimator.GPU: "from NCCL's GPU time in each collective (duration_ms)",
    Estimator.ENQUEUE: "from enqueue times (time_created_ns) on one clock",
    Estimator.ALIGNED: "from enqueue times (time_created_ns), the hosts' clocks aligned by measured offsets",
}
TABLE_COLUMNS = {
    "rank": "rank",
    "host": "host",
    "work_s": "work per collective (s)",
    "lag_s": "lag (s)",
    "wait_share": "peers' wait share",
    "late_share": "late at",
    "own_past": "vs own past",
    "named": "named",
}
ROUNDED = {"work_s": 6, "lag_s": 6, "wait_share": 4, "late_share": 4, "own_past": 3}  # the table's digits
WHY_COLUMNS = {
    "rank": "rank",
    "where": "where (sampled stacks)",
    "activity": "its process",
    "cpu_share": "CPU / wall",
    "peers_cpu_share": "peers' CPU / wall",
    "gpu_sm_clock_mhz": "GPU MHz",
    "peers_gpu_sm_clock_mhz": "peers' GPU MHz",
}
# Below this a window is its WINDOW_MIN collectives, not a minute (early in a run): the line says so.
SHORT_WINDOW_S = 10.0
# A rank's wait for a CPU is said beside what it did from this share on (a crowded host).
CROWDED_SHARE = 0.2


# ---------------------------------------------------------------- the lines watch says while the job runs
def stderr_line(verdict: StragglerVerdict) -> str:
    """The one line `watch` prints while the job runs, e.g. `ddpcheck watch: rank 5 (host b07) is
    slowing the job: its peers waited 31% of the last 60 s for it, at all_reduce`."""
    return f"ddpcheck watch: {_said(verdict)}"


def slowdown_line(g: GroupJudgement, slowdown: Slowdown) -> str:
    """The one line once a group slowed as a whole, nobody named (said once per group)."""
    return f"ddpcheck watch: {_slowed(g, slowdown)}"


def _slowed(g: GroupJudgement, s: Slowdown) -> str:
    where = f" in group {group_name(g.group, g.group_desc)}" if g.group != "0" else ""
    return (
        f"the whole job slowed {s.factor:.1f}x from {_span(s.since_s)} in "
        f"(collective #{s.since_seq}{where}): "
        f"its collectives {_seconds(s.after_s)} apart, {_seconds(s.before_s)} before; every rank alike, "
        "no rank slows the others"
    )


def recovered_line(group: str, ranks: tuple[int, ...]) -> str:
    """The one line once the ranks a verdict named no longer slow their group."""
    where = f" of group {group}" if group != "0" else ""
    return (
        f"ddpcheck watch: {listed(ranks)} no longer {'slows' if len(ranks) == 1 else 'slow'} the job{where}"
    )


def _said(v: StragglerVerdict) -> str:
    who = listed(v.ranks)
    if v.hosts:
        who += f" (host{'' if len(v.hosts) == 1 else 's'} {', '.join(v.hosts)})"
    where = f" in group {group_name(v.group, v.group_desc)}" if v.group != "0" else ""
    verb, their, them = ("is", "its", "it") if len(v.ranks) == 1 else ("are", "their", "them")
    reasons = "".join(f"; {because(why, len(v.why) > 1)}" for why in v.why if because(why, False))
    return (
        f"{who} {verb} slowing the job: {their} peers waited {v.peers_wait_share:.0%} of the last "
        f"{window_text(v.window_s, v.collectives)} for {them}, at {v.op}{where}{reasons}"
    )


def because(why: Why, say_rank: bool) -> str:
    """Why a named rank is slow, in one clause: `it was in load_batch (train.py:42), data loading, at 4 of
    5 samples; its process sleeping (CPU 3% of its time, its peers' 4%)`; "" when nothing was seen."""
    parts = []
    subject = f"rank {why.rank}" if say_rank else "it"
    if (w := why.where) is not None and w.text:
        parts.append(f"{subject} was in {w.text} at {w.there} of {counted(w.seen, 'sample')}")
    if why.usage is not None:
        owner = "its process" if parts else f"{subject} was"
        parts.append(f"{owner} {_activity(why.usage, why.peers)}")
    if why.gpu is not None and why.gpu_slower:
        parts.append(_gpu(why))
    return "; ".join(parts)


def _activity(u: Usage, peers: Usage | None) -> str:
    def theirs(share: float | None) -> str:
        return f", its peers' {share:.0%}" if peers is not None and share is not None else ""

    cpu = f"CPU {u.cpu_share:.0%} of its time{theirs(peers and peers.cpu_share)}"
    queued = u.queued_share or 0.0
    crowded = (
        f"; waiting for a CPU {queued:.0%}{theirs(peers and peers.queued_share)}"
        if queued >= CROWDED_SHARE and u.activity is not Activity.WAITING_FOR_CPU
        else ""
    )
    match u.activity:
        case Activity.STOPPED:
            return f"stopped {u.stopped_share:.0%} of the time, not runnable ({cpu}{crowded})"
        case Activity.BUSY:
            return f"busy computing, runnable {u.cpu_share + queued:.0%} of the time ({cpu}{crowded})"
        case Activity.WAITING_FOR_CPU:
            their = theirs(peers and peers.queued_share)
            return (
                f"runnable but waiting for a CPU {queued:.0%} of the time{their}: throttled, or its core "
                f"shared ({cpu})"
            )
        case Activity.IO:
            return f"waiting on I/O (in disk sleep at {u.io_share:.0%} of looks; {cpu}{crowded})"
    return f"sleeping ({cpu}{crowded})"


def _gpu(why: Why) -> str:
    g, peers = why.gpu, why.peers_gpu
    assert g is not None
    said = [f"{g.sm_clock_mhz:.0f} MHz" if g.sm_clock_mhz is not None else "?"]
    if peers is not None and peers.sm_clock_mhz is not None:
        said[0] += f" (its peers' {peers.sm_clock_mhz:.0f})"
    if g.power_w is not None:
        said.append(f"{g.power_w:.0f} W")
    if g.temperature_c is not None:
        said.append(f"{g.temperature_c:.0f} °C")
    if g.throttle:
        said.append(f"slowed by {', '.join(g.throttle)}")
    return f"its GPU at {', '.join(said)}"


def window_text(window_s: float, collectives: int) -> str:
    """A window as a person says it: `60 s`; a short one with its collectives, `0.7 s (20 collectives)`."""
    if window_s >= SHORT_WINDOW_S:
        return _span(window_s)
    return f"{_span(window_s)} ({counted(collectives, 'collective')})"


# ---------------------------------------------------------------- the report
def label(g: GroupJudgement) -> str:
    """`group 0 (default_pg)`, `group 0 (default_pg) on host b06`: how a compared unit is named."""
    where = f" on host {g.host}" if g.host else ""
    return f"group {group_name(g.group, g.group_desc)}{where}"


def reason(judgement: Judgement) -> str | None:
    """Why nothing was judged (the check is SKIP), None when something was."""
    match judgement.unjudged:
        case None:
            return None
        case Unjudged.NO_SAMPLE:
            said = "no flight-recorder sample was taken"
            if judgement.requests is None:
                return said
            if judgement.requests:
                return f"{said}: no rank answered ({counted(judgement.requests, 'request')})"
            return f"{said}: the job ended before the first sample"
        case Unjudged.NO_COLLECTIVES:
            return "the job ran no collectives: nothing to compare (p2p operations are not judged)"
        case Unjudged.SINGLE_RANKS:
            return "every process group has a single rank: nobody to compare with"
        case Unjudged.SKIPPED:
            return "; ".join(dict.fromkeys(_skipped(judgement)))


def _skipped(judgement: Judgement) -> list[str]:
    return [f"{label(g)}: {_skip_text(g)}" for g in judgement.groups if g.skipped]


def _skip_text(g: GroupJudgement) -> str:
    match g.skipped:
        case Skip.SINGLE_RANK:
            return "a single rank: nobody to compare with"
        case Skip.ALONE_ON_HOST:
            return (
                f"{listed(g.ranks)} alone on their host and no clock offsets measured: enqueue times of "
                "different hosts' clocks are not compared"
            )
        case Skip.TOO_FEW:
            return (
                f"too few collectives held by every rank ({g.compared}, at least "
                f"{MIN_COLLECTIVES} needed): the job was watched too briefly"
            )
    return ""


def rank_rows(judgement: Judgement) -> list[dict[str, Any]]:
    """The per-rank table's rows, every judged group's ranks: work per collective, lag, wait share (what
    names a rank), and the share of the window's collectives it was late at (evidence)."""
    return [
        {"group": label(g), **asdict(f), "late_share": f.late / g.collectives if g.collectives else 0.0}
        for g in judgement.judged
        for f in g.figures
    ]


def table(judgement: Judgement) -> Table | None:
    """The per-rank table for the report (one per group on the terminal), None when nothing was judged."""
    rows = rank_rows(judgement)
    if not rows:
        return None
    shown = [{**row, **{name: _round(row[name], digits) for name, digits in ROUNDED.items()}} for row in rows]
    return Table(NAME, "Stragglers: {group}", dict(TABLE_COLUMNS), shown, group_by="group")


def why_rows(judgement: Judgement) -> list[dict[str, Any]]:
    """A row per named rank of each verdict: where it was, what its process did, its GPU and its peers'."""
    rows = []
    for v in judgement.verdicts:
        for why in v.why:
            u, w, g, pg = why.usage, why.where, why.gpu, why.peers_gpu
            rows.append(
                {
                    "group": group_name(v.group, v.group_desc),
                    "rank": why.rank,
                    "where": (w.text if w else "") or None,
                    "where_samples": f"{w.there}/{w.seen}" if w else None,
                    "activity": str(u.activity) if u else None,
                    "cpu_share": _round(u.cpu_share if u else None),
                    "peers_cpu_share": _round(why.peers.cpu_share if why.peers else None),
                    "peers_queued_share": _round(why.peers.queued_share if why.peers else None),
                    "peers_stopped_share": _round(why.peers.stopped_share if why.peers else None),
                    "stopped_share": _round(u.stopped_share if u else None),
                    "queued_share": _round(u.queued_share if u else None),
                    "io_share": _round(u.io_share if u else None),
                    "seconds": _round(u.seconds if u else None),
                    "gpu_sm_clock_mhz": g.sm_clock_mhz if g else None,
                    "gpu_sm_clock_max_mhz": g.sm_clock_max_mhz if g else None,
                    "peers_gpu_sm_clock_mhz": pg.sm_clock_mhz if pg else None,
                    "gpu_power_w": g.power_w if g else None,
                    "peers_gpu_power_w": pg.power_w if pg else None,
                    "gpu_temperature_c": g.temperature_c if g else None,
                    "peers_gpu_temperature_c": pg.temperature_c if pg else None,
                    "gpu_throttle": list(g.throttle) if g else [],
                    "gpu_slower": why.gpu_slower,
                }
            )
    return rows


def slowdown_rows(judgement: Judgement) -> list[dict[str, Any]]:
    """A row per judged group whose collectives came further apart since a change (named rank or not)."""
    return [
        {
            "group": label(g),
            "factor": round(g.slowdown.factor, 3),
            "since_seq": g.slowdown.since_seq,
            "since_s": round(g.slowdown.since_s, 3),
            "before_s": round(g.slowdown.before_s, 6),
            "after_s": round(g.slowdown.after_s, 6),
            "named": g.verdict is not None,
        }
        for g in judgement.judged
        if g.slowdown is not None
    ]


def _round(value: float | None, digits: int = 4) -> float | None:
    return None if value is None else round(value, digits)


def heat_rows(judgement: Judgement) -> list[dict[str, Any]]:
    """A row per rank of each judged group: its lag per time bucket (seconds, None: no collective)."""
    return [
        {
            "group": label(g),
            "rank": rank,
            "host": host,
            "bucket_s": round(g.heat.bucket_s, 6),
            "named": any(f.rank == rank and f.named for f in g.figures),
            "lag_s": [None if v is None else round(v, 6) for v in lags],
        }
        for g in judgement.judged
        if g.heat is not None
        for rank, host, lags in zip(g.heat.ranks, g.heat.hosts, g.heat.lag_s, strict=True)
    ]


def check(judgement: Judgement) -> Check:
    """The report's `stragglers` check: WARN naming the ranks, PASS when none, SKIP with why not judged."""
    if (why := reason(judgement)) is not None:
        return Check(NAME, Status.SKIP, why)
    verdicts = judgement.verdicts
    skipped = "".join(f"; not judged: {s}" for s in _skipped(judgement))
    if verdicts:
        detail = "; ".join(
            f"{_said(v)} ({v.collectives} collectives of group {group_name(v.group, v.group_desc)}, "
            f"lag {_seconds(v.lag_s)} each, {ESTIMATED[v.estimator]})"
            for v in verdicts
        )
        ranks = sorted({r for v in verdicts for r in v.ranks})
        hosts = list(dict.fromkeys(h for v in verdicts for h in v.hosts))
        return Check(NAME, Status.WARN, detail + skipped, ranks, hosts)
    compared = _compared(judgement.judged)
    if judgement.slowdowns:
        detail = "; ".join(_slowed(g, s) for g, s in judgement.slowdowns)
        return Check(NAME, Status.WARN, f"{detail} ({compared}){skipped}")
    return Check(NAME, Status.PASS, f"no rank slows the job ({compared}){skipped}")


def _compared(judged: list[GroupJudgement]) -> str:
    """`120 collectives of 1 group compared, over 5.0 s`."""
    per_group: dict[str, int] = {}  # one host's ranks of a group, or all of them: count it once
    for g in judged:
        per_group[g.group] = max(per_group.get(g.group, 0), g.collectives)
    window = max(g.window_s for g in judged)
    apart = ", each host's ranks among themselves" if any(g.host for g in judged) else ""
    if any(g.estimator == Estimator.ALIGNED for g in judged):
        apart = ", across hosts, their clocks aligned by measured offsets"
    return (
        f"{sum(per_group.values())} collectives of {counted(len(per_group), 'group')} "
        f"compared{apart}, over {_span(window)}"
    )


# ---------------------------------------------------------------- small words
def group_name(pg: str, desc: str) -> str:
    return f"{pg} ({desc})" if desc and desc != pg else pg


def _span(seconds: float) -> str:
    """A while in seconds, never milliseconds (a window is a while, not a latency): 60 s, 5.2 s, 0.05 s."""
    if round(seconds, 1) >= 10:  # 9.96 s is 10 s, not 10.0 s
        return f"{seconds:.0f} s"
    return f"{seconds:.1f} s" if seconds >= 0.1 else f"{seconds:.2g} s"


def _seconds(value: float) -> str:
    if value >= 10:
        return f"{value:.0f} s"
    if value >= 1:
        return f"{value:.1f} s"
    return f"{value * 1e3:.1f} ms" if value >= 1e-3 else f"{value * 1e6:.0f} µs"
