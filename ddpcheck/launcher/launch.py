"""How ranks start, and how a run ends with a Report whatever happened.

Ranks are started through torch.distributed.run's programmatic API
(`elastic_launch` with a fully specified `LaunchConfig`), off the main thread, each
rank's output kept in a per-run log directory; the monitor (monitor.py) bounds
every wait. Whatever the ranks did, `launch()` returns a Report: rank 0's, this
node's share of a remote verdict, or failure/explain.py's account of a crash or hang.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import shutil
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ddpcheck.failure import explain
from ddpcheck.failure.exits import signal_name
from ddpcheck.failure.statuses import ExitInfo, SeenStatus
from ddpcheck.launcher.monitor import POLL_S, Monitor, ProgressCallback, annotate, kill_workers
from ddpcheck.launcher.plan import LaunchPlan
from ddpcheck.launcher.presence import Presence, StoreUnreachable
from ddpcheck.launcher.rendezvous import advertised_address, check_rendezvous_port, hosts_store
from ddpcheck.rank import assemble, interrupt, rundir
from ddpcheck.rank.faults import Fault
from ddpcheck.rank.remover import release as release_remover
from ddpcheck.rank.rundir import RunSpec
from ddpcheck.rank.status_channel import read_statuses
from ddpcheck.rank.torch_logs import USER_CPP_LOG_LEVEL
from ddpcheck.report.model import Check, Report, Status, Verdict
from ddpcheck.torch_compat import (
    advertise_store_address,
    allow_agent_off_main_thread,
    fields_known_to,
    rank_log_fields,
    share_rendezvous_port,
)

if TYPE_CHECKING:
    from torch.distributed.elastic.multiprocessing.errors import ProcessFailure


def make_spec(command: str, options: dict[str, Any], faults: list[Fault], plan: LaunchPlan) -> RunSpec:
    return RunSpec(
        command=command,
        options=options,
        backend=plan.backend,
        device=plan.device,
        timeout=plan.timeout,
        faults=faults,
        device_index=plan.device_index,
        budget_s=plan.budget.seconds if plan.budget else None,
        budget_end=plan.budget.end if plan.budget else None,
    )


def launch(
    command: str,
    options: dict[str, Any],
    faults: list[Fault],
    plan: LaunchPlan,
    on_progress: ProgressCallback | None = None,
) -> Report:
    """Start the ranks of this node, wait for them (bounded), and return the run's Report.

    Interrupted (Ctrl-C, or a scheduler's SIGTERM), it ends the ranks, removes the run
    directory and raises KeyboardInterrupt.
    """
    check_rendezvous_port(plan)
    started = time.monotonic()
    # From the run directory's creation to the ranks' end, a signal is only noted (and acted on
    # here, after the ranks are gone); after that, one leaves at once, removing the directory.
    with interrupt.deferred() as stop:
        run_dir = rundir.create()
        interrupt.remove_on_leave(run_dir)
        remover = rundir.remove_once_this_process_is_gone(run_dir, unless_logs_kept=True)
        rundir.write_spec(run_dir, make_spec(command, options, faults, plan))
        agent = AgentThread(plan, run_dir)
        monitor = Monitor(run_dir, plan, on_progress, presence=lambda: agent.presence)
        _run_until_done(agent, monitor, stop)
    failures, launch_error, interrupted = _how_it_ended(agent, monitor, plan, run_dir, stop.is_set())
    report = (
        None if interrupted else _report_of(command, plan, run_dir, agent, monitor, failures, launch_error)
    )
    kept = rundir.keep_logs(run_dir) if report is not None and report.verdict == Verdict.ERROR else None
    if kept is None:
        shutil.rmtree(run_dir, ignore_errors=True)
    interrupt.forget(run_dir)
    release_remover(remover)
    if report is None:
        raise KeyboardInterrupt
    return assemble.after_launch(
        report, time.monotonic() - started, options, str(kept) if kept else None, as_given(faults)
    )


def _how_it_ended(
    agent: AgentThread, monitor: Monitor, plan: LaunchPlan, run_dir: Path, interrupted: bool
) -> tuple[dict[int, Any], str | None, bool]:
    """(failed ranks, why the launch itself failed, interrupted?) once the agent is done or abandoned."""
    failures: dict[int, Any] = {}
    launch_error: str | None = None
    if agent.error is not None:
        failures, launch_error, signalled = _classify_agent_error(agent.error, plan, _missing_nodes(agent))
        interrupted = interrupted or signalled
    elif agent.is_alive() and not interrupted:
        launch_error = (
            f"the launch did not complete within {plan.timeout:g} s: the agent was still waiting on the "
            f"rendezvous store ({plan.rdzv_endpoint or 'local'}); is every node reachable at the "
            "address it advertises?"
        )
    if monitor.out_of_budget and plan.budget is not None:
        # The ranks this launcher ended are not culprits: the budget ran out on them.
        failures = {}
        launch_error = (
            f"--budget {plan.budget.seconds:g} s ran out before the ranks were done "
            f"(furthest stage reached: {_furthest_stage(run_dir)}); the ranks were ended so that "
            "ddpcheck ends in time: give a larger budget"
        )
    return failures, launch_error, interrupted


def _report_of(
    command: str,
    plan: LaunchPlan,
    run_dir: Path,
    agent: AgentThread,
    monitor: Monitor,
    failures: dict[int, Any],
    launch_error: str | None,
) -> Report:
    """Rank 0's report; this node's share of a remote verdict; or the account of what went wrong."""
    report = rundir.read_rank0_report(run_dir)
    shared = rundir.read_verdict(run_dir)
    if report is None and shared is not None and not (failures or monitor.stall or launch_error):
        # Rank 0 lives on another node: it printed the report; this node shares its verdict.
        return remote_node_report(command, plan, *shared)
    if report is None or failures or monitor.stall:
        # No report, or one whose ranks then crashed or hung (in teardown, say): explain what happened.
        evidence = _evidence(plan, run_dir, agent, monitor, failures, launch_error)
        if report is None:
            return explain.report_for(command, evidence)
        explain.add_findings(report, evidence)
    return report


def remote_node_report(command: str, plan: LaunchPlan, verdict: Verdict, report_host: str) -> Report:
    """This node's ranks finished; rank 0's node printed the report and shared its verdict."""
    report = Report(command=command)
    report.world = {**plan.report_world(), "report_on": report_host}
    report.checks.append(
        Check(
            "remote verdict",
            Status[verdict.name],  # a Verdict is named as the Status it stands for
            f"node {plan.node_rank}: its {plan.nproc} ranks finished; the report is on host "
            f"{report_host} (rank 0), verdict {verdict.value}",
        )
    )
    return report


def _evidence(
    plan: LaunchPlan,
    run_dir: Path,
    agent: AgentThread,
    monitor: Monitor,
    failures: dict[int, Any],
    launch_error: str | None,
) -> explain.Evidence:
    """What the explanation needs: every rank's status and exit as far as this node knows, and what
    the monitor saw (the stall, the stacks, the flight-recorder dumps)."""
    exits = {rank: _exit_info(f, monitor.killed) for rank, f in failures.items()}
    local = annotate(read_statuses(run_dir))
    monitor.publish_final(local, exits)
    # Another node's account of a crash is worth waiting for only if ranks ran and its store answers.
    settle = plan.nnodes > 1 and not (monitor.stall or launch_error) and agent.presence is not None
    statuses, exits = _world_view(monitor, local, exits, settle=settle)
    return explain.Evidence(
        plan,
        statuses,
        exits,
        monitor.stall,
        launch_error,
        lambda rank: _log_tail(run_dir, statuses.get(rank), failures.get(rank)),
        monitor.stacks,
        monitor.flight,
    )


# After a Ctrl-C and the workers' kill, how long the agent may take to return.
INTERRUPTED_ABANDON_AFTER_S = 1.0


def _run_until_done(agent: AgentThread, monitor: Monitor, stop: threading.Event) -> None:
    """Start the monitor and the agent; wait until the ranks are done, abandoned, or a signal came.

    Whatever ended the wait, every worker is killed and the agent given a bounded time to return.
    """
    try:
        if not stop.is_set():
            monitor.start()
            agent.start()
        # The agent may block in native code (a store connect to an unreachable host) for
        # minutes; the main thread only waits while the monitor says the run is live.
        while agent.is_alive() and not monitor.abandoned() and not stop.is_set():
            agent.join(POLL_S)
    finally:
        monitor.stop()
        kill_workers()
        if agent.ident is not None:  # started
            # Interrupted, the agent's own return is not worth waiting for: the process leaves.
            agent.join(INTERRUPTED_ABANDON_AFTER_S if stop.is_set() else monitor.abandon_after)
        if stop.is_set():
            # An agent still starting ranks when the first kill came may have started one since.
            kill_workers()


def _furthest_stage(run_dir: Path) -> str:
    statuses = read_statuses(run_dir)
    if not statuses:
        return "no rank had started"
    furthest = max(statuses.values(), key=lambda s: s.seq)
    return f"'{furthest.stage}', rank {furthest.rank}"


def as_given(faults: list[Fault]) -> list[str]:
    """The --inject faults as the user wrote them, for the report."""
    return [f.spec.strip() or str(f) for f in faults]


class AgentThread(threading.Thread):
    """torch's elastic agent, off the main thread, so that no native wait can outlive the bound."""

    def __init__(self, plan: LaunchPlan, run_dir: Path) -> None:
        super().__init__(name="ddpcheck-agent", daemon=True)
        self.plan = plan
        self.run_dir = run_dir
        self.error: BaseException | None = None

        self.presence: Presence | None = None

    def run(self) -> None:
        # Signals go to the main thread, not to this one or the native threads torch starts from it.
        interrupt.block_in_this_thread()
        try:
            if self.plan.nnodes > 1 and self.plan.rdzv_endpoint:
                self.presence = Presence(
                    self.plan.rdzv_endpoint,
                    self.plan.node_rank,
                    self.plan.nnodes,
                    is_host=hosts_store(self.plan),
                    timeout=self.plan.timeout,
                )
            _run_agent(self.plan, self.run_dir)
        except BaseException as exc:  # handed to the main thread, which reports it
            self.error = exc


def launch_config(plan: LaunchPlan, run_dir: Path) -> Any:
    """The agent's LaunchConfig: each field that this torch has, set explicitly."""
    from torch.distributed.launcher.api import LaunchConfig

    return LaunchConfig(**fields_known_to(LaunchConfig, launch_fields(plan, run_dir)))


def launch_fields(plan: LaunchPlan, run_dir: Path) -> dict[str, Any]:
    """Every LaunchConfig field of every supported release, chosen: none is left to torch's default."""
    # Without an endpoint, as torchrun --standalone: a free port, chosen by the store.
    endpoint = plan.rdzv_endpoint or "localhost:0"
    rdzv_configs: dict[str, Any] = {
        "join_timeout": plan.timeout,
        "read_timeout": max(1, math.ceil(plan.timeout)),
        "last_call_timeout": 1,
        "close_timeout": 5,
    }
    if plan.rdzv_endpoint:
        rdzv_configs["is_host"] = hosts_store(plan)
    return {
        "min_nodes": plan.nnodes,
        "max_nodes": plan.nnodes,
        "nproc_per_node": plan.nproc,
        **rank_log_fields(rundir.logs_dir(run_dir)),
        "run_id": f"ddpcheck-{uuid.uuid4().hex[:12]}" if not plan.rdzv_endpoint else "ddpcheck",
        "role": "ddpcheck",
        "rdzv_endpoint": endpoint,
        "rdzv_backend": "c10d",
        "rdzv_configs": rdzv_configs,
        "rdzv_timeout": max(1, math.ceil(plan.timeout)),
        "max_restarts": 0,
        "monitor_interval": POLL_S,
        "start_method": "spawn",
        "log_line_prefix_template": None,
        "metrics_cfg": {},
        "local_addr": advertised_address(plan.rdzv_endpoint),
        "event_log_handler": "null",
        "numa_options": None,
        "signals_to_handle": "SIGTERM,SIGINT,SIGHUP,SIGQUIT",
        "duplicate_stdout_filters": None,
        "duplicate_stderr_filters": None,
        "virtual_local_rank": False,
        "shutdown_timeout": 2,
    }


def _run_agent(plan: LaunchPlan, run_dir: Path) -> None:
    from torch.distributed.launcher.api import elastic_launch

    _silence_torch_logging()
    allow_agent_off_main_thread()
    share_rendezvous_port()
    config = launch_config(plan, run_dir)
    advertise_store_address(config.local_addr)
    env = {
        "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1"),
        "PYTHONUNBUFFERED": "1",
        # The launcher runs with torch's C++ log quietened (see quiet_torch_cpp_logs); ranks log fully.
        "TORCH_CPP_LOG_LEVEL": os.environ.get(USER_CPP_LOG_LEVEL, "WARNING"),
        **rundir.compile_cache_env(run_dir),
    }
    with _environment(env):
        elastic_launch(config, sys.executable)(*rank_argv(run_dir))


