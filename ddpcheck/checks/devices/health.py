"""A GPU's health: its facts (failure/gpu_facts.py: NVML, or `nvidia-smi -q -x`) judged, each
finding with its fix. `judge()` is pure over those facts.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ddpcheck.report.model import Check, Status, Table
from ddpcheck.report.naming import counted, hosts_of, where

# Reasons that are a fault rather than a setting: the GPU slows itself to survive.
HARMFUL_THROTTLE = {"hardware slowdown", "thermal (hardware)", "power brake"}
# XID codes that mean the GPU or its memory is unsound (NVIDIA's XID catalogue): the node
# should be drained and the GPU reset or replaced. Other codes are reported, as warnings.
CRITICAL_XID = {
    48: "double-bit ECC error",
    63: "ECC page retirement or row remapping recorded",
    64: "ECC page retirement or row remapping failed",
    74: "NVLink error",
    79: "GPU has fallen off the bus",
    92: "high single-bit ECC error rate",
    94: "contained ECC error",
    95: "uncontained ECC error",
    119: "GSP RPC timeout",
    120: "GSP error",
}
NEAR_SLOWDOWN_C = 5  # within this of the slowdown temperature is a warning


# ---------------------------------------------------------------- judging
DRAIN = "drain the node and reset the GPU (nvidia-smi -r); replace it if it recurs"
Fault = tuple[Callable[[dict[str, Any]], object], Status, str]


def _nvlink_model(name: str | None) -> bool:
    """GPUs whose NVLinks are part of the board (SXM): all links down is a fault, not a missing bridge."""
    upper = (name or "").upper()
    return "SXM" in upper or "HBM3" in upper or "H200" in upper


def _nvlink_down(facts: dict[str, Any]) -> bool:
    links, up = facts.get("nvlink_links"), facts.get("nvlink_up")
    return bool(
        links and up is not None and (0 < up < links or (up == 0 and _nvlink_model(facts.get("name"))))
    )


def _below_max(facts: dict[str, Any], key: str) -> bool:
    """A PCIe link trained below what both ends can do (`key` and `key`_max)."""
    value, most = facts.get(key), facts.get(f"{key}_max")
    return bool(value and most and value < most)


def _near_slowdown(facts: dict[str, Any]) -> bool:
    temperature, slowdown = facts.get("temperature_c"), facts.get("slowdown_c")
    return bool(temperature is not None and slowdown and temperature >= slowdown - NEAR_SLOWDOWN_C)


# What can be wrong with one GPU: when it is, how bad, what it means and its fix (formatted with the
# facts and `harmful`, the throttle reasons that are faults). Reported in this order, the kernel
# log's XID codes after the memory's failures, FAIL first.
# fmt: off
_MEMORY_FAILURES: tuple[Fault, ...] = (
    (lambda f: f.get("ecc_volatile_uncorrected"), Status.FAIL,
     "{ecc_volatile_uncorrected} uncorrectable ECC errors since the driver loaded; Fix: " + DRAIN),
    (lambda f: f.get("remap_failure"), Status.FAIL,
     "row remapping failed (no spare rows left); Fix: drain the node and replace the GPU"),
    (lambda f: f.get("retired_pending"), Status.FAIL,
     "retired pages pending; Fix: reset the GPU (nvidia-smi -r) or reboot to retire them"),
)
_FAULTS: tuple[Fault, ...] = (
    (_nvlink_down, Status.FAIL,
     "NVLink: {nvlink_up} of {nvlink_links} links up; "
     "Fix: reset the GPU, then check the baseboard and NVSwitch (drain)"),
    (lambda f: f.get("remap_pending"), Status.WARN,
     "a row remap is pending; Fix: reset the GPU (nvidia-smi -r) to apply it"),
    (lambda f: f.get("ecc_aggregate_uncorrected"), Status.WARN,
     "{ecc_aggregate_uncorrected} uncorrectable ECC errors in its lifetime; watch it"),
    (lambda f: f.get("ecc_enabled") is False, Status.WARN,
     "ECC is off: memory errors go unseen; Fix: nvidia-smi -e 1 and reboot"),
    (lambda f: _below_max(f, "pcie_width"), Status.WARN,
     "PCIe link x{pcie_width} of x{pcie_width_max}; Fix: reseat the GPU, check its riser or slot"),
    (lambda f: _below_max(f, "pcie_gen"), Status.WARN,
     "PCIe Gen{pcie_gen} of Gen{pcie_gen_max} (an idle GPU may step down; under load it should not); "
     "Fix: reseat, check the BIOS link speed"),
    (lambda f: f["harmful"], Status.WARN,
     "clocks held down: {harmful}; Fix: check cooling and power delivery"),
    (_near_slowdown, Status.WARN,
     "{temperature_c:g} C, near its slowdown at {slowdown_c:g} C; Fix: check airflow"),
    (lambda f: f.get("mig"), Status.WARN,
     "MIG is on: ranks get a slice, not the GPU; Fix: nvidia-smi -mig 0 (then reset)"),
    (lambda f: (f.get("compute_mode") or "Default") != "Default", Status.WARN,
     "compute mode {compute_mode}; Fix: nvidia-smi -c DEFAULT"),
    (lambda f: f.get("persistence") is False, Status.WARN,
     "persistence mode off (slow start, settings lost); Fix: nvidia-smi -pm 1 or nvidia-persistenced"),
)
# fmt: on


def findings(facts: dict[str, Any]) -> list[tuple[Status, str]]:
    """What is wrong with one GPU, each with its likely fix, worst first."""
    said = {**facts, "harmful": ", ".join(t for t in facts.get("throttle") or [] if t in HARMFUL_THROTTLE)}
    found = [(status, text.format_map(said)) for wrong, status, text in _MEMORY_FAILURES if wrong(said)]
    for code in dict.fromkeys(facts.get("xid") or []):
        if code in CRITICAL_XID:
            found.append((Status.FAIL, f"XID {code} in the kernel log ({CRITICAL_XID[code]}); Fix: {DRAIN}"))
        else:
            found.append((Status.WARN, f"XID {code} in the kernel log; look it up in NVIDIA's XID catalogue"))
    found += [(status, text.format_map(said)) for wrong, status, text in _FAULTS if wrong(said)]
    order = {Status.FAIL: 0, Status.WARN: 1}
    return sorted(found, key=lambda f: order[f[0]])


def gpu_label(facts: dict[str, Any]) -> str:
    ids = ", ".join(str(facts[k]) for k in ("uuid", "pci_bus_id") if facts.get(k))
    return f"GPU {facts.get('index', '?')}" + (f" ({ids})" if ids else "")


def judge(all_facts: list[dict[str, Any] | None], identities: list[dict[str, Any]]) -> Check:
    """Every GPU's findings, named by rank, host and GPU; SKIP when no GPU could be read."""
    unread = [r for r, f in enumerate(all_facts) if not f or f.get("error")]
    if len(unread) == len(all_facts):
        why = next((f["error"] for f in all_facts if f and f.get("error")), "no GPU facts")
        return Check("health", Status.SKIP, f"could not read GPU health: {why}")
    problems: list[str] = []
    severities: set[Status] = set()
    ranks: set[int] = set()
    seen: set[str] = set()
    for rank, facts in enumerate(all_facts):
        if not facts or facts.get("error"):
            continue
        key = str(facts.get("uuid") or facts.get("pci_bus_id") or rank)
        if key in seen:
            continue  # two ranks on one GPU: the rank map says so; its health once
        seen.add(key)
        for severity, text in findings(facts):
            ranks.add(rank)
            severities.add(severity)
            problems.append(f"{where(rank, identities)}, {gpu_label(facts)}: {text}")
    if unread:
        why = (all_facts[unread[0]] or {}).get("error")
        problems.append(f"not read on {', '.join(f'rank {r}' for r in unread)}: {why}")
    if not severities:
        detail = f"{counted(len(seen), 'GPU')}: no ECC, remap, XID, PCIe, NVLink, clock or mode problem"
        if unread:
            detail += "; " + problems[-1]
        return Check("health", Status.PASS, detail)
    ordered = sorted(ranks)
    status = Status.FAIL if Status.FAIL in severities else Status.WARN
    return Check("health", status, "; ".join(problems), ordered, hosts_of(ordered, identities))


