"""The one line a RasAnswer comes to: healthy, the problems NCCL names, or unparsed."""

from __future__ import annotations

from ddpcheck.failure.ras.answer import RasAnswer, RasCommunicator, RasFinding
from ddpcheck.report.naming import counted

_NAMED = 3  # processes or ranks named one by one; the rest are counted


def processes(n: int) -> str:
    return f"{n} process{'' if n == 1 else 'es'}"


def _few(said: list[str]) -> str:
    """The first _NAMED, the others counted."""
    return ", ".join(said[:_NAMED] + ([f"+{len(said) - _NAMED} more"] if len(said) > _NAMED else []))


def _comm_name(comm: RasCommunicator) -> str:
    return f"communicator {comm.id}" + (f" ({comm.hash})" if comm.hash else "")


def _finding_detail(finding: RasFinding) -> str:
    """The ranks an entry singles out with what NCCL says of them, else its first line."""
    singled = [p for p in finding.processes if p.state and p.rank is not None]
    if singled:
        return _few([f"rank {p.rank} {p.state}" for p in singled])
    return finding.lines[0].strip() if finding.lines else ""


def judge(answer: RasAnswer) -> str:
    """One line: healthy, the problems NCCL names, or unparsed (a cut answer is client.py's to say)."""
    if not answer.recognised:
        return (
            "unparsed: NCCL's answer is in a layout this client does not know (its raw text is in the report)"
        )
    if answer.healthy:
        return "healthy: " + ", ".join(_healthy_parts(answer)) + "; no errors or warnings"
    problems = []
    if answer.dead_count:
        named = f" ({_few([p.describe() for p in answer.dead])})" if answer.dead else ""
        problems.append(f"{processes(answer.dead_count)} dead{named}")
    if answer.unresponsive_count:
        named = f" ({_few([p.describe() for p in answer.unresponsive])})" if answer.unresponsive else ""
        problems.append(f"{processes(answer.unresponsive_count)} unresponsive{named}")
    problems += _communicator_problems(answer)
    if answer.timeouts:
        problems.append(f"{counted(answer.timeouts, 'RAS communication timeout')} while gathering")
    return "problems: " + "; ".join(problems or ["NCCL lists errors or warnings (see its raw answer)"])


def _healthy_parts(answer: RasAnswer) -> list[str]:
    parts = [f"NCCL {answer.nccl_version}" if answer.nccl_version else "NCCL"]
    if answer.nodes is not None:  # the job summary's three figures, parse.py reads them together
        parts += [counted(answer.nodes, "node"), processes(answer.processes), counted(answer.gpus, "GPU")]
    if answer.communicators:
        statuses = ", ".join(sorted({c.status for c in answer.communicators}))
        parts.append(f"{counted(len(answer.communicators), 'communicator')} ({statuses})")
    else:
        parts.append("no communicators")
    return parts


def _communicator_problems(answer: RasAnswer) -> list[str]:
    """Each troubled communicator's entries, then the entries of no listed communicator."""
    entries: dict[str, list[RasFinding]] = {}
    others = []
    listed = {c.id for c in answer.communicators}
    for finding in answer.errors + answer.warnings:
        if finding.comm in listed:
            entries.setdefault(finding.comm, []).append(finding)
        elif finding.comm is not None or finding.kind not in ("DEAD", "INCOMPLETE", "TIMEOUT"):
            others.append(finding)
    problems = []
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
    return problems
