"""Is this run slower than a known-good one? Like-for-like comparison of two JSON reports.

Pure and torch-free: the launcher loads and validates a baseline before anything is
launched (`load_report`, `check_setup`), and compares rank 0's report with it after
the run (`compare`); `ddpcheck compare` does the same between two saved reports.

Every figure a report holds (busbw per op and size, each link's bandwidth and
latency, each profile phase's time and TFLOP/s) is extracted with the parts of the
setup it depends on. Two reports whose setups differ are not refused outright: the
figures that do not depend on what differs are still compared (a link's bandwidth on
the same pair of hosts does not depend on the world size; per-size busbw does).
"""

from __future__ import annotations

import json
import math
import statistics
from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from ddpcheck import __version__
from ddpcheck.errors import UsageError
from ddpcheck.report.model import Check, Status, Table, counted

# Commands whose reports hold the same kinds of figures: a collectives report can be
# compared with an allreduce baseline (its all_reduce rows), never with a profile.
FAMILIES = {"allreduce": "bandwidth", "collectives": "bandwidth", "links": "links", "profile": "profile"}

# Default --tolerance per device type. CPU: from 20 healthy runs each of allreduce and of
# profile on this 2-core machine shared with four other engineers' tests, in two sessions
# (tests/perf/bench_baseline_spread.py, figures in the README): over all ordered pairs of
# runs, the worst figure kept 0.115x (allreduce, busy session) and 0.078x (profile) of the
# other run's speed, so a healthy rerun needs a tolerance above 0.92; 0.95 passes every pair
# and still fails a figure at under 0.05x: a link throttled by tc, a rank that sleeps. That
# catches only gross faults: shared cores make CPU timings swing 10x. GPU: not measured here
# (no GPU on this machine); NCCL's timings over many iterations on dedicated GPUs vary by a few
# percent, and what an operator hunts (a downed NVLink, a PCIe or TCP fallback) costs 2x or
# more, so 0.2 - measure your node type with the same bench and pass --tolerance.
DEFAULT_TOLERANCE = {"cpu": 0.95, "cuda": 0.2}

# A size is compared only when the baseline reached at least this fraction of its peak busbw
# there and at every larger size (on CPU ranks, the rerun too: see compare()). Smaller
# messages are latency-bound: their time is scheduling noise, and their busbw varies by 3x
# and more between healthy runs (README, "Baselines"). "Every larger size too": a
# latency-bound size that was lucky once in the baseline (a 128K at 0.13x in a healthy
# rerun, measured) must not become the figure a rerun is held to. The largest size always
# counts: it is the most bandwidth-bound size the sweep has.
BANDWIDTH_BOUND_FRACTION = 0.5

# Profile phases compared: each rank's median over steady steps, then the median across
# ranks. exposed_comm is left out: it is a difference of two timings, near or below zero
# on a healthy run, so its ratio means nothing.
PROFILE_PHASES = ("forward", "backward", "backward_compute", "update", "step", "compute")
COMMUNICATING_PHASES = {"backward", "step"}

# What each kind of figure depends on: figures whose keys differ between the runs are not compared.
_COMPUTE_NEEDS = ("device", "device_name", "hidden", "batch", "ranks_per_host")
NEEDS: dict[str, tuple[str, ...]] = {
    "busbw": ("world_size", "layout", "backend", "device", "device_name", "dtype"),
    "link": ("layout", "backend", "device", "device_name", "link_bytes"),
    "host link": ("backend", "device", "device_name", "link_bytes"),
    "compute": _COMPUTE_NEEDS,
    "comm phase": (*_COMPUTE_NEEDS, "world_size", "layout", "backend", "bucket_cap_mb"),
    "rank compute": (*_COMPUTE_NEEDS, "layout"),
}
SETUP_NAMES = {
    "world_size": "world size",
    "layout": "ranks per node",
    "backend": "backend",
    "device": "device type",
    "device_name": "device model",
    "dtype": "dtype",
    "link_bytes": "link message size",
    "hidden": "--hidden",
    "batch": "--batch",
    "ranks_per_host": "ranks per host",
    "bucket_cap_mb": "--bucket-cap-mb",
}
KIND_NAMES = {
    "busbw": "per-size busbw",
    "link": "per-link bandwidth and latency by rank pair",
    "host link": "per-link bandwidth and latency by host pair",
    "compute": "compute phases and TFLOP/s",
    "comm phase": "phases with communication",
    "rank compute": "per-rank compute",
}


