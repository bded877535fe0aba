"""A client of NCCL's RAS service: what a running NCCL job (2.24 and later) says of its own health.

NCCL starts a RAS (reliability, availability, serviceability) thread in every process at its
first communicator's initialisation, unless NCCL_RAS_ENABLE=0. The threads of a job form a
network of their own; each listens for clients on localhost:28028 (NCCL_RAS_ADDR overrides it)
and answers for the whole job. The protocol, as NCCL's own client (`ncclras`, src/ras/client.cc)
speaks it to the service (src/ras/client_support.cc); protocol 2 from NCCL 2.24 to 2.30:

    client: CLIENT PROTOCOL 2            service: SERVER PROTOCOL 2
    client: TIMEOUT 3   (optional)       service: OK
    client: STATUS  (or VERBOSE STATUS)  service: the report as text, then it closes the connection

The handshake has 1 s per try and is tried again on a timeout, as `ncclras` does: with
SO_REUSEPORT every process of the job on this host listens on the port, and a stopped one's
socket still accepts. Every socket operation here is bounded by one total deadline.
The text report (job summary, communicators, Errors, Warnings) is parsed into `RasAnswer`
as far as its layout is known; the raw text is always kept.
"""

from __future__ import annotations

import ipaddress
import os
import re
import socket
import threading
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field

DEFAULT_HOST = "localhost"  # NCCL binds "localhost:28028" unless NCCL_RAS_ADDR says otherwise
DEFAULT_PORT = 28028  # NCCL_RAS_CLIENT_PORT
PROTOCOL = 2  # NCCL_RAS_CLIENT_PROTOCOL, unchanged from 2.24 to 2.30
HANDSHAKE_TRY_S = 1.0  # ncclras's TIMEOUT_INCREMENT: a process that does not answer in 1 s is passed over
# NCCL gathers the job's data in a collective over its RAS network: each leg times out after 5 s
# (RAS_COLLECTIVE_LEG_TIMEOUT_SEC, or what TIMEOUT set), the whole after 5 s more (times
# NCCL_RAS_TIMEOUT_FACTOR, 1 by default).
NCCL_LEG_TIMEOUT_S = 5
NCCL_EXTRA_TIMEOUT_S = 5
DEFAULT_TIMEOUT_S = 15.0  # NCCL's worst case (10 s), the handshake, and a margin
HANDSHAKE_LINE_MAX = 1024  # ncclras's buffer for the handshake's answers
ANSWER_MAX_BYTES = 8 << 20
COMMUNICATORS_MAX = 4096  # communicators listed one by one; a table's larger groups are counted only

ANSWERED = "answered"
NO_SERVICE = "no_service"
TIMEOUT = "timeout"
PROTOCOL_ERROR = "protocol_error"
CONNECT_ERROR = "connect_error"

NO_SERVICE_VERDICT = (
    "no RAS service: NCCL < 2.24, RAS disabled (NCCL_RAS_ENABLE=0), or no NCCL job on this host"
)


@dataclass(frozen=True)
class RasAddress:
    host: str
    port: int
    scope_id: int = 0  # an IPv6 link-local address's interface ("[fe80::1%eth0]:28028")

    def __str__(self) -> str:
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"


def _atoi(text: str) -> int:
    """C's atoi: leading blanks, a sign, digits; 0 when there are none."""
    match = re.match(r"\s*([+-]?\d+)", text)
    return int(match.group(1)) if match else 0


def parse_ras_addr(value: str) -> RasAddress:
    """NCCL_RAS_ADDR as NCCL reads it (ncclSocketGetAddrFromString): "host:port" or "[ipv6]:port".

    A port that is absent is -1 to NCCL, which binds port 65535 ((uint16_t)-1); a value NCCL
    refuses (empty, one character, "[" without "]") leaves the job with no RAS client socket.
    """
    if len(value) <= 1:
        raise ValueError(f"NCCL_RAS_ADDR={value!r}: NCCL refuses it (string is null)")
    if value[0] != "[":
        # parseStringList: the first ','-separated entry with a name before its ':'.
        for entry in value.split(","):
            name, colon, rest = entry.partition(":")
            if name:
                port_text = rest.split(":", 1)[0] if colon else ""
                port = _atoi(port_text) if port_text else -1
                return RasAddress(name, port & 0xFFFF)
        raise ValueError(f"NCCL_RAS_ADDR={value!r}: no <IPv4_or_hostname>:<port> pair NCCL can read")
    close = value.find("]", 1)
    if close == -1:
        raise ValueError(f"NCCL_RAS_ADDR={value!r}: no [IPv6]:port pair NCCL can read")
    percent = value.find("%", 1, close)
    host = value[1 : percent if percent != -1 else close]
    scope = 0
    if percent != -1:
        try:
            scope = socket.if_nametoindex(value[percent + 1 : close])
        except OSError:
            scope = 0  # if_nametoindex's 0: no such interface
    return RasAddress(host, _atoi(value[close + 2 :]) & 0xFFFF, scope)