# Python 3.10 has no -P: drop the working directory that -c puts first, then run the harness as -m would.
_SAFE_PATH_310 = (
    "import runpy, sys; del sys.path[0]; "
    "runpy.run_module('ddpcheck.rank.harness', run_name='__main__', alter_sys=True)"
)


def rank_argv(run_dir: Path, safe_path_flag: bool = sys.version_info >= (3, 11)) -> list[str]:
    """The interpreter's arguments that start one rank.

    Without -P, `python -m` puts the working directory first on the import path, and a
    `ddpcheck/` folder there (the folder above a clone) hides the installed package.
    """
    if safe_path_flag:
        return ["-u", "-P", "-m", "ddpcheck.rank.harness", str(run_dir)]
    return ["-u", "-c", _SAFE_PATH_310, str(run_dir)]


REMOTE_SETTLE_S = 4.0


def _world_view(
    monitor: Monitor, local: dict[int, SeenStatus], exits: dict[int, ExitInfo], settle: bool
) -> tuple[dict[int, SeenStatus], dict[int, ExitInfo]]:
    """Every rank's status and exit as far as this node can know them.

    Other nodes publish how their ranks ended. When this node's own failures are only
    peers that lost their connection, the cause is on another node: wait a moment for
    that node's account (its launcher publishes it once its agent returns).
    """
    base = {r: s for r, s in (monitor.snapshot or local).items() if not s.get("remote")}
    deadline = time.monotonic() + (REMOTE_SETTLE_S if settle else 0)
    while True:
        statuses = monitor.world_statuses(base)
        # A rank that died there is named here too.
        merged = exits | {r: s["exit"] for r, s in statuses.items() if s.get("remote") and s.get("exit")}
        if explain.crash_culprits(statuses, merged) or time.monotonic() >= deadline:
            return statuses, merged
        time.sleep(POLL_S * 2)


