"""Is this run slower than a known-good one? Like-for-like comparison of two JSON reports.

Pure and torch-free: the launcher loads and validates a baseline before anything is
launched (`load_report`, `check_setup`), and compares rank 0's report with it after
the run (`compare`); `ddpcheck compare` (report/compare.py) does the same between two saved
reports, with what else changed: the checks' verdicts and the environment.

Every figure a report holds (busbw per op and size, each link's bandwidth and
latency, each profile phase's time and TFLOP/s) is extracted with the parts of the
setup it depends on. Two reports whose setups differ are not refused outright: the
figures that do not depend on what differs are still compared (a link's bandwidth on
the same pair of hosts does not depend on the world size; per-size busbw does).
"""

from __future__ import annotations

import json
import statistics
from collections import Counter, defaultdict
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ddpcheck import __version__
from ddpcheck.commands import COMMANDS, family_of
from ddpcheck.errors import UsageError
from ddpcheck.report.figures import Figure, FigureKind
from ddpcheck.report.model import Check, Status, Table
from ddpcheck.report.naming import counted

if TYPE_CHECKING:
    from ddpcheck.report.compare import BaselineOptions

# Default --tolerance per device type: above the spread of healthy CPU reruns on shared cores,
# and below what a GPU fault costs (docs/compare.md, "The tolerance, and how it was chosen").
DEFAULT_TOLERANCE = {"cpu": 0.95, "cuda": 0.2}

# The setup's names, in the order a difference is told: the world and its ranks (what every report's
# figures may depend on), every command's declared options (Command.setup), then how many ranks shared a host.
SETUP_NAMES = {
    "world_size": "world size",
    "layout": "ranks per node",
    "backend": "backend",
    "device": "device type",
    "device_name": "device model",
    **{setup.key: setup.label for command in COMMANDS.values() for setup in command.setup},
    "ranks_per_host": "ranks per host",
}


@dataclass
class Comparison:
    check: Check
    table: Table


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
    shaped = isinstance(data, dict) and {"ddpcheck", "command", "tables", "world"} <= data.keys()
    if not shaped or not isinstance(data["tables"], dict) or not isinstance(data["world"], dict):
        raise UsageError(f"{flag} {path}: not a ddpcheck report (save one with --json)")
    if not compatible_version(str(data["ddpcheck"])):
        raise UsageError(
            f"{flag} {path}: written by ddpcheck {data['ddpcheck']}, incompatible with this "
            f"ddpcheck {__version__}: save a new one"
        )
    if data["command"] == "compare":
        raise UsageError(f"{flag} {path}: a `compare` report, not a run: give the run's own report")
    if family_of(data["command"]) is None:
        raise UsageError(f"{flag} {path}: a `{data['command']}` report holds no figures to compare")
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


def load_baseline(options: BaselineOptions) -> dict[str, Any] | None:
    """The --baseline report, validated before anything is launched (a bad file is exit 2).

    A run with faults planted by --inject measured the fault, not the hardware: no baseline.
    """
    if options.path is None:
        return None
    data = load_report(options.path, "--baseline")
    planted = injected_of(data)
    if planted:
        raise UsageError(
            f"--baseline {options.path}: that run had faults planted with --inject ({', '.join(planted)}), "
            "so its figures are no baseline: save one from a run without --inject"
        )
    return data


def injected_of(report: dict[str, Any]) -> list[str]:
    """The faults a saved report says were planted (`injected`; none in reports from before it)."""
    found = report.get("injected") or []
    return [str(f) for f in found] if isinstance(found, list) else [str(found)]


def default_tolerance(report: dict[str, Any]) -> float:
    return DEFAULT_TOLERANCE.get(report.get("world", {}).get("device"), DEFAULT_TOLERANCE["cpu"])


# ---------------------------------------------------------------- setups
def setup_of(report: dict[str, Any]) -> dict[str, Any]:
    """What a report's figures depend on (every key of SETUP_NAMES); None where the report does not say."""
    world, options = report.get("world", {}), report.get("options", {}) or {}
    command = COMMANDS.get(report.get("command", ""))
    ranks = report.get("ranks", []) or []
    nodes = Counter((ident.get("host"), ident.get("node")) for ident in ranks)
    per_host = Counter(ident.get("host") for ident in ranks)
    names = sorted({str(r.get("device_name")) for r in ranks if r.get("device_name")})
    found: dict[str, Any] = {
        "family": command.family if command else None,
        **dict.fromkeys(SETUP_NAMES),
        "world_size": world.get("size"),
        "layout": "+".join(map(str, nodes.values())) if nodes else None,
        "backend": world.get("backend"),
        "device": world.get("device"),
        "device_name": ", ".join(names) or None,
        "ranks_per_host": "+".join(map(str, sorted(set(per_host.values())))) if per_host else None,
    }
    for setup in command.setup if command else ():
        found[setup.key] = next((options[f] for f in setup.fields if f in options), None)
    return found


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
    if theirs["family"] != family_of(command):
        raise UsageError(
            f"--baseline {path}: a report of `{baseline['command']}`; "
            f"`{command}` has no figures in common with it"
        )
    diff = differences(theirs, planned)
    kinds = {figure.kind for figure in figures_of(baseline)}
    if kinds and not [kind for kind in kinds if not set(kind.needs) & diff.keys()]:
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
def figures_of(report: dict[str, Any]) -> list[Figure]:
    """The figures a report holds, as its command says (the command registry)."""
    command = COMMANDS.get(report.get("command", ""))
    return command.figures_of(report) if command else []


