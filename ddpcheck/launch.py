"""How ranks start, and how a run ends with a Report whatever happened.

Ranks are started through torch.distributed.run's programmatic API
(`elastic_launch` with a fully specified `LaunchConfig`), each rank's output
kept in a per-run log directory. A watchdog thread reads every rank's status
file: it drives the progress display, turns a stall or a crash into a
finding within seconds, and kills every worker it leaves behind. Already
inside a launch (torchrun, srun), the command runs as that rank instead.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import os
import shutil
import signal
import socket
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import psutil

from ddpcheck import postmortem, slurm
from ddpcheck.errors import UsageError
from ddpcheck.network import route_address
from ddpcheck.options import LaunchOptions, parse_endpoint
from ddpcheck.presence import Presence, StoreUnreachable
from ddpcheck.report import Report, Verdict
from ddpcheck.status import FROZEN_AFTER_S, read_statuses
from ddpcheck.worker import SPEC_FILE, load_report, load_verdict, run_rank

ProgressCallback = Callable[[dict[str, Any]], None]
POLL_S = 0.1
PUBLISH_EVERY_S = 0.5
# Ranks still importing torch or initialising CUDA (slow on a network filesystem) are not hung.
STARTUP_STAGES = ("launched", "device")
STARTUP_ALLOWANCE_S = 120.0
# After a stall was declared and the workers killed, how long the agent may take to return.
ABANDON_AFTER_S = 5.0
# Ranks' own collective timeout is a little longer than the launcher's stall bound,
# so that the launcher, which sees every rank, names the culprit first.
PG_TIMEOUT_GRACE_S = 5.0


@dataclass
class LaunchPlan:
    """Resolved launch: how many ranks of which kind, over which backend."""

    nproc: int
    backend: str
    device: str  # "cuda" or "cpu"
    nnodes: int = 1
    node_rank: int = 0
    rdzv_endpoint: str | None = None
    timeout: float = 60.0
    inject: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    device_index: int | None = None  # the GPU of this rank when not its local rank (inline runs)

    @property
    def world_size(self) -> int:
        return self.nproc * self.nnodes


def plan_launch(opts: LaunchOptions) -> LaunchPlan:
    """Decide ranks, backend and device from the options and this machine (exit 2 if impossible)."""
    import torch
    import torch.distributed as dist

    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    backend = opts.backend
    notes: list[str] = []
    if backend == "nccl" and gpus == 0:
        raise UsageError("--backend nccl needs CUDA GPUs, and this machine has none visible; use gloo")
    if backend == "nccl" and not dist.is_nccl_available():
        raise UsageError("--backend nccl: this torch build has no NCCL; use gloo")
    if opts.gpus is not None:
        if opts.gpus > gpus:
            raise UsageError(
                f"--gpus {opts.gpus}: this machine has {gpus} visible GPU{'s' if gpus != 1 else ''}"
            )
        nproc, device = opts.gpus, "cuda"
    elif opts.nproc is not None:
        nproc = opts.nproc
        device = "cuda" if gpus and nproc <= gpus and backend != "gloo" else "cpu"
        if backend == "nccl" and nproc > gpus:
            raise UsageError(
                f"--nproc {nproc} over nccl needs {nproc} GPUs (NCCL refuses two ranks on one GPU); "
                f"this machine has {gpus}"
            )
    elif gpus and backend != "gloo":
        nproc, device = gpus, "cuda"
    else:
        nproc, device = 2, "cpu"
        if backend == "auto":
            notes.append("no GPU visible: running 2 CPU ranks over gloo")
    if backend == "auto":
        backend = "nccl" if device == "cuda" else "gloo"
    return LaunchPlan(
        nproc=nproc,
        backend=backend,
        device=device,
        nnodes=opts.nnodes,
        node_rank=opts.node_rank,
        rdzv_endpoint=opts.rdzv_endpoint,
        timeout=opts.timeout,
        inject=list(opts.inject),
        notes=notes,
    )


def plan_inline(opts: LaunchOptions) -> LaunchPlan:
    """The plan of a process that torchrun or srun already started as one rank."""
    import torch

    world_size = int(os.environ["WORLD_SIZE"])
    local_world = int(os.environ.get("LOCAL_WORLD_SIZE", world_size))
    local_rank = int(os.environ["LOCAL_RANK"])
    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    # Decide from what every rank of this node sees alike (LOCAL_WORLD_SIZE and the GPU count),
    # never from the local rank alone: a world whose ranks pick different backends hangs.
    # One GPU per task (srun --gpus-per-task=1) shows each rank its own GPU as cuda:0.
    device_index = local_rank if local_world <= gpus else 0 if gpus == 1 else None
    if opts.backend == "nccl" and device_index is None:
        raise UsageError(
            f"--backend nccl: {local_world} ranks on this node but {gpus} visible GPU(s); "
            "NCCL needs one GPU per rank"
        )
    device = "cuda" if opts.backend != "gloo" and device_index is not None else "cpu"
    backend = opts.backend if opts.backend != "auto" else ("nccl" if device == "cuda" else "gloo")
    return LaunchPlan(
        nproc=local_world,
        backend=backend,
        device=device,
        nnodes=max(1, world_size // local_world),
        node_rank=int(os.environ.get("GROUP_RANK", "0")),
        timeout=opts.timeout,
        inject=list(opts.inject),
        device_index=device_index if device == "cuda" else None,
    )


def detect_inline(opts: LaunchOptions) -> bool:
    """Whether this process is already one rank of a launch (torchrun, or an srun step).

    Under srun the Slurm task variables are mapped onto torch's here. Launch options
    (--nproc, --gpus, --nnodes) mean "launch from here" even inside a Slurm step:
    that is the one-task-per-node recipe.
    """
    if all(k in os.environ for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR")):
        return True
    explicit = opts.gpus is not None or opts.nproc is not None or opts.nnodes > 1
    if slurm.under_srun(os.environ) and not explicit:
        os.environ.update(slurm.torch_environment(os.environ))
        return True
    return False


def make_spec(command: str, options: dict[str, Any], plan: LaunchPlan) -> dict[str, Any]:
    return {
        "command": command,
        "options": options,
        "backend": plan.backend,
        "device": plan.device,
        "timeout": plan.timeout,
        "pg_timeout": plan.timeout + PG_TIMEOUT_GRACE_S,
        "inject": plan.inject,
        "notes": plan.notes,
        "plan": asdict(plan),
    }


def launch(
    command: str,
    options: dict[str, Any],
    plan: LaunchPlan,
    on_progress: ProgressCallback | None = None,
) -> Report:
    """Start the ranks of this node, wait for them (bounded), and return the run's Report."""
    check_rendezvous_port(plan)
    started = time.monotonic()
    run_dir = Path(tempfile.mkdtemp(prefix="ddpcheck-"))
    (run_dir / SPEC_FILE).write_text(json.dumps(make_spec(command, options, plan)))
    agent = AgentThread(plan, run_dir)
    watchdog = Watchdog(run_dir, plan, on_progress, presence=lambda: agent.presence)
    failures: dict[int, Any] = {}
    launch_error: str | None = None
    interrupted = False
    previous_sigterm = signal.signal(signal.SIGTERM, _interrupt)
    try:
        watchdog.start()
        agent.start()
        # The agent may block in native code (a store connect to an unreachable host) for
        # minutes; the main thread only waits while the watchdog says the run is live.
        while agent.is_alive() and not watchdog.abandoned():
            agent.join(POLL_S)
    except KeyboardInterrupt:
        interrupted = True
    finally:
        watchdog.stop()
        kill_workers()
        agent.join(ABANDON_AFTER_S)
        signal.signal(signal.SIGTERM, previous_sigterm)
    if agent.error is not None:
        failures, launch_error, signalled = _classify_agent_error(agent.error, plan, _missing_nodes(agent))
        interrupted = interrupted or signalled
    elif agent.is_alive() and not interrupted:
        launch_error = (
            f"the launch did not complete within {plan.timeout:g} s: the agent was still waiting on the "
            f"rendezvous store ({plan.rdzv_endpoint or 'local'}); is every node reachable at the "
            "address it advertises?"
        )
    if interrupted:
        shutil.rmtree(run_dir, ignore_errors=True)
        raise KeyboardInterrupt
    report = load_report(run_dir)
    shared = load_verdict(run_dir)
    if report is None and shared is not None and not (failures or watchdog.stall or launch_error):
        # Rank 0 lives on another node: it printed the report; this node shares its verdict.
        report = postmortem.remote_node_report(command, plan, *shared)
    elif report is None or failures or watchdog.stall:
        # No report, or one whose ranks then crashed or hung (in teardown, say): explain what happened.
        exits = {rank: _exit_info(f, watchdog.killed) for rank, f in failures.items()}
        local = annotate(read_statuses(run_dir))
        watchdog.publish_final(local, exits)
        statuses = watchdog.snapshot or watchdog.world_statuses(local)
        # Other nodes publish how their ranks ended; a rank that died there is named here too.
        exits |= {r: s["exit"] for r, s in statuses.items() if s.get("remote") and s.get("exit")}
        findings = {
            "plan": plan,
            "statuses": statuses,
            "exits": exits,
            "stall": watchdog.stall,
            "launch_error": launch_error,
            "log_tail": lambda rank: tail_of_log(run_dir, statuses.get(rank)),
        }
        if report is None:
            report = postmortem.report_for(command=command, **findings)
        else:
            postmortem.add_findings(report, **findings)
    report.elapsed_s = time.monotonic() - started
    report.options = report.options or options
    kept = _keep_logs(run_dir) if report.verdict == Verdict.ERROR else None
    report.log_dir = str(kept) if kept else None
    if kept is None:
        shutil.rmtree(run_dir, ignore_errors=True)
    return report


