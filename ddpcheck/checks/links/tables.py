"""The tables of `ddpcheck links`: the heat map's rows, the slowest links, per rank and per host.

Pure, over the judged links (LinkColumns), vectorised: 8.4 million links at 1,024 nodes of 8. Up to
REPORTED_NODES nodes the report keeps every intra-node link and one row per node pair and direction;
beyond, the slowest links, every slow one, and node x node (`link_nodes`).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ddpcheck.checks.links.columns import (
    PASS,
    LinkColumns,
    group_medians,
    group_minimum,
    grouped_medians,
    is_sorted,
    masked_counts,
    merge_groups,
    smallest,
)
from ddpcheck.checks.links.schedule import INTER, INTRA
from ddpcheck.report.model import Table
from ddpcheck.report.naming import node_labels, node_of, span

HEATMAP_MAX = 32  # ranks (or nodes) per side of the terminal heat map
SLOWEST_SHOWN = 8
# Up to this many nodes the report keeps every intra-node link and each node pair's slowest rail;
# beyond, the REPORTED_LINKS slowest links and every one judged slow (and `link_nodes`, node x node).
REPORTED_NODES = 64
REPORTED_LINKS = 256
# Beyond this many ranks the report has `link_nodes`, for the page's node x node heat map; beyond
# NODE_GRID_MAX nodes a cell is a block of consecutive nodes (its weight: docs/links.md).
NODE_GRID_RANKS = 64
NODE_GRID_MAX = 128

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
    links: LinkColumns, identities: list[dict[str, Any]], size: int, rounds: str, culprits: set[int]
) -> list[Table]:
    world = len(identities)
    nodes = _Nodes(identities)
    slowest = [links.row(i, identities) for i in smallest(links.ratio, SLOWEST_SHOWN)]
    every = nodes.count <= REPORTED_NODES
    slowest_title = f"Slowest links ({UNITS}; x med: against the median link)"
    if not every:
        slowest_title = (
            f"The {len(slowest)} slowest of {len(links):,} links ({UNITS}; x med: against the median link);"
            f" the JSON report has the {REPORTED_LINKS} slowest, every slow one, and node x node"
        )
    tables = [
        Table(
            "link_matrix",
            _matrix_title(world, nodes.count, size, rounds),
            {},
            heat_map_rows(links, identities, nodes),
        ),
        Table("slowest_links", slowest_title, LINK_COLUMNS, slowest),
        # Every intra-node link, and one row per node pair and direction between nodes (its slowest
        # rail); beyond REPORTED_NODES, the slowest and the slow ones. JSON only.
        Table(
            "links",
            "Links" if every else f"The {REPORTED_LINKS} slowest and every slow one of {len(links):,} links",
            {},
            _node_pair_rows(links, identities, nodes) if every else _worst_rows(links, identities),
        ),
        Table(
            "link_ranks",
            f"Links per rank ({UNITS}; slowest x: its slowest link against the median)",
            _rank_columns(links) if world <= HEATMAP_MAX else {},
            rank_rows(links, identities, culprits),
        ),
    ]
    if nodes.count > 1:
        tables.append(
            Table(
                "link_hosts",
                f"Links per host ({UNITS}; slowest x: its slowest link against the median)",
                HOST_COLUMNS if nodes.count <= 2 * HEATMAP_MAX else {},
                host_rows(links, identities, culprits, nodes),
            )
        )
    if world > NODE_GRID_RANKS and nodes.count > 1:
        tables.append(node_grid_table(links, identities, nodes))
    return tables


class _Nodes:
    """Each rank's node (launcher), numbered in order of first rank, and the nodes' labels."""

    def __init__(self, identities: list[dict[str, Any]]) -> None:
        order: dict[tuple[str, int], int] = {}
        self.of_rank = np.array(
            [order.setdefault(node_of(i), len(order)) for i in identities], dtype=np.int64
        )
        self.count = len(order)
        labels = node_labels(identities)
        self.keys = list(order)
        self.labels = [labels[node] for node in order]


def _matrix_title(world: int, nodes: int, size: int, rounds: str) -> str:
    from ddpcheck.report.units import human_bytes

    axis = (
        "rank x rank (row sends, column receives)"
        if world <= HEATMAP_MAX
        else "node x node (slowest rail; diagonal: the node's own links)"
    )
    each = f"{human_bytes(size)} each way, {rounds}"
    return f"Link bandwidth as a fraction of the median, {axis}; {each}"


def _node_pair_rows(
    links: LinkColumns, identities: list[dict[str, Any]], nodes: _Nodes
) -> list[dict[str, Any]]:
    intra = np.flatnonzero(~links.inter)
    inter = np.flatnonzero(links.inter)
    pair = nodes.of_rank[links.src[inter]] * nodes.count + nodes.of_rank[links.dst[inter]]
    # Each node pair's slowest rail (the first of equals, in (src, dst) order), and how many rails.
    order = inter[np.lexsort((inter, links.gbps[inter], pair))]
    ordered_pair = nodes.of_rank[links.src[order]] * nodes.count + nodes.of_rank[links.dst[order]]
    first = np.flatnonzero(np.r_[True, ordered_pair[1:] != ordered_pair[:-1]]) if len(order) else order
    rails = np.diff(np.r_[first, len(order)])
    rows = [links.row(i, identities) for i in intra]
    for i, count in zip(order[first].tolist(), rails.tolist(), strict=True):
        rows.append(
            {**links.row(i, identities), "rails": count, "rail": identities[int(links.src[i])]["local_rank"]}
        )
    rows.sort(key=lambda r: (r["src"], r["dst"]))
    return rows


def _worst_rows(links: LinkColumns, identities: list[dict[str, Any]]) -> list[dict[str, Any]]:
    chosen = np.union1d(smallest(links.ratio, REPORTED_LINKS), np.flatnonzero(links.status != PASS))
    return [links.row(i, identities) for i in chosen]  # in (src, dst) order


def heat_map_rows(
    links: LinkColumns, identities: list[dict[str, Any]], nodes: _Nodes | None = None
) -> list[dict[str, Any]]:
    """Rows of the heat map: rank x rank up to HEATMAP_MAX ranks, node x node up to as many nodes."""
    world = len(identities)
    if world <= HEATMAP_MAX:
        cells: list[list[float | None]] = [[None] * world for _ in range(world)]
        for i in range(len(links)):
            ratio = float(links.ratio[i])
            cells[int(links.src[i])][int(links.dst[i])] = None if np.isnan(ratio) else ratio
        return [
            {"label": str(rank), "host": identities[rank]["host"], "ratios": cells[rank]}
            for rank in range(world)
        ]
    nodes = nodes or _Nodes(identities)
    if nodes.count > HEATMAP_MAX:
        return []  # too many for a terminal: the per-host table and the slowest links say who
    grid = _grid(links, nodes.of_rank, nodes.count)
    return [
        {"label": label, "host": key[0], "ratios": grid[i]}
        for i, (label, key) in enumerate(zip(nodes.labels, nodes.keys, strict=True))
    ]


def _grid(links: LinkColumns, block_of_rank: np.ndarray, blocks: int) -> list[list[float | None]]:
    """blocks x blocks: on the diagonal the median ratio of a block's own links, off it the least."""
    src, dst, ratio = links.src, links.dst, links.ratio
    measured = ~np.isnan(ratio)
    if not measured.all():
        src, dst, ratio = src[measured], dst[measured], ratio[measured]
    src, dst = block_of_rank[src], block_of_rank[dst]
    own = src == dst
    cell = src  # src * blocks + dst, in place: 8 million of them
    cell *= blocks
    cell += dst
    least = group_minimum(cell, ratio, blocks * blocks)
    diagonal = np.arange(blocks) * (blocks + 1)
    medians = group_medians(cell[own], ratio[own], blocks * blocks)
    least[diagonal] = medians[diagonal]
    return [_rounded(row) for row in least.reshape(blocks, blocks)]


