"""The tables of `ddpcheck links` (checks/links/tables.py), over hand-built judged links.

Pins the table names and order, their exact columns, the heat map (row sends, column receives;
None, drawn '.', where nothing was measured), the slowest links (by ratio, at most 8, unmeasured
ratios left out), the node-pair rows (each direction's slowest rail), the per-rank and per-host
medians, and the switches: rank x rank up to 32 ranks, node x node beyond (diagonal: the median of
the node's own links; off it, the slowest), nothing beyond 32 nodes; per-rank columns only up to
32 ranks, per-host columns up to 64 nodes.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from rich.console import Console

from ddpcheck.checks.links import tables as links_tables
from ddpcheck.checks.links.columns import STATUSES, LinkColumns
from ddpcheck.checks.links.schedule import INTER, INTRA
from ddpcheck.checks.links.tables import HEATMAP_MAX, HOST_COLUMNS, LINK_COLUMNS, SLOWEST_SHOWN
from ddpcheck.checks.links.terminal import render_link_heatmap
from ddpcheck.report.model import Table


def idents(hosts: list[str], per_host: int, nodes: list[int] | None = None) -> list[dict[str, Any]]:
    """Identities as the ranks report them: rank, local rank, host and node (launcher) number."""
    return [
        {"rank": h * per_host + i, "local_rank": i, "host": host, "node": nodes[h] if nodes else h}
        for h, host in enumerate(hosts)
        for i in range(per_host)
    ]


def link(
    ids: list[dict[str, Any]],
    src: int,
    dst: int,
    gbps: float,
    ratio: float | None,
    latency_us: float = 50.0,
    status: str = "PASS",
) -> dict[str, Any]:
    """One judged link (after _annotate), as a row."""
    same = (ids[src]["host"], ids[src]["node"]) == (ids[dst]["host"], ids[dst]["node"])
    return {
        "src": src,
        "dst": dst,
        "src_host": ids[src]["host"],
        "dst_host": ids[dst]["host"],
        "kind": INTRA if same else INTER,
        "gbps": gbps,
        "best_gbps": gbps,
        "latency_us": latency_us,
        "wrong": 0,
        "ratio": ratio,
        "status": status,
    }


def columns(rows: list[dict[str, Any]]) -> LinkColumns:
    """Judged links as rows (src, dst, kind, gbps, best_gbps, latency_us, wrong, ratio, status) as columns."""
    return LinkColumns(
        src=np.array([r["src"] for r in rows], dtype=np.int64),
        dst=np.array([r["dst"] for r in rows], dtype=np.int64),
        inter=np.array([r["kind"] == INTER for r in rows], dtype=bool),
        gbps=np.array([r["gbps"] for r in rows], dtype=np.float64),
        best_gbps=np.array([r["best_gbps"] for r in rows], dtype=np.float64),
        latency_us=np.array([r["latency_us"] for r in rows], dtype=np.float64),
        wrong=np.array([r["wrong"] for r in rows], dtype=np.int64),
        ratio=np.array([np.nan if r["ratio"] is None else r["ratio"] for r in rows], dtype=np.float64),
        status=np.array([STATUSES.index(r["status"]) for r in rows], dtype=np.int8),
    )


# The tables' functions over rows of link() (judge() hands them columns).
def link_tables(rows: list[dict[str, Any]], ids: list[dict[str, Any]], *args: Any) -> list[Table]:
    return links_tables.link_tables(columns(rows), ids, *args)


def heat_map_rows(rows: list[dict[str, Any]], ids: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return links_tables.heat_map_rows(columns(rows), ids)


def rank_rows(
    rows: list[dict[str, Any]], ids: list[dict[str, Any]], culprits: set[int]
) -> list[dict[str, Any]]:
    return links_tables.rank_rows(columns(rows), ids, culprits)


def host_rows(
    rows: list[dict[str, Any]], ids: list[dict[str, Any]], culprits: set[int]
) -> list[dict[str, Any]]:
    return links_tables.host_rows(columns(rows), ids, culprits)


def by_name(tables: list[Table]) -> dict[str, Table]:
    return {t.name: t for t in tables}


# ------------------------------------------------------------------ names, titles, columns
def test_one_node_has_four_tables_two_nodes_add_the_hosts() -> None:
    one = idents(["a"], 3)
    rows = [link(one, 0, 1, 2.0, 1.0), link(one, 1, 0, 2.0, 1.0)]
    names = [t.name for t in link_tables(rows, one, 1 << 20, "3 rounds", set())]
    assert names == ["link_matrix", "slowest_links", "links", "link_ranks"]
    two = idents(["a", "b"], 1)
    names = [t.name for t in link_tables([link(two, 0, 1, 2.0, 1.0)], two, 1 << 20, "1 round", set())]
    assert names == ["link_matrix", "slowest_links", "links", "link_ranks", "link_hosts"]


def test_titles_and_columns() -> None:
    ids = idents(["a", "b"], 2)
    rows = [link(ids, 0, 1, 8.0, 1.0), link(ids, 0, 2, 2.0, 1.0)]
    tables = by_name(link_tables(rows, ids, 1 << 20, "3 rounds x 3 passes", set()))
    assert tables["link_matrix"].title == (
        "Link bandwidth as a fraction of the median, rank x rank (row sends, column receives); "
        "1M each way, 3 rounds x 3 passes"
    )
    assert tables["link_matrix"].columns == {} and tables["links"].columns == {}  # drawn / JSON only
    assert tables["slowest_links"].title == (
        "Slowest links (GB/s; latency in us; x med: against the median link)"
    )
    assert tables["slowest_links"].columns == LINK_COLUMNS
    assert list(LINK_COLUMNS.values()) == [
        "src",
        "dst",
        "src host",
        "dst host",
        "kind",
        "GB/s",
        "latency",
        "x med",
        "status",
    ]
    assert tables["link_ranks"].columns == {
        "rank": "rank",
        "host": "host",
        "intra_out_gbps": "intra out",
        "intra_in_gbps": "intra in",
        "inter_out_gbps": "inter out",
        "inter_in_gbps": "inter in",
        "latency_us": "latency",
        "min_ratio": "slowest x",
        "status": "status",
    }
    assert (
        tables["link_hosts"].title.startswith("Links per host (GB/s; ")
        and tables["link_hosts"].columns == HOST_COLUMNS
    )


def test_rank_columns_name_only_the_kinds_measured() -> None:
    ids = idents(["a"], 3)
    tables = by_name(link_tables([link(ids, 0, 1, 2.0, 1.0)], ids, 4096, "3 rounds", set()))
    assert list(tables["link_ranks"].columns) == [
        "rank",
        "host",
        "intra_out_gbps",
        "intra_in_gbps",
        "latency_us",
        "min_ratio",
        "status",
    ]
    assert "4K each way, 3 rounds" in tables["link_matrix"].title


# ------------------------------------------------------------------ heat map
def test_heat_map_rows_send_columns_receive_and_none_where_nothing_was_measured() -> None:
    ids = idents(["a", "b"], 2)
    rows = [
        link(ids, 0, 1, 4.0, 1.0),
        link(ids, 1, 0, 2.0, 0.5),
        link(ids, 0, 2, 1.0, 0.25),
        link(ids, 3, 1, 0.0, None),  # measured, but no reference: no ratio
    ]
    matrix = heat_map_rows(rows, ids)
    assert [(r["label"], r["host"]) for r in matrix] == [("0", "a"), ("1", "a"), ("2", "b"), ("3", "b")]
    assert matrix[0]["ratios"] == [None, 1.0, 0.25, None]
    assert matrix[1]["ratios"] == [0.5, None, None, None]
    assert matrix[2]["ratios"] == [None] * 4
    assert matrix[3]["ratios"] == [None] * 4


def test_the_terminal_draws_a_dot_where_nothing_was_measured() -> None:
    ids = idents(["a"], 2)
    table = Table("link_matrix", "Link bandwidth", {}, heat_map_rows([link(ids, 0, 1, 1.0, 0.42)], ids))
    console = Console(record=True, width=80, color_system=None)
    render_link_heatmap(table, table.rows, console)
    lines = [line.split() for line in console.export_text().splitlines()]
    assert ["0", "1"] in lines  # the header: one column per receiving rank
    assert [cells for cells in lines if len(cells) == 3] == [["0", ".", "0.42"], ["1", ".", "."]]


def test_up_to_32_ranks_rank_x_rank_beyond_node_x_node() -> None:
    at_limit = idents(["a", "b"], HEATMAP_MAX // 2)
    assert len(heat_map_rows([], at_limit)) == HEATMAP_MAX
    assert [r["label"] for r in heat_map_rows([], at_limit)][:2] == ["0", "1"]
    beyond = idents(["a", "b", "c"], 11)  # 33 ranks
    rows = [
        link(beyond, 0, 1, 9.0, 0.9),
        link(beyond, 1, 0, 11.0, 1.1),
        link(beyond, 1, 2, 13.0, 1.3),  # node a's own: median 1.1
        link(beyond, 0, 11, 5.0, 0.5),
        link(beyond, 1, 12, 8.0, 0.8),  # a -> b on two rails: the slowest, 0.5
        link(beyond, 12, 1, 0.0, None),  # b -> a: measured, no ratio
    ]
    matrix = heat_map_rows(rows, beyond)
    assert [(r["label"], r["host"]) for r in matrix] == [("a", "a"), ("b", "b"), ("c", "c")]
    assert matrix[0]["ratios"] == [1.1, 0.5, None]
    assert matrix[1]["ratios"] == [None, None, None]
    assert matrix[2]["ratios"] == [None, None, None]
    title = link_tables(rows, beyond, 1 << 20, "3 rounds", set())[0].title
    assert "node x node (slowest rail; diagonal: the node's own links)" in title
    assert "rank x rank" not in title


def test_node_x_node_up_to_32_nodes_nothing_beyond() -> None:
    assert len(heat_map_rows([], idents([f"n{i:02d}" for i in range(HEATMAP_MAX)], 2))) == HEATMAP_MAX
    assert heat_map_rows([], idents([f"n{i:02d}" for i in range(HEATMAP_MAX + 1)], 1)) == []


def test_two_launchers_on_one_host_are_two_nodes_labelled_by_number() -> None:
    ids = idents(["a", "a", "b"], 11, nodes=[0, 1, 2])  # 33 ranks, nodes 0 and 1 share host a
    labels = [r["label"] for r in heat_map_rows([], ids)]
    assert labels == ["a (node 0)", "a (node 1)", "b"]
    assert [r["host"] for r in host_rows([], ids, set())] == ["a (node 0)", "a (node 1)", "b"]


# ------------------------------------------------------------------ slowest links and node pairs
def test_slowest_links_by_ratio_at_most_eight_and_only_those_with_a_ratio() -> None:
    ids = idents(["a"], 4)
    ratios = [0.9, 0.1, 1.2, 0.5, 1.0, 0.7, 1.1, 0.3, 0.95, 1.05, 0.2]
    pairs = [(s, d) for s in range(4) for d in range(4) if s != d]
    rows = [link(ids, s, d, r * 10, r) for (s, d), r in zip(pairs, ratios, strict=False)]
    rows.append(link(ids, 3, 2, 0.0, None))
    slowest = by_name(link_tables(rows, ids, 1 << 20, "3 rounds", set()))["slowest_links"].rows
    assert SLOWEST_SHOWN == 8 and len(slowest) == 8
    assert [r["ratio"] for r in slowest] == sorted(ratios)[:8]
    assert all(r["ratio"] is not None for r in slowest)
    assert slowest[0] == rows[1]  # the row itself, every key


def test_links_keep_every_intra_link_and_each_directions_slowest_rail() -> None:
    ids = idents(["a", "b"], 2)
    rows = [
        link(ids, 0, 1, 20.0, 1.0),
        link(ids, 3, 2, 21.0, 1.05),
        link(ids, 0, 2, 5.0, 1.0),
        link(ids, 1, 3, 2.0, 0.4),  # a -> b: rail 1 is the slower
        link(ids, 2, 0, 4.0, 0.8),  # b -> a: rail 0 is the slower
        link(ids, 3, 1, 6.0, 1.2),
    ]
    reported = by_name(link_tables(rows, ids, 1 << 20, "3 rounds", set()))["links"].rows
    assert [(r["src"], r["dst"]) for r in reported] == [(0, 1), (1, 3), (2, 0), (3, 2)]
    intra = [r for r in reported if r["kind"] == INTRA]
    assert all("rails" not in r and "rail" not in r for r in intra)
    inter = {(r["src"], r["dst"]): r for r in reported if r["kind"] == INTER}
    assert (inter[(1, 3)]["rails"], inter[(1, 3)]["rail"], inter[(1, 3)]["gbps"]) == (2, 1, 2.0)
    assert (inter[(2, 0)]["rails"], inter[(2, 0)]["rail"], inter[(2, 0)]["gbps"]) == (2, 0, 4.0)
    assert "rails" not in rows[3]  # the input rows are not changed


# ------------------------------------------------------------------ per rank, per host
def test_rank_rows_are_medians_out_and_in_per_kind_and_the_named_fail() -> None:
    ids = idents(["a", "b"], 2)
    rows = [
        link(ids, 0, 1, 10.0, 1.0, latency_us=10.0),
        link(ids, 1, 0, 30.0, 3.0, latency_us=150.0),
        link(ids, 0, 2, 1.0, 0.5, latency_us=100.0),
        link(ids, 0, 3, 3.0, 1.5, latency_us=200.0),
        link(ids, 2, 0, 2.12345678, None, latency_us=1000.0),
    ]
    ranks = rank_rows(rows, ids, culprits={2})
    zero = ranks[0]
    assert zero == {
        "rank": 0,
        "host": "a",
        "intra_out_gbps": 10.0,
        "intra_in_gbps": 30.0,
        "inter_out_gbps": 2.0,  # the median of 1 and 3
        "inter_in_gbps": 2.1235,  # rounded to 4 digits
        "latency_us": 150.0,  # the median of its five links, out and in
        "min_ratio": 0.5,  # None ratios left out
        "status": "PASS",
    }
    assert ranks[2]["status"] == "FAIL" and ranks[2]["min_ratio"] == 0.5
    assert ranks[2]["inter_out_gbps"] == pytest.approx(2.1235) and ranks[2]["intra_out_gbps"] is None
    assert ranks[3]["intra_out_gbps"] is None and ranks[3]["inter_in_gbps"] == 3.0


def test_a_rank_with_no_links_has_none_everywhere() -> None:
    ids = idents(["a"], 3)
    (row,) = [r for r in rank_rows([link(ids, 0, 1, 1.0, 1.0)], ids, set()) if r["rank"] == 2]
    assert row == {
        "rank": 2,
        "host": "a",
        "intra_out_gbps": None,
        "intra_in_gbps": None,
        "inter_out_gbps": None,
        "inter_in_gbps": None,
        "latency_us": None,
        "min_ratio": None,
        "status": "PASS",
    }


def test_host_rows_are_medians_of_own_out_and_in_links() -> None:
    ids = idents(["a", "b"], 2)
    rows = [
        link(ids, 0, 1, 20.0, 1.0),
        link(ids, 1, 0, 40.0, 2.0),
        link(ids, 2, 3, 7.0, 0.35),
        link(ids, 0, 2, 1.0, 0.5),
        link(ids, 1, 3, 3.0, 1.5),
        link(ids, 2, 0, 5.0, 0.9),
    ]
    hosts = host_rows(rows, ids, culprits={3})
    assert hosts == [
        {
            "host": "a",
            "ranks": "ranks 0, 1",
            "intra_gbps": 30.0,
            "inter_out_gbps": 2.0,
            "inter_in_gbps": 5.0,
            "min_ratio": 0.5,
            "status": "PASS",
        },
        {
            "host": "b",
            "ranks": "ranks 2, 3",
            "intra_gbps": 7.0,
            "inter_out_gbps": 5.0,
            "inter_in_gbps": 2.0,
            "min_ratio": 0.35,
            "status": "FAIL",  # one of its ranks is named
        },
    ]


def test_beyond_32_ranks_per_rank_is_json_only_beyond_64_nodes_per_host_too() -> None:
    big = idents([f"n{i:02d}" for i in range(11)], 3)  # 33 ranks, 11 nodes
    tables = by_name(link_tables([], big, 1 << 20, "3 rounds", set()))
    assert tables["link_ranks"].columns == {} and len(tables["link_ranks"].rows) == 33
    assert tables["link_hosts"].columns == HOST_COLUMNS
    at_limit = by_name(link_tables([], idents([f"n{i:02d}" for i in range(64)], 1), 1 << 20, "r", set()))
    assert at_limit["link_hosts"].columns == HOST_COLUMNS
    huge = by_name(link_tables([], idents([f"n{i:02d}" for i in range(65)], 1), 1 << 20, "r", set()))
    assert huge["link_hosts"].columns == {} and len(huge["link_hosts"].rows) == 65
    assert huge["link_matrix"].rows == []
    exact = idents(["a"], HEATMAP_MAX)
    assert by_name(link_tables([], exact, 1 << 20, "r", set()))["link_ranks"].columns != {}