class AgentThread(threading.Thread):
    """torch's elastic agent, off the main thread, so that no native wait can outlive the bound."""

    def __init__(self, plan: LaunchPlan, run_dir: Path) -> None:
        super().__init__(name="ddpcheck-agent", daemon=True)
        self.plan = plan
        self.run_dir = run_dir
        self.error: BaseException | None = None

        self.presence: Presence | None = None

    def run(self) -> None:
        try:
            if self.plan.nnodes > 1 and self.plan.rdzv_endpoint:
                self.presence = Presence(
                    self.plan.rdzv_endpoint,
                    self.plan.node_rank,
                    self.plan.nnodes,
                    is_host=hosts_store(self.plan),
                    timeout_s=self.plan.timeout,
                )
            _run_agent(self.plan, self.run_dir)
        except BaseException as exc:  # handed to the main thread, which reports it
            self.error = exc


def hosts_store(plan: LaunchPlan) -> bool:
    # Node 0 hosts the store; the others only connect, so two nodes on one machine never race for it.
    return bool(plan.rdzv_endpoint) and plan.node_rank == 0 and endpoint_is_local(plan.rdzv_endpoint)


def _interrupt(signum: int, frame: Any) -> None:
    # SIGTERM from a scheduler: tear down like Ctrl-C.
    raise KeyboardInterrupt