def ras_address(environ: Mapping[str, str] | None = None) -> RasAddress:
    """Where a job with this environment listens: NCCL_RAS_ADDR if set, else localhost:28028."""
    env = os.environ if environ is None else environ
    value = env.get("NCCL_RAS_ADDR")
    return RasAddress(DEFAULT_HOST, DEFAULT_PORT) if value is None else parse_ras_addr(value)


# --- The parsed answer ---------------------------------------------------------------------------


@dataclass
class RasProcess:
    """A process, or a communicator's rank, that NCCL names in its answer."""

    line: str  # as NCCL wrote it
    pid: int | None = None
    host: str | None = None  # the node's IP address, as NCCL prints it
    gpus: str | None = None  # as NCCL prints them: "3", "0,1", "2 (NVML 5)"
    rank: int | None = None  # the communicator rank, in a communicator's entry
    state: str | None = (
        None  # what NCCL says of that rank: "has status ABORT", "reported Remote process error"
    )

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

    section: str  # "errors" or "warnings"
    kind: str  # INCOMPLETE, DEAD, ERROR, MISMATCH, TIMEOUT, or an unknown heading as NCCL wrote it
    comm: str | None = None  # "#1-0": the table's group 1, its first communicator
    comm_hash: str | None = None
    count: int | None = None  # processes missing or dead, ranks missing, timeouts: NCCL's own number
    lines: list[str] = field(default_factory=list)  # the entry's indented lines
    processes: list[RasProcess] = field(default_factory=list)
    unlisted: int = 0  # "[could not find information on N processes]"


@dataclass
class RasCommunicator:
    """One communicator: a row of NCCL's table gives its group's figures, its entries the rest."""

    id: str  # "#g-i", NCCL's numbering in this answer (groups largest first)
    group: int
    ranks_expected: int  # the communicator's size ("Ranks per comm")
    nodes: int
    status: str  # RUNNING, INIT, FINALIZE, ABORT; NOCOMM (UNKNOWN before 2.26) for a rank outside it
    errors: list[str]  # [] for OK; INCOMPLETE, ERROR, MISMATCH
    hash: str | None = None  # named only in an Errors or Warnings entry
    ranks_missing: int = 0  # ranks NCCL got no data from
    missing: list[RasProcess] = field(default_factory=list)  # those it names
    not_members: int = 0  # ranks that answered without this communicator (NOCOMM)

    @property
    def ranks_seen(self) -> int:
        return max(0, self.ranks_expected - self.ranks_missing - self.not_members)


@dataclass
class RasCommGroup:
    """A row of NCCL's communicators table: communicators alike in size, nodes, status and errors."""

    group: int
    comms: int
    nodes_per_comm: int
    ranks_per_node: str  # "8" or "6-8"
    ranks_per_comm: int
    ranks_in_group: int
    status: str
    errors: list[str]


@dataclass
class RasAnswer:
    raw: str
    recognised: bool = False  # any part of a layout this parser knows
    complete: bool = False  # the Warnings section, NCCL's last, arrived
    nccl_version: str | None = None
    cuda_compiled: str | None = None
    cuda_runtime: int | None = None
    cuda_driver: int | None = None
    nodes: int | None = None
    processes: int | None = None
    gpus: int | None = None
    processes_per_node: int | None = None  # when every node runs as many (NCCL's first table)
    gpus_per_process: int | None = None
    outlier_nodes: list[str] = field(default_factory=list)
    collection_seconds: float | None = None
    no_communicators: bool = False  # "No communicator data collected!"
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
    def ranks(self) -> int | None:
        """The largest communicator's size: the job's world size, for a job with a world communicator."""
        sizes = [g.ranks_per_comm for g in self.groups]
        return max(sizes) if sizes else None

    @property
    def healthy(self) -> bool:
        if not (self.recognised and self.complete):
            return False
        troubled = any(c.errors or c.status == "ABORT" for c in self.communicators)
        troubled |= any(g.errors or g.status == "ABORT" for g in self.groups)
        return not (troubled or self.errors or self.warnings or self.dead_count or self.unresponsive_count)


