"""The tables of `ddpcheck links`: the heat map's rows, the slowest links, per rank and per host.

Pure, over the judged links (rows with src, dst, hosts, kind, gbps, latency_us, ratio,
status). A report of 1,000 nodes stays node x node: every intra-node link, and one row per
node pair and direction between nodes.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from typing import Any

from ddpcheck.checks.links.schedule import INTER, INTRA
from ddpcheck.report.model import Table
from ddpcheck.report.naming import node_label, node_labels, node_of, span

HEATMAP_MAX = 32  # ranks (or nodes) per side of the terminal heat map
SLOWEST_SHOWN = 8

LINK_COLUMNS = {
    "src": "src",
    "dst": "dst",
    "src_host": "src host",
    "dst_host": "dst host",
    "kind": "kind",
    "gbps": "GB/s",
    "latency_us": "latency",
    "ratio": "x med",
    "status": "status",
}
# The units once, in the title: the headers stay short enough for 80 columns.
UNITS = "GB/s; latency in us"


def link_tables(
    links: list[dict[str, Any]], identities: list[dict[str, Any]], size: int, rounds: str, culprits: set[int]
) -> list[Table]:
    world = len(identities)
    nodes = len({node_of(i) for i in identities})
    reported = _node_pair_rows(links, identities)
    slowest = sorted((r for r in links if r["ratio"] is not None), key=lambda r: r["ratio"])[:SLOWEST_SHOWN]
    tables = [
        Table("link_matrix", _matrix_title(world, nodes, size, rounds), {}, heat_map_rows(links, identities)),
        Table(
            "slowest_links", f"Slowest links ({UNITS}; x med: against the median link)", LINK_COLUMNS, slowest
        ),
        # Every intra-node link, and one row per node pair and direction between nodes (its slowest
        # rail): a report of 1,000 nodes stays node x node, not rank x rank. JSON only.
        Table("links", "Links", {}, reported),
        Table(
            "link_ranks",
            f"Links per rank ({UNITS}; slowest x: its slowest link against the median)",
            _rank_columns(links) if world <= HEATMAP_MAX else {},
            rank_rows(links, identities, culprits),
        ),
    ]
    if nodes > 1:
        tables.append(
            Table(
                "link_hosts",
                f"Links per host ({UNITS}; slowest x: its slowest link against the median)",
                HOST_COLUMNS if nodes <= 2 * HEATMAP_MAX else {},
                host_rows(links, identities, culprits),
            )
        )
    return tables


def _matrix_title(world: int, nodes: int, size: int, rounds: str) -> str:
    from ddpcheck.report.units import human_bytes

    axis = (
        "rank x rank (row sends, column receives)"
        if world <= HEATMAP_MAX
        else "node x node (slowest rail; diagonal: the node's own links)"
    )
    each = f"{human_bytes(size)} each way, {rounds}"
    return f"Link bandwidth as a fraction of the median, {axis}; {each}"


def _node_pair_rows(links: list[dict[str, Any]], identities: list[dict[str, Any]]) -> list[dict[str, Any]]:
    rows = [dict(r) for r in links if r["kind"] == INTRA]
    between: dict[tuple[tuple[str, int], tuple[str, int]], list[dict[str, Any]]] = defaultdict(list)
    for r in links:
        if r["kind"] == INTER:
            between[(node_of(identities[r["src"]]), node_of(identities[r["dst"]]))].append(r)
    for rails in between.values():
        worst = min(rails, key=lambda r: r["gbps"])
        rows.append({**worst, "rails": len(rails), "rail": identities[worst["src"]]["local_rank"]})
    rows.sort(key=lambda r: (r["src"], r["dst"]))
    return rows


def heat_map_rows(links: list[dict[str, Any]], identities: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Rows of the heat map: rank x rank up to HEATMAP_MAX ranks, node x node up to as many nodes."""
    world = len(identities)
    if world <= HEATMAP_MAX:
        cells: list[list[float | None]] = [[None] * world for _ in range(world)]
        for r in links:
            cells[r["src"]][r["dst"]] = r["ratio"]
        return [
            {"label": str(rank), "host": identities[rank]["host"], "ratios": cells[rank]}
            for rank in range(world)
        ]
    nodes = list(dict.fromkeys(node_of(i) for i in identities))
    if len(nodes) > HEATMAP_MAX:
        return []  # too many for a terminal: the per-host table and the slowest links say who
    index = {node: i for i, node in enumerate(nodes)}
    grid: list[list[list[float]]] = [[[] for _ in nodes] for _ in nodes]
    for r in links:
        if r["ratio"] is not None:
            grid[index[node_of(identities[r["src"]])]][index[node_of(identities[r["dst"]])]].append(
                r["ratio"]
            )
    return [
        {
            "label": node_label(node, identities),
            "host": node[0],
            "ratios": [
                (statistics.median(c) if i == j else min(c)) if c else None for j, c in enumerate(grid[i])
            ],
        }
        for i, node in enumerate(nodes)
    ]