# ---------------------------------------------------------------- comparing
@dataclass
class Selection:
    """The figures two reports share, sorted by what can be compared and why the rest cannot."""

    pairs: list[tuple[Figure, Figure]]  # (then, now), in the baseline's order
    latency_bound: list[Figure]  # sizes left out: too small to measure bandwidth
    skipped: list[FigureKind]  # kinds that depend on what differs
    strict: bool  # CPU ranks: the rerun must be bandwidth-bound at a size too


def compare(
    old: dict[str, Any], new: dict[str, Any], tolerance: float, source: str = "the baseline"
) -> Comparison:
    """Compare `new` with the baseline `old`, like for like.

    Raises UsageError when the two share no comparable figure (another command, or every
    kind of figure depends on something that differs). A figure FAILs when it is worse than
    the baseline by more than `tolerance` (a fraction of the baseline's throughput: a time
    that grew by 1/(1 - tolerance) counts the same as a bandwidth that fell by tolerance).
    """
    diff = _same_family_differences(old, new, source)
    chosen = select(old, new, diff)
    if not chosen.pairs:
        why = describe_differences(diff) if diff else "no figure of one is in the other"
        raise UsageError(f"nothing to compare with {source}: {why}")
    rows = [score(then, now, tolerance) for then, now in chosen.pairs]
    table = _comparison_table(rows, source, tolerance)
    notes = _notes(chosen, diff, _found(chosen, rows, "better"))
    return Comparison(_verdict(chosen, rows, notes, source, tolerance), table)


def _same_family_differences(
    old: dict[str, Any], new: dict[str, Any], source: str
) -> dict[str, tuple[Any, Any]]:
    """How the two setups differ; a UsageError when the reports hold no figures in common."""
    old_setup, new_setup = setup_of(old), setup_of(new)
    if old_setup["family"] != new_setup["family"]:
        raise UsageError(
            f"{source} is a report of `{old.get('command')}` and this is `{new.get('command')}`: "
            "they have no figures in common"
        )
    return differences(old_setup, new_setup)


def select(old: dict[str, Any], new: dict[str, Any], diff: dict[str, tuple[Any, Any]]) -> Selection:
    """The figures both reports hold, of kinds that do not depend on what differs, bandwidth-bound."""
    then = {f.key: f for f in figures_of(old)}
    now = {f.key: f for f in figures_of(new)}
    common = [key for key in then if key in now]
    kinds = {then[key].kind for key in common}
    blocked = {kind for kind in kinds if set(kind.needs) & diff.keys()}
    usable = kinds - blocked
    usable -= {kind for kind in usable if kind.stands_in_for in {k.name for k in usable}}
    compared = [k for k in common if then[k].kind in usable]
    # The baseline says which sizes are bandwidth-bound; on CPU ranks, whose own curve wanders,
    # the rerun must agree. On GPUs a mid-size dip (an NCCL upgrade's new algorithm) is judged.
    strict = new.get("world", {}).get("device") == "cpu"

    def bound(key: tuple[Any, ...]) -> bool:
        return then[key].bandwidth_bound and (now[key].bandwidth_bound or not strict)

    return Selection(
        pairs=[(then[k], now[k]) for k in compared if bound(k)],
        latency_bound=[then[k] for k in compared if not bound(k)],
        skipped=sorted(blocked, key=lambda kind: kind.name),
        strict=strict,
    )


def speed_of(then: Figure, now: Figure) -> float:
    """How fast `now` is relative to `then`, whichever way is better: above 1 is faster."""
    return now.value / then.value if then.higher_is_better else then.value / now.value


def score(then: Figure, now: Figure, tolerance: float) -> dict[str, Any]:
    """One figure's row: then, now, the ratio, its speed relative to then, and its status."""
    speed = speed_of(then, now)
    # Better mirrors worse: a speed-up counts only beyond what noise could make (1 / (1 - tol)).
    status = "FAIL" if speed < 1 - tolerance else ("better" if speed * (1 - tolerance) > 1 else "PASS")
    return {
        "figure": then.label,
        "kind": then.kind.name,
        "unit": then.unit,
        "then": then.value,
        "now": now.value,
        "ratio": round(now.value / then.value, 3),
        "speed": round(speed, 3),
        "status": status,
    }


