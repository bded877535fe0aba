"""Every command's judge input at any size: what measure() returns on each rank, and the identities.

The shapes are those the judges' own tests build (tests/test_allreduce.py's rank_data,
tests/test_collectives.py's op_data, tests/test_train.py's rank_data, tests/test_profile.py's
timings, tests/test_devices.py's rank_data) and links' measure_plan, generated for N nodes of
G ranks each: tests/perf/bench_scale.py feeds them to the real judges, and tests use the
small ones.
"""

from __future__ import annotations

import random
from typing import Any

import numpy as np

from ddpcheck.checks.links.schedule import nodes_of, round_robin


def hosts_of_fleet(nodes: int) -> list[str]:
    width = max(3, len(str(nodes)))
    return [f"gpu-a{n + 1:0{width}d}" for n in range(nodes)]


def rank_identities(hosts: list[str], per_node: int, device: str = "cuda") -> list[dict[str, Any]]:
    """What the harness gathers from every rank, for `per_node` ranks on each host."""
    out = []
    for n, host in enumerate(hosts):
        for local in range(per_node):
            rank = n * per_node + local
            gpu = device == "cuda"
            out.append(
                {
                    "rank": rank,
                    "local_rank": local,
                    "node": n,
                    "host": host,
                    "address": f"10.{n // 250}.{n % 250}.1",
                    "pid": 1000 + local,
                    "device": f"cuda:{local}" if gpu else "cpu",
                    "device_name": "NVIDIA H100 80GB HBM3" if gpu else "cpu",
                    "device_uuid": f"GPU-{n:05d}-{local}" if gpu else None,
                    "pci_bus_id": f"0000:{0x18 + local:02x}:00.0" if gpu else None,
                }
            )
    return out


SIZES = (1024, 65536, 4 * 2**20, 64 * 2**20)


