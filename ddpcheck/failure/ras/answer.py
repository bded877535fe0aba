"""NCCL's answer to STATUS, as parse.py reads it: the job, its communicators, its Errors and Warnings."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class RasProcess:
    """A process, or a communicator's rank, that NCCL names in its answer."""

    line: str  # as NCCL wrote it
    pid: int | None = None
    host: str | None = None  # the node's IP address, as NCCL prints it
    gpus: str | None = None  # as NCCL prints them: "3", "0,1", "2 (NVML 5)"
    rank: int | None = None  # the communicator rank, in a communicator's entry
    state: str | None = None  # what NCCL says of it: "has status ABORT", "reported Remote process error"

    def describe(self) -> str:
        who = f"rank {self.rank}" if self.rank is not None else ""
        if self.pid is not None:
            where = f"pid {self.pid}" + (f" on {self.host}" if self.host else "")
            where += f", GPU {self.gpus}" if self.gpus else ""
            who = f"{who} ({where})" if who else where
        return who or self.line.strip()


@dataclass
class RasFinding:
    """One entry of NCCL's Errors or Warnings section."""

    kind: str  # INCOMPLETE, DEAD, ERROR, MISMATCH, TIMEOUT, or an unknown heading as NCCL wrote it
    comm: str | None = None  # "#1-0": the table's group 1, its first communicator
    comm_hash: str | None = None
    count: int | None = None  # processes missing or dead, ranks missing, timeouts: NCCL's own number
    lines: list[str] = field(default_factory=list)  # the entry's indented lines
    processes: list[RasProcess] = field(default_factory=list)


@dataclass
class RasCommunicator:
    """One communicator: a row of NCCL's table gives its group's figures, its entries the rest."""

    id: str  # "#g-i", NCCL's numbering in this answer (groups largest first)
    ranks_expected: int  # the communicator's size ("Ranks per comm")
    status: str  # RUNNING, INIT, FINALIZE, ABORT; NOCOMM (UNKNOWN before 2.26) for a rank outside it
    errors: list[str]  # [] for OK; INCOMPLETE, ERROR, MISMATCH
    hash: str | None = None  # named only in an Errors or Warnings entry
    ranks_missing: int = 0  # ranks NCCL got no data from
    missing: list[RasProcess] = field(default_factory=list)  # those it names


@dataclass
class RasCommGroup:
    """A row of NCCL's communicators table: communicators alike in size, nodes, status and errors."""

    group: int
    comms: int
    ranks_per_comm: int
    status: str
    errors: list[str]


@dataclass
class RasAnswer:
    raw: str
    recognised: bool = False  # any part of a layout this parser knows
    complete: bool = False  # the Warnings section, NCCL's last, arrived
    nccl_version: str | None = None
    nodes: int | None = None
    processes: int | None = None
    gpus: int | None = None
    groups: list[RasCommGroup] = field(default_factory=list)
    communicators: list[RasCommunicator] = field(default_factory=list)
    errors: list[RasFinding] = field(default_factory=list)
    warnings: list[RasFinding] = field(default_factory=list)
    dead: list[RasProcess] = field(default_factory=list)
    dead_count: int = 0
    unresponsive: list[RasProcess] = field(default_factory=list)  # processes that sent no data
    unresponsive_count: int = 0
    timeouts: int = 0  # RAS's own communication timeouts while gathering

    @property
    def healthy(self) -> bool:
        if not (self.recognised and self.complete):
            return False
        troubled = any(c.errors or c.status == "ABORT" for c in self.communicators)
        troubled |= any(g.errors or g.status == "ABORT" for g in self.groups)
        return not (troubled or self.errors or self.warnings or self.dead_count or self.unresponsive_count)
