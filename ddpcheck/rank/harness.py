"""The harness every check runs in, on every rank (nccl-tests' common.cu).

It joins the process group with a bounded timeout, binds the device, reports
each stage to the launcher, runs the check's `measure()`, gathers every rank's
data to rank 0, where the check's `judge()` turns it into a Report, shares the
verdict with every rank, and always tears the process group down.

Run by the launcher as `python -m ddpcheck.rank.harness RUN_DIR` (rank/rundir.py says what
the run directory holds); under torchrun, srun or mpirun the CLI calls `run_rank` itself.
"""

from __future__ import annotations

import os
import signal
import socket
import sys
import threading
import time
import traceback
from collections.abc import Callable
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from ddpcheck.command import load, options_from_dict
from ddpcheck.commands import COMMANDS
from ddpcheck.failure import stages
from ddpcheck.failure.recorders import dump_every_recorder
from ddpcheck.rank import arrival, assemble, giving_up, inline, rundir
from ddpcheck.rank.context import RankContext
from ddpcheck.rank.faults import Faults
from ddpcheck.rank.fingerprint import rank_fingerprint
from ddpcheck.rank.network import route_address
from ddpcheck.rank.rundir import RunSpec
from ddpcheck.rank.status_channel import StatusWriter
from ddpcheck.torch_compat import takes_device_id, teardown_may_deadlock

if TYPE_CHECKING:
    import torch

    from ddpcheck.report.model import Report

# How often a rank looks for the launcher's monitor's request to dump its flight recorder.
FLIGHT_POLL_S = 0.2


def rank_identity() -> dict[str, Any]:
    return {
        "rank": int(os.environ["RANK"]),
        "local_rank": int(os.environ["LOCAL_RANK"]),
        "node": int(os.environ.get("GROUP_RANK", "0")),
        "host": socket.gethostname(),
        "address": route_address(os.environ["MASTER_ADDR"]) if "MASTER_ADDR" in os.environ else None,
        "pid": os.getpid(),
    }


def device_identity(device: torch.device) -> dict[str, Any]:
    """What names this rank's device, so the rank map can tell two ranks on one GPU."""
    if device.type != "cuda":
        return {"device": "cpu", "device_name": "cpu", "device_uuid": None, "pci_bus_id": None}
    import torch

    props = torch.cuda.get_device_properties(device)
    pci = getattr(props, "pci_bus_id", None)
    domain = getattr(props, "pci_domain_id", 0)
    dev = getattr(props, "pci_device_id", 0)
    return {
        "device": f"cuda:{device.index}",
        "device_name": props.name,
        "device_uuid": str(getattr(props, "uuid", "")) or None,
        "pci_bus_id": f"{domain:04x}:{pci:02x}:{dev:02x}.0" if pci is not None else None,
    }


def run_rank(spec: RunSpec, run_dir: str, write_report: Callable[[Report], list[str]] | None = None) -> int:
    """Run one rank of the command in `spec`; returns this process's exit code.

    The exit code says whether this rank completed (0) or crashed (1); the
    verdict itself travels in the report.
    """
    identity = rank_identity()
    world_size = int(os.environ["WORLD_SIZE"])
    status = _status_writer(spec, run_dir, identity)
    faults: Faults = load(COMMANDS[spec.command].fault_actions)(spec.faults, identity["rank"])
    run = giving_up.InlineRank(spec, run_dir, world_size, None, status, write_report)  # what a give-up knows
    import torch.distributed as dist

    try:
        faults.at_stage(stages.LAUNCHED)
        device = _bind_device(spec, identity["local_rank"], status, faults)
        fingerprint = rank_fingerprint()  # after binding: the GPU model is this rank's own
        _stage(status, faults, stages.JOIN)
        if spec.inline:
            # Before the rendezvous: a peer that never arrives is named from what this rank publishes.
            run.session = _inline_session(identity["rank"], world_size, status, spec.collective_timeout)
        _join_guarded(run, status, device)
        shared = _run_command(spec, identity, world_size, device, fingerprint, status, faults, run_dir)
        # Every node learns the verdict before teardown, so all of them exit with it.
        dist.broadcast_object_list(shared, src=0)
        rundir.write_verdict(run_dir, **shared[0])
        _stage(status, faults, stages.DONE)
        return 0
    except BaseException as exc:
        message = "".join(traceback.format_exception_only(type(exc), exc)).strip()
        if isinstance(exc, inline.StoreNotReached):
            message = str(exc)  # ddpcheck's own finding, whole: no exception type before it
        status.error(message)
        if spec.inline:
            giving_up.after_failure(run, message)
        else:
            traceback.print_exc()
        return 1
    finally:
        # Where teardown can deadlock, main()'s os._exit ends the process group with the process.
        if dist.is_initialized() and not teardown_may_deadlock():
            dist.destroy_process_group()
        status.close()
        if run.session:
            run.session.close()


