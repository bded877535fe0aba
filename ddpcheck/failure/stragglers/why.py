"""Why a named rank is slow, as far as can be seen from outside its code: where it is, what it does.

Pure: each rank's looks in (what the watcher saw of it: checks/watch/looks.py), a Why out.

- Where it is while its peers wait: its main thread's Python stack, sampled by the in-rank agent at
  each sample request; the innermost frame of the user's own code (not the standard library's, not
  an installed package's), the most common outside a collective (where it is not working but
  waiting, as its peers), and the phase the frames below it say (data loading, forward, backward,
  the optimizer, I/O).
- What it does: /proc's state and times of its process over the window, read by the watcher every
  tick: stopped (SIGSTOP, a freezer, a debugger), busy computing (runnable most of the time), waiting
  for a CPU (runnable but not running: throttled, an oversubscribed host), waiting on I/O (disk
  sleep) or sleeping (a sleep, a lock, a socket).
- On GPUs, its GPU's clocks, power and temperature beside its peers' (NVML, read by the watcher).
"""

from __future__ import annotations

import os
import re
import statistics
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from ddpcheck.failure.stacks import Frame
from ddpcheck.failure.stacks import Stack as Frames
from ddpcheck.failure.text_enum import TextEnum

# Each share is compared with its peers' median (on a crowded host every rank waits for a CPU, and that is
# not why one of them is slower); docs/stragglers.md, "Why it is slow", has the table of what each says.
# Stopped from outside: in state T at this share more of the looks (a healthy rank never is in T).
STOPPED_SHARE = 0.1
# Busy computing: runnable this share of the time, its CPU this much more than its peers'.
BUSY_SHARE = 0.6
MORE_CPU = 0.1
# Held back: waiting to run this much more than its peers (a CPU quota's throttling, a shared core).
QUEUED_SHARE = 0.2
# Waiting on I/O: in uninterruptible (disk) sleep at this share more of the looks than its peers.
IO_SHARE = 0.2
# Its GPU's SM clock this far under its peers' median: the GPU is slower, not the rank's code.
GPU_CLOCK_BELOW = 0.9
# A window shorter than this says nothing of a process's CPU time (/proc counts it in 10-ms ticks).
MIN_USAGE_S = 0.5
# The frames of the standard library and installed packages: not the user's code.
_LIBRARY = re.compile(r"site-packages|dist-packages|/lib/python\d|^<frozen|/ddpcheck/")
_IO_FILES = ("socket.py", "ssl.py", "selectors.py", "subprocess.py", "shutil.py", "_pyio.py", "tempfile.py")


class Activity(TextEnum):
    """What a rank's process did over the window, from /proc."""

    STOPPED = "stopped"
    BUSY = "busy computing"
    WAITING_FOR_CPU = "waiting for a CPU"
    IO = "waiting on I/O"
    SLEEPING = "sleeping"


class Phase(TextEnum):
    """Which part of a training step a stack is in, by the frames of torch and the standard library."""

    DATA = "data loading"
    FORWARD = "forward"
    BACKWARD = "backward"
    OPTIMIZER = "optimizer"
    COLLECTIVE = "a collective"
    IO = "I/O"


@dataclass(frozen=True)
class Tick:
    """One look at a rank's process (/proc/<pid>/stat and schedstat), at `t` (its host's wall clock)."""

    t: float
    state: str  # R, S, D, T, ...
    cpu_s: float | None  # user + system, all its threads, since it started
    queued_s: float | None  # its main thread's time runnable but waiting for a CPU, since it started


@dataclass(frozen=True)
class Stack:
    """The rank's main thread's Python stack when it answered a sample request: innermost frame first."""

    t: float
    frames: Frames


@dataclass(frozen=True)
class Gpu:
    """One reading of a rank's GPU (NVML); None where it does not say."""

    t: float
    sm_clock_mhz: float | None = None
    sm_clock_max_mhz: float | None = None
    power_w: float | None = None
    temperature_c: float | None = None
    throttle: tuple[str, ...] = ()


@dataclass(frozen=True)
class Looks:
    """Everything seen of one rank, oldest first."""

    ticks: Sequence[Tick] = ()
    stacks: Sequence[Stack] = ()
    gpus: Sequence[Gpu] = ()


