"""What attach reads of a running job, without stopping it: stacks sampled, states, dumps, NCCL's RAS.

Every rank's Python stack is read every SAMPLE_EVERY_S over --interval with py-spy's --nonblocking
(the rank is never paused: a stuck rank's memory stands still, so its reads are consistent); a
rank whose stack changed between samples is progress, and the samples of a job that progresses
name its straggler (failure/stragglers/sampled.py). Every rank moving data through the kernel
meanwhile (/proc/PID/io) is progress too: a healthy job on a busy machine can sit in the same
all_reduce line at every sample, yet its gloo sockets carry hundreds of KB a second, where a stuck
job's carry none. The job's world size, from its ranks' environment (or a rank's locals in
init_process_group), says which ranks are missing.
Meanwhile, in a thread, NCCL's RAS service is asked once (only when the job loaded NCCL: on this
host's port another job's service would answer), and each rank's debug-info pipe
(TORCH_NCCL_DEBUG_INFO_PIPE_FILE) is written to, so that NCCL dumps its flight recorder; the
dumps are read at the end, with those the job had already written.
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
import time
from dataclasses import dataclass, field

from ddpcheck.checks.attach.find import Job
from ddpcheck.failure import ras
from ddpcheck.failure.flight import NotADump, RankTrace, read_dump
from ddpcheck.failure.hangs import RankView
from ddpcheck.failure.proc import ProcState, maps_any, state_letter
from ddpcheck.failure.rank_env import (
    MPI_LOCAL_SIZE_VARIABLES,
    SIZE_VARIABLES,
    STEP_NODE_VARIABLES,
    first_number,
)
from ddpcheck.failure.recorders import PIPE_SUFFIX, poke
from ddpcheck.failure.stacks import Stack, py_spy, py_spy_dumps, stacks_of
from ddpcheck.failure.stragglers import sampled
from ddpcheck.failure.stragglers.sampled import MIN_SAMPLES

SAMPLES = 3  # stacks per rank over --interval at least: two could fall on the same line of a running loop
# One round of samples this often (a round of --nonblocking dumps takes 20-30 ms a rank: docs/attach.md),
# as many as fit in --interval: the shares of samples each rank waits in a collective name a straggler.
SAMPLE_EVERY_S = 0.05
# A moving job's rounds at least, past --interval where they are slow (a busy machine): the shares of
# MIN_SAMPLES samples or more (a rank may go unread in a round) are what a straggler is judged on.
MIN_ROUNDS = MIN_SAMPLES + 8
# A --nonblocking read of a running rank fails now and then (memory changing under py-spy): rounds go on
# past --interval until every live rank has its samples, this long at most.
UNREAD_GRACE_S = 4.0
RAS_TIMEOUT_S = 6.0  # runs beside the sampling; NCCL's own gathering is cut to fit (ras.leg_timeout)
# Bytes every rank must read or write in the sampling window for the job to be moving: a healthy
# job's sockets carry far more, a stuck one's none (docs/attach.md has the figures).
IO_PROGRESS_BYTES = 16 * 1024
PIPE_WAIT_S = 3.0  # how long NCCL has to write a dump after its pipe was written to
# torch's names: where a rank's flight-recorder dump goes (<prefix><rank>), and the pipe that asks for one.
DUMP_VARIABLES = ("TORCH_FR_DUMP_TEMP_FILE", "TORCH_NCCL_DEBUG_INFO_TEMP_FILE")
DEFAULT_DUMP_PREFIX = "/tmp/nccl_trace_rank_"
PIPE_VARIABLE = "TORCH_NCCL_DEBUG_INFO_PIPE_FILE"
NCCL_LIBRARIES = ("libnccl", "libtorch_cuda")  # a rank mapping one loaded NCCL (torch's CUDA links it in)


@dataclass
class Seen:
    views: list[RankView]
    changed: list[int]  # ranks whose stack changed between samples
    gone: list[int]  # ranks that ended while attach read them
    moving: list[int] = field(default_factory=list)  # ranks whose I/O grew by IO_PROGRESS_BYTES meanwhile
    traces: dict[int, RankTrace] = field(default_factory=dict)
    ras: ras.RasStatus | None = None
    ras_skipped: str = ""  # why NCCL's RAS service was not asked
    notes: list[str] = field(default_factory=list)
    expected: list[int] = field(default_factory=list)  # the ranks this node should hold ([]: not told)


def read(job: Job, interval: float) -> Seen:
    notes: list[str] = []
    asked = _ask_pipes(job, notes)
    asking: dict[str, object] = {}
    nccl = next((r for r, p in sorted(job.ranks.items()) if maps_any(p.pid, *NCCL_LIBRARIES)), None)
    thread = None
    if nccl is not None:
        environ = job.environ.get(nccl, {})
        thread = threading.Thread(target=_ask_ras, args=(environ, asking), daemon=True)
        thread.start()
    io_before = {rank: io_bytes(p.pid) for rank, p in job.ranks.items()}
    history = sample(job, interval)
    io_after = {rank: io_bytes(p.pid) for rank, p in job.ranks.items()}
    moving = sorted(
        rank
        for rank, before in io_before.items()
        if before is not None and (io_after[rank] or 0) - before >= IO_PROGRESS_BYTES
    )
    views, gone = [], []
    for rank, process in sorted(job.ranks.items()):
        letter = state_letter(process.pid)
        if ProcState.of_letter(letter).ended:
            gone.append(rank)
        stacks = history[rank]
        latest = stacks[-1] if stacks else None
        views.append(RankView(rank, process.host, process.pid, letter, latest, samples=stacks[:-1]))
    changed = [r for r, stacks in history.items() if len(set(stacks)) > 1]
    unread = [v.rank for v in views if v.stack is None and v.rank not in gone]
    if unread:
        notes.append(f"py-spy could not read the stack of rank(s) {', '.join(map(str, unread))}")
    if asked is not None:
        time.sleep(max(0.0, asked + PIPE_WAIT_S - time.time()))
    traces = read_dumps(job, notes)
    expected = expected_here(job, history)
    seen = Seen(views, sorted(changed), gone, moving, traces, notes=notes, expected=expected)
    if thread is not None:
        thread.join(RAS_TIMEOUT_S + 1)
        seen.ras = asking.get("status")  # type: ignore[assignment]
    else:
        seen.ras_skipped = "the job loaded no NCCL library (a CPU job): no RAS service to ask"
    return seen


def _ask_ras(environ: dict[str, str], into: dict[str, object]) -> None:
    into["status"] = ras.query(environ=environ, timeout=RAS_TIMEOUT_S)


def sample(job: Job, interval: float) -> dict[int, list[Stack]]:
    """rank -> its main thread's stacks over `interval` seconds, oldest first: a round every
    SAMPLE_EVERY_S (or as soon as the last ended, on a slow machine), SAMPLES stacks of every live
    rank at least; and where a stack changed (the job moves), MIN_ROUNDS, past the interval if the
    rounds were slow or reads failed (UNREAD_GRACE_S at most): so many samples are what a straggler
    is judged on (failure/stragglers/sampled.py); as many again where one is suspected."""
    pids = {rank: process.pid for rank, process in job.ranks.items()}
    history: dict[int, list[Stack]] = {rank: [] for rank in pids}
    rounds = max(SAMPLES, int(interval / SAMPLE_EVERY_S) + 1)
    began = time.monotonic()
    index = 0
    while True:
        now = time.monotonic()
        if index >= SAMPLES and now > began + interval:
            moved = any(len(set(stacks)) > 1 for stacks in history.values())
            live = [r for r in pids if not ProcState.of_letter(state_letter(pids[r])).ended]
            fewest = min((len(history[r]) for r in live), default=SAMPLES)
            late = now > began + interval + UNREAD_GRACE_S or py_spy() is None  # none to wait for
            if fewest >= (MIN_ROUNDS if moved else SAMPLES) or late:
                break
        time.sleep(max(0.0, began + index * interval / (rounds - 1) - now))
        _sample_once(pids, history)
        index += 1
    if moved and sampled.suspected(history):  # `moved` as the loop's end found it: nothing sampled since
        # A rank its peers may wait for: as many samples again, all judged together (sampled.py).
        taken = max(len(stacks) for stacks in history.values())
        for _ in range(taken):
            time.sleep(SAMPLE_EVERY_S)
            _sample_once(pids, history)
    return history


def _sample_once(pids: dict[int, int], history: dict[int, list[Stack]]) -> None:
    for rank, stack in stacks_of(pids).items():
        history[rank].append(stack)


def expected_here(job: Job, history: dict[int, list[Stack]]) -> list[int]:
    """The ranks this node should hold: all of the world's on one node; torchrun's block of them where
    its local world is smaller (ranks are numbered node by node). [] where unknown: no world size, or
    an srun or mpirun job across nodes (their ranks may be spread round-robin), so never a crash."""
    world = world_size(job, history)
    if world is None:
        return []
    for rank, environ in sorted(job.environ.items()):
        local_size = first_number(environ, ("LOCAL_WORLD_SIZE",))
        local_rank = first_number(environ, ("LOCAL_RANK",))
        if local_size is not None and local_size < world:
            return (
                [] if local_rank is None else list(range(rank - local_rank, rank - local_rank + local_size))
            )
        if (first_number(environ, STEP_NODE_VARIABLES) or 1) > 1:  # the step's own: it may use one node
            return []
        if (first_number(environ, MPI_LOCAL_SIZE_VARIABLES) or world) < world:
            return []
    return list(range(world))


def world_size(job: Job, history: dict[int, list[Stack]]) -> int | None:
    """The job's world size: from its ranks' environment (torchrun, mpirun, srun), else from the locals
    of a rank last seen waiting in init_process_group or its rendezvous (`world_size`: Lightning's
    rank 0 is the user's process, whose environment holds none: it sets it in its own memory)."""
    for _, environ in sorted(job.environ.items()):
        if (size := first_number(environ, SIZE_VARIABLES)) is not None:
            return size
    joining = [rank for rank, stacks in sorted(history.items()) if stacks and _joining(stacks[-1])]
    return _world_from_locals(job.ranks[joining[0]].pid) if joining and joining[0] in job.ranks else None


def _joining(stack: Stack) -> bool:
    """In init_process_group or torch's rendezvous: frames whose locals hold the world size."""
    return any(f.function == "init_process_group" or f.file.endswith("/torch/distributed/rendezvous.py")
               for f in stack)  # fmt: skip


def _world_from_locals(pid: int) -> int | None:
    """`world_size` in a torch.distributed frame of the process's stack (py-spy --locals, not pausing it)."""
    # py-spy exits nonzero when any one thread cannot be read, and --json then writes nothing: none lost.
    text = py_spy_dumps({0: pid}, as_json=True, blocking=False, with_locals=True).get(0, "[]")
    try:
        threads = json.loads(text)
    except ValueError:
        return None
    for thread in threads:
        for frame in thread.get("frames", []):
            if "/torch/distributed/" not in frame.get("filename", ""):
                continue
            for local in frame.get("locals") or []:
                if local.get("name") == "world_size" and str(local.get("repr", "")).isdigit():
                    return int(local["repr"])
    return None


def io_bytes(pid: int) -> int | None:
    """Bytes the process read and wrote through system calls (sockets included), all its threads."""
    try:
        with open(f"/proc/{pid}/io") as io:
            fields = dict(line.split(":", 1) for line in io if ":" in line)
        return int(fields["rchar"]) + int(fields["wchar"])
    except (OSError, KeyError, ValueError):
        return None


def _prefixes(environ: dict[str, str]) -> list[str]:
    found = [environ[name] for name in DUMP_VARIABLES if environ.get(name)]
    return found or [DEFAULT_DUMP_PREFIX]


def _ask_pipes(job: Job, notes: list[str]) -> float | None:
    """Write to each rank's debug-info pipe (never blocking): NCCL's watchdog then dumps. When, or None."""
    asked = None
    for rank, environ in sorted(job.environ.items()):
        if not environ.get(PIPE_VARIABLE):
            continue
        path = f"{environ[PIPE_VARIABLE]}{rank}{PIPE_SUFFIX}"
        why = poke(path)
        if why is None:
            asked = time.time()
        elif why:  # "": not made (NCCL makes it, a gloo job never does)
            notes.append(f"rank {rank}'s debug-info pipe {path}: {why}")
    if asked is not None:
        notes.append("asked NCCL for flight-recorder dumps through the debug-info pipes")
    return asked


def read_dumps(job: Job, notes: list[str]) -> dict[int, RankTrace]:
    """Each rank's flight-recorder dump at <prefix><rank>, written since the job started."""
    traces: dict[int, RankTrace] = {}
    for rank in sorted(job.ranks):
        for prefix in _prefixes(job.environ.get(rank, {})):
            path = f"{prefix}{rank}"
            with contextlib.suppress(OSError):
                if os.stat(path).st_mtime < job.started - 1:
                    continue  # an older job's
                try:
                    traces[rank] = read_dump(path, rank)
                    break
                except NotADump as error:
                    notes.append(f"could not read {path}: {error}")
    return traces