def _status_writer(spec: RunSpec, run_dir: str, identity: dict[str, Any]) -> StatusWriter:
    """This rank's status channel: the run directory's file, and inline the host's job directory."""
    status = StatusWriter(run_dir, identity)
    giving_up.status_of_this_rank = status  # for the SIGTERM thread: was this rank itself stopped?
    if spec.inline:
        status.add_transport(arrival.StageTransport())  # the host's job directory, for peers before the store
    return status


def _join_guarded(run: giving_up.InlineRank, status: StatusWriter, device: torch.device) -> None:
    """Join the process group; inline, a join that outlives its timeout is given up from a thread."""
    spec = run.spec
    joined = giving_up.guard_join(run) if spec.inline else None
    _join(spec, device, status)
    if joined is not None:
        joined.set()
    if not spec.inline:
        _answer_flight_requests(run.run_dir, int(os.environ["RANK"]))
    if run.session is not None:
        status.stage(stages.JOINED)


def _run_command(
    spec: RunSpec,
    identity: dict[str, Any],
    world_size: int,
    device: torch.device,
    fingerprint: dict[str, Any],
    status: StatusWriter,
    faults: Faults,
    run_dir: str,
) -> list[Any]:
    """The check's measure() on every rank, gathered to rank 0, which judges it and writes the report;
    returns what rank 0 shares with every rank (its verdict and host; None elsewhere)."""
    command = COMMANDS[spec.command]
    check = command.module()
    options = options_from_dict(command.options, spec.options)
    ctx = RankContext(
        rank=identity["rank"],
        local_rank=identity["local_rank"],
        world_size=world_size,
        backend=spec.backend,
        device=device,
        host=identity["host"],
        faults=faults,
        status=status,
        budget=spec.budget,
    )
    _stage(status, faults, stages.MEASURE)
    data = check.measure(ctx, options)
    _stage(status, faults, stages.GATHER)
    # A substage, no fault point: a rank stuck at GATHER's stays one stage behind the peers waiting here.
    status.stage(stages.GATHER_WAIT)
    gathered = ctx.gather_to_rank0(
        {**identity, **device_identity(device), "fingerprint": fingerprint, "data": data}
    )
    if gathered is None:
        return [None]
    fingerprints = [g.pop("fingerprint") for g in gathered]
    judged = check.judge([g.pop("data") for g in gathered], gathered, options)
    report = assemble.from_ranks(judged, gathered, fingerprints, _world(spec, gathered, device), spec.options)
    rundir.write_rank0_report(run_dir, report)
    return [{"verdict": report.verdict.value, "host": identity["host"]}]


def _inline_session(rank: int, world_size: int, status: StatusWriter, wait_s: float) -> inline.Session | None:
    """Under torchrun, srun or mpirun: publish this rank's status (and heartbeat) to the shared store,
    once it answers (`wait_s`: rank 0 may open it only after this rank is here).

    DDPCHECK_INLINE_HEARTBEAT=0 turns it off: what tests/perf/bench_launchers.py compares against.
    """
    if os.environ.get(inline.HEARTBEAT_SWITCH, "1") == "0":
        return None
    try:
        session = inline.Session(rank, world_size, wait_s)
    except Exception:  # no store to reach: the run goes on, its failures are named less exactly
        return None
    inline.current = session
    status.add_transport(session.transport)
    return session


