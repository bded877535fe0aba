"""One watcher per task (`srun -K -n 3 ddpcheck watch -- python train.py`): the watchers agree on one verdict.

Task 0 hosts a TCPStore (the port derived from the job's id, as ddpcheck's own inline mode
derives its endpoint, and set apart from it). Every watcher publishes what it sees of its own
ranks; task 0 decides (every task stalled past --hang-after: a hang; a task's rank failed, or a
task's job ended non-zero: a crash; every job ended 0: success) and publishes the decision. Each
watcher then takes the evidence of its own ranks (their stacks, paused; their flight-recorder
dumps; their exits), ends its own job, and publishes it; task 0 judges all of it and writes the
report. The other watchers print one line and exit with the verdict's code.

The straggler sampling goes the same way: every watcher samples its own ranks and publishes what
is new through the store (sampling.StoreExchange); task 0 alone judges, speaks and reports. The
replicas' fingerprints travel with each task's evidence (replicas.py): task 0 judges them at the end.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta

from ddpcheck.checks.watch import clocks
from ddpcheck.checks.watch.progress import Event
from ddpcheck.checks.watch.sampling import StoreExchange
from ddpcheck.checks.watch.watcher import Watcher
from ddpcheck.failure.hangs import view_from_dict, view_to_dict
from ddpcheck.launcher import mpi, slurm, torchrun_nodes
from ddpcheck.rank import interrupt
from ddpcheck.rank.torch_logs import quiet_torch_cpp_logs
from ddpcheck.report.model import Check, Report, Status
from ddpcheck.torch_compat import store_has

PUBLISH_S = 0.5
PORT_OFFSET = 7  # ddpcheck's own inline runs of the same job use the derived port itself
CONNECT_S = 120.0  # how long task 0's store is waited for (task 0 may start last on a busy node)
EVIDENCE_S = 30.0  # how long task 0 waits for every task's evidence
FAILED_GRACE_S = 1.0  # a rank failed somewhere: the others' records have this long to arrive
CLOCK_KEY = "watch/clock"  # task 0's clock server's port (clocks.py)


@dataclass(frozen=True)
class Task:
    index: int
    count: int
    host: str  # task 0's host
    port: int


def task_of(environ: dict[str, str] | os._Environ[str], command: list[str] | None = None) -> Task | None:
    """This watcher's task of an srun step or an mpirun job with several tasks, or of a torchrun
    across nodes (one watch per node, `command` the job: torchrun_nodes.py); None when alone."""
    if "RANK" in environ:  # under torchrun: the job is watched from outside it
        return None
    node = torchrun_nodes.node_of(command or [])
    if node is not None:
        port = node.port + PORT_OFFSET if node.port + PORT_OFFSET <= 65535 else node.port - PORT_OFFSET
        return Task(node.node_rank, node.nnodes, node.host, port)
    if mpi.under_mpirun(environ):
        mapped = mpi.torch_environment(environ)
        base = int(mapped["MASTER_PORT"])
    elif slurm.under_srun(environ):
        mapped = slurm.torch_environment(environ)
        base = slurm.step_port(environ)
    else:
        return None
    port = slurm.PORT_BASE + (base - slurm.PORT_BASE + PORT_OFFSET) % slurm.PORT_SPAN
    return Task(int(mapped["RANK"]), int(mapped["WORLD_SIZE"]), mapped["MASTER_ADDR"], port)


def connect(task: Task):
    quiet_torch_cpp_logs()  # a store that went with task 0 is expected, not worth a C++ trace
    from torch.distributed import TCPStore

    return TCPStore(
        task.host if task.index else "0.0.0.0",
        task.port,
        world_size=task.count,
        is_master=task.index == 0,
        timeout=timedelta(seconds=CONNECT_S),
        wait_for_workers=False,
    )


def _get(store, key: str) -> dict | None:
    try:
        return json.loads(store.get(key)) if store_has(store, key) else None
    except (RuntimeError, ValueError):
        return None


def _set(store, key: str, value: dict) -> None:
    store.set(key, json.dumps(value))


def run_team(watcher: Watcher, task: Task, store) -> tuple[Event, Report | None]:
    """(the decision, the report on task 0; None elsewhere)."""
    server = clocks.ClockServer() if task.index == 0 else None
    try:
        if server is not None:
            _set(store, CLOCK_KEY, {"port": server.port})
        return _run_team(watcher, task, store)
    finally:
        if server is not None:
            server.close()


def _clock_offset(store, task: Task) -> Callable[[], int | None]:
    """This host's clock minus task 0's, measured each time it is asked (None: no usable answer)."""

    def measured() -> int | None:
        found = _get(store, CLOCK_KEY)
        offset = clocks.measure(task.host, int(found["port"])) if found else None
        return offset.offset_ns if offset is not None and offset.usable else None

    return measured


def _run_team(watcher: Watcher, task: Task, store) -> tuple[Event, Report | None]:
    decision = None
    next_publish = 0.0
    exchange = StoreExchange(store, task.index, task.count, clock=_clock_offset(store, task))
    watcher.share_samples(exchange, judging=task.index == 0)
    while decision is None:
        event = watcher.step()
        now = time.monotonic()
        if now >= next_publish:
            _set(store, f"watch/{task.index}", {"event": event, "code": watcher.job_code()})
            next_publish = now + PUBLISH_S
            if task.index == 0:
                decision = _decide(store, task)
                if decision:
                    _set(store, "watch/decision", {"decision": decision})
        if task.index != 0:
            found = _get(store, "watch/decision")
            decision = Event(found["decision"]) if found else None
        time.sleep(0.1)
    views = watcher.evidence(decision)
    evidence = {"views": [view_to_dict(v) for v in views], "output": watcher.output()[-20000:]}
    evidence["replicas"] = watcher.share_replicas(task.index == 0)
    _set(store, f"watch/evidence/{task.index}", evidence)
    if task.index != 0:
        # Task 0 writes the report and exits with the verdict; srun -K then ends the step (SIGTERM
        # to every task), which must not cut this one's own exit (its code, its kept directory).
        interrupt.ignore_sigterm()
        _wait_for_leader(store)
        return decision, None
    gathered, output, missing = [], "", []
    deadline = time.monotonic() + EVIDENCE_S
    for index in range(task.count):
        while (found := _get(store, f"watch/evidence/{index}")) is None and time.monotonic() < deadline:
            time.sleep(0.1)
        if found is None:
            missing.append(index)
            continue
        gathered += [view_from_dict(v) for v in found["views"]]
        if index != 0 and found.get("replicas"):
            watcher.take_replicas(found["replicas"])
        output += found["output"]
    report = watcher.verdict(decision, gathered, output)
    if missing:
        report.checks.append(Check("watchers", Status.ERROR, f"tasks {missing} gave no evidence in time"))
    return decision, report


def _decide(store, task: Task) -> Event | None:
    """Task 0's decision from every task's last look (its event, and its job's exit status once ended)."""
    looks = [_get(store, f"watch/{i}") or {"event": None, "code": None} for i in range(task.count)]
    events = [(Event(look["event"]) if look["event"] else None, look["code"]) for look in looks]
    if any(e is Event.FAILED or (e is Event.ENDED and code not in (0, None)) for e, code in events):
        time.sleep(FAILED_GRACE_S)
        return Event.CRASH
    if all(e is Event.ENDED for e, _ in events):
        return Event.ENDED
    if all(e in (Event.HANG, Event.ENDED) for e, _ in events) and any(e is Event.HANG for e, _ in events):
        return Event.HANG
    return None


def _wait_for_leader(store) -> None:
    """Until task 0 has the report out: its store goes with it."""
    deadline = time.monotonic() + EVIDENCE_S + 30
    while time.monotonic() < deadline:
        try:
            if not store_has(store, "watch/decision"):
                return  # set before this task left its loop: on 2.2 a store gone reads as the key unset
        except RuntimeError:
            return
        time.sleep(0.2)
