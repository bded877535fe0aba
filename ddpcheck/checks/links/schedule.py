"""Who exchanges with whom, round by round, so that every pair of ranks is measured once.

Pure and torch-free: every rank computes the same plan from the same node layout, so no
rank needs to be told its partners.
"""

from __future__ import annotations

from dataclasses import dataclass

INTRA = "intra"
INTER = "inter"


@dataclass(frozen=True)
class Round:
    """Pairs of ranks that exchange at the same time; `kind` says which links they are."""

    kind: str
    pairs: tuple[tuple[int, int], ...]

    def partner(self, rank: int) -> int | None:
        for a, b in self.pairs:
            if rank == a:
                return b
            if rank == b:
                return a
        return None  # this rank sits out the round


def round_robin(n: int) -> list[list[tuple[int, int]]]:
    """The circle method: every pair of 0..n-1 exactly once, each index in at most one pair a round.

    n - 1 rounds of n/2 pairs for even n. For odd n a phantom player is added: n rounds of
    (n - 1)/2 pairs, and whoever meets the phantom sits that round out (each index once).
    Index 0 stays put while the others rotate one place per round.
    """
    if n < 2:
        return []
    slots: list[int | None] = [*range(n), *([None] if n % 2 else [])]
    m = len(slots)
    rounds = []
    for _ in range(m - 1):
        ends = [(slots[i], slots[m - 1 - i]) for i in range(m // 2)]
        rounds.append(sorted((min(a, b), max(a, b)) for a, b in ends if a is not None and b is not None))
        slots = [slots[0], slots[-1], *slots[1:-1]]
    return rounds


def link_plan(nodes: list[list[int]]) -> list[Round]:
    """Every round of `ddpcheck links`, for nodes given as their ranks in local-rank order.

    First the links inside each node, every node at once (round r of every node's own
    round robin runs together). Then the links between nodes: node pairs in a round robin
    of their own, rail-aligned (local rank i of node A with local rank i of node B, all
    rails at once), so each NIC carries one exchange at a time and is measured alone.
    """
    rounds: list[Round] = []
    per_node = [round_robin(len(ranks)) for ranks in nodes]
    for r in range(max((len(p) for p in per_node), default=0)):
        pairs = [
            (ranks[a], ranks[b])
            for ranks, plan in zip(nodes, per_node, strict=True)
            if r < len(plan)
            for a, b in plan[r]
        ]
        rounds.append(Round(INTRA, tuple(pairs)))
    for node_pairs in round_robin(len(nodes)):
        pairs = [
            (nodes[a][i], nodes[b][i])
            for a, b in node_pairs
            for i in range(min(len(nodes[a]), len(nodes[b])))
        ]
        if pairs:
            rounds.append(Round(INTER, tuple(pairs)))
    return rounds


def nodes_of(layout: list[tuple[str, int, int]]) -> list[list[int]]:
    """(host, node number, local rank) of every rank, in rank order -> each node's ranks.

    Nodes are ordered by their first rank, ranks within a node by local rank (rail order).
    """
    members: dict[tuple[str, int], list[tuple[int, int]]] = {}
    for rank, (host, node, local_rank) in enumerate(layout):
        members.setdefault((host, node), []).append((local_rank, rank))
    return [[rank for _, rank in sorted(ranks)] for ranks in members.values()]