_VERSION = re.compile(r"^NCCL version (\S+) compiled with CUDA (\S+)")
_CUDA = re.compile(r"^CUDA runtime version (-?\d+), driver version (-?\d+)")
_SUMMARY_FULL = re.compile(r"^\(total\)\s+per node\s+per process\s+\(total\)\s+\(total\)\s*$")
_SUMMARY_TOTALS = re.compile(r"^\(total\)\s+\(total\)\s+\(total\)\s*$")
_OUTLIER_NODE = re.compile(r"^\s+Node (\S+) running process")
_COMMUNICATORS = re.compile(r"^Communicators\.\.\.(?:\s*\((\d+(?:\.\d+)?)s\))?")
_TABLE_HEADER = re.compile(r"^Group\s+Comms\s+Nodes\s+Ranks\s+Ranks\s+Ranks\s+Status\s+Errors\s*$")
_TABLE_ROW = re.compile(r"^\s*(\d+)\s+(\d+)\s+(\d+)\s+(\d+(?:-\d+)?)\s+(\d+)\s+(\d+)\s+(\S+)\s+(\S+)\s*$")
_COMM_ENTRY = re.compile(r"^#(\d+)-(\d+) \(([0-9a-fA-F]+)\) (\S+)\s*$")
_PROCESS = re.compile(r"^\s+Process (\d+) on node (\S*) managing GPUs? (.*?)\s*$")
_UNLISTED = re.compile(r"\[could not find information on (\d+) process")
_RANK = re.compile(
    r"^\s+Rank (\d+)(?: (.*?))? -- "
    r"(?:GPU (.+?) managed by process (\d+) on node ?(\S*)|\[process information not found\])\s*$"
)
_RANKS_BARE = re.compile(r"^\s+Rank ([\d,]+) has status (\S+)\s*$")  # 2.24-2.25: ranks NCCL knows nothing of
_RANK_LIST = re.compile(r"^\s+The (missing|unknown) ranks?: ([\d,]+)\s*$")  # 2.24-2.25
_RANKS_CONTEXT = re.compile(
    r"^\s+(\d+) ranks "
    r"(have status \S+|reported .+?|have launched up to operation \d+|have not launched any operations)\s*$"
)
_COUNTS = {
    "INCOMPLETE": re.compile(r"Missing communicator data from (\d+) (?:job process|rank)"),
    "DEAD": re.compile(r"(\d+) job process(?:es)? (?:are|is) considered dead"),
    "TIMEOUT": re.compile(r"Encountered (\d+) communication timeout"),
}


def _section_heads(lines: list[str], name: str, rule: str) -> int | None:
    for i in range(len(lines) - 1):
        if lines[i].strip() == name and re.fullmatch(rf"{re.escape(rule)}+", lines[i + 1].strip()):
            return i
    return None


def _ints(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x.strip().isdigit()]


def _finding(section: str, head: str, body: list[str]) -> RasFinding:
    comm = _COMM_ENTRY.match(head)
    if comm:
        finding = RasFinding(
            section, comm.group(4), f"#{comm.group(1)}-{comm.group(2)}", comm.group(3).lower()
        )
    else:
        finding = RasFinding(section, head.strip())
    finding.lines = [line.rstrip() for line in body]
    counter = _COUNTS.get(finding.kind)
    context: str | None = None  # "N ranks have status X": the state of the bare rank lines after it
    for line in finding.lines:
        if counter and finding.count is None and (m := counter.search(line)):
            finding.count = int(m.group(1))
        if m := _PROCESS.match(line):
            finding.processes.append(
                RasProcess(line, int(m.group(1)), m.group(2) or None, m.group(3) or None)
            )
        elif m := _UNLISTED.search(line):
            finding.unlisted += int(m.group(1))
        elif m := _RANKS_CONTEXT.match(line):
            context = re.sub(r"^have ", "has ", m.group(2))
        elif m := _RANK.match(line):
            pid = int(m.group(4)) if m.group(4) else None
            state = m.group(2) or context
            finding.processes.append(
                RasProcess(line, pid, m.group(5) or None, m.group(3), int(m.group(1)), state)
            )
        elif m := _RANKS_BARE.match(line):
            state = f"has status {m.group(2)}"
            finding.processes.extend(RasProcess(line, rank=r, state=state) for r in _ints(m.group(1)))
        elif m := _RANK_LIST.match(line):
            state = None if m.group(1) == "missing" else context
            finding.processes.extend(RasProcess(line, rank=r, state=state) for r in _ints(m.group(2)))
        elif line.strip().startswith("Communicator ranks have different"):
            context = None
    return finding