@dataclass(frozen=True)
class Figure:
    """One number a report holds, with what names it and who to blame when it regresses."""

    kind: str  # a key of NEEDS
    key: tuple[Any, ...]  # matches the same figure in the other report
    label: str
    unit: str
    value: float
    higher_is_better: bool
    ranks: tuple[int, ...] = ()
    hosts: tuple[str, ...] = ()
    bandwidth_bound: bool = True  # False: a message too small to measure bandwidth (busbw only)


@dataclass
class Comparison:
    check: Check
    table: Table
    differences: dict[str, tuple[Any, Any]] = field(default_factory=dict)


# ---------------------------------------------------------------- loading
def load_report(path: str, flag: str = "--baseline") -> dict[str, Any]:
    """A saved JSON report, validated enough to compare; anything else is a one-line UsageError."""
    try:
        with open(path, encoding="utf-8") as handle:
            text = handle.read()
    except FileNotFoundError:
        raise UsageError(f"{flag} {path}: no such file") from None
    except IsADirectoryError:
        raise UsageError(f"{flag} {path}: is a directory") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"{flag} {path}: cannot read it ({exc})") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise UsageError(f"{flag} {path}: not JSON ({exc.msg} at line {exc.lineno})") from None
    if not isinstance(data, dict) or not {"ddpcheck", "command", "tables", "world"} <= data.keys():
        raise UsageError(f"{flag} {path}: not a ddpcheck report (save one with --json)")
    if not isinstance(data["tables"], dict) or not isinstance(data["world"], dict):
        raise UsageError(f"{flag} {path}: not a ddpcheck report (save one with --json)")
    if not compatible_version(str(data["ddpcheck"])):
        raise UsageError(
            f"{flag} {path}: written by ddpcheck {data['ddpcheck']}, incompatible with this "
            f"ddpcheck {__version__}: save a new one"
        )
    if data["command"] not in FAMILIES and data["command"] != "compare":
        raise UsageError(f"{flag} {path}: a `{data['command']}` report holds no figures to compare")
    if data["command"] == "compare":
        raise UsageError(f"{flag} {path}: a `compare` report, not a run: give the run's own report")
    return data


def compatible_version(version: str) -> bool:
    """Same major version; while 0.x, the same minor too (0.x may change the report's shape)."""
    try:
        theirs = [int(part) for part in version.split(".")[:2]]
        ours = [int(part) for part in __version__.split(".")[:2]]
    except ValueError:
        return False
    if len(theirs) < 2:
        return False
    return theirs[0] == ours[0] and (ours[0] > 0 or theirs[1] == ours[1])


def validate_tolerance(tolerance: float | None) -> None:
    if tolerance is not None and not 0 <= tolerance < 1:
        raise UsageError(f"--tolerance must be a fraction in [0, 1), got {tolerance:g}")


def default_tolerance(report: dict[str, Any]) -> float:
    return DEFAULT_TOLERANCE.get(report.get("world", {}).get("device"), DEFAULT_TOLERANCE["cpu"])


# ---------------------------------------------------------------- setups
def setup_of(report: dict[str, Any]) -> dict[str, Any]:
    """What a report's figures depend on; None where the report does not say."""
    world, options = report.get("world", {}), report.get("options", {}) or {}
    ranks = report.get("ranks", []) or []
    nodes: dict[tuple[Any, Any], int] = {}
    for ident in ranks:
        node = (ident.get("host"), ident.get("node"))
        nodes[node] = nodes.get(node, 0) + 1
    per_host: dict[Any, int] = defaultdict(int)
    for ident in ranks:
        per_host[ident.get("host")] += 1
    names = sorted({str(r.get("device_name")) for r in ranks if r.get("device_name")})
    return {
        "family": FAMILIES.get(report.get("command", "")),
        "world_size": world.get("size"),
        "layout": "+".join(map(str, nodes.values())) if nodes else None,
        "backend": world.get("backend"),
        "device": world.get("device"),
        "device_name": ", ".join(names) or None,
        "dtype": options.get("dtype"),
        "link_bytes": options.get("size_bytes", options.get("size")),
        "hidden": options.get("hidden"),
        "batch": options.get("batch"),
        "ranks_per_host": "+".join(map(str, sorted(set(per_host.values())))) if per_host else None,
        "bucket_cap_mb": options.get("bucket_cap_mb"),
    }


