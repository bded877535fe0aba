"""What the straggler judge's Judgement says: watch's stderr lines, the `stragglers` check and tables."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict
from typing import Any

from ddpcheck.failure.stragglers.judge import (
    GroupJudgement,
    Judgement,
    Skip,
    StragglerVerdict,
    Thresholds,
    Unjudged,
)
from ddpcheck.failure.stragglers.timeline import Estimator
from ddpcheck.report.model import Check, Status, Table
from ddpcheck.report.naming import counted

NAME = "stragglers"  # the check's and the per-rank table's name
HEAT = "straggler_lag"  # the report's table of the heat map's rows (JSON and HTML only)
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
    "named": "named",
}
# Below this a window is its WINDOW_MIN collectives, not a minute (early in a run): the line says so.
SHORT_WINDOW_S = 10.0


# ---------------------------------------------------------------- the lines watch says while the job runs
def stderr_line(verdict: StragglerVerdict) -> str:
    """The one line `watch` prints while the job runs, e.g. `ddpcheck watch: rank 5 (host b07) is
    slowing the job: its peers waited 31% of the last 60 s for it, at all_reduce`."""
    return f"ddpcheck watch: {_said(verdict)}"


def recovered_line(group: str, ranks: tuple[int, ...]) -> str:
    """The one line once the ranks a verdict named no longer slow their group."""
    where = f" of group {group}" if group != "0" else ""
    return (
        f"ddpcheck watch: {_ranks(ranks)} no longer {'slows' if len(ranks) == 1 else 'slow'} the job{where}"
    )


def _said(v: StragglerVerdict) -> str:
    one = len(v.ranks) == 1
    who = _ranks(v.ranks)
    if v.hosts:
        who += f" (host{'' if len(v.hosts) == 1 else 's'} {', '.join(v.hosts)})"
    where = f" in group {group_name(v.group, v.group_desc)}" if v.group != "0" else ""
    verb, their, them = ("is", "its", "it") if one else ("are", "their", "them")
    return (
        f"{who} {verb} slowing the job: {their} peers waited {v.peers_wait_share:.0%} of the last "
        f"{window_text(v.window_s, v.collectives)} for {them}, at {v.op}{where}"
    )


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
    return [f"{label(g)}: {_skip_text(g, judgement.thresholds)}" for g in judgement.groups if g.skipped]


def _skip_text(g: GroupJudgement, thresholds: Thresholds) -> str:
    match g.skipped:
        case Skip.SINGLE_RANK:
            return "a single rank: nobody to compare with"
        case Skip.ALONE_ON_HOST:
            return (
                f"{_ranks(g.ranks)} alone on their host and no clock offsets measured: enqueue times of "
                "different hosts' clocks are not compared"
            )
        case Skip.TOO_FEW:
            return (
                f"too few collectives held by every rank ({g.compared}, at least "
                f"{thresholds.min_collectives} needed): the job was watched too briefly"
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
    shown = [
        {
            **row,
            "work_s": round(row["work_s"], 6),
            "lag_s": round(row["lag_s"], 6),
            "wait_share": round(row["wait_share"], 4),
            "late_share": round(row["late_share"], 4),
        }
        for row in rows
    ]
    return Table(NAME, "Stragglers: {group}", dict(TABLE_COLUMNS), shown, group_by="group")


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
    why = reason(judgement)
    if why is not None:
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
    judged = judgement.judged
    per_group: dict[str, int] = {}  # one host's ranks of a group, or all of them: count it once
    for g in judged:
        per_group[g.group] = max(per_group.get(g.group, 0), g.collectives)
    window = max(g.window_s for g in judged)
    apart = ", each host's ranks among themselves" if any(g.host for g in judged) else ""
    if any(g.estimator == Estimator.ALIGNED for g in judged):
        apart = ", across hosts, their clocks aligned by measured offsets"
    detail = (
        f"no rank slows the job ({sum(per_group.values())} collectives of {counted(len(per_group), 'group')} "
        f"compared{apart}, over {_span(window)})"
    )
    return Check(NAME, Status.PASS, detail + skipped)


# ---------------------------------------------------------------- small words
def group_name(pg: str, desc: str) -> str:
    return f"{pg} ({desc})" if desc and desc != pg else pg


def _ranks(ranks: Sequence[int]) -> str:
    """`rank 5`, `ranks 4, 12`: every rank named (no range, unlike naming.span)."""
    return f"rank {ranks[0]}" if len(ranks) == 1 else f"ranks {', '.join(map(str, ranks))}"


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