def _findings(section: str, lines: list[str]) -> list[RasFinding]:
    found: list[RasFinding] = []
    head: str | None = None
    body: list[str] = []
    for line in [*lines, ""]:
        if line and not line[0].isspace():
            if head is not None:
                found.append(_finding(section, head, body))
            head, body = line, []
        elif line.strip():
            if head is None:
                head = line.strip()  # an indented line with no heading: kept as an entry of its own
            else:
                body.append(line)
        elif head is not None:
            found.append(_finding(section, head, body))
            head, body = None, []
    return found


def parse_answer(text: str) -> RasAnswer:
    """NCCL's text answer to STATUS, as far as its layout is known; `raw` keeps all of it."""
    answer = RasAnswer(raw=text)
    lines = text.splitlines()
    errors_at = _section_heads(lines, "Errors", "=")
    warnings_at = _section_heads(lines, "Warnings", "=")
    head_end = min(i for i in (errors_at, warnings_at, len(lines)) if i is not None)
    communicators_at = None
    for i, line in enumerate(lines[:head_end]):
        if m := _VERSION.match(line):
            answer.nccl_version, answer.cuda_compiled = m.group(1), m.group(2)
            answer.recognised = True
        elif m := _CUDA.match(line):
            answer.cuda_runtime, answer.cuda_driver = int(m.group(1)), int(m.group(2))
        elif line.strip() == "Job summary":
            answer.recognised = True
        elif _SUMMARY_FULL.match(line) and i + 1 < len(lines):
            numbers = [int(x) for x in re.findall(r"\d+", lines[i + 1])]
            if len(numbers) == 5:
                nodes, answer.processes_per_node, answer.gpus_per_process, processes, gpus = numbers
                answer.nodes, answer.processes, answer.gpus = nodes, processes, gpus
        elif _SUMMARY_TOTALS.match(line) and i + 1 < len(lines):
            numbers = [int(x) for x in re.findall(r"\d+", lines[i + 1])]
            if len(numbers) == 3:
                answer.nodes, answer.processes, answer.gpus = numbers
        elif m := _OUTLIER_NODE.match(line):
            answer.outlier_nodes.append(m.group(1))
        elif m := _COMMUNICATORS.match(line):
            answer.recognised = True
            communicators_at = i
            answer.collection_seconds = float(m.group(1)) if m.group(1) else None
    if communicators_at is not None:
        for line in lines[communicators_at:head_end]:
            if line.strip() == "No communicator data collected!":
                answer.no_communicators = True
            elif (m := _TABLE_ROW.match(line)) and not _TABLE_HEADER.match(line):
                g = m.groups()
                errors = [] if g[7] == "OK" else g[7].split(",")
                answer.groups.append(
                    RasCommGroup(int(g[0]), int(g[1]), int(g[2]), g[3], int(g[4]), int(g[5]), g[6], errors)
                )
    if errors_at is not None:
        end = warnings_at if warnings_at is not None and warnings_at > errors_at else len(lines)
        answer.errors = _findings("errors", lines[errors_at + 2 : end])
        answer.recognised = True
    if warnings_at is not None:
        answer.warnings = _findings("warnings", lines[warnings_at + 2 :])
        answer.recognised = answer.complete = True
    _gather(answer)
    return answer


