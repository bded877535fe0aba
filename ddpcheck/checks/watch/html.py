"""watch's stragglers: a ranks × time heat map of lag per process group, drawn as links draws its matrix.

Reads the table `straggler_lag` (checks/watch/sampling.py: a row per rank of a judged group, with
`group`, `rank`, `host`, `bucket_s`, `named` and `lag_s`, the rank's mean lag behind its peers'
median in each time bucket of the watched run, null where the bucket held no collective) and
`stragglers` (the per-rank figures) for the table beside it.
"""

from __future__ import annotations

import math
from typing import Any

from ddpcheck.failure.stragglers.words import HEAT
from ddpcheck.report.html import svg
from ddpcheck.report.html.chart import Chart, number
from ddpcheck.report.model import Report, Table

RANK_LABELS = 32  # up to this many ranks each row is labelled; beyond, matplotlib's own ticks


def charts(report: Report) -> list[Chart]:
    table = report.table(HEAT)
    if table is None or not table.rows:
        return []
    groups: dict[str, list[dict[str, Any]]] = {}
    for row in table.rows:
        if isinstance(row.get("lag_s"), list) and isinstance(row.get("rank"), int):
            groups.setdefault(str(row.get("group")), []).append(row)
    return [_chart(report, group, rows) for group, rows in groups.items()]


def _label(row: dict[str, Any]) -> str:
    host = row.get("host")
    return f"rank {row['rank']} ({host})" if host else f"rank {row['rank']}"


def _chart(report: Report, group: str, rows: list[dict[str, Any]]) -> Chart:
    import numpy as np
    from matplotlib.patches import Rectangle

    rows = sorted(rows, key=lambda r: r["rank"])
    width = max(len(r["lag_s"]) for r in rows)
    lag_ms = np.full((len(rows), width), np.nan)
    for i, row in enumerate(rows):
        for j, value in enumerate(row["lag_s"]):
            lag_ms[i, j] = number(value) * 1e3
    bucket_s = number(rows[0].get("bucket_s"))
    top = np.nanmax(lag_ms) if np.isfinite(lag_ms).any() else 0.0
    titles: dict[str, str] = {}
    with svg.figure(7.5, min(7.0, 1.6 + len(rows) * 0.3)) as fig:
        # As the links matrix: white (no lag) to red (the most lag), a gap left blank.
        ax = svg.heat_map(fig, lag_ms, "Reds", max(top, 1e-3), "lag behind peers (ms)", aspect="auto")
        seconds = f" ({_seconds(bucket_s)} each)" if math.isfinite(bucket_s) else ""
        ax.set_xlabel(f"time in the watched run, buckets{seconds}")
        ax.set_ylabel("rank")
        if len(rows) <= RANK_LABELS:
            ax.set_yticks(range(len(rows)), [_label(r) for r in rows], fontsize=7)
        for i, row in enumerate(rows):
            if not row.get("named"):
                continue
            # The named rank's row outlined, its hover text the row's figures (as links marks a slow link);
            # unfilled, as links' cells: the page's CSS gives it pointer events over the whole row.
            cell = Rectangle(
                (-0.5, i - 0.5), width, 1, facecolor=(0, 0, 0, 0), edgecolor="black", linewidth=1.5
            )
            svg.hover(cell, f"straggler-{i}", f"named: {_label(row)} slows {group}", titles)
            ax.add_patch(cell)
        chart_svg = svg.to_svg(fig, titles)
    figures = report.table("stragglers")
    shown = [r for r in (figures.rows if figures else []) if str(r.get("group")) == group]
    columns = dict(figures.columns) if figures else {"rank": "rank"}
    chart_table = Table("chart_stragglers", f"Stragglers: {group}", columns, shown)
    named = [r for r in rows if r.get("named")]
    notes = [f"slows the job: {_label(r)}" for r in named] or ["no rank slows the job"]
    return Chart(f"Lag behind peers over time, {group}, {len(rows)} ranks", chart_svg, chart_table, notes)


def _seconds(value: float) -> str:
    return f"{value:.1f} s" if value >= 1 else f"{value * 1e3:.0f} ms"
