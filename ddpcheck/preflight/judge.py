"""preflight's verdicts, on rank 0: pure over what every rank measured (measure.py) or what the store
said (attendance.py), with the judges `ddpcheck allreduce` and every command use.
"""

from __future__ import annotations

from typing import Any

# Each GPU's facts judged as `ddpcheck devices` judges them (the one reach into a command's folder).
from ddpcheck.checks.devices import health
from ddpcheck.checks.sweep.fit import budget_findings
from ddpcheck.checks.sweep.judge import bandwidth_rows, bandwidth_table, judge_bandwidth, judge_data
from ddpcheck.preflight.attendance import Attendance
from ddpcheck.preflight.options import PreflightOptions
from ddpcheck.rank import assemble
from ddpcheck.rank.rankmap import judge_rank_map, rank_map_table
from ddpcheck.report.model import Check, Report, Status
from ddpcheck.report.naming import counted

COMMAND = "preflight"
ALL_REDUCE = "all_reduce"
DTYPE = "float32"


def judge_missing(came: Attendance, wait_s: float, world: dict[str, Any], opts: PreflightOptions) -> Report:
    """The report when a rank never came: the arrival alone (nothing else could run)."""
    hosts = {r: came.host_of(r) for r in came.missing}
    named = ", ".join(f"rank {r}" + (f" (host {hosts[r]})" if hosts[r] else "") for r in came.missing[:16])
    more = f" and {len(came.missing) - 16} more" if len(came.missing) > 16 else ""
    tally = f"{len(came.present)} of {came.world_size} ranks came"
    detail = f"{named}{more} did not arrive within {wait_s:.1f} s ({tally}): no collective was run"
    check = Check(
        "arrival",
        Status.ERROR,
        detail,
        list(came.missing),
        sorted({h for h in hosts.values() if h}),
    )
    ranks = [came.present[r] for r in sorted(came.present)]
    return Report(
        COMMAND, [check], world=world, ranks=ranks, options=_options(opts), injected=opts.injected()
    )


def judge(
    gathered: list[dict[str, Any]],
    came: Attendance,
    world: dict[str, Any],
    opts: PreflightOptions,
) -> Report:
    """Every rank's measurements -> the Report: arrival, the sum, bandwidth, versions, health, rank map."""
    identities = [g["identity"] for g in gathered]
    arrived = f"{counted(came.world_size, 'rank')} arrived in {came.waited_s:.2f} s"
    report = Report(command=COMMAND, checks=[Check("arrival", Status.PASS, arrived)])
    sweeps = [g["sweep"] for g in gathered]
    if sweeps[0] is not None:
        _judge_sweep(report, sweeps, identities, opts)
    if "health" in opts.checks:
        facts = [g["health"] for g in gathered]
        if all(f is None for f in facts):
            report.checks.append(Check("health", Status.SKIP, "CPU ranks: no GPU to read"))
        else:
            report.checks.append(health.judge(facts, identities))
            if report.checks[-1].status != Status.PASS:
                report.tables.append(health.table(facts, identities))
    if "rankmap" in opts.checks:
        report.checks.append(judge_rank_map(identities))
        if report.checks[-1].status != Status.PASS:
            report.tables.append(rank_map_table(identities))
    fingerprints = [g["fingerprint"] for g in gathered]
    report = assemble.from_ranks(report, identities, fingerprints, world, _options(opts))
    if "versions" not in opts.checks:
        report.checks = [c for c in report.checks if c.name != "nodes agree"]
    report.injected = opts.injected()
    return report


def _judge_sweep(
    report: Report, sweeps: list[dict[str, Any]], identities: list[dict[str, Any]], opts: PreflightOptions
) -> None:
    if sweeps[0].get("skipped"):
        for name in ("sum", "bandwidth"):
            if name in opts.checks:
                report.checks.append(Check(f"all_reduce {name}", Status.SKIP, str(sweeps[0]["skipped"])))
        return
    rows = bandwidth_rows(ALL_REDUCE, sweeps, DTYPE)
    if "sum" in opts.checks or any(r["wrong"] for r in rows):  # a wrong sum is never left unsaid
        report.checks.append(judge_data("all_reduce sum", ALL_REDUCE, rows, sweeps, identities))
    if "bandwidth" in opts.checks:
        check = judge_bandwidth("bandwidth", rows, len(sweeps), opts.min_busbw)
        check.detail = check.detail.replace("--min-busbw", "min_busbw")
        report.checks.append(check)
        n = len(sweeps)
        if n > 1:
            title = f"all_reduce bandwidth ({DTYPE}, {n} ranks, slowest rank's time)"
            report.tables.append(bandwidth_table("bandwidth", title, rows))
        budget = budget_findings([sweeps[0]])
        if budget and "(cut to fit)" in budget[0].detail:
            report.notes.append(f"bandwidth sample {budget[0].detail}")


def _options(opts: PreflightOptions) -> dict[str, Any]:
    return {
        "checks": list(opts.checks),
        "budget_s": opts.budget_s,
        "min_busbw": opts.min_busbw,
    }