def _missing_nodes(agent: AgentThread) -> str:
    """Which node ranks never reached the store, when this node could read it."""
    if agent.presence is None:
        return ""
    try:
        return agent.presence.describe_missing()
    except Exception:  # the store went away with node 0: nothing more to learn
        return ""


def _classify_agent_error(
    exc: BaseException, plan: LaunchPlan, missing: str = ""
) -> tuple[dict[int, Any], str | None, bool]:
    """(failed ranks, a launch error message, interrupted?) from what elastic_launch raised.

    `missing` names the nodes that never reached the rendezvous store, when known.
    """
    from torch.distributed.elastic.multiprocessing.api import SignalException
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.elastic.rendezvous.api import RendezvousError, RendezvousTimeoutError

    if isinstance(exc, ChildFailedError):
        return dict(exc.failures), None, False
    if isinstance(exc, SignalException):
        return {}, None, True
    where = plan.rdzv_endpoint or "localhost"
    if isinstance(exc, RendezvousTimeoutError):
        error = (
            f"rendezvous at {where} did not complete within {plan.timeout:g} s: "
            f"{missing or f'{plan.nnodes} node(s) expected'}; are all nodes running with the "
            "same --rdzv-endpoint and --nnodes?"
        )
    elif isinstance(exc, (RendezvousError, StoreUnreachable)):
        cause = exc.__cause__ or exc.__context__
        reason = f" ({_headline(cause)})" if cause else ""
        error = (
            f"could not reach the rendezvous store at {where}{reason}: is node 0 running, "
            "and is that port free of other programs?"
        )
    else:
        error = f"{type(exc).__name__}: {_headline(exc)}".strip()
    return {}, error, False


