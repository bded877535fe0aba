"""--prom: a report as node_exporter textfile metrics, written with prometheus_client.

Names follow Prometheus' conventions: the `ddpcheck_` prefix, base units in the name
(`_seconds`, `_bytes_per_second`, `_flops_per_second`; never GB/s or ms), one family per
quantity with labels for what varies (op, size, rank, host). The run's and the checks'
families are here; each command's own figures are its declaration's `metrics` (report/metrics.py).

`ddpcheck_check_status` is one gauge per check and host: 0 pass, 1 warn, 2 fail, 3 error,
-1 skipped; a host the check names gets the check's status, the other hosts of the run pass
(a check that names no host applies to every host). Alert on `ddpcheck_check_status >= 2`.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

from ddpcheck.command import load
from ddpcheck.commands import COMMANDS
from ddpcheck.report.metrics import Metric
from ddpcheck.report.model import Report, Status

STATUS_VALUE = {Status.PASS: 0, Status.WARN: 1, Status.FAIL: 2, Status.ERROR: 3, Status.SKIP: -1}


def write(report: Report, path: str) -> None:
    """The metrics, written atomically (a temporary file beside PATH, then a rename), as every
    output file is (formats/text.py): the same temporary name, cleaned up the same way."""
    from ddpcheck.report.formats.text import write_text

    write_text(path, text_of(report))


def text_of(report: Report) -> str:
    """The metrics as the textfile holds them (what write writes)."""
    from prometheus_client import generate_latest

    # generate_latest reads any Collector, an object with collect(): here, the report's families.
    return generate_latest(SimpleNamespace(collect=lambda: families(report))).decode()


def families(report: Report) -> list[Any]:
    """Every metric family of a report: the run, the checks, and the command's figures."""
    from prometheus_client.core import GaugeMetricFamily

    command = report.command
    made: dict[str, GaugeMetricFamily] = {}

    def gauge(name: str, documentation: str, labels: tuple[str, ...] = ()) -> GaugeMetricFamily:
        if name not in made:
            made[name] = GaugeMetricFamily(name, documentation, labels=("command", *labels))
        return made[name]

    gauge("ddpcheck_verdict", "Exit code of the last run: 0 pass, 1 a check failed, 3 could not complete.")
    made["ddpcheck_verdict"].add_metric([command], report.verdict.exit_code)
    gauge("ddpcheck_run_duration_seconds", "How long the last run took.").add_metric(
        [command], report.elapsed_s
    )
    gauge("ddpcheck_ranks", "Ranks in the last run.").add_metric([command], _world_size(report))
    gauge(
        "ddpcheck_injected_faults", "Faults planted with --inject in the last run (not hardware)."
    ).add_metric([command], len(report.injected))
    status = gauge(
        "ddpcheck_check_status",
        "Status of each check on each host: 0 pass, 1 warn, 2 fail, 3 error, -1 skipped.",
        ("check", "host"),
    )
    hosts = _hosts(report)
    # One sample per check and host, however many checks share a name (the worse status wins):
    # node_exporter refuses a textfile that repeats a series.
    worst: dict[tuple[str, str], int] = {}
    for check in report.checks:
        named = set(check.hosts)
        for host in hosts or [""]:
            applies = not named or host in named or check.status in (Status.SKIP, Status.PASS)
            value = STATUS_VALUE[check.status] if applies else STATUS_VALUE[Status.PASS]
            worst[(check.name, host)] = max(value, worst.get((check.name, host), value))
    for (check_name, host), value in worst.items():
        status.add_metric([command, check_name, host], value)
    for name, help_text, labels, samples in _command_metrics(report):
        family = gauge(name, help_text, labels)
        unique = {tuple(values): value for values, value in samples}
        for values, value in unique.items():
            if value is not None and math.isfinite(value):
                family.add_metric([command, *values], value)
    return list(made.values())


def _world_size(report: Report) -> int:
    size = report.world.get("size")
    return size if isinstance(size, int) else len(report.ranks)


def _hosts(report: Report) -> list[str]:
    """Every host of the run, and every host a check names."""
    seen = [r.get("host") for r in report.ranks if isinstance(r, dict)]
    seen += [h for c in report.checks for h in c.hosts]
    return [h for h in dict.fromkeys(seen) if isinstance(h, str) and h]


def _command_metrics(report: Report) -> Iterator[Metric]:
    """The families its command's declaration exports from the report's tables (none for most)."""
    command = COMMANDS.get(report.command)
    if command is None or command.metrics is None:
        return iter(())
    tables = {t.name: [r for r in t.rows if isinstance(r, dict)] for t in report.tables}
    return iter(load(command.metrics)(tables))
