"""links: the rank × rank heat map, each cell a link's bandwidth as a fraction of the median.

Reads the table `links` (rows: `src`, `dst`, `src_host`, `dst_host`, `gbps`, `latency_us`,
`ratio` = gbps / the median of comparable links). A link is slow below the run's `--threshold`
(the report's options), or when its row says so (`status` FAIL or WARN). Beyond 64 ranks the
report has `link_nodes` (node × node, or blocks of nodes, each cell the slowest rail's ratio):
the page draws that, and the table of the slowest links.
"""

from __future__ import annotations

import itertools
import math
from typing import Any

from ddpcheck.report.html import svg
from ddpcheck.report.html.chart import Chart, number
from ddpcheck.report.model import Report, Table

DEFAULT_THRESHOLD = 0.5  # used only when a report does not say its own --threshold
MATRIX_RANKS = 64  # up to this many ranks the page's table is the whole matrix; beyond, the slowest links
HOVER_EVERY_CELL = 16  # up to this many ranks every cell has hover text; beyond, the slow ones (file size)


def _label(rank: int, host: Any) -> str:
    return f"rank {rank} (host {host})" if host else f"rank {rank}"


def _describe(row: dict[str, Any]) -> str:
    src, dst = int(row["src"]), int(row["dst"])
    ends = f"{_label(src, row.get('src_host'))} → {_label(dst, row.get('dst_host'))}"
    text = f"{ends}: {number(row.get('gbps')):.4g} GB/s"
    ratio = number(row.get("ratio"))
    if not math.isnan(ratio):
        text += f", {ratio:.2f} × median"
    latency = number(row.get("latency_us"))
    if not math.isnan(latency):
        text += f", latency {latency:.4g} us"
    return text