def _run_agent(plan: LaunchPlan, run_dir: Path) -> None:
    from torch.distributed.elastic.multiprocessing import DefaultLogsSpecs, Std
    from torch.distributed.launcher.api import LaunchConfig, elastic_launch

    _silence_torch_logging()
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
    config = LaunchConfig(
        min_nodes=plan.nnodes,
        max_nodes=plan.nnodes,
        nproc_per_node=plan.nproc,
        logs_specs=DefaultLogsSpecs(log_dir=str(run_dir / "logs"), redirects=Std.ALL, tee=Std.NONE),
        run_id=f"ddpcheck-{uuid.uuid4().hex[:12]}" if not plan.rdzv_endpoint else "ddpcheck",
        role="ddpcheck",
        rdzv_endpoint=endpoint,
        rdzv_backend="c10d",
        rdzv_configs=rdzv_configs,
        rdzv_timeout=max(1, math.ceil(plan.timeout)),
        max_restarts=0,
        monitor_interval=POLL_S,
        start_method="spawn",
        log_line_prefix_template=None,
        metrics_cfg={},
        local_addr=advertised_address(plan.rdzv_endpoint),
        event_log_handler="null",
        numa_options=None,
        signals_to_handle="SIGTERM,SIGINT,SIGHUP,SIGQUIT",
        duplicate_stdout_filters=None,
        duplicate_stderr_filters=None,
        virtual_local_rank=False,
        shutdown_timeout=2,
    )
    env = {
        "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1"),
        "PYTHONUNBUFFERED": "1",
        # The launcher runs with torch's C++ log quietened (see quiet_torch_cpp_logs); ranks log fully.
        "TORCH_CPP_LOG_LEVEL": os.environ.get(USER_CPP_LOG_LEVEL, "WARNING"),
        **compile_cache_env(run_dir),
    }
    with _environment(env):
        elastic_launch(config, sys.executable)("-u", "-m", "ddpcheck.worker", str(run_dir))