def _found(chosen: Selection, rows: list[dict[str, Any]], status: str) -> list[tuple[Figure, float]]:
    """The figures (now) whose row has this status, with their speed (unrounded)."""
    return [
        (now, speed_of(then, now))
        for (then, now), row in zip(chosen.pairs, rows, strict=True)
        if row["status"] == status
    ]


def _comparison_table(rows: list[dict[str, Any]], source: str, tolerance: float) -> Table:
    columns = {key: key for key in ("figure", "unit", "then", "now", "ratio", "status")}
    title = f"Compared with {source} (tolerance {tolerance:.0%}; ratio = now / then)"
    return Table("baseline", title, columns, rows)


def _notes(
    chosen: Selection, diff: dict[str, tuple[Any, Any]], better: list[tuple[Figure, float]]
) -> list[str]:
    """What was left out and why, and what got better."""
    notes = []
    reasons: dict[str, list[str]] = defaultdict(list)
    for kind in chosen.skipped:  # each with only the differences it depends on
        reasons[describe_differences({k: v for k, v in diff.items() if k in kind.needs})].append(kind.label)
    notes += [f"not compared: {', '.join(names)} ({why})" for why, names in reasons.items()]
    if diff and not chosen.skipped:
        notes.append(f"setups differ ({describe_differences(diff)}); compared what does not depend on it")
    if chosen.latency_bound:
        notes.append(
            f"{counted(len(chosen.latency_bound), 'latency-bound size')} left out "
            f"(below half the peak busbw{' in either run' if chosen.strict else ''})"
        )
    if better:
        notes.append(f"{counted(len(better), 'figure')} better than the baseline: {_named(better)}")
    return notes


def _verdict(
    chosen: Selection, rows: list[dict[str, Any]], notes: list[str], source: str, tolerance: float
) -> Check:
    """FAIL naming the worse figures and who measured them; else PASS with the median speed."""
    tail = "".join(f"; {n}" for n in notes)
    worse = _found(chosen, rows, "FAIL")
    if worse:
        # The figures that name a rank or host first, then the worst: what to look at comes first.
        worse.sort(key=lambda found: (not found[0].ranks and not found[0].hosts, found[1]))
        ranks = sorted({r for fig, _ in worse for r in fig.ranks})
        hosts = list(dict.fromkeys(h for fig, _ in worse for h in fig.hosts))
        detail = (
            f"{len(worse)} of {counted(len(rows), 'figure')} worse than {source} by more than "
            f"{tolerance:.0%}: {_named(worse)}{tail}"
        )
        return Check("baseline", Status.FAIL, detail, ranks, hosts)
    speeds = [r["speed"] for r in rows]
    middle = statistics.median(speeds)
    direction = (
        "faster than" if middle > 1 else "slower than, within tolerance of" if middle < 1 else "as fast as"
    )
    detail = (
        f"{counted(len(rows), 'figure')} compared, none worse than {source} by more than {tolerance:.0%}: "
        f"the median figure at {middle:.2f}x its speed ({direction} it; from {min(speeds):.2f}x "
        f"to {max(speeds):.2f}x){tail}"
    )
    return Check("baseline", Status.PASS, detail)


def _named(found: list[tuple[Figure, float]], limit: int = 6) -> str:
    text = ", ".join(f"{fig.label} {speed:.2f}x" for fig, speed in found[:limit])
    return text + (f" and {len(found) - limit} more" if len(found) > limit else "")


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
    pairs = [(n, then.get(n), (now.get(n) or {}).get("status")) for n in names]
    rows = [{"check": n, "then": was, "now": is_now, "changed": was != is_now} for n, was, is_now in pairs]
    table = Table("verdicts", "Checks: then and now", {"check": "check", "then": "then", "now": "now"}, rows)
    broke = [r for r in rows if r["then"] in ("PASS", "WARN") and r["now"] in ("FAIL", "ERROR")]
    fixed = [r for r in rows if r["then"] in ("FAIL", "ERROR") and r["now"] in ("PASS", "WARN")]
    ranks = sorted({r for row in broke for r in (now[row["check"]].get("ranks") or [])})
    hosts = list(dict.fromkeys(h for row in broke for h in (now[row["check"]].get("hosts") or [])))
    moved = (("passed then, fails now", broke), ("failed then, passes now", fixed))
    parts = [f"{what}: {', '.join(r['check'] for r in which)}" for what, which in moved if which]
    if not parts:
        changed = sum(r["changed"] for r in rows)
        detail = f"no check went from pass to fail or back ({counted(changed, 'other change')})"
        return Check("verdicts", Status.PASS, detail), table
    return Check("verdicts", Status.WARN if broke else Status.PASS, "; ".join(parts), ranks, hosts), table
