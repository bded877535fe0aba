"""--prom: a report as node_exporter textfile metrics, written with prometheus_client.

Names follow Prometheus' conventions: the `ddpcheck_` prefix, base units in the name
(`_seconds`, `_bytes_per_second`, `_flops_per_second`; never GB/s or ms), one family per
quantity with labels for what varies (op, size, rank, host). Every figure the terminal
quotes in GB/s is exported in bytes per second (x 1e9), every millisecond in seconds.

`ddpcheck_check_status` is one gauge per check and host: 0 pass, 1 warn, 2 fail, 3 error,
-1 skipped; a host the check names gets the check's status, the other hosts of the run pass
(a check that names no host applies to every host). Alert on `ddpcheck_check_status >= 2`.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

from ddpcheck.report.model import Report, Status

STATUS_VALUE = {Status.PASS: 0, Status.WARN: 1, Status.FAIL: 2, Status.ERROR: 3, Status.SKIP: -1}
GIGA = 1e9
MILLI = 1e-3
MICRO = 1e-6
TERA = 1e12


def write_metrics(report: Report, path: str) -> None:
    """The metrics, written atomically (a temporary file beside PATH, then a rename)."""
    from prometheus_client import CollectorRegistry, write_to_textfile

    registry = CollectorRegistry(auto_describe=False)
    registry.register(_ReportCollector(report))
    write_to_textfile(path, registry)


def text_of(report: Report) -> str:
    """The metrics as the textfile holds them (what write_metrics writes)."""
    from prometheus_client import CollectorRegistry, generate_latest

    registry = CollectorRegistry(auto_describe=False)
    registry.register(_ReportCollector(report))
    return generate_latest(registry).decode()


class _ReportCollector:
    """A prometheus_client collector over one finished report."""

    def __init__(self, report: Report) -> None:
        self.report = report

    def collect(self) -> Iterator[Any]:
        yield from families(self.report)


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
    for name, help_text, labels, samples in _figures(report):
        family = gauge(name, help_text, labels)
        unique = {tuple(values): value for values, value in samples}
        for values, value in unique.items():
            if value is not None and math.isfinite(value):
                family.add_metric([command, *values], value)
    return list(made.values())


def _world_size(report: Report) -> int:
    size = report.world.get("size") if isinstance(report.world, dict) else None
    return size if isinstance(size, int) else len(report.ranks)


def _hosts(report: Report) -> list[str]:
    """Every host of the run, and every host a check names."""
    seen = [r.get("host") for r in report.ranks if isinstance(r, dict)]
    seen += [h for c in report.checks for h in c.hosts]
    return [h for h in dict.fromkeys(seen) if isinstance(h, str) and h]


Samples = list[tuple[list[str], float | None]]


def _figures(report: Report) -> Iterator[tuple[str, str, tuple[str, ...], Samples]]:
    """(metric name, help, labels, samples) for each figure family the report's tables hold."""
    rows = {t.name: [r for r in t.rows if isinstance(r, dict)] for t in report.tables}
    if report.command in ("allreduce", "collectives") and rows.get("bandwidth"):
        yield from _bandwidth(rows["bandwidth"], report.command)
    if report.command == "links":
        yield from _links(rows)
    if report.command == "devices" and rows.get("devices"):
        yield from _devices(rows["devices"])
    if report.command == "profile":
        yield from _profile(rows)
    if report.command == "train" and rows.get("parity"):
        yield (
            "ddpcheck_train_final_loss",
            "Each rank's loss after the last step of `ddpcheck train`.",
            ("rank", "host"),
            [
                ([str(r.get("rank")), str(r.get("host", ""))], _number(r.get("final_loss")))
                for r in rows["parity"]
            ],
        )


def _number(value: Any, scale: float = 1.0) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) * scale


def _bandwidth(
    rows: list[dict[str, Any]], command: str
) -> Iterator[tuple[str, str, tuple[str, ...], Samples]]:
    labels = ("op", "size_bytes", "dtype")

    def key(r: dict[str, Any]) -> list[str]:
        return [str(r.get("op", "all_reduce")), str(r.get("size_bytes")), str(r.get("dtype", ""))]

    yield (
        "ddpcheck_busbw_bytes_per_second",
        "Bus bandwidth per collective and message size (nccl-tests' busbw), in bytes per second.",
        labels,
        [(key(r), _number(r.get("busbw_gbps"), GIGA)) for r in rows],
    )
    yield (
        "ddpcheck_algbw_bytes_per_second",
        "Algorithm bandwidth (message bytes / time) per collective and size, in bytes per second.",
        labels,
        [(key(r), _number(r.get("algbw_gbps"), GIGA)) for r in rows],
    )
    yield (
        "ddpcheck_collective_duration_seconds",
        "Time of one collective per op and message size (median over the iterations).",
        labels,
        [(key(r), _number(r.get("time_us"), MICRO)) for r in rows],
    )