def _rank_columns(links: list[dict[str, Any]]) -> dict[str, str]:
    columns = {"rank": "rank", "host": "host"}
    for kind in (INTRA, INTER):
        if any(r["kind"] == kind for r in links):
            columns |= {f"{kind}_out_gbps": f"{kind} out", f"{kind}_in_gbps": f"{kind} in"}
    return columns | {"latency_us": "latency", "min_ratio": "slowest x", "status": "status"}


def _by_rank(links: list[dict[str, Any]]) -> dict[int, list[dict[str, Any]]]:
    """Each rank's links, out and in: one pass, so that per-rank tables stay linear in the links."""
    mine: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for r in links:
        mine[r["src"]].append(r)
        mine[r["dst"]].append(r)
    return mine


def _median(values: list[float], digits: int) -> float | None:
    return round(statistics.median(values), digits) if values else None


def rank_rows(
    links: list[dict[str, Any]], identities: list[dict[str, Any]], culprits: set[int]
) -> list[dict[str, Any]]:
    """Per rank: the median of its links out and in, per kind; its slowest link's ratio; named or not."""
    by_rank = _by_rank(links)
    rows = []
    for ident in identities:
        rank = ident["rank"]
        mine = by_rank.get(rank, [])
        row: dict[str, Any] = {"rank": rank, "host": ident["host"]}
        for kind in (INTRA, INTER):
            row[f"{kind}_out_gbps"] = _median(
                [r["gbps"] for r in mine if r["kind"] == kind and r["src"] == rank], 4
            )
            row[f"{kind}_in_gbps"] = _median(
                [r["gbps"] for r in mine if r["kind"] == kind and r["dst"] == rank], 4
            )
        row["latency_us"] = _median([r["latency_us"] for r in mine], 1)
        ratios = [r["ratio"] for r in mine if r["ratio"] is not None]
        row["min_ratio"] = min(ratios) if ratios else None
        row["status"] = "FAIL" if rank in culprits else "PASS"
        rows.append(row)
    return rows


HOST_COLUMNS = {
    "host": "host",
    "ranks": "ranks",
    "intra_gbps": "intra",
    "inter_out_gbps": "out",
    "inter_in_gbps": "in",
    "min_ratio": "slowest x",
    "status": "status",
}


def host_rows(
    links: list[dict[str, Any]], identities: list[dict[str, Any]], culprits: set[int]
) -> list[dict[str, Any]]:
    """Per node: the median of its own links, of its links to other nodes out and in; named or not."""
    members: dict[tuple[str, int], list[int]] = defaultdict(list)
    for ident in identities:
        members[node_of(ident)].append(ident["rank"])
    by_rank = _by_rank(links)
    labels = node_labels(identities)
    rows = []
    for node, ranks in members.items():
        mine = set(ranks)
        touching = list({id(r): r for rank in ranks for r in by_rank.get(rank, [])}.values())
        ratios = [r["ratio"] for r in touching if r["ratio"] is not None]
        rows.append(
            {
                "host": labels[node],
                "ranks": span(ranks),
                "intra_gbps": _median(
                    [r["gbps"] for r in touching if r["kind"] == INTRA and r["src"] in mine], 4
                ),
                "inter_out_gbps": _median(
                    [r["gbps"] for r in touching if r["kind"] == INTER and r["src"] in mine], 4
                ),
                "inter_in_gbps": _median(
                    [r["gbps"] for r in touching if r["kind"] == INTER and r["dst"] in mine], 4
                ),
                "min_ratio": min(ratios) if ratios else None,
                "status": "FAIL" if mine & culprits else "PASS",
            }
        )
    return rows
