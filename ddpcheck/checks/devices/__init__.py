"""`ddpcheck devices`: every device's speed, health and results, judged against its peers and its hardware.

check.py measures; judge.py judges what every rank measured (pure); health.py judges each GPU's
facts (failure/gpu_facts.py reads them from NVML or `nvidia-smi -q -x`); topology.py reads CPU
affinity, NUMA nodes and the PCIe tree; expected.py holds what known GPUs should do; figures.py the
figures a baseline compares.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import ClassVar

from ddpcheck.command import HARNESS_FAULTS, Command, Setup, option
from ddpcheck.errors import UsageError, check_between

MAX_SIZE = 32_768  # a 4 GiB float32 matrix, three of them: beyond that the check is the problem


@dataclass(kw_only=True)
class DevicesOptions:
    """`ddpcheck devices`: None means the device's default (docs/devices.md says how each was chosen)."""

    size: int | None = option(
        None, help="Side N of the N x N matrices multiplied (default 512 on CPU, 8192 on GPU)."
    )
    iters: int | None = option(
        None,
        help="Matrix products (and copies) per timed pass, at least (default 12 on CPU, 200 on GPU); "
        "5 passes, the best counts.",
    )
    threshold: float | None = option(
        None,
        help="FAIL a device whose products run below this fraction of its peers' median "
        "(default 0.7 on CPU, 0.8 on GPU).",
    )
    memory_threshold: float | None = option(
        None,
        help="FAIL a device whose copies run below this fraction of its peers' median "
        "(default 0.4 on CPU, where every rank shares the host's memory; 0.8 on GPU).",
    )
    passes: ClassVar[int] = 5  # each figure keeps its best pass: noise only ever slows one down

    def validate(self) -> None:
        check_between("--size", self.size, 16, MAX_SIZE)
        check_between("--iters", self.iters, 1, 100_000)
        for flag, value in (("--threshold", self.threshold), ("--memory-threshold", self.memory_threshold)):
            if value is not None and not 0 < value < 1:
                raise UsageError(f"{flag} must be in (0, 1), a fraction of the peers' median, got {value:g}")

    def for_device(self, device: str) -> DevicesOptions:
        gpu = device == "cuda"
        return dataclasses.replace(
            self,
            size=self.size or (8192 if gpu else 512),
            iters=self.iters or (200 if gpu else 12),
            threshold=self.threshold or (0.8 if gpu else 0.7),
            memory_threshold=self.memory_threshold or (0.8 if gpu else 0.4),
        )


COMMAND = Command(
    name="devices",
    help="""Is every device healthy, as fast as its peers and its hardware, and computing the same results?

    Per rank: the sustained matrix-multiply rate (fp32 on CPU; bf16 and fp32/TF32 on GPUs)
    and the copy rates (memcpy on CPU; host<->device pinned and device-to-device on GPUs),
    each judged against the peers' median and, on known GPUs, against what the hardware
    should do; the same seeded products on every rank compared bitwise (a check for silent data
    corruption across the node); on GPUs, health through NVML (ECC, retired pages and
    row remaps, PCIe link, NVLink, XID errors, clocks and throttling) and topology (CPU
    affinity against the GPU's NUMA node). A failure names the rank, GPU and host.
    """,
    # \b: click keeps these lines as written (one command a line, to copy).
    epilog=(
        "\b\nExamples:\n"
        "  ddpcheck devices --gpus 8\n"
        "  ddpcheck devices --nproc 4\n"
        "  ddpcheck devices --gpus 8 --size 16384 --json devices.json\n"
        "  ddpcheck devices --nproc 3 --inject slowgpu@1\n"
        "  ddpcheck devices --gpus 8 --budget 15  # a prolog"
    ),
    options=DevicesOptions,
    implementation="ddpcheck.checks.devices.check",
    faults={
        "slowgpu": "rank R's matrix products run at a quarter of its device's speed",
        "sdc": "one element of each matrix product on rank R is wrong (silent data corruption)",
        **HARNESS_FAULTS,
    },
    fault_actions="ddpcheck.checks.devices.faults:DeviceFaults",
    charts={"devices": "ddpcheck.checks.devices.terminal:render_rate_chart"},
    html_charts=("ddpcheck.checks.devices.html",),
    family="devices",
    figures="ddpcheck.checks.devices.figures:device_figures",
    setup=(Setup("matrix_size", "--size (matrix side)", ("size",)),),
    metrics="ddpcheck.checks.devices.figures:device_metrics",
    judges=("ddpcheck.checks.devices.judge", "ddpcheck.checks.reference"),
    budgeted=True,
)