def differences(old: dict[str, Any], new: dict[str, Any]) -> dict[str, tuple[Any, Any]]:
    """Setup keys both sides know and that differ (unknown on either side is not a difference)."""
    return {
        key: (old[key], new[key])
        for key in SETUP_NAMES
        if old.get(key) is not None and new.get(key) is not None and old[key] != new[key]
    }


def describe_differences(diff: dict[str, tuple[Any, Any]]) -> str:
    return ", ".join(f"{SETUP_NAMES[k]} {a} -> {b}" for k, (a, b) in diff.items())


def check_setup(baseline: dict[str, Any], command: str, planned: dict[str, Any], path: str) -> None:
    """Before launching: refuse a baseline that nothing of the planned run could be compared with.

    `planned` holds the setup keys known before the launch (world size, backend, device,
    the command's options); the rest is judged after the run.
    """
    theirs = setup_of(baseline)
    if theirs["family"] != FAMILIES.get(command):
        raise UsageError(
            f"--baseline {path}: a report of `{baseline['command']}`; "
            f"`{command}` has no figures in common with it"
        )
    diff = differences(theirs, planned)
    kinds = {kind for kind in _kinds_in(baseline)}
    if kinds and not [kind for kind in kinds if not set(NEEDS[kind]) & diff.keys()]:
        raise UsageError(f"--baseline {path}: nothing comparable: {describe_differences(diff)}")


def planned_setup(command: str, world_size: int, backend: str, device: str, options: dict[str, Any]) -> dict:
    """The setup of a run about to start, in setup_of's terms (layout and models come after it)."""
    return setup_of(
        {
            "command": command,
            "world": {"size": world_size, "backend": backend, "device": device},
            "options": options,
        }
    )


# ---------------------------------------------------------------- figures
def _rows(report: dict[str, Any], table: str) -> list[dict[str, Any]]:
    rows = report.get("tables", {}).get(table)
    return [r for r in rows if isinstance(r, dict)] if isinstance(rows, list) else []


def _number(value: Any) -> float | None:
    """A finite positive figure, or None: zero busbw (one rank) or NaN has no ratio."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) and value > 0 else None


def _size_label(size: int) -> str:
    for unit, factor in (("G", 1024**3), ("M", 1024**2), ("K", 1024)):
        if size >= factor and size % factor == 0:
            return f"{size // factor}{unit}"
    return f"{size}B"


def bandwidth_figures(report: dict[str, Any]) -> list[Figure]:
    """busbw per op and size, at the sizes where the report is bandwidth-bound."""
    by_op: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for row in _rows(report, "bandwidth"):
        if not row.get("wrong") and _number(row.get("busbw_gbps")) and isinstance(row.get("size_bytes"), int):
            by_op[str(row.get("op") or "all_reduce")].append(row)
    figures = []
    for op, rows in by_op.items():
        peak = max(r["busbw_gbps"] for r in rows)
        rows = sorted(rows, key=lambda r: r["size_bytes"])
        # The first size from which every size reaches the fraction of the peak.
        first = len(rows) - 1
        while first > 0 and rows[first - 1]["busbw_gbps"] >= BANDWIDTH_BOUND_FRACTION * peak:
            first -= 1
        for index, row in enumerate(rows):
            figures.append(
                Figure(
                    kind="busbw",
                    key=("busbw", op, row["size_bytes"]),
                    label=f"{op} busbw at {_size_label(row['size_bytes'])}",
                    unit="GB/s",
                    value=float(row["busbw_gbps"]),
                    higher_is_better=True,
                    # Marked, not dropped: whether a size counts is the baseline's call (compare()).
                    bandwidth_bound=index >= first,
                )
            )
    return figures


def link_figures(report: dict[str, Any]) -> list[Figure]:
    """Each link's bandwidth and latency by rank pair, and the median per host pair."""
    figures = []
    by_hosts: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
    for row in _rows(report, "links"):
        src, dst, src_host, dst_host = (
            row.get("src"),
            row.get("dst"),
            row.get("src_host"),
            row.get("dst_host"),
        )
        name = f"link {src} -> {dst} ({src_host} -> {dst_host})"
        for metric, unit, better in (("gbps", "GB/s", True), ("latency_us", "us", False)):
            value = _number(row.get(metric))
            if value is not None:
                figures.append(
                    Figure(
                        "link",
                        ("link", metric, src, dst),
                        f"{name} {'bandwidth' if better else 'latency'}",
                        unit,
                        value,
                        better,
                        ranks=tuple(r for r in (src, dst) if isinstance(r, int)),
                        hosts=tuple(dict.fromkeys(h for h in (src_host, dst_host) if h)),
                    )
                )
        if src_host and dst_host:
            by_hosts[(src_host, dst_host)].append(row)
    for (src_host, dst_host), rows in by_hosts.items():
        for metric, unit, better in (("gbps", "GB/s", True), ("latency_us", "us", False)):
            values = [v for v in (_number(r.get(metric)) for r in rows) if v is not None]
            if values:
                figures.append(
                    Figure(
                        "host link",
                        ("host link", metric, src_host, dst_host),
                        f"links {src_host} -> {dst_host} {'bandwidth' if better else 'latency'} (median)",
                        unit,
                        statistics.median(values),
                        better,
                        hosts=tuple(dict.fromkeys((src_host, dst_host))),
                    )
                )
    return figures


