"""The report of `ddpcheck env`: this host probed, judged, and its facts laid out as tables."""

from __future__ import annotations

import gc
import time
from collections.abc import Mapping
from typing import Any

from ddpcheck.checks.env import EnvOptions
from ddpcheck.checks.env.judge import judge
from ddpcheck.checks.env.probe import ProbeConfig, probe
from ddpcheck.report.model import Report, Table
from ddpcheck.report.units import UNLIMITED, human_bytes


def run(options: EnvOptions) -> Report:
    """The command: the host's report. The process ends right after it is shown."""
    report = run_env()
    # Exempt torch's objects from the garbage collection at exit: a large part of env's time (docs/env.md).
    gc.freeze()
    return report


def run_env(config: ProbeConfig | None = None) -> Report:
    """`ddpcheck env`: probe this host, judge it, and time it."""
    start = time.perf_counter()
    facts = probe(config)
    torch_info = facts["torch"]
    report = Report(command="env", checks=judge(facts), tables=env_tables(facts))
    report.world = {
        "nodes": 1,
        "hosts": [facts["host"]["hostname"]],
        "torch": torch_info["version"],
        "cuda": torch_info["cuda_build"],
        "nccl": torch_info["nccl"],
    }
    report.notes = list(facts["problems"])
    report.elapsed_s = time.perf_counter() - start
    return report


KV_COLUMNS = {"item": "item", "value": "value"}


def env_tables(facts: Mapping[str, Any]) -> list[Table]:
    tables = [
        Table("software", "Software", KV_COLUMNS, _software_rows(facts)),
        Table(
            "gpus",
            "GPUs visible to torch",
            {"index": "#", "name": "name", "memory_gib": "memory (GiB)", "capability": "cc", "uuid": "UUID"},
            facts["torch"]["gpus"],
        ),
        Table(
            "topology",
            "GPU topology (nvidia-smi topo -m)",
            {key: key for row in facts["topology"] for key in row},  # every row's columns, as they first come
            facts["topology"],
        ),
        Table("host", "Host", KV_COLUMNS, _host_rows(facts["host"])),
        Table(
            "network",
            "Network interfaces",
            {
                "name": "name",
                "state": "state",
                "speed_mbps": "speed (Mb/s)",
                "mtu": "MTU",
                "addresses": "addresses",
            },
            [
                {
                    "name": n,
                    "state": "up" if i["up"] else "down",
                    "speed_mbps": i["speed_mbps"],
                    "mtu": i["mtu"],
                    "addresses": ", ".join(i["addresses"]),
                }
                for n, i in facts["interfaces"].items()
            ],
        ),
        Table(
            "infiniband",
            "InfiniBand / RoCE ports",
            {"device": "device", "port": "port", "state": "state", "rate": "rate", "link_layer": "link"},
            facts["infiniband"],
        ),
        Table(
            "environment",
            "Distributed environment (secret-looking values redacted)",
            {"name": "name", "value": "value"},
            [{"name": k, "value": v} for k, v in facts["env"].items()],
        ),
    ]
    # An empty table says nothing in the terminal; JSON readers default to [].
    return [t for t in tables if t.rows]


def _software_rows(facts: Mapping[str, Any]) -> list[dict[str, Any]]:
    t = facts["torch"]
    rows = [
        ("python", f"{facts['python']['version']} ({facts['python']['executable']})"),
        ("torch", t["version"]),
        ("torch git", t["git_version"]),
        ("debug build", "yes" if t["debug"] else "no"),
        (
            "CUDA (torch built with)",
            t["cuda_build"] or (f"ROCm {t['hip_build']}" if t["hip_build"] else None),
        ),
        ("CUDA (driver supports)", t["driver_cuda"]),
        ("cuDNN", t["cudnn"]),
        ("NCCL", t["nccl"]),
        ("NVIDIA driver", facts["driver"]),
        ("backends", ", ".join(b for b in ("nccl", "gloo", "mpi", "ucc") if t["backends"].get(b)) or "none"),
    ]
    return [{"item": k, "value": v} for k, v in rows]


def _host_rows(host: Mapping[str, Any]) -> list[dict[str, Any]]:
    shm = host["shm"]
    memlock, nofile = host["memlock"] or {}, host["nofile"] or {}
    rows: list[tuple[str, Any, Any]] = [
        ("hostname", host["hostname"], None),
        ("platform", host["platform"], None),
        (
            "CPU cores (usable / logical / physical)",
            f"{host['cpu_usable']} / {host['cpu_logical']} / {host['cpu_physical']}",
            host["cpu_usable"],
        ),
        ("load (1, 5, 15 min)", ", ".join(map(str, host["load"])) if host["load"] else None, None),
        (
            "memory (available / total)",
            f"{human_bytes(host['memory_available'], amount=True)} / "
            f"{human_bytes(host['memory_total'], amount=True)}",
            host["memory_total"],
        ),
        (
            shm["path"],
            f"{human_bytes(shm['free'], amount=True)} free / {human_bytes(shm['total'], amount=True)}"
            if shm["total"] is not None
            else None,
            shm["total"],
        ),
        ("ulimit -l (locked memory)", _limit(memlock.get("soft")), memlock.get("soft")),
        ("ulimit -n (open files)", _limit(nofile.get("soft"), as_bytes=False), nofile.get("soft")),
    ]
    # "raw": the number behind the text, for JSON readers.
    return [{"item": k, "value": v, **({"raw": raw} if raw is not None else {})} for k, v, raw in rows]


def _limit(value: Any, as_bytes: bool = True) -> str | None:
    if value is None or value == UNLIMITED:
        return value
    return human_bytes(int(value), amount=True) if as_bytes else str(value)