def _missing_nodes(agent: AgentThread) -> str:
    """Which node ranks never reached the store, when this node could read it."""
    if agent.presence is None:
        return ""
    try:
        return agent.presence.describe_missing()
    except Exception:  # the store went away with node 0: nothing more to learn
        return ""


def compile_cache_env(run_dir: Path) -> dict[str, str]:
    """Keep torch's compile cache (created by an optimizer's first step) inside the run directory.

    Otherwise it lands in $TMPDIR/torchinductor_$USER and outlives the run.
    """
    if "TORCHINDUCTOR_CACHE_DIR" in os.environ:
        return {}
    return {"TORCHINDUCTOR_CACHE_DIR": str(run_dir / "inductor")}


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
        return (
            {},
            (
                f"rendezvous at {where} did not complete within {plan.timeout:g} s: "
                f"{missing or f'{plan.nnodes} node(s) expected'}; are all nodes running with the "
                "same --rdzv-endpoint and --nnodes?"
            ),
            False,
        )
    if isinstance(exc, (RendezvousError, StoreUnreachable)):
        cause = exc.__cause__ or exc.__context__
        reason = f" ({_one_line(cause)})" if cause else ""
        return (
            {},
            (
                f"could not reach the rendezvous store at {where}{reason}: is node 0 running, "
                "and is that port free of other programs?"
            ),
            False,
        )
    return {}, f"{type(exc).__name__}: {_one_line(exc)}".strip(), False


def _one_line(exc: BaseException) -> str:
    lines = [line for line in str(exc).splitlines() if line.strip()]
    return lines[0].strip() if lines else type(exc).__name__


def endpoint_is_local(endpoint: str) -> bool:
    """Whether the endpoint's host is one of this machine's addresses."""
    host, _ = parse_endpoint(endpoint)
    try:
        addresses = {info[4][0] for info in socket.getaddrinfo(host, None)}
    except socket.gaierror as exc:
        raise UsageError(f"--rdzv-endpoint host {host!r} does not resolve ({exc.strerror})") from None
    local = {a.address.split("%")[0] for addrs in psutil.net_if_addrs().values() for a in addrs}
    return any(a in local or a.startswith("127.") or a == "::1" for a in addresses)


def advertised_address(endpoint: str | None) -> str:
    """The address this node gives the others: an IP on the route to the rendezvous host.

    torch would advertise the hostname; a hostname the other nodes cannot resolve
    turns into a five-minute connect timeout, a classic multi-node hang.
    """
    if not endpoint:
        return "127.0.0.1"
    return route_address(*parse_endpoint(endpoint)) or socket.gethostname()


def check_rendezvous_port(plan: LaunchPlan) -> None:
    """On the node that hosts the store, a port taken by another program is bad input: say so now."""
    if not plan.rdzv_endpoint:
        return
    local = endpoint_is_local(plan.rdzv_endpoint)  # on every node: a host that does not resolve is bad input
    if plan.node_rank != 0 or not local:
        return
    host, port = parse_endpoint(plan.rdzv_endpoint)
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(("", port))
        except OSError as exc:
            raise UsageError(
                f"rendezvous port {host}:{port} is already in use on this host ({exc.strerror}); "
                "choose a free port for --rdzv-endpoint"
            ) from None


USER_CPP_LOG_LEVEL = "DDPCHECK_USER_TORCH_CPP_LOG_LEVEL"


def quiet_torch_cpp_logs() -> None:
    """Keep torch's C++ warnings (store retries, socket errors) off the launcher's terminal.

    Must run before torch is imported, which reads the level once; ddpcheck reports those
    failures itself, and the ranks get the user's level back for their log files.
    """
    if "torch" in sys.modules:
        return
    os.environ[USER_CPP_LOG_LEVEL] = os.environ.get("TORCH_CPP_LOG_LEVEL", "WARNING")
    os.environ["TORCH_CPP_LOG_LEVEL"] = "FATAL"


def _exit_info(failure: Any, killed: set[int]) -> dict[str, Any]:
    info: dict[str, Any] = {
        "exitcode": failure.exitcode,
        "pid": failure.pid,
        "killed_by_ddpcheck": failure.pid in killed,
    }
    if failure.exitcode is not None and failure.exitcode < 0:
        try:
            info["signal"] = signal.Signals(-failure.exitcode).name
        except ValueError:
            info["signal"] = f"signal {-failure.exitcode}"
    return info