@dataclass(frozen=True)
class Usage:
    """A rank's process over a window: shares of its wall time."""

    seconds: float
    cpu_share: float  # CPU time (all its threads) over wall time
    queued_share: float | None  # runnable but waiting for a CPU
    stopped_share: float  # of the looks, in state T
    io_share: float  # of the looks, in state D
    activity: Activity


@dataclass(frozen=True)
class Where:
    """The most common place of a rank's sampled stacks outside a collective."""

    frame: Frame | None  # the innermost frame of the user's code (None: no user frame)
    phase: Phase | None
    seen: int  # its stacks in the window outside a collective
    there: int  # ...of them here

    @property
    def text(self) -> str:
        """`load_batch (train.py:42), data loading`: its frame and its phase, those known."""
        f = self.frame
        frame = f"{f.function} ({os.path.basename(f.file)}:{f.line})" if f else None
        return ", ".join(str(x) for x in (frame, self.phase) if x)


@dataclass(frozen=True)
class Why:
    """Why one named rank is slow: its place, its process's use of the time, its GPU beside its peers'."""

    rank: int
    where: Where | None = None
    usage: Usage | None = None
    peers: Usage | None = None  # the median of its peers' shares
    gpu: Gpu | None = None
    peers_gpu: Gpu | None = None
    gpu_slower: bool = False


# ---------------------------------------------------------------- where
def is_user_code(frame: Frame) -> bool:
    return not _LIBRARY.search(frame.file)


def phase_of(frames: Sequence[Frame]) -> Phase | None:
    """The step's part the frames are in, innermost first: the first of them that says."""
    for f in frames:
        path = f.file.replace("\\", "/")
        if "torch/utils/data/" in path:
            return Phase.DATA
        if "torch/optim/" in path:
            return Phase.OPTIMIZER
        if "torch/autograd/" in path or (path.endswith("torch/_tensor.py") and f.function == "backward"):
            return Phase.BACKWARD
        if "torch/distributed/" in path:
            return Phase.COLLECTIVE
        if "torch/nn/" in path:
            return Phase.FORWARD
        if not is_user_code(f) and path.endswith(_IO_FILES):
            return Phase.IO
    return None


def where_of(stacks: Sequence[Frames]) -> Where | None:
    """The commonest (innermost user frame, phase) of `stacks` outside a collective."""
    places = Counter[tuple[Frame | None, Phase | None]]()
    for frames in stacks:
        phase = phase_of(frames)
        if phase is Phase.COLLECTIVE or not frames:
            continue
        places[(next((f for f in frames if is_user_code(f)), None), phase)] += 1
    if not places:
        return None
    (frame, phase), there = places.most_common(1)[0]
    return Where(frame, phase, sum(places.values()), there)


# ---------------------------------------------------------------- what its process did
def usage_of(ticks: Sequence[Tick]) -> Usage | None:
    """Its shares of the ticks' span; None when the span is too short or /proc gave no times."""
    timed = [t for t in ticks if t.cpu_s is not None]
    if len(timed) < 2 or timed[-1].t - timed[0].t < MIN_USAGE_S:
        return None
    seconds = timed[-1].t - timed[0].t
    cpu = _share((timed[-1].cpu_s or 0.0) - (timed[0].cpu_s or 0.0), seconds)
    queued = None
    if timed[0].queued_s is not None and timed[-1].queued_s is not None:
        queued = _share(timed[-1].queued_s - timed[0].queued_s, seconds)
    stopped = sum(t.state in ("T", "t") for t in ticks) / len(ticks)
    io = sum(t.state == "D" for t in ticks) / len(ticks)
    found = Usage(seconds, cpu, queued, stopped, io, Activity.SLEEPING)
    return replace(found, activity=activity(found, None))


def activity(u: Usage, peers: Usage | None) -> Activity:
    """What the process did, by its shares beyond its peers' (none given: beyond nothing)."""
    p = peers or Usage(0.0, 0.0, 0.0, 0.0, 0.0, Activity.SLEEPING)
    queued = u.queued_share or 0.0
    if u.stopped_share - p.stopped_share >= STOPPED_SHARE:
        return Activity.STOPPED
    if u.cpu_share + queued >= BUSY_SHARE and u.cpu_share >= p.cpu_share + MORE_CPU:
        # Runnable most of the time: computing, and held back where it waits to run more than it runs.
        return Activity.BUSY if u.cpu_share >= queued else Activity.WAITING_FOR_CPU
    if queued - (p.queued_share or 0.0) >= QUEUED_SHARE:
        return Activity.WAITING_FOR_CPU
    if u.io_share - p.io_share >= IO_SHARE:
        return Activity.IO
    return Activity.SLEEPING