def table(all_facts: list[dict[str, Any] | None], identities: list[dict[str, Any]]) -> Table:
    rows = [
        {
            "rank": rank,
            "host": identities[rank]["host"],
            "gpu": facts.get("index"),
            "uuid": facts.get("uuid"),
            "pci_bus_id": facts.get("pci_bus_id"),
            "ecc": _pair(facts.get("ecc_volatile_uncorrected"), facts.get("ecc_aggregate_uncorrected")),
            "remap": "failed"
            if facts.get("remap_failure")
            else "pending"
            if facts.get("remap_pending")
            else "ok",
            "pcie": _link(facts),
            "nvlink": _pair(facts.get("nvlink_up"), facts.get("nvlink_links")),
            "temperature_c": facts.get("temperature_c"),
            "power_w": facts.get("power_w"),
            "sm_clock_mhz": facts.get("sm_clock_mhz"),
            "throttle": ", ".join(facts.get("throttle") or []) or None,
            "xid": ", ".join(map(str, facts.get("xid") or [])) or None,
            "error": facts.get("error"),
        }
        for rank, facts in enumerate(read or {} for read in all_facts)
    ]
    columns = {
        "rank": "rank",
        "gpu": "GPU",
        "ecc": "ECC unc. (vol/agg)",
        "remap": "remap",
        "pcie": "PCIe",
        "nvlink": "NVLink",
        "temperature_c": "C",
        "power_w": "W",
        "xid": "XID",
    }
    return Table("health", "GPU health (NVML)", columns, rows)


def _pair(a: Any, b: Any) -> str | None:
    return None if a is None and b is None else f"{'-' if a is None else a}/{'-' if b is None else b}"


def _link(facts: dict[str, Any]) -> str | None:
    if facts.get("pcie_gen") is None:
        return None
    return (
        f"Gen{facts.get('pcie_gen')} x{facts.get('pcie_width')} of "
        f"Gen{facts.get('pcie_gen_max')} x{facts.get('pcie_width_max')}"
    )
