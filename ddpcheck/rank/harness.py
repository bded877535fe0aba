"""The harness every check runs in, on every rank (nccl-tests' common.cu).

It joins the process group with a bounded timeout, binds the device, reports
each stage to the launcher, runs the check's `measure()`, gathers every rank's
data to rank 0, where the check's `judge()` turns it into a Report, shares the
verdict with every rank, and always tears the process group down.

Run by the launcher as `python -m ddpcheck.rank.harness RUN_DIR` (rank/rundir.py says what
the run directory holds); under torchrun, srun or mpirun the CLI calls `run_rank` itself.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import sys
import threading
import time
import traceback
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

from ddpcheck.command import load, options_from_dict
from ddpcheck.commands import COMMANDS
from ddpcheck.errors import EXIT_COULD_NOT_COMPLETE, say
from ddpcheck.failure import explain, peers, stages
from ddpcheck.failure.liveness import Stall
from ddpcheck.failure.recorders import dump_every_recorder
from ddpcheck.rank import arrival, assemble, here, inline, interrupt, rundir
from ddpcheck.rank.context import NullStatus, RankContext
from ddpcheck.rank.faults import Faults
from ddpcheck.rank.fingerprint import rank_fingerprint
from ddpcheck.rank.network import route_address
from ddpcheck.rank.rundir import RunSpec
from ddpcheck.rank.status import StatusWriter
from ddpcheck.torch_compat import takes_device_id, teardown_may_deadlock

if TYPE_CHECKING:
    import torch

    from ddpcheck.report.model import Check, Report

# How often a rank looks for the launcher's monitor's request to dump its flight recorder.
FLIGHT_POLL_S = 0.2
# Past its own timeout, this much longer before a join that did not return is given up (_guard_join).
JOIN_GRACE_S = 5.0
# This rank's status writer, once it has one.
_writer: list[StatusWriter] = []
# A pause of its own this long names the rank itself (a busy 2-core machine delays a beat by < 0.5 s).
PAUSED_ITSELF_S = 2.0


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


def run_rank(
    spec: RunSpec, run_dir: str | None, write_report: Callable[[Report], list[str]] | None = None
) -> int:
    """Run one rank of the command in `spec`; returns this process's exit code.

    The exit code says whether this rank completed (0) or crashed (1); the
    verdict itself travels in the report.
    """
    identity = rank_identity()
    rank, world_size = identity["rank"], int(os.environ["WORLD_SIZE"])
    status = StatusWriter(run_dir, identity) if run_dir else None
    _writer[:] = [status] if status else []  # for the SIGTERM thread: was this rank itself stopped?
    if status and spec.inline:
        status.add_transport(arrival.StageTransport())  # the host's job directory, for peers before the store
    faults: Faults = load(COMMANDS[spec.command].fault_actions)(spec.faults, rank)
    session: inline.Session | None = None
    import torch.distributed as dist

    try:
        faults.at_stage(stages.LAUNCHED)
        device = _bind_device(spec, identity["local_rank"], status, faults)
        fingerprint = rank_fingerprint()  # after binding: the GPU model is this rank's own
        _stage(status, faults, stages.JOIN)
        if spec.inline and status:
            # Before the rendezvous: a peer that never arrives is named from what this rank publishes.
            session = _inline_session(rank, world_size, status, spec.collective_timeout)
        joined = (
            _guard_join(spec, run_dir, world_size, session, status, write_report) if spec.inline else None
        )
        _join(spec, device, status)
        if joined is not None:
            joined.set()
        if run_dir and not spec.inline:
            _answer_flight_requests(run_dir, rank)
        if session is not None and status:
            status.stage(stages.JOINED)
        command = COMMANDS[spec.command]
        check = command.module()
        options = options_from_dict(command.options, spec.options)
        ctx = RankContext(
            rank=rank,
            local_rank=identity["local_rank"],
            world_size=world_size,
            backend=spec.backend,
            device=device,
            host=identity["host"],
            faults=faults,
            status=status or NullStatus(),
            budget=spec.budget,
        )
        _stage(status, faults, stages.MEASURE)
        data = check.measure(ctx, options)
        _stage(status, faults, stages.GATHER)
        _substage(status, stages.GATHER_WAIT)
        gathered = ctx.gather_to_rank0(
            {**identity, **device_identity(device), "fingerprint": fingerprint, "data": data}
        )
        shared: list[Any] = [None]
        if gathered is not None:
            fingerprints = [g.pop("fingerprint") for g in gathered]
            judged = check.judge([g.pop("data") for g in gathered], gathered, options)
            world = _world(spec, gathered, device)
            report = assemble.from_ranks(judged, gathered, fingerprints, world, spec.options)
            shared = [{"verdict": report.verdict.value, "host": identity["host"]}]
            if run_dir:
                rundir.write_rank0_report(run_dir, report)
        # Every node learns the verdict before teardown, so all of them exit with it.
        dist.broadcast_object_list(shared, src=0)
        if run_dir:
            rundir.write_verdict(run_dir, **shared[0])
        _stage(status, faults, stages.DONE)
        return 0
    except BaseException as exc:
        message = "".join(traceback.format_exception_only(type(exc), exc)).strip()
        if isinstance(exc, StoreNotReached):
            message = str(exc)  # ddpcheck's own finding, whole: no exception type before it
        if status:
            status.error(message)
        if spec.inline:
            own = status.record.to_dict() if status else {}
            paused = _paused_itself(spec, status, rank, message)
            _inline_gave_up(spec, run_dir, world_size, message, session, {**own, "error": message}, paused)
        else:
            traceback.print_exc()
        return 1
    finally:
        # Where teardown can deadlock, main()'s os._exit ends the process group with the process.
        if dist.is_initialized() and not teardown_may_deadlock():
            dist.destroy_process_group()
        if status:
            status.close()
        if session:
            session.close()


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


def _inline_gave_up(
    spec: RunSpec,
    run_dir: str | None,
    world_size: int,
    message: str,
    session: inline.Session | None,
    own: dict[str, Any],
    paused: Check | None = None,
    claimed: bool = False,
) -> None:
    """Under torchrun, srun or mpirun no launcher watches: the rank that gives up names who stopped beating.

    Rank 0 writes the report; every other rank names the same culprit in its one line (this
    is the user's terminal, not a log file). A peer whose connection dropped may still beat
    for a moment: wait up to inline.SAMPLE_S for its heartbeat to stop.
    """
    rank = int(os.environ["RANK"])
    headline = message.splitlines()[-1]
    if not claimed and not inline.claim():
        # SIGTERM came first: its thread says the one line and ends the process.
        time.sleep(inline.SIGTERM_GRACE_S)
        return
    try:
        if rank != 0 and run_dir:
            # Nothing more to write here; a launcher's SIGKILL may come while this rank looks.
            rundir.remove(run_dir)
        if paused is not None:
            # Its peers' timeouts are its own doing: it names itself, and blames nobody else.
            say(f"ddpcheck: rank {rank} failed ({headline}): {paused.detail}")
            if rank == 0 and run_dir:
                report = explain.inline_crash_report(spec, world_size, own, message, paused)
                rundir.write_rank0_report(run_dir, report)
            return
        if session is None or not peers.is_collateral_error(message):
            # No store to read, or this rank failed first-hand: then it is the culprit itself.
            say(f"ddpcheck: rank {rank} failed: {headline}")
            if rank == 0 and run_dir and session is not None:
                rundir.write_rank0_report(
                    run_dir, explain.inline_crash_report(spec, world_size, own, message)
                )
            return
        wait_s = inline.SAMPLE_S if rank != 0 or peers.connection_dropped(message) else 0.0
        statuses = session.observe(wait_s)
        if not statuses:
            where = f"{os.environ.get('MASTER_ADDR')}:{os.environ.get('MASTER_PORT')}"
            say(
                f"ddpcheck: rank {rank} failed: {headline} (the store at {where}, which holds every "
                "rank's heartbeat, did not answer: its host, rank 0 or the launcher, is gone or frozen)"
            )
            return
        stall = Stall(statuses, waited_s=spec.collective_timeout, world_size=world_size)
        end_stopped = spec.launcher == "torchrun" and rank == 0
        ended = inline.reap(statuses, end_stopped=end_stopped, store=session.store)
        if rank != 0:
            check = explain.judge_inline(stall, message, rank)
            say(f"ddpcheck: rank {rank} failed ({headline}): {check.detail}")
            session.said()
            if spec.launcher in ("srun", "mpirun"):
                # The first task to exit starts the launcher's teardown: rank 0, which reports, leaves first.
                session.wait_for_rank0(inline.RANK0_LEAVES_S)
            return
        say(f"ddpcheck: rank 0 failed: {headline}")
        report = explain.inline_report(spec, stall, message)
        if ended:
            report.notes.append(
                f"ddpcheck ended stopped rank(s) {', '.join(map(str, ended))} on this host (SIGKILL): "
                "torchrun's SIGTERM cannot reach a stopped process, and it would wait its shutdown timeout"
            )
        if run_dir:
            rundir.write_rank0_report(run_dir, report)
        if spec.launcher in ("srun", "mpirun"):
            # Rank 0's process hosts the store there: the others read it to name the culprit.
            session.wait_for_waiters(report.checks[0].ranks, inline.SAMPLE_S + 1.0)
    finally:
        inline.gave_up.set()


def _guard_join(
    spec: RunSpec,
    run_dir: str | None,
    world_size: int,
    session: inline.Session | None,
    status: StatusWriter | None,
    write_report: Callable[[Report], list[str]] | None,
) -> threading.Event:
    """Under torchrun, srun or mpirun: a join that outlives its own timeout is given up from a thread.

    gloo's full-mesh connect to a peer stopped mid-handshake never returns (torch 2.13: two ranks
    stuck 45 s in init_process_group with --timeout 10, 1 strike of 20 under torchrun), and no
    launcher watches. Set the event once the join returned."""
    joined = threading.Event()
    bound_s = spec.collective_timeout + JOIN_GRACE_S

    def guard() -> None:
        if joined.wait(bound_s) or not inline.claim():
            return  # joined; or the main thread (its own timeout), or SIGTERM's thread, is giving up
        rank = int(os.environ["RANK"])
        message = (
            f"init_process_group timed out: it had not returned {bound_s:g} s after it began "
            f"(its own timeout is {spec.collective_timeout:g} s)"
        )
        if status:
            status.error(message)
        own = status.record.to_dict() if status else {}
        paused = _paused_itself(spec, status, rank, message)
        _inline_gave_up(spec, run_dir, world_size, message, session, {**own, "error": message}, paused, True)
        report = rundir.read_rank0_report(run_dir) if run_dir and write_report else None
        if report is not None and write_report is not None:
            with contextlib.suppress(Exception):
                for said in write_report(report):
                    say(f"ddpcheck: {said}")
        _leave()

    threading.Thread(target=_quietly, args=(guard,), name="ddpcheck-join-guard", daemon=True).start()
    return joined


def _paused_itself(spec: RunSpec, status: StatusWriter | None, rank: int, message: str) -> Check | None:
    """This rank's own beats show it did not run for a long while (SIGSTOP, then SIGCONT from its
    launcher's teardown): then the timeout it met is its own doing. A pause under PAUSED_ITSELF_S, or
    under a quarter of the collective timeout, cannot have made a peer give up."""
    if status is None:
        return None
    pause_s, stage = status.pause()
    if pause_s < max(PAUSED_ITSELF_S, spec.collective_timeout / 4):
        return None
    return explain.paused_itself(rank, status.record.to_dict(), pause_s, stage, message)


def _leave() -> NoReturn:
    """Exit 3, the run directory (registered by run_inline) removed once more: the main thread went
    on while this thread looked, and what it wrote there since would outlive the rank."""
    interrupt.leave(EXIT_COULD_NOT_COMPLETE, say=False)


def on_inline_sigterm(
    spec: RunSpec, run_dir: Path, write_report: Callable[[Report], list[str]] | None = None
) -> None:
    """The launcher stops this rank (SIGTERM) because another failed: name the one that stopped beating.

    Runs on inline.SigtermWatch's thread while the main thread may be blocked in a collective.
    Rank 0 also writes the report's files (`write_report`, which says where): under mpirun its
    SIGTERM can come before its own collective fails, and a SIGKILL a second after it.
    """
    rank = int(os.environ["RANK"])
    # slurmstepd's SIGKILL follows only after KillWait: rank 0's main thread, which writes the report,
    # gives up within its collective's timeout (at once when the peer's connection dropped).
    srun_rank0 = rank == 0 and spec.launcher == "srun" and inline.current is not None
    if srun_rank0 and inline.gave_up.wait(spec.collective_timeout + inline.SIGTERM_GRACE_S):
        time.sleep(inline.SIGTERM_GRACE_S)  # it is rendering the report, then exits by itself
        _leave()
    claimed = inline.claim()
    arrival.stage(arrival.TERMINATED)  # a SIGKILL may follow: the peers must not take this rank for a culprit
    # The launcher may follow with SIGKILL within a second (mpirun does): clean up first. Nothing
    # in the run directory must outlive that: rank 0's report, if its main thread is writing it
    # now, is kept in this process too (rundir.write_rank0_report).
    rundir.remove(run_dir)
    if not claimed:
        # This rank is already giving up: let it finish its report and line, within a bound.
        inline.gave_up.wait(inline.SIGTERM_GRACE_S)
        time.sleep(inline.SIGTERM_GRACE_S)
        _leave()
    line = f"ddpcheck: rank {rank} stopped by SIGTERM (its launcher ends every rank once one failed)"
    paused = _paused_itself(spec, _writer[0] if _writer else None, rank, "")
    if paused is not None:
        # Stopped itself, and continued by its launcher's teardown (SIGCONT, then SIGTERM): the culprit.
        written: list[str] = []
        if rank == 0 and write_report is not None:
            world = int(os.environ["WORLD_SIZE"])
            with contextlib.suppress(Exception):
                written = write_report(explain.inline_crash_report(spec, world, {}, "SIGTERM", paused))
        say(f"{line}: {paused.detail}")
        for said in written:
            say(f"ddpcheck: {said}")
        _leave()
    session = inline.current
    found: list[str] = []
    stalls: list[Stall] = []

    def look() -> None:
        if session is None:
            statuses = here.arrivals_seen()  # before the store: what this host's job directory says
            if statuses:
                world = int(os.environ["WORLD_SIZE"])
                stalls.append(Stall(statuses, None, world))
                found.append(": " + explain.judge_inline(stalls[0], "SIGTERM", rank).detail)
            return
        statuses = session.observe(look_s, connect_s=look_s)
        end_stopped = spec.launcher == "torchrun" and rank == 0
        inline.reap(statuses, end_stopped=end_stopped, store=session.store)
        world = int(os.environ["WORLD_SIZE"])
        if statuses:
            stalls.append(Stall(statuses, None, world))
            found.append(": " + explain.judge_inline(stalls[0], "SIGTERM", rank).detail)
        else:
            found.append("; the store the ranks shared is gone: the others had ended already")

    # Bounded: mpirun's SIGKILL follows its SIGTERM by a second; the line must be out before it.
    look_s = inline.sigterm_look_s(spec.launcher)
    looking = threading.Thread(target=_quietly, args=(look,), daemon=True)
    looking.start()
    looking.join(look_s)
    line += found[0] if found else "; the others' heartbeats could not be read in time"
    wrote: list[str] = []
    if rank == 0 and found and stalls and write_report is not None:
        # The files first: they are what a SIGKILL would cost; each is written whole or not at all.
        with contextlib.suppress(Exception):
            wrote = write_report(explain.sigterm_report(spec, stalls[0]))
    say(line)
    for said in wrote:
        say(f"ddpcheck: {said}")
    if session is not None and rank != 0:
        _quietly(session.said)
    _leave()


def _quietly(action: Callable[[], object]) -> None:
    with contextlib.suppress(Exception):
        action()


def _bind_device(spec: RunSpec, local_rank: int, status: StatusWriter | None, faults: Faults) -> torch.device:
    import torch

    _stage(status, faults, stages.DEVICE)
    if spec.device == "cuda":
        index = local_rank if spec.device_index is None else spec.device_index
        # The classic pitfall: without set_device every rank lands on cuda:0.
        torch.cuda.set_device(index)
        return torch.device("cuda", index)
    return torch.device("cpu")


class StoreNotReached(RuntimeError):
    """A rank could not reach rank 0's store: what it says names the address and what is wrong with it."""