def _gather(answer: RasAnswer) -> None:
    """The communicators one by one, and the dead and unresponsive processes, from the table and entries."""
    by_id: dict[str, RasCommunicator] = {}
    for group in answer.groups:
        for index in range(min(group.comms, COMMUNICATORS_MAX - len(answer.communicators))):
            comm = RasCommunicator(
                f"#{group.group}-{index}",
                group.group,
                group.ranks_per_comm,
                group.nodes_per_comm,
                group.status,
                list(group.errors),
            )
            answer.communicators.append(comm)
            by_id[comm.id] = comm
    for finding in answer.errors + answer.warnings:
        if finding.comm is None:
            if finding.kind == "DEAD":
                answer.dead.extend(finding.processes)
                answer.dead_count += finding.count if finding.count is not None else len(finding.processes)
            elif finding.kind == "INCOMPLETE":
                answer.unresponsive.extend(finding.processes)
                n = finding.count if finding.count is not None else len(finding.processes)
                answer.unresponsive_count += n
            elif finding.kind == "TIMEOUT":
                answer.timeouts += finding.count or 0
            continue
        comm = by_id.get(finding.comm)
        if comm is None:
            continue
        comm.hash = comm.hash or finding.comm_hash
        if finding.kind == "INCOMPLETE":
            comm.missing = list(finding.processes)
            comm.ranks_missing = finding.count if finding.count is not None else len(finding.processes)
        elif finding.kind == "MISMATCH":
            counts = [
                int(m.group(1))
                for line in finding.lines
                if (m := _RANKS_CONTEXT.match(line))
                and m.group(2) in ("have status NOCOMM", "have status UNKNOWN")
            ]
            singles = [
                p
                for p in finding.processes
                if p.state in ("has status NOCOMM", "has status UNKNOWN") and not _RANKS_CONTEXT.match(p.line)
            ]
            comm.not_members = sum(counts) or len(singles)


# --- The verdict ---------------------------------------------------------------------------------


def _plural(n: int, word: str, many: str | None = None) -> str:
    return f"{n} {word if n == 1 else (many or word + 's')}"


def _names(processes: list[RasProcess], limit: int = 3) -> str:
    named = [p.describe() for p in processes[:limit]]
    if len(processes) > limit:
        named.append(f"+{len(processes) - limit} more")
    return ", ".join(named)


def _comm_name(comm: RasCommunicator) -> str:
    return f"communicator {comm.id}" + (f" ({comm.hash})" if comm.hash else "")


def _finding_detail(finding: RasFinding) -> str:
    """The ranks an entry singles out with what NCCL says of them, else its first line."""
    singled = [p for p in finding.processes if p.state and p.rank is not None]
    if singled:
        shown = [f"rank {p.rank} {p.state}" for p in singled[:3]]
        return ", ".join(shown + ([f"+{len(singled) - 3} more"] if len(singled) > 3 else []))
    return finding.lines[0].strip() if finding.lines else ""


def judge(answer: RasAnswer) -> str:
    """One line: healthy, the problems NCCL names, or unparsed."""
    if not answer.recognised:
        return "unparsed: NCCL's answer is in a layout this client does not know (its raw text is kept)"
    if answer.healthy:
        parts = [f"NCCL {answer.nccl_version}" if answer.nccl_version else "NCCL"]
        if answer.nodes is not None:
            parts.append(_plural(answer.nodes, "node"))
        if answer.processes is not None:
            parts.append(_plural(answer.processes, "process", "processes"))
        if answer.gpus is not None:
            parts.append(_plural(answer.gpus, "GPU"))
        if answer.communicators:
            statuses = ", ".join(sorted({c.status for c in answer.communicators}))
            parts.append(f"{_plural(len(answer.communicators), 'communicator')} ({statuses})")
        else:
            parts.append("no communicators")
        return "healthy: " + ", ".join(parts) + "; no errors or warnings"
    problems = []
    if answer.dead_count:
        named = f" ({_names(answer.dead)})" if answer.dead else ""
        problems.append(f"{_plural(answer.dead_count, 'process', 'processes')} dead{named}")
    if answer.unresponsive_count:
        named = f" ({_names(answer.unresponsive)})" if answer.unresponsive else ""
        problems.append(f"{_plural(answer.unresponsive_count, 'process', 'processes')} unresponsive{named}")
    entries: dict[str, list[RasFinding]] = {}
    others = []
    listed = {c.id for c in answer.communicators}
    for finding in answer.errors + answer.warnings:
        if finding.comm in listed:
            entries.setdefault(finding.comm, []).append(finding)
        elif finding.comm is not None or finding.kind not in ("DEAD", "INCOMPLETE", "TIMEOUT"):
            others.append(finding)
    for comm in answer.communicators:
        said = []
        if "INCOMPLETE" in comm.errors:
            ranks = sorted({p.rank for p in comm.missing if p.rank is not None})
            named = f" (ranks {', '.join(map(str, ranks))})" if ranks else ""
            said.append(f"missing {comm.ranks_missing or '?'} of {comm.ranks_expected} ranks{named}")
        for finding in entries.get(comm.id, []):
            if finding.kind != "INCOMPLETE":
                detail = _finding_detail(finding)
                said.append(f"{finding.kind}: {detail}" if detail else finding.kind)
        said += [e for e in comm.errors if e != "INCOMPLETE" and not any(e in s for s in said)]
        if comm.status == "ABORT":
            said.append("aborted")
        if said:
            problems.append(f"{_comm_name(comm)} " + "; ".join(said))
    for finding in others:
        where = f"communicator {finding.comm} {finding.kind}" if finding.comm else finding.kind
        detail = _finding_detail(finding)
        problems.append(f"{where}: {detail}" if detail else where)
    if answer.timeouts:
        problems.append(f"{_plural(answer.timeouts, 'RAS communication timeout')} while gathering")
    if not answer.complete:
        problems.append("the answer ended before its Warnings section")
    return "problems: " + "; ".join(problems or ["NCCL lists errors or warnings (see its raw answer)"])