def profile_figures(report: dict[str, Any]) -> list[Figure]:
    """Each phase's steady-state time, the TFLOP/s figures, and each rank's compute time."""
    figures = []
    for row in _rows(report, "summary"):
        phase, value = row.get("phase"), _number(row.get("median_ms"))
        if phase in PROFILE_PHASES and value is not None:
            slowest = row.get("slowest_rank")
            figures.append(
                Figure(
                    "comm phase" if phase in COMMUNICATING_PHASES else "compute",
                    ("phase", phase),
                    f"{row.get('label') or phase} time (median rank)",
                    "ms",
                    value,
                    False,
                    ranks=(slowest,) if isinstance(slowest, int) else (),
                    hosts=(row["slowest_host"],) if row.get("slowest_host") else (),
                )
            )
    for row in _rows(report, "figures")[:1]:
        for key in ("forward_tflops", "backward_tflops", "step_tflops"):
            value = _number(row.get(key))
            if value is not None:
                figures.append(
                    Figure(
                        "compute",
                        ("tflops", key),
                        key.replace("_tflops", "") + " TFLOP/s",
                        "TFLOP/s",
                        value,
                        True,
                    )
                )
    for row in _rows(report, "per_rank"):
        value, rank = _number(row.get("compute_ms")), row.get("rank")
        if value is not None and isinstance(rank, int):
            figures.append(
                Figure(
                    "rank compute",
                    ("rank compute", rank),
                    f"rank {rank} compute time" + (f" on {row['host']}" if row.get("host") else ""),
                    "ms",
                    value,
                    False,
                    ranks=(rank,),
                    hosts=(row["host"],) if row.get("host") else (),
                )
            )
    return figures


EXTRACTORS: dict[str, Callable[[dict[str, Any]], list[Figure]]] = {
    "bandwidth": bandwidth_figures,
    "links": link_figures,
    "profile": profile_figures,
}


def figures_of(report: dict[str, Any]) -> list[Figure]:
    extract = EXTRACTORS.get(FAMILIES.get(report.get("command", ""), ""))
    return extract(report) if extract else []


def _kinds_in(report: dict[str, Any]) -> set[str]:
    return {f.kind for f in figures_of(report)}


