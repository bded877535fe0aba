"""What a check's measure() is given: its rank, device and faults, and the few collectives all need."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ddpcheck.rank.budget import Budget
from ddpcheck.rank.faults import Faults
from ddpcheck.rank.status_channel import StatusWriter

if TYPE_CHECKING:
    import torch


@dataclass
class RankContext:
    """What a check's measure() needs to know about, and do on, its rank."""

    rank: int
    local_rank: int
    world_size: int
    backend: str
    device: torch.device
    host: str
    faults: Faults
    status: StatusWriter | NullStatus
    budget: Budget | None = None  # --budget: the end every rank sizes its work by

    def stage(self, name: str) -> None:
        self.status.stage(name)

    def progress(self, done: int, total: int, label: str) -> None:
        if self.rank == 0:
            self.status.progress(done, total, label)

    def tick(self) -> None:
        """One iteration of a long stage done: proof of life for the launcher's stall detector."""
        self.status.tick()

    def sync(self) -> None:
        """Wait for this rank's queued device work (a no-op on CPU)."""
        if self.device.type == "cuda":
            import torch

            torch.cuda.synchronize(self.device)

    def time_calls(self, call: Callable[[], object], iters: int) -> float:
        """Seconds for `iters` calls on this rank's device: CUDA events on GPUs, perf_counter on CPU.

        A tick per call: a long timed loop is proof of life for the stall detector.
        """
        if self.device.type == "cuda":
            import torch

            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(iters):
                call()
                self.tick()
            end.record()
            end.synchronize()
            return start.elapsed_time(end) / 1e3
        began = time.perf_counter()
        for _ in range(iters):
            call()
            self.tick()
        self.sync()
        return time.perf_counter() - began

    def barrier(self, group: Any = None) -> None:
        import torch.distributed as dist

        if self.backend == "nccl":
            dist.barrier(group=group, device_ids=[self.device.index])
        else:
            dist.barrier(group=group)

    def agree_max(self, values: list[int]) -> list[int]:
        """The element-wise maximum of `values` over every rank (every rank learns it): one all_reduce."""
        return self._agree(values, "MAX")

    def agree_min(self, values: list[int]) -> list[int]:
        return self._agree(values, "MIN")

    def _agree(self, values: list[int], how: str) -> list[int]:
        import torch
        import torch.distributed as dist

        # A tensor, not an object collective: a few integers, whatever the world size.
        tensor = torch.tensor(values, dtype=torch.int64, device=self.device)
        dist.all_reduce(tensor, op=getattr(dist.ReduceOp, how))
        return [int(v) for v in tensor.tolist()]

    def all_gather_object(self, obj: Any) -> list[Any]:
        """Every rank's small `obj` on every rank (padded to the largest: keep it tiny)."""
        import torch.distributed as dist

        gathered: list[Any] = [None] * self.world_size
        dist.all_gather_object(gathered, obj)
        return gathered

    def gather_to_rank0(self, obj: Any) -> list[Any] | None:
        """Every rank's `obj` on rank 0 (None elsewhere): each rank sends its own, nobody receives all."""
        import torch.distributed as dist

        gathered: list[Any] | None = [None] * self.world_size if self.rank == 0 else None
        dist.gather_object(obj, gathered, dst=0)
        return gathered


class NullStatus:
    """Stands in for the status channel when no launcher is watching."""

    def stage(self, name: str) -> None:
        pass

    def progress(self, done: int, total: int, label: str) -> None:
        pass

    def tick(self) -> None:
        pass
