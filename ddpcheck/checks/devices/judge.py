"""`ddpcheck devices`' verdicts: pure, over every rank's plain figures (what check.measure returns).

Apart from the measuring so that the judgement alone can be tested, and mutated
(docs/testing.md), without ranks: each rank's best pass against its peers' median, and in
each round (pass) against the peers measured next to it in time, the seeded products'
digests by device model, NVML's health and the topology judged by health.py and topology.py.
"""

from __future__ import annotations

import statistics
from collections import Counter
from collections.abc import Callable
from typing import Any

import numpy as np

from ddpcheck.checks.devices import DevicesOptions, health, topology
from ddpcheck.checks.devices import expected as expectations
from ddpcheck.checks.devices.fit import budget_findings
from ddpcheck.checks.reference import EXACT_UP_TO, median_of, reference_of
from ddpcheck.rank.rankmap import judge_rank_map, rank_map_table
from ddpcheck.report.model import Check, Report, Status, Table
from ddpcheck.report.naming import counted, describe_ranks, hosts_of, where
from ddpcheck.report.units import significant

# The products whose checksums every rank compares: the dtypes training uses on each device.
DTYPES = {"cpu": ("float32",), "cuda": ("bfloat16", "tf32")}
COPIES = {"cpu": ("memcpy",), "cuda": ("h2d", "d2h", "d2d")}
# Each copy: its figure's key in a device's row (a CPU's memcpy and a GPU's d2d share one) and its label.
COPY_FIGURES = {
    "memcpy": ("copy_gbps", "memcpy"),
    "h2d": ("h2d_gbps", "host to device"),
    "d2h": ("d2h_gbps", "device to host"),
    "d2d": ("copy_gbps", "device to device"),
}


def judge(data: list[dict[str, Any]], identities: list[dict[str, Any]], opts: DevicesOptions) -> Report:
    assert opts.threshold is not None and opts.memory_threshold is not None
    kind = "cuda" if any(str(i.get("device", "")).startswith("cuda") for i in identities) else "cpu"
    rows = device_rows(data, identities, kind)
    report = Report(command="devices")
    report.checks.append(judge_rank_map(identities))
    report.checks.append(judge_compute(rows, identities, opts.threshold, kind))
    report.checks.append(judge_memory(rows, identities, opts.memory_threshold, kind))
    report.checks.append(judge_results(data, identities))
    if kind == "cuda":
        report.checks.append(health.judge([d["health"] for d in data], identities))
        report.checks.append(topology.judge([d["topology"] for d in data], identities))
        report.tables.append(health.table([d["health"] for d in data], identities))
    else:
        report.checks.append(Check("health", Status.SKIP, "CPU ranks: no GPU to read health from (NVML)"))
        report.checks.append(Check("topology", Status.SKIP, "CPU ranks: no GPU whose NUMA node to match"))
    blamed = {r for c in report.checks if c.status in (Status.FAIL, Status.ERROR) for r in c.ranks}
    for row in rows:
        row["status"] = "FAIL" if row["rank"] in blamed else "PASS"
    report.tables.insert(0, devices_table(rows, kind, opts))
    report.tables.append(rank_map_table(identities))
    busy = busy_host_note(rows)
    if busy:
        report.notes.append(busy)
    budget = budget_findings(data[0].get("budget"))
    if budget:
        report.checks.append(budget[0])
        report.tables.append(budget[1])
    return report


def device_rows(
    data: list[dict[str, Any]], identities: list[dict[str, Any]], kind: str
) -> list[dict[str, Any]]:
    """One row per rank: its best pass of every figure (noise only ever slows a pass), and every
    pass's figure under KEY_passes (what each round's comparison reads)."""
    rows = []
    primary = DTYPES[kind][0]
    for rank, d in enumerate(data):
        ident = identities[rank]
        passes = d["passes"]
        row: dict[str, Any] = {
            "rank": rank,
            "host": ident["host"],
            "device": ident["device"],
            "device_name": ident.get("device_name"),
            "model": d["model"],
            "gemm_dtype": primary,
        }
        products = [("gemm_tflops" if d == primary else f"{d}_tflops", "gemm", d) for d in DTYPES[kind]]
        for key, part, figure in products + [(COPY_FIGURES[c][0], "copy", c) for c in COPIES[kind]]:
            row[key + "_passes"] = [significant(p[part][figure]) for p in passes]
            row[key] = max(row[key + "_passes"])
        waits = [p["cpu_wait"] for p in passes if "cpu_wait" in p]
        if waits:
            row["cpu_wait_pct"] = round(100 * statistics.fmean(waits))
        row["checksum"] = d["checksums"][primary]["sha256"]
        if d.get("health"):
            row["sm_clock_mhz"] = d["health"].get("sm_clock_mhz")
            row["throttle"] = ", ".join(d["health"].get("throttle") or []) or None
        rows.append(row)
    return rows