def _links(rows: dict[str, list[dict[str, Any]]]) -> Iterator[tuple[str, str, tuple[str, ...], Samples]]:
    """Per rank (median of its links, by kind and direction) and the slowest links themselves.

    Not every link: at 1,000 nodes they are millions; the per-rank medians and the slowest
    links are what a dashboard or an alert reads.
    """
    per_rank = rows.get("link_ranks", [])
    yield (
        "ddpcheck_rank_link_bandwidth_bytes_per_second",
        "Median bandwidth of each rank's links, by kind (intra/inter-node) and direction (out/in).",
        ("rank", "host", "kind", "direction"),
        [
            (
                [str(r.get("rank")), str(r.get("host", "")), kind, way],
                _number(r.get(f"{kind}_{way}_gbps"), GIGA),
            )
            for r in per_rank
            for kind in ("intra", "inter")
            for way in ("out", "in")
        ],
    )
    yield (
        "ddpcheck_rank_link_latency_seconds",
        "Median one-way latency of each rank's links.",
        ("rank", "host"),
        [
            ([str(r.get("rank")), str(r.get("host", ""))], _number(r.get("latency_us"), MICRO))
            for r in per_rank
        ],
    )
    slowest = rows.get("slowest_links", [])
    ends = ("src_rank", "dst_rank", "src_host", "dst_host", "kind")

    def key(r: dict[str, Any]) -> list[str]:
        return [str(r.get(k)) for k in ("src", "dst", "src_host", "dst_host", "kind")]

    yield (
        "ddpcheck_slowest_link_bandwidth_bytes_per_second",
        "Bandwidth of the slowest links (one direction each), in bytes per second.",
        ends,
        [(key(r), _number(r.get("gbps"), GIGA)) for r in slowest],
    )
    yield (
        "ddpcheck_slowest_link_latency_seconds",
        "One-way latency of the slowest links.",
        ends,
        [(key(r), _number(r.get("latency_us"), MICRO)) for r in slowest],
    )


def _devices(rows: list[dict[str, Any]]) -> Iterator[tuple[str, str, tuple[str, ...], Samples]]:
    def who(r: dict[str, Any]) -> list[str]:
        return [str(r.get("rank")), str(r.get("host", ""))]

    yield (
        "ddpcheck_device_matmul_flops_per_second",
        "Each device's matrix-product rate, in floating-point operations per second.",
        ("rank", "host", "dtype"),
        [
            *[([*who(r), str(r.get("gemm_dtype", ""))], _number(r.get("gemm_tflops"), TERA)) for r in rows],
            *[([*who(r), "tf32"], _number(r.get("tf32_tflops"), TERA)) for r in rows if "tf32_tflops" in r],
        ],
    )
    yield (
        "ddpcheck_device_copy_bytes_per_second",
        "Each device's copy rate: on the device, host to device, device to host.",
        ("rank", "host", "direction"),
        [
            ([*who(r), direction], _number(r.get(key), GIGA))
            for r in rows
            for key, direction in (("copy_gbps", "device"), ("h2d_gbps", "h2d"), ("d2h_gbps", "d2h"))
            if key in r
        ],
    )


def _profile(rows: dict[str, list[dict[str, Any]]]) -> Iterator[tuple[str, str, tuple[str, ...], Samples]]:
    per_rank = rows.get("per_rank", [])

    def who(r: dict[str, Any]) -> list[str]:
        return [str(r.get("rank")), str(r.get("host", ""))]

    for key, name, what in (
        ("step_ms", "ddpcheck_step_duration_seconds", "Each rank's median training step time."),
        ("compute_ms", "ddpcheck_compute_duration_seconds", "Each rank's median compute time per step."),
        (
            "exposed_comm_ms",
            "ddpcheck_exposed_communication_seconds",
            "Each rank's median communication per step that compute did not hide.",
        ),
    ):
        yield name, what, ("rank", "host"), [(who(r), _number(r.get(key), MILLI)) for r in per_rank]
    yield (
        "ddpcheck_phase_duration_seconds",
        "Each phase of a step: the median rank's median over the steady steps.",
        ("phase",),
        [([str(r.get("phase"))], _number(r.get("median_ms"), MILLI)) for r in rows.get("summary", [])],
    )
    figures = rows.get("figures", [])[:1]
    yield (
        "ddpcheck_model_flops_per_second",
        "The model's achieved rate per phase, in floating-point operations per second.",
        ("phase",),
        [
            ([phase], _number(r.get(f"{phase}_tflops"), TERA))
            for r in figures
            for phase in ("forward", "backward", "step")
        ],
    )