# ---------------------------------------------------------------- comparing
def compare(
    old: dict[str, Any], new: dict[str, Any], tolerance: float, source: str = "the baseline"
) -> Comparison:
    """Compare `new` with the baseline `old`, like for like.

    Raises UsageError when the two share no comparable figure (another command, or every
    kind of figure depends on something that differs). A figure FAILs when it is worse than
    the baseline by more than `tolerance` (a fraction of the baseline's throughput: a time
    that grew by 1/(1 - tolerance) counts the same as a bandwidth that fell by tolerance).
    """
    old_setup, new_setup = setup_of(old), setup_of(new)
    if old_setup["family"] != new_setup["family"]:
        raise UsageError(
            f"{source} is a report of `{old.get('command')}` and this is `{new.get('command')}`: "
            "they have no figures in common"
        )
    diff = differences(old_setup, new_setup)
    then = {f.key: f for f in figures_of(old)}
    now = {f.key: f for f in figures_of(new)}
    blocked = {kind for kind in NEEDS if set(NEEDS[kind]) & diff.keys()}
    common = [key for key in then if key in now]
    usable = {then[key].kind for key in common} - blocked
    skipped = sorted({then[key].kind for key in common} & blocked)
    if "link" in usable:
        # Host pairs stand in for rank pairs only when rank pairs cannot be matched (another layout).
        usable.discard("host link")
    compared = [k for k in common if then[k].kind in usable]
    # The baseline says which sizes are bandwidth-bound. On CPU ranks the rerun must agree:
    # there a healthy run's own curve wanders, and a size that fell below half its run's peak
    # measures the scheduler (measured: a healthy 256K at 0.016x). On GPUs a mid-size dip is
    # what an NCCL upgrade's new algorithm does, and is judged. The largest size always counts.
    strict = new.get("world", {}).get("device") == "cpu"

    def bound(key: tuple[Any, ...]) -> bool:
        return then[key].bandwidth_bound and (now[key].bandwidth_bound or not strict)

    pairs = [(then[k], now[k]) for k in compared if bound(k)]
    latency_bound = [then[k] for k in compared if not bound(k)]
    if not pairs:
        why = describe_differences(diff) if diff else "no figure of one is in the other"
        raise UsageError(f"nothing to compare with {source}: {why}")
    rows, worse, better = [], [], []
    for a, b in pairs:
        speed = b.value / a.value if a.higher_is_better else a.value / b.value
        # Better mirrors worse: a speed-up counts only beyond what noise could make (1 / (1 - tol)).
        status = "FAIL" if speed < 1 - tolerance else ("better" if speed * (1 - tolerance) > 1 else "PASS")
        rows.append(
            {
                "figure": a.label,
                "kind": a.kind,
                "unit": a.unit,
                "then": a.value,
                "now": b.value,
                "ratio": round(b.value / a.value, 3),
                "speed": round(speed, 3),
                "status": status,
            }
        )
        (worse if status == "FAIL" else better if status == "better" else []).append((b, speed))
    table = Table(
        "baseline",
        f"Compared with {source} (tolerance {tolerance:.0%}; ratio = now / then)",
        {
            "figure": "figure",
            "unit": "unit",
            "then": "then",
            "now": "now",
            "ratio": "ratio",
            "status": "status",
        },
        rows,
    )
    speeds = [r["speed"] for r in rows]
    notes = []
    reasons: dict[str, list[str]] = defaultdict(list)
    for kind in skipped:  # each with only the differences it depends on
        reasons[describe_differences({k: v for k, v in diff.items() if k in NEEDS[kind]})].append(
            KIND_NAMES[kind]
        )
    notes += [f"not compared: {', '.join(names)} ({why})" for why, names in reasons.items()]
    if diff and not skipped:
        notes.append(f"setups differ ({describe_differences(diff)}); compared what does not depend on it")
    if latency_bound:
        notes.append(
            f"{counted(len(latency_bound), 'latency-bound size')} left out "
            f"(below half the peak busbw{' in either run' if strict else ''})"
        )
    if better:
        notes.append(f"{counted(len(better), 'figure')} better than the baseline: {_named(better)}")
    tail = "".join(f"; {n}" for n in notes)
    if worse:
        # The figures that name a rank or host first, then the worst: what to look at comes first.
        worse.sort(key=lambda found: (not found[0].ranks and not found[0].hosts, found[1]))
        ranks = sorted({r for fig, _ in worse for r in fig.ranks})
        hosts = list(dict.fromkeys(h for fig, _ in worse for h in fig.hosts))
        detail = (
            f"{len(worse)} of {counted(len(rows), 'figure')} worse than {source} by more than "
            f"{tolerance:.0%}: {_named(worse)}{tail}"
        )
        return Comparison(Check("baseline", Status.FAIL, detail, ranks, hosts), table, diff)
    middle = statistics.median(speeds)
    direction = (
        "faster than" if middle > 1 else "slower than, within tolerance of" if middle < 1 else "as fast as"
    )
    detail = (
        f"{counted(len(rows), 'figure')} compared, none worse than {source} by more than {tolerance:.0%}: "
        f"the median figure at {middle:.2f}x its speed ({direction} it; from {min(speeds):.2f}x "
        f"to {max(speeds):.2f}x){tail}"
    )
    return Comparison(Check("baseline", Status.PASS, detail), table, diff)