def node_grid_table(links: LinkColumns, identities: list[dict[str, Any]], nodes: _Nodes) -> Table:
    """`link_nodes`: node x node (or blocks of consecutive nodes beyond NODE_GRID_MAX), JSON only."""
    per_block = -(-nodes.count // NODE_GRID_MAX)
    blocks = -(-nodes.count // per_block)
    grid = _grid(links, nodes.of_rank // per_block, blocks)
    members = [nodes.labels[b * per_block : (b + 1) * per_block] for b in range(blocks)]
    rows = [
        {
            "label": labels[0] if len(labels) == 1 else f"{labels[0]} to {labels[-1]}",
            "nodes": len(labels),
            "ratios": [None if v is None else round(v, 3) for v in ratios],
        }
        for labels, ratios in zip(members, grid, strict=True)
    ]
    what = "node x node" if per_block == 1 else f"blocks of {per_block} consecutive nodes"
    return Table(
        "link_nodes",
        f"Link bandwidth as a fraction of the median, {what} "
        "(slowest rail; diagonal: the median of its own links)",
        {},
        rows,
    )


def _rank_columns(links: LinkColumns) -> dict[str, str]:
    columns = {"rank": "rank", "host": "host"}
    for kind, inter in ((INTRA, False), (INTER, True)):
        if np.any(links.inter == inter):
            columns |= {f"{kind}_out_gbps": f"{kind} out", f"{kind}_in_gbps": f"{kind} in"}
    return columns | {"latency_us": "latency", "min_ratio": "slowest x", "status": "status"}


def _rounded(values: np.ndarray, digits: int | None = None) -> list[float | None]:
    """The values as a row holds them: None where NaN, else rounded to `digits` (None: as they are)."""
    return [None if np.isnan(v) else v if digits is None else round(v, digits) for v in values.tolist()]


def rank_rows(
    links: LinkColumns, identities: list[dict[str, Any]], culprits: set[int]
) -> list[dict[str, Any]]:
    """Per rank: the median of its links out and in, per kind; its slowest link's ratio; named or not."""
    world = len(identities)
    into_rank = links.incoming()
    columns = {}
    for kind, inter in ((INTRA, False), (INTER, True)):
        # A rank's links out are one slice in (src, dst) order, its links in one in (dst, src) order.
        mine, theirs = links.inter == inter, into_rank.inter == inter
        out = _medians_by(links.src, mine, links.gbps, world)
        into = _medians_by(into_rank.dst, theirs, into_rank.gbps, world)
        columns |= {f"{kind}_out_gbps": _rounded(out, 4), f"{kind}_in_gbps": _rounded(into, 4)}
    # Each link counts for both its ends.
    latency = grouped_medians(
        *merge_groups([(links.src, links.latency_us), (into_rank.dst, into_rank.latency_us)], world),
        scratch=True,
    )
    columns |= {"latency_us": _rounded(latency, 1), "min_ratio": _rounded(links.least_ratio(world))}
    return [
        {
            "rank": ident["rank"],
            "host": ident["host"],
            **{name: column[ident["rank"]] for name, column in columns.items()},
            "status": "FAIL" if ident["rank"] in culprits else "PASS",
        }
        for ident in identities
    ]


def _medians_by(groups: np.ndarray, mask: np.ndarray, values: np.ndarray, size: int) -> np.ndarray:
    """group_medians of the values of `mask`; groups in increasing order are counted, not copied."""
    if not is_sorted(groups):
        return group_medians(groups[mask], values[mask], size, scratch=True)
    return grouped_medians(values[mask], masked_counts(groups, mask, size), scratch=True)


def _node_medians(ranks: np.ndarray, mask: np.ndarray, values: np.ndarray, nodes: _Nodes) -> np.ndarray:
    """Each node's median of the values of `mask` whose rank (in increasing order) is on it."""
    if not is_sorted(ranks) or not is_sorted(nodes.of_rank):  # a node's ranks not in one run
        return group_medians(nodes.of_rank[ranks[mask]], values[mask], nodes.count, scratch=True)
    per_rank = masked_counts(ranks, mask, len(nodes.of_rank))
    counts = np.bincount(nodes.of_rank, weights=per_rank, minlength=nodes.count).astype(np.int64)
    return grouped_medians(values[mask], counts, scratch=True)


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
    links: LinkColumns, identities: list[dict[str, Any]], culprits: set[int], nodes: _Nodes | None = None
) -> list[dict[str, Any]]:
    """Per node: the median of its own links, of its links to other nodes out and in; named or not."""
    nodes = nodes or _Nodes(identities)
    members: list[list[int]] = [[] for _ in range(nodes.count)]
    for ident in identities:
        members[int(nodes.of_rank[ident["rank"]])].append(ident["rank"])
    into_rank = links.incoming()
    # Intra-node links have both ends in one node (a node's own); inter-node ones, out of and into it:
    # a node's links out are slices in (src, dst) order, its links in in (dst, src) order.
    intra, inter, inter_in = ~links.inter, links.inter, into_rank.inter
    own = _rounded(_node_medians(links.src, intra, links.gbps, nodes), 4)
    out = _rounded(_node_medians(links.src, inter, links.gbps, nodes), 4)
    into = _rounded(_node_medians(into_rank.dst, inter_in, into_rank.gbps, nodes), 4)
    # A node's slowest link is its ranks' slowest.
    least = _rounded(group_minimum(nodes.of_rank, links.least_ratio(len(identities)), nodes.count))
    return [
        {
            "host": nodes.labels[n],
            "ranks": span(ranks),
            "intra_gbps": own[n],
            "inter_out_gbps": out[n],
            "inter_in_gbps": into[n],
            "min_ratio": least[n],
            "status": "FAIL" if set(ranks) & culprits else "PASS",
        }
        for n, ranks in enumerate(members)
    ]
