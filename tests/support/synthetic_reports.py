"""Reports of commands whose runs these tests do not launch: many ranks, or commands built elsewhere.

The shapes follow the JSON tables those commands write (docs/links.md, docs/collectives.md): `links` rows
(src, dst, src_host, dst_host, gbps, latency_us, ratio); `bandwidth` rows with `op`.
"""

from __future__ import annotations

import random
import statistics
from pathlib import Path

from ddpcheck.checks.sweep.judge import BANDWIDTH_COLUMNS
from ddpcheck.report.model import Check, Report, Status, Table

OPS = ("all_reduce", "all_gather", "reduce_scatter", "broadcast", "reduce", "all_to_all", "sendrecv")
BUS_FACTOR = {"all_reduce": 2.0, "all_gather": 1.0, "reduce_scatter": 1.0, "all_to_all": 1.0}


def _world(n: int, hosts: list[str]) -> dict:
    return {
        "size": n,
        "backend": "nccl",
        "device": "cuda",
        "nodes": len(set(hosts)),
        "hosts": sorted(set(hosts)),
    }


def links_report(
    n: int = 64, per_host: int = 8, slow: tuple[int, int] | None = (13, 42), seed: int = 0
) -> Report:
    """n ranks on n/per_host hosts; every link near its peers' speed except `slow` (src, dst) at a tenth."""
    rng = random.Random(seed)
    hosts = [f"gpu{r // per_host + 1:02d}" for r in range(n)]
    rows = []
    for src in range(n):
        for dst in range(n):
            if src == dst:
                continue
            intra = hosts[src] == hosts[dst]
            gbps = (150.0 if intra else 23.0) * rng.uniform(0.95, 1.03)
            latency = (8.0 if intra else 14.0) * rng.uniform(0.9, 1.1)
            if (src, dst) == slow:
                gbps, latency = gbps / 10, latency * 3
            rows.append(
                {
                    "src": src,
                    "dst": dst,
                    "src_host": hosts[src],
                    "dst_host": hosts[dst],
                    "gbps": round(gbps, 3),
                    "latency_us": round(latency, 2),
                    "intra": intra,
                }
            )
    for kind in (True, False):
        median = statistics.median(r["gbps"] for r in rows if r["intra"] == kind)
        for r in rows:
            if r["intra"] == kind:
                r["ratio"] = round(r["gbps"] / median, 3)
    for r in rows:
        del r["intra"]
    report = Report(command="links", world=_world(n, hosts), options={"threshold": 0.5, "size": 64 * 2**20})
    report.ranks = [{"rank": r, "local_rank": r % per_host, "host": hosts[r]} for r in range(n)]
    if slow:
        s, d = slow
        bad = next(r for r in rows if (r["src"], r["dst"]) == slow)
        report.checks.append(
            Check(
                "links",
                Status.FAIL,
                f"link rank {s} (host {hosts[s]}) -> rank {d} (host {hosts[d]}): {bad['gbps']} GB/s, "
                f"{bad['ratio']} x the median of comparable links",
                [s, d],
                sorted({hosts[s], hosts[d]}),
            )
        )
    else:
        report.checks.append(Check("links", Status.PASS, f"{len(rows)} links within 0.5 x the median"))
    report.checks.append(Check("rank map", Status.PASS, f"{n} ranks on {len(set(hosts))} hosts"))
    report.tables.append(Table("links", "Every link", {}, rows))
    report.elapsed_s = 41.2
    return report


def collectives_report(n: int = 8, corrupt: int | None = 3) -> Report:
    """Every op's busbw curve on n ranks; with `corrupt`, all_gather is wrong at every size, naming it."""
    rows = []
    for i, op in enumerate(OPS):
        factor = BUS_FACTOR.get(op, 1.0) * (n - 1) / n if op in BUS_FACTOR else 1.0
        for k in range(20, 31, 2):
            size = 2**k
            algbw = (40.0 - 3.5 * i) * size / (size + 2**24)  # each op its own plateau, as on real links
            rows.append(
                {
                    "op": op,
                    "size_bytes": size,
                    "size": f"{size // 2**20}M" if size >= 2**20 else f"{size // 1024}K",
                    "count": size // 4,
                    "dtype": "float32",
                    "time_us": round(size / algbw / 1e3, 1),
                    "algbw_gbps": round(algbw, 3),
                    "busbw_gbps": round(algbw * factor, 3),
                    "wrong": 7 if corrupt is not None and op == "all_gather" else 0,
                }
            )
    hosts = ["node1"] * n
    report = Report(command="collectives", world=_world(n, hosts), options={"dtype": "float32"})
    for op in OPS:
        if corrupt is not None and op == "all_gather":
            report.checks.append(
                Check(op, Status.FAIL, f"wrong elements; rank {corrupt} on host node1", [corrupt], ["node1"])
            )
        else:
            report.checks.append(Check(op, Status.PASS, "6 sizes exact"))
    columns = {"op": "op", **BANDWIDTH_COLUMNS}
    report.tables.append(Table("bandwidth", f"bandwidth (float32, {n} ranks)", columns, rows))
    report.tables.append(
        Table(
            "baseline",
            "Against the baseline",
            {},
            [
                {
                    "op": r["op"],
                    "size_bytes": r["size_bytes"],
                    "metric": "busbw_gbps",
                    "then": round(r["busbw_gbps"] * 1.1, 3),
                    "now": r["busbw_gbps"],
                }
                for r in rows
                if r["op"] == "all_reduce"
            ],
        )
    )
    report.elapsed_s = 12.5
    return report


GLOO_STRAGGLERS = Path(__file__).resolve().parents[1] / "fixtures" / "gloo_stragglers"


def watch_report(job: str = "rank2_slower", host: str = "vm") -> Report:
    """A successful watch's report with its stragglers judged as watch judges them (sampling.py), from
    the real gloo dumps of tests/fixtures/gloo_stragglers (`healthy` or `rank2_slower`: 4 ranks)."""
    from ddpcheck.checks.watch.sampling import Sampler, slim
    from ddpcheck.failure.flight import read_raw

    sampler = Sampler(
        GLOO_STRAGGLERS / job, every_s=1.0, speak=lambda line: None
    )  # never asks: nothing written
    for rank in range(4):
        sampler.history.add(rank, slim(read_raw(str(GLOO_STRAGGLERS / job / f"fr{rank}"))), host)
    job_check = Check("job", Status.PASS, "the job ran to completion: 4 ranks, exit 0, 5.2 s")
    report = Report(command="watch", checks=[job_check], world={"size": 4, "nodes": 1})
    return sampler.add_to(report)