class Watchdog(threading.Thread):
    """Reads every rank's status file; reports progress; ends a stalled or crashed run.

    In a multi-node run it also publishes this node's statuses to the rendezvous store
    and, when it gives up, reads every other node's: a rank that hangs on another node
    is named as such, not the local ranks that wait for it.
    """

    def __init__(
        self,
        run_dir: Path,
        plan: LaunchPlan,
        on_progress: ProgressCallback | None,
        presence: Callable[[], Presence | None] = lambda: None,
    ) -> None:
        super().__init__(name="ddpcheck-watchdog", daemon=True)
        self.run_dir = run_dir
        self.plan = plan
        self.on_progress = on_progress
        self.presence = presence
        self.stall: dict[str, Any] | None = None
        self.killed: set[int] = set()  # pids this watchdog killed: collateral, not culprits
        self.gave_up_at: float | None = None
        self.snapshot: dict[int, dict[str, Any]] | None = None  # statuses just before a crash kill
        self._stop_event = threading.Event()

    def run(self) -> None:
        started = last_change = last_publish = time.monotonic()
        last_seen: tuple[Any, ...] = ()
        crash_seen_at: float | None = None
        while not self._stop_event.wait(POLL_S):
            statuses = read_statuses(self.run_dir)
            seen = tuple(sorted((r, s["seq"], s["progress_seq"], s["ticks"]) for r, s in statuses.items()))
            now = time.monotonic()
            if seen != last_seen:
                last_seen, last_change = seen, now
            if self.on_progress and 0 in statuses:
                self.on_progress(statuses[0])
            if now - last_publish > PUBLISH_EVERY_S:
                last_publish = now
                self._publish(statuses)
            if any(s.get("error") for s in statuses.values()):
                # A rank crashed: give the agent a moment to notice, then end the others,
                # keeping how every rank looked (alive? frozen?) before they were killed.
                if crash_seen_at is None:
                    crash_seen_at = now
                    self._publish(statuses)  # other nodes learn of it now, not at the next beat
                if now - crash_seen_at > 2.0:
                    self.snapshot = self.world_statuses(annotate(statuses))
                    self._give_up()
                    return
            if now - last_change > self._bound(statuses):
                self.stall = {
                    "at": time.time(),
                    "waited_s": now - last_change,
                    "elapsed_s": now - started,
                    "statuses": self.world_statuses(annotate(statuses)),
                    "world_size": self.plan.world_size,
                }
                self._give_up()
                return

    def _bound(self, statuses: dict[int, dict[str, Any]]) -> float:
        """--timeout, or more while ranks are still starting (importing torch, initialising CUDA).

        A frozen rank gets no allowance: its heartbeat stopped, it is not slow, it is stuck.
        """
        now = time.time()
        frozen = any(now - s["heartbeat"] > FROZEN_AFTER_S for s in statuses.values())
        starting = len(statuses) < self.plan.nproc or any(
            s["stage"] in STARTUP_STAGES for s in statuses.values()
        )
        return max(self.plan.timeout, STARTUP_ALLOWANCE_S) if starting and not frozen else self.plan.timeout

    def _give_up(self) -> None:
        self.gave_up_at = time.time()
        self.killed |= kill_workers()

    def _publish(self, statuses: dict[int, dict[str, Any]], annotated: bool = False) -> None:
        presence = self.presence()
        if presence is not None:
            # The store may be gone (node 0 ended): then there is no one left to tell.
            with contextlib.suppress(Exception):
                presence.publish(statuses if annotated else annotate(statuses))

    def publish_final(self, statuses: dict[int, dict[str, Any]], exits: dict[int, dict[str, Any]]) -> None:
        """How this node's ranks ended (exit codes, signals), for node 0's report."""
        self._publish({r: {**s, "exit": exits.get(r)} for r, s in statuses.items()}, annotated=True)

    def world_statuses(self, local: dict[int, dict[str, Any]]) -> dict[int, dict[str, Any]]:
        """This node's statuses, and in a multi-node run the other nodes' last published ones."""
        presence = self.presence()
        if presence is None:
            return local
        try:
            return {**presence.world_statuses(), **local}
        except Exception:
            return local

    def abandoned(self) -> bool:
        """The watchdog gave up long enough ago that the agent should have returned."""
        return self.gave_up_at is not None and time.time() - self.gave_up_at > ABANDON_AFTER_S

    def stop(self) -> None:
        self._stop_event.set()
        if self.is_alive():
            self.join(timeout=5)