def _headline(exc: BaseException) -> str:
    """The first line of an exception's message (torch's store errors add pages after it)."""
    lines = [line for line in str(exc).splitlines() if line.strip()]
    return lines[0].strip() if lines else type(exc).__name__


def _exit_info(failure: ProcessFailure, killed: set[int]) -> ExitInfo:
    info: ExitInfo = {
        "exitcode": failure.exitcode,
        "pid": failure.pid,
        "killed_by_ddpcheck": failure.pid in killed,
    }
    if failure.exitcode is not None and failure.exitcode < 0:
        info["signal"] = signal_name(-failure.exitcode)
    return info


def _log_tail(run_dir: Path, status: SeenStatus | None, failure: Any = None) -> str:
    """The last lines of a rank's stderr, when that rank ran on this node.

    A rank that died before its first status (on import, say) is known only by its local
    failure, which carries its local rank too.
    """
    if status and not status.get("remote") and status.get("local_rank") is not None:
        return rundir.stderr_tail(run_dir, status["local_rank"])
    if failure is not None and getattr(failure, "local_rank", None) is not None:
        return rundir.stderr_tail(run_dir, failure.local_rank)
    return ""


def _silence_torch_logging() -> None:
    # The elastic agent logs its launch banner and every worker failure; ddpcheck reports those itself.
    for name in ("torch.distributed.elastic", "torch.distributed.launcher"):
        # Its module loggers set their own levels, so silence them where they meet: a handler
        # that drops everything (without one, Python's last-resort handler prints to stderr).
        logger = logging.getLogger(name)
        if not any(isinstance(h, logging.NullHandler) for h in logger.handlers):
            logger.addHandler(logging.NullHandler())
        logger.propagate = False


@contextlib.contextmanager
def _environment(values: dict[str, str]) -> Iterator[None]:
    saved = {key: os.environ.get(key) for key in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
