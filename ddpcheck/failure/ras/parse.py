"""NCCL's text answer to STATUS read into a RasAnswer, as far as its layout is known (raw kept whole)."""

from __future__ import annotations

import re

from ddpcheck.failure.ras.answer import RasAnswer, RasCommGroup, RasCommunicator, RasFinding, RasProcess

COMMUNICATORS_MAX = 4096  # communicators listed one by one; a table's larger groups are counted only

_VERSION = re.compile(r"^NCCL version (\S+) compiled with CUDA \S+")
_SUMMARY_FULL = re.compile(r"^\(total\)\s+per node\s+per process\s+\(total\)\s+\(total\)\s*$")
_SUMMARY_TOTALS = re.compile(r"^\(total\)\s+\(total\)\s+\(total\)\s*$")
_COMMUNICATORS = re.compile(r"^Communicators\.\.\.")
_TABLE_HEADER = re.compile(r"^Group\s+Comms\s+Nodes\s+Ranks\s+Ranks\s+Ranks\s+Status\s+Errors\s*$")
_TABLE_ROW = re.compile(r"^\s*(\d+)\s+(\d+)\s+(\d+)\s+(\d+(?:-\d+)?)\s+(\d+)\s+(\d+)\s+(\S+)\s+(\S+)\s*$")
_COMM_ENTRY = re.compile(r"^#(\d+)-(\d+) \(([0-9a-fA-F]+)\) (\S+)\s*$")
_PROCESS = re.compile(r"^\s+Process (\d+) on node (\S*) managing GPUs? (.*?)\s*$")
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


def _finding(head: str, body: list[str]) -> RasFinding:
    comm = _COMM_ENTRY.match(head)
    if comm:
        finding = RasFinding(comm.group(4), f"#{comm.group(1)}-{comm.group(2)}", comm.group(3).lower())
    else:
        finding = RasFinding(head.strip())
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


def _findings(lines: list[str]) -> list[RasFinding]:
    found: list[RasFinding] = []
    head: str | None = None
    body: list[str] = []
    for line in [*lines, ""]:
        if line and not line[0].isspace():
            if head is not None:
                found.append(_finding(head, body))
            head, body = line, []
        elif line.strip():
            if head is None:
                head = line.strip()  # an indented line with no heading: kept as an entry of its own
            else:
                body.append(line)
        elif head is not None:
            found.append(_finding(head, body))
            head, body = None, []
    return found


def parse_answer(text: str) -> RasAnswer:
    """NCCL's text answer to STATUS, as far as its layout is known; `raw` keeps all of it."""
    answer = RasAnswer(raw=text)
    lines = text.splitlines()
    errors_at = _section_heads(lines, "Errors", "=")
    warnings_at = _section_heads(lines, "Warnings", "=")
    head_end = min(i for i in (errors_at, warnings_at, len(lines)) if i is not None)
    in_table = False  # below "Communicators...": the table's rows
    for i, line in enumerate(lines[:head_end]):
        if m := _VERSION.match(line):
            answer.nccl_version = m.group(1)
            answer.recognised = True
        elif line.strip() == "Job summary":
            answer.recognised = True
        elif (table := _SUMMARY_FULL.match(line) or _SUMMARY_TOTALS.match(line)) and i + 1 < len(lines):
            numbers = [int(x) for x in re.findall(r"\d+", lines[i + 1])]
            # nodes, [processes per node, GPUs per process,] processes, GPUs
            if len(numbers) == (5 if table.re is _SUMMARY_FULL else 3):
                answer.nodes, answer.processes, answer.gpus = numbers[0], numbers[-2], numbers[-1]
        elif _COMMUNICATORS.match(line):
            answer.recognised = in_table = True
        elif in_table and (m := _TABLE_ROW.match(line)) and not _TABLE_HEADER.match(line):
            g = m.groups()
            errors = [] if g[7] == "OK" else g[7].split(",")
            answer.groups.append(RasCommGroup(int(g[0]), int(g[1]), int(g[4]), g[6], errors))
    if errors_at is not None:
        end = warnings_at if warnings_at is not None and warnings_at > errors_at else len(lines)
        answer.errors = _findings(lines[errors_at + 2 : end])
        answer.recognised = True
    if warnings_at is not None:
        answer.warnings = _findings(lines[warnings_at + 2 :])
        answer.recognised = answer.complete = True
    _gather(answer)
    return answer


def _gather(answer: RasAnswer) -> None:
    """The communicators one by one, and the dead and unresponsive processes, from the table and entries."""
    for group in answer.groups:
        for index in range(min(group.comms, COMMUNICATORS_MAX - len(answer.communicators))):
            comm = RasCommunicator(
                f"#{group.group}-{index}", group.ranks_per_comm, group.status, list(group.errors)
            )
            answer.communicators.append(comm)
    by_id = {comm.id: comm for comm in answer.communicators}
    for finding in answer.errors + answer.warnings:
        named = finding.count if finding.count is not None else len(finding.processes)
        if finding.comm is None:
            if finding.kind == "DEAD":
                answer.dead.extend(finding.processes)
                answer.dead_count += named
            elif finding.kind == "INCOMPLETE":
                answer.unresponsive.extend(finding.processes)
                answer.unresponsive_count += named
            elif finding.kind == "TIMEOUT":
                answer.timeouts += finding.count or 0
            continue
        comm = by_id.get(finding.comm)
        if comm is None:
            continue
        comm.hash = comm.hash or finding.comm_hash
        if finding.kind == "INCOMPLETE":
            comm.missing = list(finding.processes)
            comm.ranks_missing = named