def peers_usage(usages: Sequence[Usage]) -> Usage | None:
    """The median of each share over the peers."""
    if not usages:
        return None
    queued = [u.queued_share for u in usages if u.queued_share is not None]
    return Usage(
        seconds=statistics.median(u.seconds for u in usages),
        cpu_share=statistics.median(u.cpu_share for u in usages),
        queued_share=statistics.median(queued) if queued else None,
        stopped_share=statistics.median(u.stopped_share for u in usages),
        io_share=statistics.median(u.io_share for u in usages),
        activity=Activity.SLEEPING,  # not judged: only its shares are compared
    )


def _share(part: float, whole: float) -> float:
    return max(0.0, part / whole) if whole > 0 else 0.0


# ---------------------------------------------------------------- its GPU
def gpu_of(readings: Sequence[Gpu]) -> Gpu | None:
    """The median of each reading (the throttle reasons seen in any), None without readings."""
    if not readings:
        return None

    def median(name: str) -> float | None:
        values = [getattr(r, name) for r in readings if getattr(r, name) is not None]
        return statistics.median(values) if values else None

    return Gpu(
        t=readings[-1].t,
        sm_clock_mhz=median("sm_clock_mhz"),
        sm_clock_max_mhz=median("sm_clock_max_mhz"),
        power_w=median("power_w"),
        temperature_c=median("temperature_c"),
        throttle=tuple(dict.fromkeys(reason for r in readings for reason in r.throttle)),
    )


# ---------------------------------------------------------------- the whole
def explain(
    rank: int,
    peers: Sequence[int],
    looks: Mapping[int, Looks],
    window_s: float,
    ends_s: Mapping[int, float] | None = None,
) -> Why:
    """Why `rank` is slow, from each rank's looks over the `window_s` up to its end in `ends_s` (its last
    collective judged, on its host's wall clock, as its looks), or up to its latest look."""
    ends_s = ends_s or {}
    mine = _recent(looks.get(rank, Looks()), window_s, ends_s.get(rank))
    others = [_recent(looks[p], window_s, ends_s.get(p)) for p in peers if p in looks]
    peers = peers_usage([u for u in (usage_of(o.ticks) for o in others) if u is not None])
    usage = usage_of(mine.ticks)
    gpu = gpu_of(mine.gpus)
    peer_gpus = [g for g in (gpu_of(o.gpus) for o in others) if g is not None]
    peers_gpu = gpu_of(peer_gpus)  # the median of the peers' medians
    return Why(
        rank=rank,
        where=where_of([s.frames for s in mine.stacks]),
        usage=None if usage is None else replace(usage, activity=activity(usage, peers)),
        peers=peers,
        gpu=gpu,
        peers_gpu=peers_gpu,
        gpu_slower=_gpu_slower(gpu, peers_gpu),
    )


def _gpu_slower(gpu: Gpu | None, peers: Gpu | None) -> bool:
    """Its SM clock GPU_CLOCK_BELOW its peers', or slowed by a reason none of its peers' GPUs had (a
    power cap that every GPU at full load meets is no reason)."""
    if gpu is None or peers is None:
        return False
    mine, theirs = gpu.sm_clock_mhz, peers.sm_clock_mhz
    if mine is not None and theirs is not None and mine <= GPU_CLOCK_BELOW * theirs:
        return True
    return bool(set(gpu.throttle) - set(peers.throttle))


def _recent(looks: Looks, window_s: float, end: float | None) -> Looks:
    """The looks of the `window_s` seconds up to `end` (None: its latest look): a rank's shutdown after its
    last collective judged is not in it."""
    if end is None:
        end = max((x.t for x in (*looks.ticks[-1:], *looks.stacks[-1:], *looks.gpus[-1:])), default=0.0)
    since = end - window_s

    def within(seen: Sequence) -> list:
        return [x for x in seen if since <= x.t <= end]

    return Looks(ticks=within(looks.ticks), stacks=within(looks.stacks), gpus=within(looks.gpus))