# A rank that waited for a core this share of its passes or more: the host was busy, and says so.
BUSY_HOST_WAIT_PCT = 25


def busy_host_note(rows: list[dict[str, Any]]) -> str | None:
    """A note when CPU ranks waited for a core much of their passes: their rates leave that time out."""
    waits = {row["rank"]: row["cpu_wait_pct"] for row in rows if "cpu_wait_pct" in row}
    if not waits or max(waits.values()) < BUSY_HOST_WAIT_PCT:
        return None
    rank = max(waits, key=waits.__getitem__)
    return (
        f"the host was busy: ranks waited for a core while other processes ran, up to "
        f"{waits[rank]}% of rank {rank}'s passes; their rates leave that time out "
        "(the wait % column), so a busy host does not make a healthy rank look slow"
    )


def slow_ranks(values: dict[int, float], threshold: float) -> dict[int, float]:
    """Ranks below `threshold` x the median of the others, and further below than their noise.

    Each rank against the others only: with four ranks and one slow, its own figure does not
    pull down the reference it is held to (beyond EXACT_UP_TO ranks, one reference over all
    of them serves every rank: linear time). Returns rank -> that reference.
    """
    if len(values) > EXACT_UP_TO:
        shared = reference_of(list(values.values()), threshold)
        assert shared is not None
        return {r: shared.median for r, v in values.items() if shared.is_slow(v, threshold)}
    peers = {rank: reference_of([v for r, v in values.items() if r != rank], threshold) for rank in values}
    return {
        r: ref.median for r, ref in peers.items() if ref is not None and ref.is_slow(values[r], threshold)
    }


def round_ratios(passes: dict[int, list[float]]) -> dict[int, list[float]]:
    """Each rank's figure in every round over the median of its peers' figures in that round.

    A round is one pass of every rank, measured next to each other in time (in turn on CPU
    ranks, at once on GPUs). A load that steps up mid-run, another job starting on the host,
    slows every rank measured after it alike, so the ranks whose turns all came after it look
    slow by their best pass but not against the peers of their own rounds. Beyond EXACT_UP_TO
    ranks, one median of all serves every rank, as in slow_ranks.
    """
    rounds = min(len(p) for p in passes.values())
    ratios: dict[int, list[float]] = {rank: [] for rank in passes}
    for number in range(rounds):
        values = {rank: p[number] for rank, p in passes.items()}
        shared = median_of(np.asarray(list(values.values())))
        for rank, value in values.items():
            if len(values) > EXACT_UP_TO:
                reference = shared
            else:
                others = [v for r, v in values.items() if r != rank]
                reference = statistics.median(others) if others else value
            ratios[rank].append(value / reference if reference > 0 else 1.0)
    return ratios


def _peer_check(
    name: str,
    figures: list[tuple[str, str, str]],
    rows: list[dict[str, Any]],
    identities: list[dict[str, Any]],
    threshold: float,
    expected: Callable[[str, str, float], str | None],
) -> Check:
    """One check over several figures (key, label, unit): FAIL on a slow rank, WARN below the hardware.

    A rank is slow when its best pass is below `threshold` x its peers' (slow_ranks) and, in
    most rounds, below `threshold` x the peers measured in the same round (round_ratios):
    slow whatever the rest of the host was doing, not only while it happened to be busier.
    """
    problems, warnings, summary = [], [], []
    ranks: set[int] = set()
    warned: set[int] = set()
    for key, label, unit in figures:
        values = {row["rank"]: row[key] for row in rows if isinstance(row.get(key), (int, float))}
        if not values:
            continue
        per_round = round_ratios({row["rank"]: row[key + "_passes"] for row in rows if row["rank"] in values})
        for rank, reference in sorted(slow_ranks(values, threshold).items()):
            if statistics.median(per_round[rank]) >= threshold:
                continue
            ranks.add(rank)
            rounds = len(per_round[rank])
            below = sum(ratio < threshold for ratio in per_round[rank])
            problems.append(
                f"{where(rank, identities)}: {label} {values[rank]:.3g} {unit}, "
                f"{values[rank] / reference:.2f}x its peers' median {reference:.3g} {unit} "
                f"(below {threshold:g}x" + (f"; in {below} of {rounds} rounds)" if rounds > 1 else ")")
            )
        summary.append(f"{label} {min(values.values()):.3g}-{max(values.values()):.3g} {unit}")
        for row in rows:
            warning = expected(key, row.get("device_name") or "", row[key]) if key in row else None
            if warning:
                warned.add(row["rank"])
                warnings.append(f"{where(row['rank'], identities)}: {warning}")
    for status, found, named in ((Status.FAIL, problems, ranks), (Status.WARN, warnings, warned)):
        if found:
            ordered = sorted(named)
            return Check(name, status, _listed(found), ordered, hosts_of(ordered, identities))
    peers = counted(len(rows), "rank")
    return Check(name, Status.PASS, f"{peers} within {threshold:g}x of their peers: {'; '.join(summary)}")