# --- The conversation ----------------------------------------------------------------------------


@dataclass
class RasStatus:
    """What asking the RAS service gave: an answer, or why there is none."""

    address: str
    outcome: str  # answered, no_service, timeout, protocol_error, connect_error
    verdict: str  # one line
    message: str = ""  # what happened, for the outcomes other than answered
    seconds: float = 0.0
    attempts: int = 0  # connections made (a handshake that timed out is tried again)
    server_protocol: int | None = None
    notes: list[str] = field(default_factory=list)  # e.g. a protocol version mismatch
    answer: RasAnswer | None = None  # parsed, also from a partial answer

    @property
    def healthy(self) -> bool | None:
        """True or False when NCCL answered in a known layout; None when it could not say."""
        if self.outcome != ANSWERED or self.answer is None or not self.answer.recognised:
            return None
        return self.answer.healthy

    @property
    def raw(self) -> str:
        return self.answer.raw if self.answer else ""

    def as_dict(self) -> dict:
        """For a JSON report: the fields, `healthy`, and the answer's `ranks` and `ranks_seen`s."""
        data = asdict(self)
        data["healthy"] = self.healthy
        if self.answer is not None:
            data["answer"]["ranks"] = self.answer.ranks
            for comm, shown in zip(self.answer.communicators, data["answer"]["communicators"], strict=True):
                shown["ranks_seen"] = comm.ranks_seen
        return data


class _Closed(Exception):
    pass


class _Link:
    """A connected socket read line by line or to its end, each operation bounded by a deadline."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.buffer = bytearray()

    @staticmethod
    def _left(until: float) -> float:
        left = until - time.monotonic()
        if left <= 0:
            raise TimeoutError
        return left

    def send(self, text: str, until: float) -> None:
        self.sock.settimeout(self._left(until))
        self.sock.sendall(text.encode())

    def _recv(self, until: float, size: int = 65536) -> bytes:
        self.sock.settimeout(self._left(until))
        return self.sock.recv(size)

    def readline(self, until: float) -> str:
        while b"\n" not in self.buffer:
            if len(self.buffer) >= HANDSHAKE_LINE_MAX:
                raise ValueError(f"no end of line in {len(self.buffer)} bytes")
            chunk = self._recv(until, HANDSHAKE_LINE_MAX)
            if not chunk:
                raise _Closed(bytes(self.buffer).decode(errors="replace"))
            self.buffer += chunk
        line, _, rest = bytes(self.buffer).partition(b"\n")
        self.buffer = bytearray(rest)
        return line.decode(errors="replace").rstrip("\r")

    def read_to_end(self, until: float, cap: int) -> tuple[bytes, str]:
        """Everything until the service closes: (data, "eof" | "timeout" | "reset" | "too long")."""
        data = bytearray(self.buffer)
        self.buffer.clear()
        try:
            while len(data) <= cap:
                chunk = self._recv(until)
                if not chunk:
                    return bytes(data), "eof"
                data += chunk
        except TimeoutError:
            return bytes(data), "timeout"
        except OSError:
            return bytes(data), "reset"
        return bytes(data), "too long"


def _is_ip(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


def _resolve(where: RasAddress, until: float) -> list[tuple]:
    """getaddrinfo, bounded: a name lookup cannot take a timeout, so a slow one runs in a thread."""
    query = (where.host, where.port, socket.AF_UNSPEC, socket.SOCK_STREAM)
    if _is_ip(where.host) or where.host == DEFAULT_HOST:
        return socket.getaddrinfo(*query)
    found: list = []

    def lookup() -> None:
        try:
            found.append(socket.getaddrinfo(*query))
        except OSError as error:
            found.append(error)

    worker = threading.Thread(target=lookup, name="ras-resolve", daemon=True)
    worker.start()
    worker.join(max(0.0, until - time.monotonic()))
    if not found:
        raise TimeoutError(f"resolving {where.host}")
    if isinstance(found[0], OSError):
        raise found[0]
    return found[0]


def _connect(where: RasAddress, until: float) -> socket.socket:
    """A connection to the first address that takes one, as ncclras tries each of getaddrinfo's."""
    failures: list[OSError] = []
    for family, kind, proto, _, sockaddr in _resolve(where, until):
        if family == socket.AF_INET6 and where.scope_id:
            sockaddr = (*sockaddr[:3], where.scope_id)
        sock = socket.socket(family, kind, proto)
        try:
            sock.settimeout(_Link._left(until))
            sock.connect(sockaddr)
        except OSError as error:
            sock.close()
            failures.append(error)
            if isinstance(error, TimeoutError):
                break
            continue
        return sock
    if failures and all(isinstance(f, ConnectionRefusedError) for f in failures):
        raise failures[0]
    if any(isinstance(f, TimeoutError) for f in failures):
        raise TimeoutError("connect")
    raise failures[-1] if failures else OSError(f"no address for {where.host}")


