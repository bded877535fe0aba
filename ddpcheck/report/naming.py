"""How every finding names ranks, hosts and nodes: one wording for every command and judge.

Pure functions over the identities the harness gathers from every rank (rank, host, node).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from typing import Any


def where(rank: int, identities: list[dict[str, Any]]) -> str:
    """'rank R on host H' - how every finding names a rank."""
    return f"rank {rank} on host {identities[rank]['host']}"


def node_of(ident: dict[str, Any]) -> tuple[str, int]:
    """A node is one launcher's ranks: usually one host, but two launchers may share a host."""
    return ident["host"], ident.get("node", 0)


def node_labels(identities: list[dict[str, Any]]) -> dict[tuple[str, int], str]:
    """Every node's name: its host, with its node number where two launchers share that host."""
    nodes_on: dict[str, set[tuple[str, int]]] = defaultdict(set)
    for ident in identities:
        nodes_on[ident["host"]].add(node_of(ident))
    return {
        node: f"{node[0]} (node {node[1]})" if len(nodes) > 1 else node[0]
        for nodes in nodes_on.values()
        for node in nodes
    }


def describe_ranks(ranks: list[int], identities: list[dict[str, Any]]) -> str:
    """Name ranks, a whole node at once when every one of its ranks is among them."""
    wanted = set(ranks)
    members: dict[tuple[str, int], list[int]] = defaultdict(list)
    for ident in identities:
        members[node_of(ident)].append(ident["rank"])
    labels = node_labels(identities)
    parts, covered = [], set()
    for node, node_ranks in members.items():
        if len(node_ranks) > 1 and set(node_ranks) <= wanted:
            parts.append(f"every rank of host {labels[node]} ({span(node_ranks)})")
            covered |= set(node_ranks)
    parts += [where(r, identities) for r in sorted(wanted - covered)]
    return ", ".join(parts)


def span(ranks: list[int]) -> str:
    ordered = sorted(ranks)
    if len(ordered) > 2 and ordered == list(range(ordered[0], ordered[-1] + 1)):
        return f"ranks {ordered[0]}-{ordered[-1]}"
    return ("ranks " if len(ordered) > 1 else "rank ") + ", ".join(map(str, ordered))


def listed(ranks: Sequence[int], most: int | None = None) -> str:
    """'rank 2', 'ranks 1, 3': every rank named in its order (no range, unlike span); past `most`, ' ...'."""
    shown = ", ".join(map(str, ranks[:most])) + (" ..." if most is not None and len(ranks) > most else "")
    return f"rank{'s' if len(ranks) > 1 else ''} {shown}"


def hosts_of(ranks: list[int], identities: list[dict[str, Any]]) -> list[str]:
    return list(dict.fromkeys(identities[r]["host"] for r in ranks))


def hosts_known(ranks: list[int], hosts: Mapping[int, str]) -> list[str]:
    """The hosts of `ranks`, each once; a rank whose host is not known is left out."""
    return list(dict.fromkeys(hosts[r] for r in ranks if r in hosts))


def counted(n: int, noun: str) -> str:
    """'1 rank', '2 ranks': a count and its noun, for details and verdict lines."""
    return f"{n} {noun}{'' if n == 1 else 's'}"


def all_of(n: int, noun: str) -> str:
    """'the one rank', 'both ranks', 'all 4 ranks'."""
    if n == 1:
        return f"the one {noun}"
    return f"both {noun}s" if n == 2 else f"all {n} {noun}s"