# Findings a check's detail spells out: two figures on every GPU of an 8-GPU node; the rest are
# counted (the check's ranks and hosts, and the devices table, name every one).
FINDINGS_SHOWN = 16


def _listed(findings: list[str]) -> str:
    shown = "; ".join(findings[:FINDINGS_SHOWN])
    more = len(findings) - FINDINGS_SHOWN
    return shown + (f"; and {more} more (the devices table in --json has every rank)" if more > 0 else "")


def judge_compute(
    rows: list[dict[str, Any]], identities: list[dict[str, Any]], threshold: float, kind: str
) -> Check:
    primary = DTYPES[kind][0]
    figures = [("gemm_tflops", f"{primary} products", "TFLOP/s")]
    if kind == "cuda":
        figures.append(("tf32_tflops", "tf32 products", "TFLOP/s"))
    check = _peer_check("compute", figures, rows, identities, threshold, expectations.compute_warning)
    throttled = [r for r in rows if r.get("throttle") and r["rank"] in check.ranks]
    if throttled:
        check.detail += "; throttled: " + ", ".join(f"rank {r['rank']} ({r['throttle']})" for r in throttled)
    return check


def judge_memory(
    rows: list[dict[str, Any]], identities: list[dict[str, Any]], threshold: float, kind: str
) -> Check:
    figures = [(COPY_FIGURES[copy][0], COPY_FIGURES[copy][1] + " copies", "GB/s") for copy in COPIES[kind]]
    return _peer_check("memory", figures, rows, identities, threshold, expectations.copy_warning)


def judge_results(data: list[dict[str, Any]], identities: list[dict[str, Any]]) -> Check:
    """The same seeded products, bitwise, across the ranks of one device model: the odd ones out named."""
    problems: list[str] = []
    culprits: set[int] = set()
    by_model: dict[str, list[int]] = {}
    for rank, d in enumerate(data):
        by_model.setdefault(d["model"], []).append(rank)
    for model, ranks in by_model.items():
        for dtype in data[ranks[0]]["checksums"]:
            digests = {r: data[r]["checksums"][dtype]["sha256"] for r in ranks}
            (top, top_count), *rest = Counter(digests.values()).most_common()
            if not rest:
                continue
            if rest[0][1] == top_count:
                culprits |= set(ranks)
                problems.append(
                    f"{dtype} products on {model} disagree and no majority says which is right "
                    f"({', '.join(f'rank {r}: {digests[r]}' for r in ranks)})"
                )
                continue
            odd = sorted(r for r in ranks if digests[r] != top)
            culprits |= set(odd)
            agree = next(r for r in ranks if digests[r] == top)
            sums = ", ".join(
                f"sum {data[r]['checksums'][dtype]['sum']:.6g} against "
                f"{data[agree]['checksums'][dtype]['sum']:.6g}"
                for r in odd[:4]
            )
            problems.append(
                f"{describe_ranks(odd, identities)}: {dtype} product differs from the {top_count} of "
                f"{len(ranks)} ranks of {model} that agree ({sums})"
            )
    if problems:
        ordered = sorted(culprits)
        return Check(
            "results agree", Status.FAIL, "; ".join(problems), ordered, hosts_of(ordered, identities)
        )
    if len(data) > 1 and all(len(ranks) == 1 for ranks in by_model.values()):
        return Check(
            "results agree", Status.SKIP, "every rank's device is a different model: nothing to compare"
        )
    models = counted(len(by_model), "device model")
    compared = sum(len(data[ranks[0]]["checksums"]) for ranks in by_model.values())
    return Check(
        "results agree",
        Status.PASS,
        f"the same seeded products bit for bit on every rank of each model ({models}, "
        f"{counted(compared, 'product')} compared)",
    )


def devices_table(rows: list[dict[str, Any]], kind: str, opts: DevicesOptions) -> Table:
    primary = DTYPES[kind][0]
    # The units in the title and short headers: the table fits 80 columns. On GPUs the host (the
    # rank map's) and the checksum (the results check names a rank that differs) are JSON only.
    if kind == "cuda":
        columns = {"rank": "rank", "device": "device", "gemm_tflops": primary, "tf32_tflops": "tf32"}
        columns |= {"h2d_gbps": "H2D", "d2h_gbps": "D2H", "copy_gbps": "D2D", "sm_clock_mhz": "SM MHz"}
        units = "TFLOP/s of products, GB/s of copies"
    else:
        columns = {"rank": "rank", "host": "host", "device": "device", "gemm_tflops": primary}
        columns |= {"copy_gbps": "memcpy", "cpu_wait_pct": "wait %", "checksum": "checksum"}
        units = "TFLOP/s of products, GB/s of memcpy, % of the time waiting for a core"
    columns["status"] = "status"
    title = f"Devices: {units} ({opts.size}x{opts.size} products, best of {opts.passes} passes)"
    return Table("devices", title, columns, rows)