def leg_timeout(timeout: float, nccl_timeout: int | None) -> int | None:
    """The TIMEOUT to send, if any: NCCL's own (none sent) when the budget holds its worst case.

    NCCL gives up on its gathering after the leg timeout plus 5 s; with a shorter budget the
    leg timeout is cut so that NCCL answers, with what it has, before this client gives up.
    0 would disable NCCL's timeout, so it is sent only when asked for.
    """
    if nccl_timeout is not None:
        return nccl_timeout
    if timeout >= HANDSHAKE_TRY_S + NCCL_LEG_TIMEOUT_S + NCCL_EXTRA_TIMEOUT_S:
        return None
    return max(1, int(timeout - HANDSHAKE_TRY_S - NCCL_EXTRA_TIMEOUT_S))


def query(
    address: str | None = None,
    *,
    timeout: float = DEFAULT_TIMEOUT_S,
    verbose: bool = False,
    nccl_timeout: int | None = None,
    environ: Mapping[str, str] | None = None,
) -> RasStatus:
    """Ask NCCL's RAS service for the job's status; never raises for what the network or NCCL does.

    address: "host:port" as NCCL_RAS_ADDR writes it; None: NCCL_RAS_ADDR of `environ` (this
    process's environment by default, a job's from /proc/PID/environ), else localhost:28028.
    timeout: the whole conversation's bound, in seconds. verbose: VERBOSE STATUS (more ranks
    named). nccl_timeout: the TIMEOUT to send NCCL (see leg_timeout).
    """
    started = time.monotonic()
    deadline = started + max(0.0, timeout)
    try:
        where = parse_ras_addr(address) if address is not None else ras_address(environ)
    except ValueError as error:
        shown = address if address is not None else "NCCL_RAS_ADDR"
        return RasStatus(
            shown, CONNECT_ERROR, f"no RAS address: {error}", f"{error}: NCCL opens no RAS client socket"
        )
    status = RasStatus(str(where), TIMEOUT, "")
    leg = leg_timeout(timeout, nccl_timeout)
    silent = 0  # connections whose handshake got no answer in time
    while True:
        status.attempts += 1
        try:
            sock = _connect(where, deadline)
        except ConnectionRefusedError:
            _end(status, NO_SERVICE, NO_SERVICE_VERDICT, f"connection refused at {where}")
            break
        except TimeoutError:
            _timed_out(status, timeout, silent)
            break
        except OSError as error:
            _end(status, CONNECT_ERROR, f"cannot reach NCCL's RAS service at {where}: {error}", str(error))
            break
        with sock:
            try:
                if _converse(_Link(sock), status, deadline, verbose, leg):
                    break
            except TimeoutError:
                silent += 1
                if time.monotonic() < deadline:
                    continue  # ncclras connects again: another process of the job may answer
                _timed_out(status, timeout, silent)
                break
    status.seconds = time.monotonic() - started
    return status


def _timed_out(status: RasStatus, timeout: float, silent: int) -> None:
    if not silent:
        _end(status, TIMEOUT, f"timeout: could not connect to {status.address} in {timeout:g} s", "connect")
        return
    _end(
        status,
        TIMEOUT,
        f"timeout: NCCL's RAS service at {status.address} did not answer in {timeout:g} s",
        f"{_plural(silent, 'connection')} accepted, none answered the handshake in "
        f"{HANDSHAKE_TRY_S:g} s: a stopped or hung NCCL process, or not NCCL on this port",
    )