def _bind_device(spec: RunSpec, local_rank: int, status: StatusWriter, faults: Faults) -> torch.device:
    import torch

    _stage(status, faults, stages.DEVICE)
    if spec.device == "cuda":
        index = local_rank if spec.device_index is None else spec.device_index
        # The classic pitfall: without set_device every rank lands on cuda:0.
        torch.cuda.set_device(index)
        return torch.device("cuda", index)
    return torch.device("cpu")


def _join(spec: RunSpec, device: torch.device, status: StatusWriter) -> None:
    import torch.distributed as dist

    if not spec.inline:
        # Before the process group exists: the flight recorder sizes its buffer when it starts.
        os.environ.setdefault(rundir.FLIGHT_BUFFER_ENV, str(rundir.FLIGHT_BUFFER_ENTRIES))
    timeout = timedelta(seconds=spec.collective_timeout)
    kwargs: dict[str, Any] = {"backend": spec.backend, "timeout": timeout}
    if device.type == "cuda" and spec.backend == "nccl" and takes_device_id():
        kwargs["device_id"] = device  # eager NCCL init: a bad GPU fails here, not mid-check
    if spec.inline:
        # The rendezvous apart from the join: a peer stuck in one is named at that stage.
        status.stage(stages.RENDEZVOUS)
        kwargs.update(store=inline.rendezvous_store(timeout), rank=int(os.environ["RANK"]))
        kwargs["world_size"] = int(os.environ["WORLD_SIZE"])
    status.stage(stages.JOIN_WAIT)
    dist.init_process_group(**kwargs)


def _world(spec: RunSpec, gathered: list[dict[str, Any]], device: torch.device) -> dict[str, Any]:
    import torch

    nccl = ".".join(map(str, torch.cuda.nccl.version())) if device.type == "cuda" else None
    return {**assemble.world(len(gathered), spec.backend, device.type, gathered), "nccl": nccl}


def _answer_flight_requests(run_dir: str, rank: int) -> None:
    """A thread that dumps this rank's flight recorder when the launcher's monitor asks (a stall): the main
    thread may be stuck inside a collective, which gloo waits in without the GIL."""

    def watch() -> None:
        from torch._C import _distributed_c10d as native

        while not rundir.flight_requested(run_dir):
            time.sleep(FLIGHT_POLL_S)
        dump = dump_every_recorder(native, nccl_stacks=False)  # py-spy has the stacks
        if dump is not None:
            rundir.write_flight_dump(run_dir, rank, dump)

    threading.Thread(target=giving_up.quietly, args=(watch,), name="ddpcheck-flight", daemon=True).start()


def _stage(status: StatusWriter, faults: Faults, name: str) -> None:
    """Enter a harness stage; an injected fault fires here, before the stage's work begins."""
    status.stage(name)
    faults.at_stage(name)


def _die_with_parent() -> None:
    """Ask Linux to SIGKILL this rank when its launcher dies, even if the rank is stopped or stuck.

    The heartbeat thread checks the parent too, but cannot run in a frozen process.
    """
    try:
        import ctypes

        pr_set_pdeathsig = 1
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(pr_set_pdeathsig, signal.SIGKILL)
    except (OSError, AttributeError):
        pass  # not Linux: the heartbeat thread's parent check remains


def main() -> None:
    # Started from the launcher's agent thread, which keeps SIGINT and SIGTERM off itself.
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT, signal.SIGTERM})
    _die_with_parent()
    run_dir = sys.argv[1]
    code = run_rank(rundir.read_spec(run_dir), run_dir)
    sys.stdout.flush()
    sys.stderr.flush()
    # Skip interpreter teardown: after a peer failed, library destructors can block on dead sockets.
    os._exit(code)


if __name__ == "__main__":
    main()