def slow_links(report: Report, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    threshold = number(report.options.get("threshold"))
    threshold = DEFAULT_THRESHOLD if math.isnan(threshold) else threshold
    return [r for r in rows if number(r.get("ratio")) < threshold or r.get("status") in ("FAIL", "WARN")]


def _link_rows(report: Report) -> list[dict[str, Any]]:
    """The rows of `links` that name both ends."""
    return [
        r for r in report.rows("links") if isinstance(r.get("src"), int) and isinstance(r.get("dst"), int)
    ]


def _slowest_table(rows: list[dict[str, Any]], title: str) -> Table:
    """The MATRIX_RANKS slowest links; `title` formatted with {shown} and {total}."""
    columns = {k: k.replace("_", " ") for k in ("src", "dst", "src_host", "dst_host", "gbps", "ratio")}
    slowest = sorted(rows, key=lambda r: number(r.get("ratio")))[:MATRIX_RANKS]
    return Table("chart_links", title.format(shown=len(slowest), total=len(rows)), columns, slowest)


def _slow_notes(slow: list[dict[str, Any]]) -> list[str]:
    """One note per slow link, slowest first, up to MATRIX_RANKS of them."""
    slow = sorted(slow, key=lambda r: number(r.get("ratio")))
    notes = [f"slow: {_describe(r)}" for r in slow[:MATRIX_RANKS]]
    if len(slow) > MATRIX_RANKS:
        notes.append(f"and {len(slow) - MATRIX_RANKS:,} more slow links (in the JSON report)")
    return notes or ["no link is slower than the threshold"]


def charts(report: Report) -> list[Chart]:
    grid = report.table("link_nodes")
    if grid is not None and grid.rows:
        return [_node_chart(report, grid)]
    rows = _link_rows(report)
    if not rows:
        return []
    import numpy as np
    from matplotlib.patches import Rectangle

    n = max(max(r["src"], r["dst"]) for r in rows) + 1
    ratio = np.full((n, n), np.nan)
    for r in rows:
        ratio[r["src"], r["dst"]] = number(r.get("ratio"))
    slow = slow_links(report, rows)
    slow_keys = {(r["src"], r["dst"]) for r in slow}
    titles: dict[str, str] = {}
    side = min(7.0, 3.0 + n * 0.12)
    with svg.figure(side + 1.2, side) as fig:
        # Short: the label runs along a bar as tall as a 3-rank map.
        ax = svg.heat_map(fig, ratio, "RdYlGn", 1.0, "bandwidth ÷ median link")
        ax.set_xlabel("destination rank")
        ax.set_ylabel("source rank")
        if n <= 32:
            ax.set_xticks(range(n))
            ax.set_yticks(range(n))
        hosts = {r["src"]: r.get("src_host") for r in rows} | {r["dst"]: r.get("dst_host") for r in rows}
        starts = [r for r in range(1, n) if hosts.get(r) != hosts.get(r - 1)]
        for start in starts:  # where one host's ranks end: a block per host pair shows a slow host or NIC
            ax.axhline(start - 0.5, color="white", linewidth=1)
            ax.axvline(start - 0.5, color="white", linewidth=1)
        if starts and len(starts) < 16:
            edges = [0, *starts, n]
            top = ax.secondary_xaxis("top")
            top.set_xticks([(a + b - 1) / 2 for a, b in itertools.pairwise(edges)])
            top.set_xticklabels([str(hosts.get(a)) for a in edges[:-1]], fontsize=7)
            top.tick_params(length=0)
        for i, r in enumerate(rows):
            marked = (r["src"], r["dst"]) in slow_keys
            if not marked and n > HOVER_EVERY_CELL:
                continue
            # Unfilled (matplotlib writes a transparent face as none): the page's CSS gives
            # these cells pointer events over their whole area, so the hover works anywhere on them.
            cell = Rectangle(
                (r["dst"] - 0.5, r["src"] - 0.5),
                1,
                1,
                facecolor=(0, 0, 0, 0),
                edgecolor="black" if marked else "none",
                linewidth=1.5 if marked else 0,
            )
            svg.hover(cell, f"link-{i}", ("slow: " if marked else "") + _describe(r), titles)
            ax.add_patch(cell)
        chart_svg = svg.to_svg(fig, titles)
    if n > MATRIX_RANKS:
        # A matrix of thousands of columns reads as nothing and weighs megabytes: the slowest links.
        table = _slowest_table(rows, "The {shown} slowest of {total:,} links (GB/s)")
    else:
        gbps = {(r["src"], r["dst"]): r.get("gbps") for r in rows}
        columns = {"src": "src \\ dst (GB/s)", **{str(d): str(d) for d in range(n)}}
        matrix = [{"src": s, **{str(d): gbps.get((s, d)) for d in range(n)}} for s in range(n)]
        table = Table("chart_links", "Bandwidth of every link (GB/s)", columns, matrix)
    title = f"Link bandwidth, {n} × {n} ranks, as a fraction of the median"
    return [Chart(title, chart_svg, table, _slow_notes(slow))]


def _node_chart(report: Report, grid: Table) -> Chart:
    """Node × node (or blocks of nodes): a slow host is a red row and column, a bad cable a red cell."""
    import numpy as np

    labels = [str(r.get("label")) for r in grid.rows]
    n = len(labels)
    ratio = np.array(
        [
            [number(v) for v in r.get("ratios", [])] + [math.nan] * (n - len(r.get("ratios", [])))
            for r in grid.rows
        ]
    )
    rows = _link_rows(report)
    blocks = any(number(r.get("nodes")) > 1 for r in grid.rows)
    with svg.figure(8.2, 7.0) as fig:
        ax = svg.heat_map(fig, ratio, "RdYlGn", 1.0, "slowest rail ÷ median link")
        what = "block of nodes" if blocks else "node"
        ax.set_xlabel(f"destination {what}")
        ax.set_ylabel(f"source {what}")
        if n <= 32:
            ax.set_xticks(range(n), labels, rotation=90, fontsize=6)
            ax.set_yticks(range(n), labels, fontsize=6)
        chart_svg = svg.to_svg(fig, {})
    chart_table = _slowest_table(rows, "The {shown} slowest of the {total:,} links in the report (GB/s)")
    notes = _slow_notes(slow_links(report, rows))
    if blocks:
        per_block = int(number(grid.rows[0].get("nodes")))
        notes.append(f"each cell is a block of {per_block} consecutive nodes: its slowest rail")
    axis = "blocks of nodes" if blocks else "nodes"
    title = f"Link bandwidth, {n} × {n} {axis}, the slowest rail as a fraction of the median"
    return Chart(title, chart_svg, chart_table, notes)
