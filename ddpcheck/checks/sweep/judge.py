"""The collective sweep on rank 0: bandwidth rows, who sent or received wrong data, and the verdicts.

Pure functions over what every rank measured (collective/sweep.py), so they are
unit-tested with synthetic data: a bad sender, a bad receiver, a bad link.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ddpcheck.checks.sweep.ops import OPS
from ddpcheck.checks.sweep.ops.base import Rooted
from ddpcheck.report.model import Check, Status, Table
from ddpcheck.report.naming import counted, describe_ranks, hosts_of, where
from ddpcheck.report.units import human_bytes

BANDWIDTH_COLUMNS = {
    "size": "size",
    "count": "count",
    "time_us": "time (us)",
    "algbw_gbps": "algbw (GB/s)",
    "busbw_gbps": "busbw (GB/s)",
    "wrong": "#wrong",
}
UNLOCALISED = (
    "could not localise: every subgroup reduced correctly, so the fault shows only with all "
    "ranks together (an algorithm or link used only at full scale); the ranks named saw wrong values"
)

# One rank moves nothing between ranks: a timing of it is an in-place no-op, not a bandwidth.
ONE_RANK = "one rank: no traffic, so no bandwidth to measure (run 2 or more ranks)"


def bandwidth_rows(op_name: str, data: list[dict[str, Any]], dtype: str) -> list[dict[str, Any]]:
    """One row per size: the slowest rank's time, nccl-tests' algbw and busbw, #wrong summed over ranks.

    `data` holds every rank's account of this collective (sweep.measure_op).
    """
    n = len(data)
    factor = OPS[op_name].bus_factor(n) if n > 1 else 0.0
    rows = []
    for i, first in enumerate(data[0]["sizes"]):
        seconds = max(rank["sizes"][i]["seconds"] for rank in data)
        algbw = first["size_bytes"] / seconds / 1e9 if seconds > 0 else 0.0
        rows.append(
            {
                "op": op_name,
                "size_bytes": first["size_bytes"],
                "size": human_bytes(first["size_bytes"]),
                "count": first["count"],
                "dtype": dtype,
                "time_us": round(seconds * 1e6, 2),
                "algbw_gbps": round(algbw, 3),
                "busbw_gbps": round(algbw * factor, 3),
                "wrong": sum(rank["sizes"][i]["wrong"] for rank in data),
                "wrong_ranks": [r for r, rank in enumerate(data) if rank["sizes"][i]["wrong"]],
            }
        )
    return rows


def bandwidth_table(name: str, title: str, rows: list[dict[str, Any]], group_by: str | None = None) -> Table:
    return Table(name, title, dict(BANDWIDTH_COLUMNS), rows, group_by=group_by)


def peak(rows: list[dict[str, Any]]) -> dict[str, Any]:
    return max(rows, key=lambda r: r["busbw_gbps"])


# ---------------------------------------------------------------- who is at fault
@dataclass
class Attribution:
    """Who made the data wrong, from which blocks were wrong on which receivers."""

    senders: list[int] = field(default_factory=list)  # every receiver of their data saw it wrong
    receivers: list[int] = field(default_factory=list)  # wrong in what every sender sent them
    links: list[tuple[int, int]] = field(default_factory=list)  # (sender, receiver) wrong alone
    wrong: dict[tuple[int, int], int] = field(default_factory=dict)  # (sender, receiver) -> elements
    everywhere: bool = False  # every block on every rank was wrong

    @property
    def ranks(self) -> list[int]:
        return sorted({*self.senders, *self.receivers, *(r for link in self.links for r in link)})


def attribute(op_name: str, data: list[dict[str, Any]]) -> Attribution:
    """Name senders, receivers and links from every rank's wrong elements by sender.

    A sender whose own copy of its block was already wrong (all_gather's and all_to_all's
    local block, broadcast's root buffer) sent bad data: the data was bad before it left.
    So did a sender whose block was wrong on every other rank that received it. A receiver
    wrong in what every other sender sent it received badly. What neither explains is the
    link between that sender and that receiver. A rank's own block never crosses a link,
    so it is no evidence about links or receivers; and one observer alone proves nothing
    about a sender (nor one sender about a receiver): that stays a link.
    """
    op, n = OPS[op_name], len(data)
    expected: set[tuple[int, int]] = set()
    for row in data[0]["sizes"]:
        for variant in row.get("variants", [0]):
            for sender in op.senders(n, variant):
                expected |= {(sender, receiver) for receiver in op.observers(sender, n, variant)}
    found = Attribution()
    for receiver, rank in enumerate(data):
        for row in rank["sizes"]:
            for sender, count in row.get("wrong_from", {}).items():
                key = (int(sender), receiver)
                found.wrong[key] = found.wrong.get(key, 0) + count
    found.everywhere = len(data) > 1 and all(pair in found.wrong for pair in expected)
    crossing = {(j, k) for j, k in expected if j != k}
    for sender in range(n):
        seen_by = {k for j, k in crossing if j == sender}
        own_copy_wrong = (sender, sender) in found.wrong
        if own_copy_wrong or (len(seen_by) > 1 and all((sender, k) in found.wrong for k in seen_by)):
            found.senders.append(sender)
    for receiver in range(n):
        heard = {j for j, k in crossing if k == receiver and j not in found.senders}
        if len(heard) > 1 and all((j, receiver) in found.wrong for j in heard):
            found.receivers.append(receiver)
    found.links = sorted(
        (j, k) for j, k in found.wrong if j not in found.senders and k not in found.receivers
    )
    return found


def _link_text(link: tuple[int, int], identities: list[dict[str, Any]]) -> str:
    sender, receiver = link
    if sender == receiver:
        return f"{where(sender, identities)}'s own block (its local copy)"
    return f"{where(sender, identities)} -> {where(receiver, identities)}"


def describe_attribution(found: Attribution, identities: list[dict[str, Any]], n: int) -> str:
    if found.everywhere:
        return "every block on every rank was wrong: the collective itself fails, not one rank"
    parts = []
    for sender in found.senders:
        seen = {k: c for (j, k), c in found.wrong.items() if j == sender}
        others = [k for k in seen if k != sender]
        if len(others) > 1:
            count = "both" if len(others) == 2 else f"all {len(others)}"
            how = f"{count} other ranks that received it saw it wrong"
        elif sender in seen:
            how = "its own copy was already wrong"
        else:
            how = "the rank that received it saw it wrong"
        parts.append(
            f"{where(sender, identities)} sent wrong data: {how} ({sum(seen.values()):,} elements in all)"
        )
    for receiver in found.receivers:
        parts.append(f"{where(receiver, identities)} received wrong data from every sender")
    if found.links:
        named = ", ".join(_link_text(link, identities) for link in found.links[:8])
        more = f" and {len(found.links) - 8} more" if len(found.links) > 8 else ""
        parts.append(f"only the data on {named}{more} was wrong: the link, or those two ends")
        if n == 2 and not found.senders and not found.receivers:
            parts.append("with 2 ranks one receiver cannot tell a bad sender from a bad receiver")
    return "; ".join(parts)


# ---------------------------------------------------------------- verdicts
def culprit_text(culprits: list[int], identities: list[dict[str, Any]]) -> str:
    """How a localised (or unlocalisable) reduction fault is said."""
    if not culprits:
        return UNLOCALISED
    named = describe_ranks(culprits, identities)
    verb = "makes" if len(culprits) == 1 else "make"
    return f"localised by re-running on subgroups: {named} {verb} the sum wrong"


def culprit_clause(culprits: list[int], unlocalised: bool, identities: list[dict[str, Any]]) -> str:
    """'; ' and culprit_text where bisection ran (it named ranks, or could not), '' where it did not."""
    return f"; {culprit_text(culprits, identities)}" if culprits or unlocalised else ""


def judge_data(
    name: str,
    op_name: str,
    rows: list[dict[str, Any]],
    data: list[dict[str, Any]],
    identities: list[dict[str, Any]],
) -> Check:
    """The exact data check of one collective over the sweep; a failure names ranks (and links)."""
    bad = [r for r in rows if r["wrong"]]
    if not bad:
        total = sum(r["count"] for r in rows)
        detail = f"{counted(len(rows), 'size')}, {total:,} elements per rank compared exactly, 0 wrong"
        roots = {v for row in data[0]["sizes"] for v in row.get("variants", [])}
        if isinstance(OPS[op_name], Rooted) and len(roots) < len(data):
            detail += f" (from {len(roots)} of {len(data)} roots; a longer sweep turns through more)"
        return Check(name, Status.PASS, detail)
    sizes = ", ".join(f"{r['size']}: {r['wrong']:,} wrong" for r in bad[:6])
    detail = f"wrong elements after {op_name} ({sizes})"
    if OPS[op_name].reduces:
        named, links = data[0].get("culprits") or [], []
        detail += culprit_clause(named, bool(data[0].get("unlocalised")), identities)
    else:
        found = attribute(op_name, data)
        detail += f"; {describe_attribution(found, identities, len(data))}"
        named, links = found.ranks, [list(link) for link in found.links]
    # Else every rank that saw a wrong element.
    ranks = named or sorted({x for r in bad for x in r["wrong_ranks"]})
    return Check(name, Status.FAIL, detail, ranks, hosts_of(ranks, identities), links=links)


def judge_bandwidth(name: str, rows: list[dict[str, Any]], n: int, min_busbw: float | None) -> Check:
    if n == 1:
        return Check(name, Status.SKIP, ONE_RANK)
    top = peak(rows)
    detail = f"peak busbw {top['busbw_gbps']:.3f} GB/s at {top['size']}"
    if min_busbw is not None and top["busbw_gbps"] < min_busbw:
        return Check(name, Status.FAIL, f"{detail}, below --min-busbw {min_busbw:g} GB/s")
    if min_busbw is not None:
        detail += f" (>= --min-busbw {min_busbw:g})"
    return Check(name, Status.PASS, detail)
