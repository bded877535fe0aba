"""Every node agrees: the cross-rank check every command runs, over each rank's fingerprint.

Pure: `judge_agreement()` and `fingerprint_table()` run on rank 0 over every rank's
`probe.rank_fingerprint()` (taken on the rank itself, cheaply: no subprocess, no CUDA init).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from ddpcheck.report.model import Check, Status, Table
from ddpcheck.report.naming import counted, listed

# (key, label, status when a host differs). torch, CUDA and NCCL must match for
# collectives to interoperate (a mixed NCCL can hang or corrupt); a different
# driver, GPU model or Python usually runs but is the "one node was upgraded" smell.
FINGERPRINT_FIELDS: tuple[tuple[str, str, Status], ...] = (
    ("torch", "torch", Status.FAIL),
    ("cuda", "CUDA", Status.FAIL),
    ("nccl", "NCCL", Status.FAIL),
    ("driver", "driver", Status.WARN),
    ("gpu", "GPU model", Status.WARN),
    ("python", "Python", Status.WARN),
)


def judge_agreement(
    fingerprints: Sequence[Mapping[str, Any] | None], identities: Sequence[Mapping[str, Any]]
) -> Check:
    """Name the hosts whose torch/CUDA/NCCL/driver/GPU model/Python differs from the majority.

    `fingerprints[r]` is rank r's `rank_fingerprint()`, `identities[r]` its
    identity (with 'host'). Votes are per host, not per rank: a node is one
    upgrade, however many ranks it runs.
    """
    name = "nodes agree"
    findings: list[str] = []
    status = Status.PASS
    culprits: set[int] = set()
    ranks_on = Counter(str(identity["host"]) for identity in identities)
    for key, label, severity in FINGERPRINT_FIELDS:
        values = [(fp or {}).get(key) for fp in fingerprints]
        # Each value's hosts, and their ranks holding it, in the order they come.
        seen: dict[Any, dict[str, list[int]]] = {}
        for rank, value in enumerate(values):
            seen.setdefault(value, {}).setdefault(str(identities[rank]["host"]), []).append(rank)
        if len(seen) < 2:
            continue
        ranked = sorted(seen.items(), key=lambda kv: -len(kv[1]))
        tie = len(ranked[0][1]) == len(ranked[1][1])
        odd = [v for v, _ in ranked] if tie else [v for v, _ in ranked[1:]]
        culprits.update(r for r, v in enumerate(values) if v in odd)
        if status != Status.FAIL:
            status = severity
        if tie:
            groups = "; ".join(f"{_show(v)} on {_named(h, ranks_on)}" for v, h in ranked)
            findings.append(f"{label} differs with no majority: {groups}")
        else:
            majority, majority_hosts = ranked[0]
            parts = [
                f"{_named(h, ranks_on)} {'has' if len(h) == 1 else 'have'} {_show(v)}" for v, h in ranked[1:]
            ]
            named = {host for _, h in ranked[1:] for host in h}
            if named & majority_hosts.keys():  # a host holds both: its other ranks are in the majority
                rest = "every other rank"
            else:
                rest = f"the other {counted(len(majority_hosts), 'host')}"
            findings.append(f"{label} differs: {'; '.join(parts)}, {rest} {_show(majority)}")
    if not findings:
        first = next((fp for fp in fingerprints if fp), {}) or {}
        summary = ", ".join(f"{label} {_show(first.get(key))}" for key, label, _ in FINGERPRINT_FIELDS)
        agree = "agrees" if len(ranks_on) == 1 else "agree"
        return Check(name, Status.PASS, f"{counted(len(ranks_on), 'host')} {agree}: {summary}")
    fix = (
        "Fix: install the same torch wheel (and driver) on every node, e.g. from one container image."
        if status == Status.FAIL
        else "Mixed drivers, GPUs or Pythons usually run, at the pace of the slowest, "
        "but point to a node set up differently."
    )
    ranks = sorted(culprits)
    hosts = list(dict.fromkeys(str(identities[r]["host"]) for r in ranks))
    return Check(name, status, f"{'; '.join(findings)}. {fix}", ranks, hosts)


def fingerprint_table(
    fingerprints: Sequence[Mapping[str, Any] | None], identities: Sequence[Mapping[str, Any]]
) -> Table:
    """One row per distinct (host, fingerprint): what each node runs, side by side."""
    rows: dict[tuple[Any, ...], dict[str, Any]] = {}
    for rank, fp in enumerate(fingerprints):
        facts = {"host": identities[rank]["host"], **{k: (fp or {}).get(k) for k, _, _ in FINGERPRINT_FIELDS}}
        # One row per distinct facts; its columns: the host, its ranks, then the facts.
        row = rows.setdefault(tuple(facts.values()), {"host": facts["host"], "ranks": [], **facts})
        row["ranks"].append(rank)
    for row in rows.values():
        row["ranks"] = ", ".join(map(str, row["ranks"]))
    columns = {"host": "host", "ranks": "ranks", **{k: label for k, label, _ in FINGERPRINT_FIELDS}}
    return Table("fingerprints", "Software on every node", columns, list(rows.values()))


def _named(hosts: Mapping[str, list[int]], ranks_on: Mapping[str, int]) -> str:
    """Hosts by name; one whose ranks hold different values names its ranks that hold this one."""
    return ", ".join(
        host if len(ranks) == ranks_on[host] else f"{host} ({listed(ranks)})" for host, ranks in hosts.items()
    )


def _show(value: Any) -> str:
    return "none" if value is None else str(value)
