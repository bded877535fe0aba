"""The terminal's chart of the devices: each rank's product rate as bars, the failing ones red."""

from __future__ import annotations

from typing import Any

from rich.console import Console

from ddpcheck.report.model import Table
from ddpcheck.report.rows import SHOWN_ROWS, worst_rows
from ddpcheck.report.terminal import bar_chart


def render_rate_chart(table: Table, rows: list[dict[str, Any]], console: Console, width: int = 40) -> None:
    """Each rank's product rate (rows: rank, gemm_tflops, status) as bars, the failing ones red."""
    rows = [r for r in rows if isinstance(r.get("gemm_tflops"), (int, float))]
    top = max((r["gemm_tflops"] for r in rows), default=0.0)
    if top <= 0:
        return
    dtype = rows[0].get("gemm_dtype") or ""
    total = len(rows)
    rows = worst_rows(rows, SHOWN_ROWS, lambda r: r.get("status") == "FAIL", lambda r: -r["gemm_tflops"])
    bars = [
        (
            f"rank {r['rank']}",
            r["gemm_tflops"],
            "red" if r.get("status") == "FAIL" else "cyan",
            f"{r['gemm_tflops']:.4g} TFLOP/s",
        )
        for r in rows
    ]
    title = f"{dtype} product rate by rank".strip()
    if len(rows) < total:
        title += f" (the {len(rows)} slowest or failing of {total:,} ranks)"
    console.print(bar_chart(title, bars, top, width))
