"""A run that could not complete, explained: who crashed, hung or froze, where, and why.

Pure functions over what the launcher saw - every rank's last status, the
exit codes the agent collected, the watchdog's stall snapshot - so they are
unit-tested with synthetic data.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from ddpcheck.report import Check, Report, Status, Table, Verdict
from ddpcheck.status import FROZEN_AFTER_S

# Errors a rank raises because a *peer* went away: collateral, not the root cause.
COLLATERAL_MARKERS = (
    "connection closed by peer",
    "connection reset by peer",
    "broken pipe",
    "timed out",
    "timeout",
    "socket closed",
    "ended the connection",
    "sigterm",
    "signalexception",
    "keyboardinterrupt",
)
PRE_JOIN_STAGES = ("launched", "device", "join")

STAGES_COLUMNS = {
    "rank": "rank",
    "host": "host",
    "pid": "pid",
    "stage": "last stage",
    "in_stage_s": "in stage (s)",
    "heartbeat_s": "heartbeat (s ago)",
    "state": "state",
}


def report_for(
    *,
    command: str,
    plan: Any,
    statuses: dict[int, dict[str, Any]],
    exits: dict[int, dict[str, Any]],
    stall: dict[str, Any] | None,
    launch_error: str | None,
    log_tail: Callable[[int], str],
    now: float | None = None,
) -> Report:
    """The report of a run whose rank 0 never produced one."""
    report = Report(command=command)
    report.world = {
        "size": plan.world_size,
        "backend": plan.backend,
        "device": plan.device,
        "nodes": plan.nnodes,
    }
    report.notes = list(plan.notes)
    report.ranks = [
        {k: s.get(k) for k in ("rank", "local_rank", "host", "pid")} for _, s in sorted(statuses.items())
    ]
    add_findings(report, plan, statuses, exits, stall, launch_error, log_tail, now)
    return report


def add_findings(
    report: Report,
    plan: Any,
    statuses: dict[int, dict[str, Any]],
    exits: dict[int, dict[str, Any]],
    stall: dict[str, Any] | None,
    launch_error: str | None,
    log_tail: Callable[[int], str],
    now: float | None = None,
) -> None:
    if now is None:
        # Ages are as of the moment the watchdog gave up, not of this (later) report.
        now = stall.get("at", time.time()) if stall else time.time()
    if launch_error:
        report.checks.append(Check("launch", Status.ERROR, _one_line(launch_error)))
    if stall and (statuses or not launch_error):
        report.checks.append(judge_stall(stall, plan.nproc, now))
    crashed = crash_culprits(statuses, exits) if not stall else []
    for rank in crashed:
        report.checks.append(describe_crash(rank, statuses.get(rank, {}), exits.get(rank, {})))
    if not report.checks:
        report.checks.append(
            Check("launch", Status.ERROR, "the ranks ended without a report; see the rank logs")
        )
    report.tables.append(stages_table(statuses, exits, stall, now))
    tails = [
        {"rank": rank, "host": statuses.get(rank, {}).get("host"), "stderr_tail": log_tail(rank)}
        for rank in sorted({r for c in report.checks for r in c.ranks})
    ]
    tails = [t for t in tails if t["stderr_tail"]]
    if tails:
        report.tables.append(
            Table(
                "stderr",
                "Last lines of stderr of the ranks at fault",
                {"rank": "rank", "stderr_tail": "stderr"},
                tails,
            )
        )


def crash_culprits(statuses: dict[int, dict[str, Any]], exits: dict[int, dict[str, Any]]) -> list[int]:
    """Ranks that failed first-hand; peers that merely lost their connection are left out."""
    failed = sorted(set(exits) | {r for r, s in statuses.items() if s.get("error")})
    root = [r for r in failed if not _is_collateral(statuses.get(r, {}), exits.get(r, {}))]
    if root:
        return root
    if not failed:
        return []
    # Everyone reports a lost peer: the first to fail is the best lead.
    first = min(failed, key=lambda r: statuses.get(r, {}).get("error_at") or float("inf"))
    return [first]


def _is_collateral(status: dict[str, Any], exit_info: dict[str, Any]) -> bool:
    message = (status.get("error") or "").lower()
    if message:
        return any(marker in message for marker in COLLATERAL_MARKERS)
    # No error of its own: torn down by the agent after another rank failed, or died on its own.
    return exit_info.get("signal") in ("SIGTERM", "SIGINT", "SIGHUP")


def describe_crash(rank: int, status: dict[str, Any], exit_info: dict[str, Any]) -> Check:
    who = _who(rank, status, exit_info)
    stage = status.get("stage", "before it reported any stage")
    if status.get("error"):
        how = "raised an exception"
    elif exit_info.get("signal"):
        how = f"was killed by {exit_info['signal']}"
    elif exit_info.get("exitcode") is not None:
        how = f"exited with code {exit_info['exitcode']}"
    else:
        how = "failed"
    detail = f"{who} {how} at stage '{stage}'"
    if status.get("error"):
        detail += f": {_one_line(status['error'])}"
    hosts = [status["host"]] if status.get("host") else []
    return Check("rank crashed", Status.ERROR, detail, [rank], hosts)


def judge_stall(stall: dict[str, Any], nproc: int, now: float) -> Check:
    """Name the ranks that are behind or frozen when no rank made progress for the timeout."""
    statuses: dict[int, dict[str, Any]] = stall["statuses"]
    alive: dict[int, str] | None = stall.get("alive")
    waited = stall["waited_s"]

    def is_live(s: dict[str, Any]) -> bool:
        return alive is None or not alive or s.get("pid") in alive

    present_local = {s.get("local_rank") for s in statuses.values()}
    missing_local = [lr for lr in range(nproc) if lr not in present_local]
    live = {r: s for r, s in statuses.items() if is_live(s)}
    frozen = [
        r
        for r, s in live.items()
        if (alive or {}).get(s.get("pid")) == "stopped" or now - s.get("heartbeat", now) > FROZEN_AFTER_S
    ]
    furthest = max((s["seq"] for s in statuses.values()), default=0)
    behind = [r for r, s in live.items() if s["seq"] < furthest and r not in frozen]
    finished = [r for r in statuses if r not in live]
    if not frozen and not behind and finished:
        behind = sorted(live)  # the others completed and left; these never did
    culprits = sorted(set(frozen) | set(behind))
    parts = []
    for r in sorted(frozen):
        s = statuses[r]
        state = "stopped (SIGSTOP)" if (alive or {}).get(s.get("pid")) == "stopped" else "frozen"
        parts.append(
            f"{_who(r, s)} is {state}: no heartbeat for {now - s.get('heartbeat', now):.0f} s, "
            f"last seen at stage '{s['stage']}'"
        )
    for r in sorted(behind):
        s = statuses[r]
        if s["stage"] in PRE_JOIN_STAGES:
            parts.append(
                f"{_who(r, s)} never joined the process group (alive, last seen at stage '{s['stage']}')"
            )
        else:
            parts.append(f"{_who(r, s)} is behind: alive but stuck at stage '{s['stage']}'")
    if missing_local:
        parts.append(f"local rank(s) {', '.join(map(str, missing_local))} never started")
    waiting = sorted(r for r in live if r not in culprits)
    if not culprits and not missing_local:
        culprits = sorted(live)
        stage = statuses[culprits[0]]["stage"] if culprits else "?"
        parts.append(f"every rank is alive and stuck at stage '{stage}' (a collective that never completes)")
    elif waiting:
        stages = sorted({statuses[r]["stage"] for r in waiting})
        parts.append(
            f"rank{'s' if len(waiting) > 1 else ''} {_ranks(waiting)} waited {waited:.0f} s "
            f"at {', '.join(repr(x) for x in stages)}"
        )
    if finished:
        parts.append(f"rank{'s' if len(finished) > 1 else ''} {_ranks(sorted(finished))} finished")
    hosts = list(dict.fromkeys(statuses[r]["host"] for r in culprits if r in statuses))
    return Check("hang", Status.ERROR, "; ".join(parts), culprits, hosts)


def stages_table(
    statuses: dict[int, dict[str, Any]],
    exits: dict[int, dict[str, Any]],
    stall: dict[str, Any] | None,
    now: float,
) -> Table:
    alive = (stall or {}).get("alive", {})
    if stall:
        # Describe the ranks as the watchdog found them, before it killed them.
        statuses, exits = stall["statuses"], {}
    rows = []
    for rank, s in sorted(statuses.items()):
        exit_info = exits.get(rank, {})
        if exit_info.get("signal"):
            state = f"killed ({exit_info['signal']})"
        elif exit_info.get("exitcode"):
            state = f"exited {exit_info['exitcode']}"
        elif s.get("error"):
            state = "raised"
        elif alive.get(s.get("pid")) == "stopped":
            state = "stopped"
        elif stall and now - s.get("heartbeat", now) > FROZEN_AFTER_S:
            state = "frozen"
        elif stall and alive and s.get("pid") not in alive:
            state = "exited"
        elif s.get("stage") == "done":
            state = "done"
        else:
            state = "alive"
        rows.append(
            {
                "rank": rank,
                "local_rank": s.get("local_rank"),
                "host": s.get("host"),
                "pid": s.get("pid"),
                "stage": s.get("stage"),
                "in_stage_s": round(now - s.get("stage_since", now), 1),
                "heartbeat_s": round(now - s.get("heartbeat", now), 1),
                "state": state,
                "error": s.get("error"),
            }
        )
    return Table("stages", "Where every rank was last seen", STAGES_COLUMNS, rows)


def remote_node_report(command: str, plan: Any, verdict: Verdict, report_host: str) -> Report:
    """This node's ranks finished; rank 0's node printed the report and shared its verdict."""
    report = Report(command=command)
    report.world = {
        "size": plan.world_size,
        "backend": plan.backend,
        "device": plan.device,
        "nodes": plan.nnodes,
        "report_on": report_host,
    }
    status = {Verdict.PASS: Status.PASS, Verdict.FAIL: Status.FAIL, Verdict.ERROR: Status.ERROR}[verdict]
    report.checks.append(
        Check(
            "remote verdict",
            status,
            f"node {plan.node_rank}: its {plan.nproc} ranks finished; the report is on host "
            f"{report_host} (rank 0), verdict {verdict.value}",
        )
    )
    return report


def _who(rank: int, status: dict[str, Any], exit_info: dict[str, Any] | None = None) -> str:
    host = status.get("host", "?")
    pid = status.get("pid") or (exit_info or {}).get("pid", "?")
    return f"rank {rank} (host {host}, pid {pid})"


def _ranks(ranks: list[int]) -> str:
    return ", ".join(map(str, ranks))


def _one_line(text: str) -> str:
    lines = [line.strip() for line in str(text).strip().splitlines() if line.strip()]
    return lines[-1] if lines else ""