def _end(status: RasStatus, outcome: str, verdict: str, message: str = "") -> bool:
    status.outcome, status.verdict, status.message = outcome, verdict, message
    return True


def _protocol_error(status: RasStatus, what: str) -> bool:
    return _end(status, PROTOCOL_ERROR, f"protocol error: {what}", what)


def _handshake(link: _Link, status: RasStatus, deadline: float, leg: int | None) -> bool:
    """CLIENT PROTOCOL and TIMEOUT, 1 s a step: True when done, False after a protocol error.

    A timeout raises TimeoutError for the caller to connect again, as ncclras does.
    """
    try_until = min(deadline, time.monotonic() + HANDSHAKE_TRY_S)
    link.send(f"CLIENT PROTOCOL {PROTOCOL}\n", try_until)
    try:
        line = link.readline(try_until)
    except _Closed as closed:
        return not _protocol_error(status, f"NCCL closed the connection during the handshake {str(closed)!r}")
    except ValueError as error:
        return not _protocol_error(status, f"unexpected answer to the handshake: {error}")
    if not line.upper().startswith("SERVER PROTOCOL "):
        return not _protocol_error(status, f"unexpected answer to the handshake: {line[:200]!r}")
    version_text = line[len("SERVER PROTOCOL ") :]
    status.server_protocol = _atoi(version_text)
    mismatch = (
        f"protocol version mismatch (NCCL: {version_text.strip()}; this client: {PROTOCOL}): "
        "continuing, as NCCL's own client does"
    )
    if status.server_protocol != PROTOCOL and mismatch not in status.notes:
        status.notes.append(mismatch)
    if leg is not None:
        try_until = min(deadline, time.monotonic() + HANDSHAKE_TRY_S)
        link.send(f"TIMEOUT {leg}\n", try_until)
        try:
            line = link.readline(try_until)
        except _Closed:
            return not _protocol_error(status, f"NCCL closed the connection after TIMEOUT {leg}")
        except ValueError as error:
            return not _protocol_error(status, f"unexpected answer to TIMEOUT {leg}: {error}")
        if line.strip().upper() != "OK":
            return not _protocol_error(status, f"unexpected answer to TIMEOUT {leg}: {line[:200]!r}")
    return True


def _converse(link: _Link, status: RasStatus, deadline: float, verbose: bool, leg: int | None) -> bool:
    """One connection's conversation; True when it settled the outcome. TimeoutError: try again."""
    try:
        if not _handshake(link, status, deadline, leg):
            return True
    except TimeoutError:
        raise
    except OSError as error:
        return _protocol_error(status, f"the connection failed during the handshake: {error}")
    command = "VERBOSE STATUS" if verbose else "STATUS"
    try:
        link.send(f"{command}\n", deadline)
    except TimeoutError:
        return _end(
            status, TIMEOUT, f"timeout: could not send {command} to {status.address}", "send timed out"
        )
    except OSError as error:
        return _protocol_error(status, f"the connection failed sending {command}: {error}")
    data, end = link.read_to_end(deadline, ANSWER_MAX_BYTES)
    text = data.decode("utf-8", errors="replace")
    first = text.lstrip().splitlines()[0] if text.strip() else ""
    if first.upper().startswith("ERROR:"):
        status.answer = RasAnswer(raw=text)
        return _protocol_error(status, f"NCCL refused {command}: {first[:200]}")
    status.answer = parse_answer(text)
    received = f"after {len(data)} bytes"
    if end == "timeout":
        return _end(
            status,
            TIMEOUT,
            f"timeout: no complete answer from NCCL's RAS service at {status.address} "
            f"({received}; the partial answer is kept)",
            f"the answer did not end before the deadline ({received})",
        )
    if end == "reset":
        return _protocol_error(status, f"the connection was reset mid-answer ({received})")
    if end == "too long":
        return _protocol_error(status, f"the answer exceeds {ANSWER_MAX_BYTES} bytes")
    if not text.strip():
        return _protocol_error(status, f"NCCL closed the connection without answering {command}")
    if status.answer.recognised and not status.answer.complete:
        return _protocol_error(
            status, f"NCCL closed the connection mid-answer ({received}, no Warnings section)"
        )
    return _end(status, ANSWERED, judge(status.answer))
