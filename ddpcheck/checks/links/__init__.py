"""`ddpcheck links`: every pair of ranks measured, the slow one named (check.py measures and judges).

check.py measures and judges; schedule.py plans the round robin, columns.py holds every link
as numpy arrays (millions at a thousand nodes), outliers.py judges each link against its
peers, tables.py lays out what the terminal and the JSON show.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import ClassVar

from ddpcheck.command import HARNESS_FAULTS, Command, Setup, option
from ddpcheck.errors import UsageError, check_between
from ddpcheck.report.units import parse_size

MAX_LINK_BYTES = 4 * 1024**3


@dataclass(kw_only=True)
class LinksOptions:
    """`ddpcheck links`: every pair of ranks exchanges `size` bytes; None means the device's default."""

    size: int | None = option(
        None,
        cli_type=str | None,
        parse=lambda text: {"size": parse_size(text)},
        metavar="BYTES",
        help="Bytes each rank sends its partner per exchange (K/M/G). Default 1M on CPU, 64M on GPU.",
    )
    iters: int | None = option(
        None, help="Timed exchanges per pair, all passes together (default 50 on CPU, 20 on GPU)."
    )
    warmup: int | None = option(
        None, help="Untimed exchanges per pair before each pass (default 3 on CPU, 5 on GPU)."
    )
    threshold: float | None = option(
        None,
        help="FAIL a link below this fraction of the median of comparable links "
        "(default 0.2 on CPU, 0.5 on GPU); latency above 1/F x the median.",
    )
    min_gbps: float | None = option(
        None, help="FAIL any link whose bandwidth (GB/s, each way) is below this.", metavar="GBPS"
    )
    # The harness refuses fewer ranks with a usage error: one rank has no link to measure.
    min_world_size: ClassVar[int] = 2

    def validate(self) -> None:
        if self.size is not None and not 1 <= self.size <= MAX_LINK_BYTES:
            raise UsageError(f"--size must be between 1 byte and 4G, got {self.size}")
        check_between("--iters", self.iters, 1, 100_000)
        check_between("--warmup", self.warmup, 0, 100_000)
        if self.threshold is not None and not 0 < self.threshold < 1:
            raise UsageError(
                f"--threshold must be in (0, 1), a fraction of the median link, got {self.threshold:g}"
            )
        if self.min_gbps is not None and not 0 <= self.min_gbps < float("inf"):
            raise UsageError(f"--min-gbps must be >= 0 GB/s, got {self.min_gbps:g}")

    def for_device(self, device: str) -> LinksOptions:
        """The device's defaults (docs/links.md says how each was chosen)."""
        gpu = device == "cuda"
        return dataclasses.replace(
            self,
            size=self.size or (64 * 1024**2 if gpu else 1024**2),
            iters=self.iters or (20 if gpu else 50),
            warmup=self.warmup if self.warmup is not None else (5 if gpu else 3),
            threshold=self.threshold or (0.5 if gpu else 0.2),
        )


COMMAND = Command(
    name="links",
    help="""Which GPU, host or cable is slower than its peers? Every pair of ranks measured.

    In n-1 rounds (a round robin; all pairs of a round at once) every pair of ranks
    exchanges --size bytes both ways at once, and a small round trip gives the latency:
    within each node every pair, between nodes rail by rail (local rank i with local
    rank i). Each link is judged against the median of comparable links; a rank or host
    most of whose links are slow is named, else the slow link itself.
    """,
    # \b: click keeps these lines as written (one command a line, to copy).
    epilog=(
        "\b\nExamples:\n"
        "  ddpcheck links --gpus 8\n"
        "  ddpcheck links --nproc 4 --size 4M\n"
        "  ddpcheck links --nnodes 16 --rdzv-endpoint node01:29400 --gpus 8 --json links.json\n"
        "  ddpcheck links --nproc 4 --inject slowlink@2\n"
        "  ddpcheck links --gpus 8 --budget 20  # a prolog"
    ),
    options=LinksOptions,
    implementation="ddpcheck.checks.links.check",
    faults={"slowlink": "rank R's link traffic runs at about a tenth of its speed", **HARNESS_FAULTS},
    fault_actions="ddpcheck.checks.links.faults:LinkFaults",
    charts={"link_matrix": "ddpcheck.checks.links.terminal:render_link_heatmap"},
    html_charts=("ddpcheck.checks.links.html",),
    family="links",
    figures="ddpcheck.checks.links.figures:link_figures",
    # size_bytes first: the name some saved reports hold it under.
    setup=(Setup("link_bytes", "link message size", ("size_bytes", "size")),),
    metrics="ddpcheck.checks.links.figures:link_metrics",
    judges=("ddpcheck.checks.links.outliers", "ddpcheck.checks.links.figures", "ddpcheck.checks.reference"),
    budgeted=True,
)
