"""The rank map: rank <-> local rank <-> host <-> pid <-> device, and what is wrong with it.

Pure functions over the identities the harness gathers from every rank.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from ddpcheck.report import Check, Status, Table

RANKS_TABLE_COLUMNS = {
    "rank": "rank",
    "local_rank": "local",
    "host": "host",
    "pid": "pid",
    "device": "device",
    "device_name": "device name",
    "device_id": "UUID / PCI bus",
}


def where(rank: int, identities: list[dict[str, Any]]) -> str:
    """'rank R on host H' - how every finding names a rank."""
    return f"rank {rank} on host {identities[rank]['host']}"


def hosts_of(ranks: list[int], identities: list[dict[str, Any]]) -> list[str]:
    return list(dict.fromkeys(identities[r]["host"] for r in ranks))


def rank_map_table(identities: list[dict[str, Any]]) -> Table:
    rows = [
        {
            **{k: ident.get(k) for k in ("rank", "local_rank", "host", "pid", "device")},
            "device_name": ident.get("device_name"),
            "device_uuid": ident.get("device_uuid"),
            "pci_bus_id": ident.get("pci_bus_id"),
            "device_id": ident.get("device_uuid") or ident.get("pci_bus_id") or "-",
        }
        for ident in identities
    ]
    return Table("ranks", "Rank map", RANKS_TABLE_COLUMNS, rows)


def judge_rank_map(identities: list[dict[str, Any]]) -> Check:
    """FAIL when a host's local ranks are not 0..k-1 or two ranks of one host share a GPU."""
    problems: list[str] = []
    culprits: set[int] = set()
    by_host: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for ident in identities:
        by_host[ident["host"]].append(ident)
    for host, members in by_host.items():
        local = sorted(m["local_rank"] for m in members)
        if local != list(range(len(members))):
            problems.append(f"host {host}: local ranks are {local}, expected 0..{len(members) - 1}")
            culprits.update(m["rank"] for m in members)
        by_gpu: dict[str, list[int]] = defaultdict(list)
        for m in members:
            gpu = m.get("device_uuid") or m.get("pci_bus_id")
            if m.get("device", "cpu") != "cpu" and gpu:
                by_gpu[gpu].append(m["rank"])
        for gpu, ranks in by_gpu.items():
            if len(ranks) > 1:
                problems.append(
                    f"host {host}: ranks {', '.join(map(str, ranks))} share one GPU ({gpu}); "
                    "each rank needs torch.cuda.set_device(local_rank)"
                )
                culprits.update(ranks)
    if problems:
        ranks = sorted(culprits)
        return Check("rank map", Status.FAIL, "; ".join(problems), ranks, hosts_of(ranks, identities))
    hosts = len(by_host)
    return Check(
        "rank map",
        Status.PASS,
        f"{len(identities)} ranks on {hosts} host{'s' if hosts != 1 else ''}, "
        "local ranks contiguous, one device per rank",
    )
