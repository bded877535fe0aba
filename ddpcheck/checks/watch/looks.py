"""What the watcher sees of each rank besides its flight recorder, for why a named rank is slow.

- Every tick: /proc/<pid>/stat (its state letter, its threads' CPU time) and /proc/<pid>/schedstat
  (its main thread's time waiting for a CPU): read from outside, so a stopped rank is seen too.
- Every sample: its main thread's Python stack, which the in-rank agent writes beside its answer
  (agent.py, `<rank>-<n>.sample.where`).
- Every sample, on a host with NVIDIA GPUs and nvidia-ml-py: its GPU's clocks, power and
  temperature (failure/gpu_facts.py's NVML reading), its GPU found by its LOCAL_RANK.

failure/stragglers/why.py judges them; the team's tasks publish theirs to task 0 (sampling.py).
"""

from __future__ import annotations

import contextlib
import json
import os
from collections import deque
from collections.abc import Mapping
from typing import Any

from ddpcheck.failure.gpu_facts import from_nvml
from ddpcheck.failure.proc import environ
from ddpcheck.failure.stacks import Frame
from ddpcheck.failure.stragglers.why import Gpu, Looks, Stack, Tick

TICKS_KEPT = 1_200  # a rank's latest /proc looks: two minutes of 0.1-s ticks, past the judge's window
STACKS_KEPT = 200  # ...its latest stacks and GPU readings, one a sample
_CLOCK_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def read_tick(pid: int, t: float) -> Tick | None:
    """The process's state and times now, None when it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            fields = stat.read().rpartition(")")[2].split()
    except OSError:
        return None
    try:
        cpu: float | None = (int(fields[11]) + int(fields[12])) / _CLOCK_TICKS  # utime, stime
    except (IndexError, ValueError):
        cpu = None
    queued = None
    with contextlib.suppress(OSError, IndexError, ValueError), open(f"/proc/{pid}/schedstat") as schedstat:
        queued = int(schedstat.read().split()[1]) / 1e9  # run_delay: runnable, not running
    return Tick(t, fields[0] if fields else "?", cpu, queued)


def read_stack(path: str) -> Stack | None:
    """The agent's stack beside a sample's answer, None when it wrote none or half of one."""
    try:
        with open(path) as found:
            return stack_of(json.load(found))
    except (OSError, ValueError, TypeError, KeyError):
        return None


def stack_of(raw: Mapping[str, Any]) -> Stack:
    return Stack(float(raw["t"]), tuple(Frame(str(fn), str(f), int(line)) for f, fn, line in raw["frames"]))


def raw_stack(stack: Stack) -> dict[str, Any]:
    return {"t": stack.t, "frames": [[f.file, f.function, f.line] for f in stack.frames]}


class Seen:
    """Each rank's looks, the oldest dropped; what a team's task has not yet published."""

    def __init__(self) -> None:
        self.ticks: dict[int, deque[Tick]] = {}
        self.stacks: dict[int, deque[Stack]] = {}
        self.gpus: dict[int, deque[Gpu]] = {}
        self._unpublished: dict[int, dict[str, list[Any]]] = {}

    def tick(self, rank: int, tick: Tick) -> None:
        self.ticks.setdefault(rank, deque(maxlen=TICKS_KEPT)).append(tick)
        self._note(rank, "ticks", [tick.t, tick.state, tick.cpu_s, tick.queued_s])

    def stack(self, rank: int, stack: Stack) -> None:
        self.stacks.setdefault(rank, deque(maxlen=STACKS_KEPT)).append(stack)
        self._note(rank, "stacks", raw_stack(stack))

    def gpu(self, rank: int, gpu: Gpu) -> None:
        self.gpus.setdefault(rank, deque(maxlen=STACKS_KEPT)).append(gpu)
        self._note(rank, "gpus", dict(vars(gpu)))

    def _note(self, rank: int, kind: str, raw: Any) -> None:
        found = self._unpublished.setdefault(rank, {}).setdefault(kind, [])
        if len(found) < TICKS_KEPT:  # a task that never publishes (task 0, one watch) keeps no more
            found.append(raw)

    def unpublished(self) -> dict[int, dict[str, list[Any]]]:
        """What was seen since the last call, by rank, as JSON can carry it."""
        out, self._unpublished = self._unpublished, {}
        return out

    def take(self, published: Mapping[int, Mapping[str, list[Any]]]) -> None:
        """Another task's looks of its ranks, as `unpublished` gave them."""
        for rank, kinds in published.items():
            for t, state, cpu, queued in kinds.get("ticks", []):
                self.ticks.setdefault(rank, deque(maxlen=TICKS_KEPT)).append(Tick(t, state, cpu, queued))
            for raw in kinds.get("stacks", []):
                with contextlib.suppress(ValueError, TypeError, KeyError):
                    self.stacks.setdefault(rank, deque(maxlen=STACKS_KEPT)).append(stack_of(raw))
            for raw in kinds.get("gpus", []):
                with contextlib.suppress(TypeError):
                    gpu = Gpu(**{**raw, "throttle": tuple(raw.get("throttle") or ())})
                    self.gpus.setdefault(rank, deque(maxlen=STACKS_KEPT)).append(gpu)

    def looks(self) -> dict[int, Looks]:
        ranks = set(self.ticks) | set(self.stacks) | set(self.gpus)
        return {
            r: Looks(list(self.ticks.get(r, ())), list(self.stacks.get(r, ())), list(self.gpus.get(r, ())))
            for r in ranks
        }