def annotate(statuses: dict[int, dict[str, Any]]) -> dict[int, dict[str, Any]]:
    """Add what only this host can see: each rank's process state and heartbeat age.

    Done where the ranks run, so that ages never mix two hosts' clocks.
    """
    states = _process_states()
    now = time.time()
    return {
        rank: {
            **s,
            "proc_state": "exited" if states.get(s.get("pid"), "zombie") == "zombie" else states[s["pid"]],
            "heartbeat_age_s": round(now - s.get("heartbeat", now), 1),
            "in_stage_s": round(now - s.get("stage_since", now), 1),
        }
        for rank, s in statuses.items()
    }


def _process_states() -> dict[int, str]:
    """pid -> process state ('stopped' for SIGSTOP) of every descendant still running."""
    states = {}
    for child in psutil.Process().children(recursive=True):
        try:
            states[child.pid] = child.status()
        except psutil.Error:
            continue
    return states


def kill_workers() -> set[int]:
    """Kill every descendant process, stopped ones included (SIGTERM cannot reach those)."""
    children = psutil.Process().children(recursive=True)
    for child in children:
        try:
            child.send_signal(signal.SIGCONT)
            child.kill()
        except psutil.Error:
            continue
    psutil.wait_procs(children, timeout=5)
    return {child.pid for child in children}


def tail_of_log(run_dir: Path, status: dict[str, Any] | None, lines: int = 12) -> str:
    """The last lines of a rank's stderr, when that rank ran on this node."""
    if not status or status.get("remote"):
        return ""
    for path in sorted((run_dir / "logs").glob(f"*/attempt_*/{status['local_rank']}/stderr.log")):
        text = path.read_text(errors="replace").strip().splitlines()
        return "\n".join(text[-lines:])
    return ""


def _keep_logs(run_dir: Path) -> Path | None:
    """Keep only the rank logs of a run that could not complete; drop the scratch files.

    None when no rank wrote a line: there is nothing to read, so nothing is kept.
    """
    logs = run_dir / "logs"
    if not logs.is_dir() or not any(p.stat().st_size for p in logs.rglob("*.log")):
        return None
    for name in ("status", SPEC_FILE):
        target = run_dir / name
        if target.is_dir():
            shutil.rmtree(target, ignore_errors=True)
        elif target.exists():
            target.unlink()
    return run_dir


def _silence_torch_logging() -> None:
    # The elastic agent logs its launch banner and every worker failure; ddpcheck reports those itself.
    for name in ("torch.distributed.elastic", "torch.distributed.launcher"):
        # Its module loggers set their own levels, so silence them where they meet: a handler
        # that drops everything (without one, Python's last-resort handler prints to stderr).
        logger = logging.getLogger(name)
        if not any(isinstance(h, logging.NullHandler) for h in logger.handlers):
            logger.addHandler(logging.NullHandler())
        logger.propagate = False


class _environment:
    def __init__(self, values: dict[str, str]) -> None:
        self.values = values
        self.saved: dict[str, str | None] = {}

    def __enter__(self) -> None:
        for key, value in self.values.items():
            self.saved[key] = os.environ.get(key)
            os.environ[key] = value

    def __exit__(self, *exc: object) -> None:
        for key, value in self.saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def run_inline(command: str, options: dict[str, Any], plan: LaunchPlan) -> Report | Verdict:
    """Already launched by torchrun or srun: run as this rank, spawn nothing.

    Rank 0 returns the Report; every other rank returns the shared verdict.
    """
    started = time.monotonic()
    run_dir = Path(tempfile.mkdtemp(prefix="ddpcheck-"))
    try:
        spec = make_spec(command, options, plan)
        spec["pg_timeout"] = plan.timeout  # no launcher watches: the ranks' own timeout is the bound
        spec["inline"] = True
        os.environ.update(compile_cache_env(run_dir))
        code = run_rank(spec, str(run_dir))
        report = load_report(run_dir)
        if report is not None:
            report.elapsed_s = time.monotonic() - started
            return report
        shared = load_verdict(run_dir)
        if code != 0 or shared is None:
            return Verdict.ERROR
        return shared[0]
    finally:
        shutil.rmtree(run_dir, ignore_errors=True)
