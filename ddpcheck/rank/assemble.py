"""Where every Report of a run is completed: a judge gives its checks and tables, this adds the rest.

On rank 0, after the judge: whether the nodes agree, the world, the ranks, the hosts table
(`from_ranks`). On the launcher side, after the ranks are gone: the time, the options, the
kept logs (`after_launch`), and the speed against a baseline or the hardware (`judge_speed`).
A run that could not complete gets its Report from failure/explain.py, completed here too.
"""

from __future__ import annotations

from typing import Any

from ddpcheck.command import load
from ddpcheck.commands import COMMANDS
from ddpcheck.errors import UsageError
from ddpcheck.rank.agreement import fingerprint_table, judge_agreement
from ddpcheck.rank.rankmap import hosts_table
from ddpcheck.report import baseline as baselines
from ddpcheck.report.compare import BaselineOptions
from ddpcheck.report.model import Check, Report, Status, Verdict
from ddpcheck.report.naming import node_of


def from_ranks(
    report: Report,
    identities: list[dict[str, Any]],
    fingerprints: list[dict[str, Any]],
    world: dict[str, Any],
    options: dict[str, Any],
) -> Report:
    """Rank 0's report: the judge's, with the nodes' agreement and who ran where."""
    agreement = judge_agreement(fingerprints, identities)
    report.checks.append(agreement)
    if agreement.status != Status.PASS:
        report.tables.append(fingerprint_table(fingerprints, identities))
    report.world = {**world, "fingerprint": fingerprints[0]}  # the driver and the rest, for `compare`
    report.ranks = identities
    if world["nodes"] > 1:
        report.tables.insert(0, hosts_table(identities, report.checks))
    report.options = options
    return report


def world(size: int, backend: str, device: str, identities: list[dict[str, Any]]) -> dict[str, Any]:
    """The world a report describes: its size, backend and device, its nodes and hosts, torch and CUDA."""
    import torch

    return {
        "size": size,
        "backend": backend,
        "device": device,
        "nodes": len({node_of(i) for i in identities}),
        "hosts": list(dict.fromkeys(str(i.get("host")) for i in identities)),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
    }


def after_launch(
    report: Report,
    elapsed_s: float,
    options: dict[str, Any],
    log_dir: str | None,
    injected: list[str] | None = None,
) -> Report:
    """The launcher's part: how long the run took, what it ran with, where its logs were kept.

    `injected`: the --inject faults as given; every output says they were planted.
    """
    report.elapsed_s = elapsed_s
    report.options = report.options or options
    report.log_dir = log_dir
    report.injected = list(injected or [])
    return report


def judge_speed(report: Report, known_good: dict[str, Any] | None, baseline: BaselineOptions) -> None:
    """After the run, on the launcher side: against the baseline, or else what the hardware should do."""
    if report.written_elsewhere:
        return  # not rank 0's node: the report, and its comparison, are printed there
    if known_good is None:
        command = COMMANDS.get(report.command)
        if command and command.expected and report.verdict != Verdict.ERROR:
            report.checks.append(load(command.expected)(report.to_dict()))
        return
    if report.verdict == Verdict.ERROR:
        report.checks.append(Check("baseline", Status.SKIP, "the run did not complete: nothing to compare"))
        return
    now = report.to_dict()
    tolerance = baselines.default_tolerance(now) if baseline.tolerance is None else baseline.tolerance
    try:
        comparison = baselines.compare(known_good, now, tolerance, f"baseline {baseline.path}")
    except UsageError as exc:
        # After the run, not before it: the run's own verdicts still stand, and this one fails.
        report.checks.append(Check("baseline", Status.FAIL, str(exc)))
        return
    report.checks.append(comparison.check)
    report.tables.append(comparison.table)