def _rendezvous_store(timeout: timedelta) -> Any:
    """inline.rendezvous_store; a rank that cannot reach rank 0's store says where it looked and why
    it failed (what `ddpcheck env` finds), not torch's timeout."""
    began = time.monotonic()
    try:
        return inline.rendezvous_store(timeout)
    except Exception as exc:
        if os.environ.get("RANK") == "0" or os.environ.get("TORCHELASTIC_USE_AGENT_STORE") == "True":
            raise  # rank 0 hosts it; torchrun's agent is this host's own
        waited_s = round(time.monotonic() - began)
        where = f"{os.environ.get('MASTER_ADDR')}:{os.environ.get('MASTER_PORT')}"
        if inline.why_unreachable is None:
            raise StoreNotReached(f"could not reach rank 0's store at {where} within {waited_s} s") from exc
        raise StoreNotReached(inline.why_unreachable(os.environ, waited_s)) from exc


def _join(spec: RunSpec, device: torch.device, status: StatusWriter | None) -> None:
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
        _substage(status, stages.RENDEZVOUS)
        kwargs.update(store=_rendezvous_store(timeout), rank=int(os.environ["RANK"]))
        kwargs["world_size"] = int(os.environ["WORLD_SIZE"])
    _substage(status, stages.JOIN_WAIT)
    dist.init_process_group(**kwargs)


def _world(spec: RunSpec, gathered: list[dict[str, Any]], device: torch.device) -> dict[str, Any]:
    import torch

    hosts = list(dict.fromkeys(g["host"] for g in gathered))
    return {
        "size": len(gathered),
        "backend": spec.backend,
        "device": device.type,
        "nodes": len({(g["host"], g["node"]) for g in gathered}),
        "hosts": hosts,
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "nccl": ".".join(map(str, torch.cuda.nccl.version())) if device.type == "cuda" else None,
    }


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

    threading.Thread(target=_quietly, args=(watch,), name="ddpcheck-flight", daemon=True).start()


def _stage(status: StatusWriter | None, faults: Faults, name: str) -> None:
    """Enter a harness stage; an injected fault fires here, before the stage's work begins."""
    if status:
        status.stage(name)
    faults.at_stage(name)


def _substage(status: StatusWriter | None, name: str) -> None:
    # A rank stuck at the fault point stays one stage behind the peers that went on to wait here.
    if status:
        status.stage(name)


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
