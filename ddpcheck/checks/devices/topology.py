"""Where a GPU rank sits: its CPU affinity against its GPU's NUMA node, and the NICs on the GPU's PCIe switch.

`read()` looks at sysfs and the process's affinity (Linux); `judge()` is pure over what it read.
A rank bound to CPUs of the other socket pays the socket link on every copy to its GPU: a WARN.
A rank bound to no CPU set at all (every CPU) is the launcher's default: said, not blamed.
"""

from __future__ import annotations

import os
from itertools import groupby
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ddpcheck.report.model import Check, Status
from ddpcheck.report.naming import hosts_of, where

if TYPE_CHECKING:
    import torch

SYS = Path("/sys")


def read(device: torch.device, sys_root: Path = SYS) -> dict[str, Any]:
    import torch

    props = torch.cuda.get_device_properties(device)
    bus = f"{getattr(props, 'pci_domain_id', 0):04x}:{props.pci_bus_id:02x}:{props.pci_device_id:02x}.0"
    return facts_of(bus, sorted(os.sched_getaffinity(0)), os.cpu_count() or 1, sys_root)


def facts_of(bus: str, affinity: list[int], cpus: int, sys_root: Path = SYS) -> dict[str, Any]:
    """What sysfs says about the GPU at PCI address `bus`, and the rank's CPUs."""
    pci = sys_root / "bus/pci/devices" / bus
    numa = _read_int(pci / "numa_node")
    numa = numa if numa is not None and numa >= 0 else None  # -1: the kernel knows no node for it
    node = sys_root / f"devices/system/node/node{numa}/cpulist" if numa is not None else None
    return {
        "pci_bus_id": bus,
        "numa_node": numa,
        "node_cpus": parse_cpulist(_read(node)) if node is not None else [],
        "affinity": affinity,
        "cpus": cpus,
        "nics": nics_near(pci, sys_root),
    }


def nics_near(gpu: Path, sys_root: Path = SYS) -> list[str]:
    """Network interfaces behind the same PCIe switch as the GPU (below the root port, a shared bridge)."""
    try:
        gpu_path = gpu.resolve().parts
    except OSError:
        return []
    root = next((i for i, part in enumerate(gpu_path) if part.startswith("pci")), None)
    # .../pci0000:00/<root port>/<switch upstream>/...: sharing more than the root port is a switch.
    if root is None or len(gpu_path) < root + 3:
        return []
    switch = gpu_path[: root + 3]
    near = []
    for net in sorted((sys_root / "class/net").glob("*")):
        device = net / "device"
        if device.exists() and device.resolve().parts[: len(switch)] == switch:
            near.append(net.name)
    return near


def parse_cpulist(text: str | None) -> list[int]:
    """'0-3,8,10-11' -> [0, 1, 2, 3, 8, 10, 11]."""
    cpus: list[int] = []
    for part in (text or "").strip().split(","):
        if not part:
            continue
        low, _, high = part.partition("-")
        cpus.extend(range(int(low), int(high or low) + 1))
    return cpus


def judge(all_facts: list[dict[str, Any] | None], identities: list[dict[str, Any]]) -> Check:
    warned: dict[int, str] = {}  # rank -> what is wrong
    notes, unbound = [], []
    for rank, facts in enumerate(all_facts):
        if not facts:
            continue
        affinity, node_cpus = set(facts.get("affinity") or []), set(facts.get("node_cpus") or [])
        if facts.get("nics"):
            notes.append(f"rank {rank}'s GPU shares its PCIe switch with {', '.join(facts['nics'])}")
        if not node_cpus or not affinity:
            continue
        if len(affinity) >= facts.get("cpus", 0):
            unbound.append(rank)
        elif not affinity & node_cpus:
            warned[rank] = (
                f"{where(rank, identities)} runs on CPUs {_span(sorted(affinity))}, but its GPU "
                f"({facts['pci_bus_id']}) is on NUMA node {facts['numa_node']} (CPUs "
                f"{_span(sorted(node_cpus))}); Fix: bind each rank to its GPU's node "
                f"(numactl --cpunodebind={facts['numa_node']}, srun --cpu-bind=ldoms)"
            )
    tail = "".join(f"; {n}" for n in notes)
    if warned:
        ranks = list(warned)
        return Check(
            "topology", Status.WARN, "; ".join(warned.values()) + tail, ranks, hosts_of(ranks, identities)
        )
    bound = len([f for f in all_facts if f]) - len(unbound)
    detail = f"{bound} rank(s) bound near their GPU's NUMA node"
    if unbound:
        detail += f", {len(unbound)} not bound to a CPU set (every CPU)"
    return Check("topology", Status.PASS, detail + tail)


def _span(cpus: list[int]) -> str:
    """Sorted CPUs as a cpulist: [0, 1, 2, 3, 8] -> '0-3,8' (a run's CPUs less their place is one number)."""
    runs = [[cpu for _, cpu in run] for _, run in groupby(enumerate(cpus), lambda pair: pair[1] - pair[0])]
    return ",".join(f"{run[0]}-{run[-1]}" if len(run) > 1 else str(run[0]) for run in runs) or "none"


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None


def _read_int(path: Path) -> int | None:
    text = _read(path)
    try:
        return int(text) if text is not None else None
    except ValueError:
        return None