class GpuReader:
    """Each rank's GPU through NVML, where nvidia-ml-py is installed and NVML starts; else nothing,
    tried once."""

    def __init__(self) -> None:
        self.nvml: Any = None
        self.tried = False
        self.index: dict[int, int | None] = {}  # pid -> its GPU's NVML index

    def read(self, pid: int, t: float) -> Gpu | None:
        nvml = self._start()
        if nvml is None:
            return None
        if pid not in self.index:
            env = environ(pid)
            self.index[pid] = None if env is None else device_index(env)
        index = self.index[pid]
        if index is None:
            return None
        try:
            facts = from_nvml(nvml, nvml.nvmlDeviceGetHandleByIndex(index))
        except Exception:  # NVML's errors are its own class; a GPU gone is no fault of the watch
            return None
        return gpu_of_facts(facts, t)

    def _start(self) -> Any:
        if not self.tried:
            self.tried = True
            with contextlib.suppress(Exception):  # not installed, no driver, no GPU: no readings
                import pynvml

                pynvml.nvmlInit()
                if pynvml.nvmlDeviceGetCount() > 0:
                    self.nvml = pynvml
        return self.nvml

    def close(self) -> None:
        if self.nvml is not None:
            with contextlib.suppress(Exception):
                self.nvml.nvmlShutdown()
            self.nvml = None


def gpu_of_facts(facts: Mapping[str, Any], t: float) -> Gpu:
    """gpu_facts.py's facts of one GPU as one reading."""
    return Gpu(
        t=t,
        sm_clock_mhz=facts.get("sm_clock_mhz"),
        sm_clock_max_mhz=facts.get("sm_clock_max_mhz"),
        power_w=facts.get("power_w"),
        temperature_c=facts.get("temperature_c"),
        throttle=tuple(facts.get("throttle") or ()),
    )


def device_index(env: Mapping[str, str]) -> int | None:
    """The NVML index of the GPU a rank uses: its LOCAL_RANK's device among CUDA_VISIBLE_DEVICES."""
    local = env.get("LOCAL_RANK", "0")
    if not local.isdigit():
        return None
    visible = [d.strip() for d in env.get("CUDA_VISIBLE_DEVICES", "").split(",") if d.strip()]
    if not visible:
        return int(local)
    chosen = visible[int(local) % len(visible)]
    return int(chosen) if chosen.isdigit() else None  # a UUID: not mapped here
