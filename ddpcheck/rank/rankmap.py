"""The rank map: rank <-> local rank <-> host <-> pid <-> device, and what is wrong with it.

Pure functions over the identities the harness gathers from every rank.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from ddpcheck.report.model import Check, Status, Table
from ddpcheck.report.naming import counted, hosts_of, node_labels, node_of, span

RANKS_TABLE_COLUMNS = {
    "rank": "rank",
    "local_rank": "local",
    "host": "host",
    "address": "address",
    "pid": "pid",
    "device": "device",
    "device_name": "device name",
    "device_id": "UUID / PCI bus",
}


def hosts_table(identities: list[dict[str, Any]], checks: list[Any]) -> Table:
    """One summary row per node: its ranks, devices and whether any check names them."""
    blamed = {r for c in checks if c.status.value in ("FAIL", "ERROR") for r in c.ranks}
    members: dict[tuple[str, int], list[dict[str, Any]]] = defaultdict(list)
    for ident in identities:
        members[node_of(ident)].append(ident)
    labels = node_labels(identities)
    rows = []
    for node, idents in members.items():
        ranks = [i["rank"] for i in idents]
        at_fault = sorted(set(ranks) & blamed)
        rows.append(
            {
                "host": labels[node],
                "node": node[1],
                "address": next((i.get("address") for i in idents if i.get("address")), None),
                "ranks": span(ranks),
                "devices": ", ".join(sorted({str(i.get("device_name") or i.get("device")) for i in idents})),
                "at_fault": ", ".join(map(str, at_fault)) or "-",
                "status": "FAIL" if at_fault else "PASS",
            }
        )
    columns = {k: k.replace("_", " ") for k in ("host", "address", "ranks", "devices", "at_fault", "status")}
    return Table("hosts", "Hosts", columns, rows)


def rank_map_table(identities: list[dict[str, Any]]) -> Table:
    rows = [
        {
            **{k: ident.get(k) for k in ("rank", "local_rank", "node", "host", "address", "pid", "device")},
            "device_name": ident.get("device_name"),
            "device_uuid": ident.get("device_uuid"),
            "pci_bus_id": ident.get("pci_bus_id"),
            "device_id": ident.get("device_uuid") or ident.get("pci_bus_id") or "-",
        }
        for ident in identities
    ]
    return Table("ranks", "Rank map", RANKS_TABLE_COLUMNS, rows)


def judge_rank_map(identities: list[dict[str, Any]]) -> Check:
    """FAIL when a node's local ranks are not 0..k-1 or two ranks of one host share a GPU."""
    problems: list[str] = []
    culprits: set[int] = set()
    by_node: dict[tuple[str, int], list[dict[str, Any]]] = defaultdict(list)
    by_host: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for ident in identities:
        by_node[node_of(ident)].append(ident)
        by_host[ident["host"]].append(ident)
    labels = node_labels(identities)
    for node, members in by_node.items():
        local = sorted(m["local_rank"] for m in members)
        if local != list(range(len(members))):
            problems.append(f"host {labels[node]}: local ranks are {local}, expected 0..{len(members) - 1}")
            culprits.update(m["rank"] for m in members)
    sizes = {node: len(members) for node, members in by_node.items()}
    # The most common size; on a tie the larger one (a node more often loses a GPU than gains one).
    usual = max(set(sizes.values()), key=lambda n: (list(sizes.values()).count(n), n))
    for node, size in sizes.items():
        if size != usual:
            problems.append(
                f"host {labels[node]} runs {counted(size, 'rank')}, the other nodes {usual}: "
                "a GPU missing from that node, or a different --nproc/--gpus there?"
            )
            culprits.update(m["rank"] for m in by_node[node])
    for host, members in by_host.items():
        # GPUs belong to the machine, whichever launcher started the ranks on it.
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
    return Check(
        "rank map",
        Status.PASS,
        f"{counted(len(identities), 'rank')} on {counted(len(by_node), 'node')}, "
        "local ranks contiguous, one device per rank",
    )