def allreduce_data(n: int) -> list[dict[str, Any]]:
    expected = float(n * (n - 1) // 2)
    sizes = [{"size_bytes": s, "count": s // 4, "seconds": 1e-5 + s / 300e9, "wrong": 0} for s in SIZES]
    one = {"classic": {"got": expected, "expected": expected}, "sizes": sizes}
    return [one for _ in range(n)]


def collectives_data(n: int, names: tuple[str, ...]) -> list[dict[str, Any]]:
    """Every rank's account of each collective, every block right (tests/test_collectives.py's op_data)."""
    from ddpcheck.checks.sweep.ops import OPS

    per_op = []
    for name in names:
        op = OPS[name]
        rows = []
        for i, size in enumerate(SIZES):
            count = op.count(size, 4, n)
            rows.append(
                {
                    "size_bytes": count * 4,
                    "count": count,
                    "seconds": 1e-5 + size / 300e9,
                    "wrong": 0,
                    "wrong_from": {},
                    "variants": op.variants(n, i),
                }
            )
        per_op.append({"op": name, "skipped": None, "sizes": rows, "culprits": [], "unlocalised": False})
    one = {"ops": per_op}
    return [one for _ in range(n)]


def train_data(n: int, steps: int = 5) -> list[dict[str, Any]]:
    """A healthy DDP run (tests/test_train.py's rank_data without faults)."""
    params = ["weight", "bias"]
    out = []
    for rank in range(n):
        record_steps = [
            {
                "loss": 1.3 - 0.1 * s + 0.01 * (rank % 7),
                "reference_loss": 1.3 - 0.1 * s,
                "grad_fingerprint": [[s, 7]] * 2,
                "grad_dev": [1e-10, 0.0],
                "grad_scale": [1e-3, 1e-3],
                "weight_fingerprint": [[s, 1]] * 2,
                "weight_finite": True,
                "reference_dev": [1e-7, 1e-8],
            }
            for s in range(steps)
        ]
        out.append(
            {
                "params": params,
                "init": {
                    "before": {
                        "fingerprint": [[rank, rank]] * 2,
                        "diff_from_rank0": [0.06 * (rank > 0), 0.0],
                    },
                    "after": {"fingerprint": [[0, 0]] * 2, "diff_from_rank0": [0.0, 0.0]},
                },
                "steps": record_steps,
                "update_scale": [5e-3, 5e-3],
                "weight_scale": [0.12, 0.12],
            }
        )
    return out


def profile_data(n: int, steps: int = 10, hidden: int = 4096) -> list[dict[str, Any]]:
    """Steady timings with a little jitter per rank (tests/test_profile.py's timings)."""
    rng = random.Random(0)
    out = []
    for _ in range(n):
        jitter = 1 + rng.uniform(-0.02, 0.02)
        rows = [
            {
                "forward": 1e-3 * jitter * (40 if s == 0 else 1),
                "backward": 2.5e-3 * jitter,
                "backward_compute": 2e-3 * jitter,
                "update": 5e-4 * jitter,
            }
            for s in range(steps)
        ]
        out.append(
            {
                "steps": rows,
                "grad_bytes": 4 * (hidden * hidden + hidden),
                "allreduce_s": 1e-3,
                "peak_memory_bytes": 300 * 2**20,
                "memory_kind": "cuda",
                "matmul_precision": "highest",
            }
        )
    return out


PASS_FACTORS = (0.9, 1.0, 0.95)


def devices_data(n: int) -> list[dict[str, Any]]:
    """Healthy GPUs with a little spread (tests/test_devices.py's rank_data, with the CUDA figures)."""
    rng = random.Random(0)
    out = []
    for _ in range(n):
        tflops, copy = 400 * rng.uniform(0.97, 1.0), 2000 * rng.uniform(0.97, 1.0)
        gemm = {"bfloat16": tflops * 1.75, "tf32": tflops}  # 70% and 80% of an H100's dense peaks
        copies = {"h2d": 50.0, "d2h": 50.0, "d2d": copy}
        out.append(
            {
                "model": "NVIDIA H100 80GB HBM3",
                "checksums": {"bfloat16": {"sha256": "aa", "sum": 1.5}},
                "passes": [
                    {
                        "gemm": {k: v * f for k, v in gemm.items()},
                        "copy": {k: v * f for k, v in copies.items()},
                    }
                    for f in (0.9, 1.0, 0.95)
                ],
                "health": None,
                "topology": None,
            }
        )
    return out


def links_data(
    identities: list[dict[str, Any]],
    size: int = 64 * 2**20,
    slow_hosts: set[str] | frozenset[str] = frozenset(),
    seed: int = 0,
) -> list[dict[str, Any]]:
    """Every rank's links as measure_plan returns them (columns), over the plan's links for this layout.

    The plan's links (link_plan): every pair inside a node, and rail-aligned pairs between nodes
    (local rank i with local rank i), built here as arrays: link_plan's tuples take seconds at a
    thousand nodes. Healthy links near 150 GB/s inside a node and 23 GB/s between nodes; every
    link out of a host in `slow_hosts` at a tenth of that.
    """
    rng = np.random.default_rng(seed)
    layout = [(i["host"], i.get("node", 0), i["local_rank"]) for i in identities]
    nodes = nodes_of(layout)
    rounds = max((len(round_robin(len(ranks))) for ranks in nodes), default=0) + len(round_robin(len(nodes)))
    # rail[i]: the rank of local rank i on every node (-1 where a node has fewer ranks).
    width = max((len(ranks) for ranks in nodes), default=0)
    rail = np.full((len(nodes), width), -1, dtype=np.int64)
    for n, ranks in enumerate(nodes):
        rail[n, : len(ranks)] = ranks
    slow = np.array([i["host"] in slow_hosts for i in identities], dtype=bool)
    out = []
    for n, ranks in enumerate(nodes):
        for local, dst in enumerate(ranks):
            intra = np.array([r for r in ranks if r != dst], dtype=np.int64)
            inter = np.delete(rail[:, local], n)
            inter = inter[inter >= 0]
            peer = np.concatenate([intra, inter])
            is_inter = np.concatenate([np.zeros(len(intra), bool), np.ones(len(inter), bool)])
            order = np.argsort(peer)
            peer, is_inter = peer[order], is_inter[order]
            speed = np.where(is_inter, 23.0, 150.0) * rng.uniform(0.95, 1.03, len(peer))
            speed = np.where(slow[peer], speed / 10, speed)
            seconds = size / (speed * 1e9)
            latency = np.where(is_inter, 14e-6, 8e-6) * rng.uniform(0.9, 1.1, len(peer))
            out.append(
                (
                    dst,
                    {
                        "size_bytes": size,
                        "rounds": rounds,
                        "passes": 1,
                        "links": {
                            "peer": peer,
                            "inter": is_inter,
                            "recv_s": seconds,
                            "best_pass_recv_s": seconds * 0.98,
                            "latency_s": latency,
                            "wrong": np.zeros(len(peer), dtype=np.int64),
                        },
                    },
                )
            )
    return [data for _, data in sorted(out, key=lambda x: x[0])]