def _named(found: Iterable[tuple[Figure, float]], limit: int = 6) -> str:
    items = list(found)
    text = ", ".join(f"{fig.label} {speed:.2f}x" for fig, speed in items[:limit])
    return text + (f" and {len(items) - limit} more" if len(items) > limit else "")


# ---------------------------------------------------------------- what else changed
FINGERPRINT_KEYS = ("torch", "cuda", "nccl", "driver", "gpu", "python")


def fingerprint_of(report: dict[str, Any]) -> dict[str, Any]:
    """torch, CUDA, NCCL from `world`; the driver and the rest from rank 0's fingerprint where saved."""
    world = report.get("world", {})
    found = {key: world.get(key) for key in ("torch", "cuda", "nccl")}
    saved = world.get("fingerprint")
    if isinstance(saved, dict):
        found.update({key: saved.get(key) for key in FINGERPRINT_KEYS if saved.get(key) is not None})
    found["ddpcheck"] = report.get("ddpcheck")
    return found


def environment_changes(old: dict[str, Any], new: dict[str, Any]) -> tuple[Check, Table]:
    then, now = fingerprint_of(old), fingerprint_of(new)
    rows = [
        {"what": key, "then": then.get(key), "now": now.get(key), "changed": then.get(key) != now.get(key)}
        for key in (*FINGERPRINT_KEYS, "ddpcheck")
        if then.get(key) is not None or now.get(key) is not None
    ]
    changed = [r for r in rows if r["changed"]]
    table = Table(
        "environment", "Environment: then and now", {"what": "", "then": "then", "now": "now"}, rows
    )
    if not changed:
        return Check("environment", Status.PASS, "same torch, CUDA, NCCL and driver versions"), table
    detail = ", ".join(f"{r['what']} {r['then'] or 'none'} -> {r['now'] or 'none'}" for r in changed)
    return Check("environment", Status.WARN, f"changed: {detail}"), table


def verdict_changes(old: dict[str, Any], new: dict[str, Any]) -> tuple[Check, Table]:
    """Each check's status then and now; a check that passed and now fails is named."""
    then = {c.get("name"): c.get("status") for c in old.get("checks", []) if isinstance(c, dict)}
    now = {c.get("name"): c for c in new.get("checks", []) if isinstance(c, dict)}
    names = list(dict.fromkeys([*then, *now]))
    rows = [
        {"check": n, "then": then.get(n), "now": (now.get(n) or {}).get("status"), "changed": False}
        for n in names
    ]
    for row in rows:
        row["changed"] = row["then"] != row["now"]
    table = Table("verdicts", "Checks: then and now", {"check": "check", "then": "then", "now": "now"}, rows)
    broke = [r for r in rows if r["then"] in ("PASS", "WARN") and r["now"] in ("FAIL", "ERROR")]
    fixed = [r for r in rows if r["then"] in ("FAIL", "ERROR") and r["now"] in ("PASS", "WARN")]
    ranks = sorted({r for row in broke for r in (now[row["check"]].get("ranks") or [])})
    hosts = list(dict.fromkeys(h for row in broke for h in (now[row["check"]].get("hosts") or [])))
    parts = []
    if broke:
        parts.append("passed then, fails now: " + ", ".join(r["check"] for r in broke))
    if fixed:
        parts.append("failed then, passes now: " + ", ".join(r["check"] for r in fixed))
    if not parts:
        changed = sum(r["changed"] for r in rows)
        detail = f"no check went from pass to fail or back ({counted(changed, 'other change')})"
        return Check("verdicts", Status.PASS, detail), table
    return Check("verdicts", Status.WARN if broke else Status.PASS, "; ".join(parts), ranks, hosts), table
