"""A run of ddpcheck's that could not complete, explained: who crashed, hung or froze, where, and why.

Pure functions over what the launcher saw - every rank's last status, the
exit codes the agent collected, the monitor's stall snapshot - so they are
unit-tested with synthetic data. The ranks call them too, inline, under torchrun, srun or mpirun.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ddpcheck.failure import liveness
from ddpcheck.failure.collectives import with_last_collectives
from ddpcheck.failure.error_texts import connection_dropped, is_collateral_error, store_waited_for
from ddpcheck.failure.flight import RankTrace
from ddpcheck.failure.liveness import Stall
from ddpcheck.failure.stages import DONE, PRE_JOIN
from ddpcheck.failure.statuses import ExitInfo, SeenStatus
from ddpcheck.report.model import Check, Report, Status, Table
from ddpcheck.report.naming import listed

if TYPE_CHECKING:
    from ddpcheck.launcher.plan import LaunchPlan
    from ddpcheck.rank.rundir import RunSpec

STAGES_COLUMNS = {
    "rank": "rank",
    "host": "host",
    "pid": "pid",
    "stage": "last stage",
    "in_stage_s": "in stage (s)",
    "heartbeat_s": "heartbeat (s ago)",
    "state": "state",
}


@dataclass
class Evidence:
    """What explains a run that crashed, hung or never launched.

    `statuses` are annotated (statuses.seen): each carries its process state and heartbeat age as
    seen on its own host. `stacks` are the Python stacks (py-spy) of the stuck ranks, taken before
    they were killed, when py-spy could take them; `flight` the flight-recorder dumps of the ranks
    that could answer, by rank.
    """

    plan: LaunchPlan
    statuses: dict[int, SeenStatus]
    exits: dict[int, ExitInfo]
    stall: Stall | None
    launch_error: str | None
    log_tail: Callable[[int], str]
    stacks: dict[int, str] = field(default_factory=dict)
    flight: dict[int, RankTrace] = field(default_factory=dict)


def report_for(command: str, evidence: Evidence) -> Report:
    """The report of a run whose rank 0 never produced one."""
    report = Report(command=command)
    report.world = evidence.plan.report_world()
    report.ranks = [
        {k: s.get(k) for k in ("rank", "local_rank", "host", "pid")}
        for _, s in sorted(evidence.statuses.items())
    ]
    add_findings(report, evidence)
    return report


def add_findings(report: Report, evidence: Evidence) -> None:
    """Append what explains a run that crashed, hung or never launched (Evidence)."""
    statuses, exits, stall, stacks = evidence.statuses, evidence.exits, evidence.stall, evidence.stacks
    if evidence.launch_error:
        report.checks.append(Check("launch", Status.ERROR, _one_line(evidence.launch_error)))
    if stall and (statuses or not evidence.launch_error):
        report.checks.append(with_last_collectives(judge_stall(stall), evidence.flight))
    crashed = crash_culprits(statuses, exits) if not stall else []
    if crashed is None:
        # Every failure is a peer that timed out or lost its connection: someone hung or froze.
        report.checks.append(judge_stall(Stall(statuses, waited_s=None, world_size=evidence.plan.world_size)))
        crashed = []
    for rank in crashed:
        report.checks.append(describe_crash(rank, statuses.get(rank, {}), exits.get(rank, {})))
    if not report.checks:
        report.checks.append(
            Check("launch", Status.ERROR, "the ranks ended without a report; see the rank logs")
        )
    report.tables.append(stages_table(stall.statuses if stall else statuses, exits))
    tails = [
        {
            "rank": rank,
            "host": statuses.get(rank, {}).get("host"),
            "stderr_tail": evidence.log_tail(rank),
            **({"stack": stacks[rank]} if rank in stacks else {}),
        }
        for rank in sorted({r for c in report.checks for r in c.ranks})
    ]
    tails = [t for t in tails if t["stderr_tail"] or t.get("stack")]
    if tails:
        columns = {"rank": "rank", "stderr_tail": "stderr", **({"stack": "stack"} if stacks else {})}
        title = "Last lines of stderr" + (" and Python stacks" if stacks else "") + " of the ranks at fault"
        report.tables.append(Table("stderr", title, columns, tails))


def crash_culprits(statuses: dict[int, SeenStatus], exits: dict[int, ExitInfo]) -> list[int] | None:
    """Ranks that failed first-hand; peers that merely lost their connection are left out.

    None when every failure is collateral (timeouts, lost connections): then no rank
    crashed, one hung, and the statuses must say which.
    """
    failed = sorted(set(exits) | {r for r, s in statuses.items() if s.get("error")})
    root = [r for r in failed if not _is_collateral(statuses.get(r, {}), exits.get(r, {}))]
    return root if root or not failed else None


def _is_collateral(status: SeenStatus, exit_info: ExitInfo) -> bool:
    message = (status.get("error") or "").lower()
    if message:
        return is_collateral_error(message)
    # No error of its own: torn down (by the agent or by ddpcheck) after another rank failed,
    # or it died on its own.
    return exit_info.get("killed_by_ddpcheck") or exit_info.get("signal") in ("SIGTERM", "SIGINT", "SIGHUP")


def describe_crash(rank: int, status: SeenStatus, exit_info: ExitInfo) -> Check:
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
    return _finding("rank crashed", [detail], [rank], {rank: status})


def paused_itself(rank: int, status: SeenStatus, pause_s: float, stage: str, message: str) -> Check:
    """This rank gave up, but it was itself not running (stopped, or its host froze) long enough
    that its peers gave up on it first: it is the culprit, not the peers it blames for the timeout."""
    detail = (
        f"{_who(rank, status)} was stopped: its process did not run for {pause_s:.0f} s at stage "
        f"'{stage}' (SIGSTOP, or its host froze), so its peers gave up waiting for it"
    )
    if message:
        detail += f"; when it went on: {_one_line(message)}"
    return _finding("hang", [detail], [rank], {rank: status})


def stopped_after_the_run(stopped: list[SeenStatus]) -> Check:
    """Ranks stopped (SIGSTOP) once the run's last collective was behind them: nobody waited for them,
    so nobody gave up on them, and their launcher would have waited for them forever."""
    who = "; ".join(f"{_who(s['rank'], s)} is stopped (SIGSTOP) at stage '{s['stage']}'" for s in stopped)
    them = "them" if len(stopped) > 1 else "it"
    detail = (
        f"{who}, after the run's last collective: its launcher would have waited for {them} forever; "
        f"ddpcheck ended {them} (SIGKILL)"
    )
    hosts = list(dict.fromkeys(s["host"] for s in stopped))
    return Check("hang", Status.ERROR, detail, [s["rank"] for s in stopped], hosts)


def judge_stall(stall: Stall) -> Check:
    """Name the ranks that are behind or frozen when no rank made progress for the timeout.

    `stall.statuses` are annotated statuses of every rank that could be seen (in a
    multi-node run, the other nodes' too); `stall.world_size` says how many there
    should be.
    """
    statuses = stall.statuses
    never_started = [r for r in range(stall.world_size) if r not in statuses]
    live = {r: s for r, s in statuses.items() if s.get("proc_state", "running") != "exited"}
    frozen = [r for r, s in live.items() if liveness.frozen(s)]
    furthest = max((s["seq"] for s in statuses.values()), default=0)
    # A frozen rank explains the stall: a live rank behind the others then waits for it (a rank
    # stopped in a barrier holds back the peers it had not yet answered, while the rest go on).
    behind = [] if frozen else [r for r, s in live.items() if s["seq"] < furthest]
    finished = [r for r in statuses if r not in live and not statuses[r].get("error")]
    gave_up = [r for r in statuses if r not in live and statuses[r].get("error")]
    if not frozen and not behind and (finished or gave_up):
        behind = sorted(live)  # the others completed or gave up waiting and left; these never did
    culprits = sorted(set(frozen) | set(behind))
    parts = [_silent(r, statuses[r]) for r in sorted(frozen)]
    for r in sorted(behind):
        s = statuses[r]
        if s["stage"] in PRE_JOIN:
            parts.append(
                f"{_who(r, s)} never joined the process group (alive, last seen at stage '{s['stage']}')"
            )
        else:
            parts.append(f"{_who(r, s)} is behind: alive but stuck at stage '{s['stage']}'")
    if never_started:
        parts.append(f"rank(s) {_ranks(never_started)} never started (or their node never reported)")
        culprits = sorted(set(culprits) | set(never_started))
    silent = [r for r in finished if statuses[r].get("stage") != DONE]
    if not culprits and not live and silent:
        # Nobody is left waiting: the ranks that ended mid-run without an error are the lead.
        for r in silent:
            parts.append(f"{_who(r, statuses[r])} ended at stage '{statuses[r]['stage']}' without an error")
        culprits = silent
        finished = [r for r in finished if r not in silent]
    waiting = sorted(r for r in live if r not in culprits)
    if not culprits:
        culprits = sorted(live)
        stage = statuses[culprits[0]]["stage"] if culprits else "?"
        what = (
            "before joining the process group" if stage in PRE_JOIN else "(a collective that never completes)"
        )
        parts.append(f"every rank is alive and stuck at stage '{stage}' {what}")
    elif waiting:
        stages = sorted({statuses[r]["stage"] for r in waiting})
        how_long = f" {stall.waited_s:.0f} s" if stall.waited_s is not None else ""
        parts.append(f"{listed(waiting)} waited{how_long} at {', '.join(repr(x) for x in stages)}")
    if gave_up:
        first = statuses[gave_up[0]]
        parts.append(
            f"{listed(sorted(gave_up))} gave up waiting at stage '{first['stage']}' "
            f"({_one_line(first['error'])})"
        )
    if finished:
        parts.append(f"{listed(sorted(finished))} finished")
    return _finding("hang", parts, culprits, statuses)


def stages_table(statuses: dict[int, SeenStatus], exits: dict[int, ExitInfo]) -> Table:
    """Where every rank was last seen, as its own host saw it."""
    rows = []
    for rank, s in sorted(statuses.items()):
        exit_info = exits.get(rank, {})
        if exit_info.get("signal") and not exit_info.get("killed_by_ddpcheck"):
            state = f"killed ({exit_info['signal']})"
        elif exit_info.get("exitcode") and not exit_info.get("killed_by_ddpcheck"):
            state = f"exited {exit_info['exitcode']}"
        elif s.get("error"):
            state = "raised"
        elif s.get("proc_state") == "stopped":
            state = "stopped"
        elif s.get("proc_state") == "exited":
            state = "done" if s.get("stage") == DONE else "exited"
        elif liveness.frozen(s):
            state = "frozen"
        else:
            state = "alive"
        rows.append(
            {
                "rank": rank,
                **{key: s.get(key) for key in ("local_rank", "host", "pid", "stage", "in_stage_s")},
                "heartbeat_s": s.get("heartbeat_age_s"),
                "state": state,
                "error": s.get("error"),
            }
        )
    return Table("stages", "Where every rank was last seen", STAGES_COLUMNS, rows)


def judge_inline(stall: Stall, message: str, me: int) -> Check:
    """Name the rank that stopped beating when rank `me` gave up under torchrun, srun or mpirun.

    `stall.statuses` come from inline.observe: a rank whose process is gone mid-run is lost,
    one whose heartbeat stopped is stopped or frozen (or lost, when its connection dropped);
    the ranks that were only waiting for it are not blamed. With every heartbeat fresh, the
    stages decide, as under ddpcheck's own launcher.
    """
    statuses, lost = stall.statuses, connection_dropped(message)
    raised = sorted(
        r for r, s in statuses.items() if s.get("error") and not _is_collateral(s, {}) and r != me
    )
    if raised:
        # A rank failed first-hand (an exception of its own): it is the cause, whoever waited for it.
        parts = [describe_crash(r, statuses[r], {}).detail for r in raised]
        return _finding("rank crashed", parts, raised, statuses)
    dead = sorted(r for r, s in statuses.items() if liveness.died(s))
    silent = sorted(r for r, s in statuses.items() if r not in dead and r != me and liveness.silent(s))
    culprits = sorted(dead + silent)
    absent = [r for r in range(stall.world_size) if r not in statuses]
    if not culprits and absent:
        # Every rank that is here waited for these: nothing of them reached the store, nor this host.
        said = (
            f"{listed(absent)} never arrived: "
            f"{'they' if len(absent) > 1 else 'it'} never reached the store the ranks share, and no process "
            f"of {'theirs' if len(absent) > 1 else 'its'} is on this host; ranks "
            f"{_ranks(sorted(statuses))} were waiting{_store_evidence(message, absent)}"
        )
        return _finding("hang", [said], absent, statuses)  # no host: none of them was seen
    if not culprits:
        check = judge_stall(stall)
        if lost:
            check.detail += f"; rank {me} lost a peer's connection, yet every heartbeat was fresh"
        return check
    parts = []
    for r in dead + silent:
        s = statuses[r]
        if s.get("arrived") is False:
            parts.append(_absent(r, s))
        elif r in dead:
            parts.append(
                f"{_who(r, s)} is lost: its process ended at stage '{s['stage']}' without an error "
                f"(last heartbeat {s['heartbeat_age_s']:.0f} s ago)"
            )
        else:
            parts.append(_silent(r, s, lost))
    # A rank that gave up waiting (its collective timed out) and has left was waiting for it too:
    # under torchrun the one that gave up first is gone when rank 0, stopped by SIGTERM, judges.
    waiting = sorted(
        r
        for r, s in statuses.items()
        if r not in culprits and (s["proc_state"] != "exited" or (s.get("error") and _is_collateral(s, {})))
    )
    if waiting:
        stages = sorted({statuses[r]["stage"] for r in waiting})
        parts.append(
            f"{listed(waiting)} "
            f"{'were' if len(waiting) > 1 else 'was'} waiting for it at {', '.join(repr(x) for x in stages)}"
        )
    if absent:
        parts.append(f"rank(s) {_ranks(absent)} never published a status")
    name = (
        "rank lost"
        if dead or (lost and any(statuses[r]["proc_state"] != "stopped" for r in silent))
        else "hang"
    )
    return _finding(name, parts, culprits, statuses)


def judge_early(statuses: dict[int, SeenStatus], world_size: int, me: int, single_host: bool) -> Check | None:
    """The rank its launcher stopped (SIGTERM) before it reached the store: who, on this host, failed.

    `statuses`: this host's ranks as their job directory and the launcher's processes show them
    (rank/here.HostDir). A rank whose process ended by itself, or is stopped, is the culprit; with
    every rank of the job on this host (`single_host`), so is one of which nothing is left. None when
    nothing here explains it (the culprit is on another host: its own peers there name it).
    """
    lost = sorted(r for r, s in statuses.items() if r != me and liveness.died(s))
    stopped = sorted(r for r, s in statuses.items() if r != me and s["proc_state"] == "stopped")
    missing = sorted(r for r in range(world_size) if r not in statuses and r != me) if single_host else []
    culprits = sorted(lost + stopped + missing)
    if not culprits:
        return None
    parts = [_absent(r, statuses[r]) for r in sorted(lost + stopped)]
    if len(missing) == 1:
        parts.append(
            f"rank {missing[0]} never arrived: no process of it is left on this host "
            "(killed before it could say where it was)"
        )
    elif missing:
        # Their launcher stopped the others the moment one ended: which one was first left no trace here.
        parts.append(
            f"one of ranks {_ranks(missing)} ended first, before any of them said a word: no process of "
            "theirs is left on this host, and nothing here tells which one its launcher saw end first"
        )
    return _finding(
        "hang" if stopped and not lost and not missing else "rank lost", parts, culprits, statuses
    )


def _store_evidence(message: str, absent: list[int]) -> str:
    """torch's own word, where its store timeout names the keys of the same ranks."""
    waited = store_waited_for(message)
    if not waited or not set(waited) <= set(absent):
        return ""
    return f" (torch's store timed out waiting for the key of {listed(waited)})"


def _absent(rank: int, status: SeenStatus) -> str:
    """A rank known only from its host's job directory: where it was before it reached the store."""
    where = f"at stage '{status['stage']}', before its status reached the store the ranks share"
    if status["proc_state"] == "stopped":
        return f"{_who(rank, status)} is stopped (SIGSTOP) {where}"
    if status["proc_state"] == "exited":
        return f"{_who(rank, status)} is lost: its process ended {where}"
    in_stage_s = status.get("in_stage_s") or 0
    return f"{_who(rank, status)} never arrived: alive, at stage '{status['stage']}' for {in_stage_s:.0f} s"


def _silent(rank: int, status: SeenStatus, lost: bool = False) -> str:
    """A stopped or frozen rank (`lost`: a peer's connection dropped): 'no heartbeat for N s', what its
    peers did meanwhile when that was counted, and its stage."""
    if status.get("proc_state") == "stopped":
        state = "stopped (SIGSTOP)"
    elif lost:
        state = "lost (its process died or its host is unreachable)"
    else:
        state = "frozen"
    silence = f"no heartbeat for {status.get('heartbeat_age_s', 0):.0f} s"
    if status.get("missed_beats"):
        silence += f" (a peer beat {status['missed_beats']} times meanwhile)"
    return f"{_who(rank, status)} is {state}: {silence}, last seen at stage '{status['stage']}'"


def _finding(name: str, parts: list[str], ranks: list[int], statuses: dict[int, SeenStatus]) -> Check:
    """One hang or loss: its parts said in one line, and the hosts of its ranks that were seen."""
    hosts = list(dict.fromkeys(host for r in ranks if (host := statuses.get(r, {}).get("host"))))
    return Check(name, Status.ERROR, "; ".join(parts), ranks, hosts)


def inline_report(spec: RunSpec, stall: Stall, message: str) -> Report:
    """Rank 0's report when it gave up waiting under torchrun, srun or mpirun, from the ranks' records;
    or, `message` 'SIGTERM', when its launcher's SIGTERM came before its own collective failed (a
    SIGKILL may follow within a second: the report is all that is left of the run)."""
    if message == "SIGTERM":
        how = "rank 0 was stopped by SIGTERM (its launcher ends every rank once one failed)"
    else:
        after = "" if connection_dropped(message) else f" after {stall.waited_s:g} s"
        how = f"rank 0 gave up{after}: {_one_line(message)}"
    check = judge_inline(stall, message, 0)
    check.detail += f"; {how}"
    report = _inline_report(spec, stall.world_size, check)
    if (
        spec.launcher is not None
        and spec.launcher.kills_late
        and any(stall.statuses[r]["proc_state"] != "exited" for r in check.ranks if r in stall.statuses)
    ):
        report.notes.append(SRUN_WAITS)
    report.tables.append(stages_table(stall.statuses, {}))
    return report


def inline_crash_report(
    spec: RunSpec, world_size: int, record: SeenStatus, message: str, check: Check | None = None
) -> Report:
    """Rank 0's report when rank 0 itself failed first-hand under torchrun, srun or mpirun (`check`:
    what it found, when not the crash of its own exception)."""
    return _inline_report(
        spec, world_size, check or describe_crash(record.get("rank", 0), {**record, "error": message}, {})
    )


def _inline_report(spec: RunSpec, world_size: int, check: Check) -> Report:
    world = {"size": world_size, "backend": spec.backend, "device": spec.device}
    return Report(command=spec.command, checks=[check], world=world)


SRUN_WAITS = (
    "srun waits for a stopped or frozen task after the others exited: the step ends now only if "
    "srun was started with --kill-on-bad-exit=1"
)


def _who(rank: int, status: SeenStatus, exit_info: ExitInfo | None = None) -> str:
    host = status.get("host", "?")
    pid = status.get("pid") or (exit_info or {}).get("pid", "?")
    elsewhere = ", on another node: as last reported there" if status.get("remote") else ""
    return f"rank {rank} (host {host}, pid {pid}{elsewhere})"


def _ranks(ranks: list[int]) -> str:
    return ", ".join(map(str, ranks))


def _one_line(text: str) -> str:
    lines = [line.strip() for line in str(text).strip().splitlines() if line.strip()]
    return lines[-1] if lines else ""
