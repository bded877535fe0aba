"""`ddpcheck compare OLD NEW`: two saved reports, their figures compared (report/baseline.py), with
the checks' verdicts and the environment then and now."""

from __future__ import annotations

import time

from ddpcheck.report import baseline
from ddpcheck.report.compare import CompareOptions
from ddpcheck.report.model import Report


def run(options: CompareOptions) -> Report:
    """`ddpcheck compare OLD NEW`: the figures, the verdicts and the environment, then and now."""
    began = time.monotonic()
    then, now = baseline.load_report(options.old, "OLD"), baseline.load_report(options.new, "NEW")
    chosen = baseline.default_tolerance(now) if options.tolerance is None else options.tolerance
    comparison = baseline.compare(then, now, chosen, options.old)
    verdicts, verdicts_table = baseline.verdict_changes(then, now)
    environment, environment_table = baseline.environment_changes(then, now)
    report = Report(
        "compare",
        checks=[comparison.check, verdicts, environment],
        tables=[comparison.table, verdicts_table, environment_table],
        world=now.get("world", {}),
        options={"old": options.old, "new": options.new, "tolerance": chosen},
    )
    for side, saved in (("OLD", then), ("NEW", now)):
        planted = baseline.injected_of(saved)
        if planted:
            report.notes.append(
                f"{side} ({options.old if side == 'OLD' else options.new}) had faults planted with "
                f"--inject: {', '.join(planted)}; its figures measure the fault, not the hardware"
            )
    report.injected = list(dict.fromkeys([*baseline.injected_of(then), *baseline.injected_of(now)]))
    report.elapsed_s = time.monotonic() - began
    return report
