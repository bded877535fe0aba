"""The figures a baseline compares in `devices` reports: each rank's product and copy rates."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from ddpcheck.report.figures import Figure, FigureKind, positive, rows_of
from ddpcheck.report.metrics import GIGA, TERA, Metric, Tables, number
from ddpcheck.report.metrics import rank_and_host as who

DEVICE = FigureKind("device", "per-rank device rates", ("device", "device_name", "layout", "matrix_size"))
RATES = (
    ("gemm_tflops", "products", "TFLOP/s"),
    ("tf32_tflops", "tf32 products", "TFLOP/s"),
    ("copy_gbps", "copies", "GB/s"),
    ("h2d_gbps", "host-to-device copies", "GB/s"),
    ("d2h_gbps", "device-to-host copies", "GB/s"),
)


def device_figures(report: dict[str, Any]) -> list[Figure]:
    figures = []
    for row in rows_of(report, "devices"):
        rank = row.get("rank")
        if not isinstance(rank, int):
            continue
        host = row.get("host")
        for key, label, unit in RATES:
            value = positive(row.get(key))
            if value is not None:
                figures.append(
                    Figure(
                        DEVICE,
                        ("device", key, rank),
                        _label(rank, row.get("gemm_dtype") if key == "gemm_tflops" else None, label, host),
                        unit,
                        value,
                        True,
                        ranks=(rank,),
                        hosts=(host,) if host else (),
                    )
                )
    return figures


def _label(rank: int, dtype: str | None, what: str, host: str | None) -> str:
    return f"rank {rank} {dtype + ' ' if dtype else ''}{what}" + (f" on {host}" if host else "")


def device_metrics(tables: Tables) -> Iterator[Metric]:
    """Each device's product and copy rates, for --prom."""
    rows = tables.get("devices")
    if not rows:
        return
    yield Metric(
        "ddpcheck_device_matmul_flops_per_second",
        "Each device's matrix-product rate, in floating-point operations per second.",
        ("rank", "host", "dtype"),
        [
            *[([*who(r), str(r.get("gemm_dtype", ""))], number(r.get("gemm_tflops"), TERA)) for r in rows],
            *[([*who(r), "tf32"], number(r.get("tf32_tflops"), TERA)) for r in rows if "tf32_tflops" in r],
        ],
    )
    yield Metric(
        "ddpcheck_device_copy_bytes_per_second",
        "Each device's copy rate: on the device, host to device, device to host.",
        ("rank", "host", "direction"),
        [
            ([*who(r), direction], number(r.get(key), GIGA))
            for r in rows
            for key, direction in (("copy_gbps", "device"), ("h2d_gbps", "h2d"), ("d2h_gbps", "d2h"))
            if key in r
        ],
    )
