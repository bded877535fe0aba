"""Pure: replicas that drifted apart and the first NaN or Inf, from the ranks' fingerprints (watch's agent).

A replica group is the ranks of one DistributedDataParallel module's process group (the world by
default), or, for an HSDP module (FSDP2 on a mesh with a replicated dimension, FSDP1's
HYBRID_SHARD), the ranks that hold the same shard of its parameters (kind "HSDP": each rank's local
shard is compared, no buffers).
After the same optimizer step they hold the same parameters and buffers, bit for bit: at
every step fingerprinted, the ranks whose exact fingerprint differs from the majority's are named,
with the first parameter that differs and by how much (the float64 sums). Two ranks that differ,
or no majority: every rank of the split is named, since nobody can say which is right.

The first NaN or Inf: each rank records the first step its own gradients (before the all_reduce)
were not finite; the ranks of the earliest step made it, those later only received it.
"""

from __future__ import annotations

import hashlib
import math
from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from ddpcheck.report.model import Check, Status, Table
from ddpcheck.report.naming import span

CHECK = "replicas agree"
NAN_CHECK = "first nan"
TABLE = "replicas"
DDP, HSDP = "DDP", "HSDP"


@dataclass(frozen=True)
class ModulePrint:
    """One DDP module's fingerprint on one rank at one step. `names`, `exact`, `sums` may be left out
    (None) where only the digest travelled (a team's far-off steps)."""

    module: str
    group: tuple[int, ...]
    digest: str
    names: tuple[str, ...] | None = None
    exact: tuple[int, ...] | None = None
    sums: tuple[float, ...] | None = None
    kind: str = DDP  # or HSDP: the group holds one shard, its local parameters only


@dataclass(frozen=True)
class Fingerprint:
    rank: int
    step: int
    modules: tuple[ModulePrint, ...]


@dataclass(frozen=True)
class NonFinite:
    rank: int
    step: int
    where: str  # "gradient"
    parameters: tuple[str, ...]
    count: int


@dataclass(frozen=True)
class Divergence:
    step: int
    module: str
    odd: tuple[int, ...]  # the ranks named
    majority: tuple[int, ...]  # their replicas that agree (empty when there is no majority)
    parameter: str | None  # the first that differs (None: only digests were kept of this step)
    odd_sum: float | None
    majority_sum: float | None
    kind: str = DDP

    @property
    def difference(self) -> float | None:
        if self.odd_sum is None or self.majority_sum is None:
            return None
        return self.odd_sum - self.majority_sum


@dataclass
class Judgement:
    ranks: list[int] = field(default_factory=list)  # every rank fingerprinted
    steps: list[int] = field(default_factory=list)  # the steps compared (two ranks or more)
    groups: set[tuple[int, ...]] = field(default_factory=set)  # the replica groups seen
    kinds: set[str] = field(default_factory=set)  # DDP, HSDP
    divergence: Divergence | None = None
    first_nan: list[NonFinite] = field(default_factory=list)  # the ranks that made it (earliest step)
    later_nan: list[NonFinite] = field(default_factory=list)  # ...and those that received it
    # No rank saw it in its gradients, but parameters turned non-finite: (the first such step, its ranks).
    unseen_nan: tuple[int, tuple[int, ...]] | None = None

    @property
    def nan_found(self) -> bool:
        return bool(self.first_nan) or self.unseen_nan is not None

    @property
    def agree(self) -> bool:
        return self.divergence is None


def digest_of(exact: Iterable[int]) -> str:
    return hashlib.sha1(",".join(str(int(v)) for v in exact).encode()).hexdigest()[:16]


def fingerprint_from_record(record: dict[str, Any]) -> Fingerprint:
    """A rank's file (fingerprints.py) or what a team's task shared of it (`to_record`)."""
    modules = []
    for found in record["modules"]:
        exact = tuple(int(v) for v in found["exact"]) if found.get("exact") is not None else None
        modules.append(
            ModulePrint(
                module=str(found.get("module", "")),
                group=tuple(int(r) for r in found.get("group") or ()),
                digest=found.get("digest") or digest_of(exact or ()),
                names=tuple(found["names"]) if found.get("names") is not None else None,
                exact=exact,
                sums=tuple(float(v) for v in found["sums"]) if found.get("sums") is not None else None,
                kind=str(found.get("kind") or DDP),
            )
        )
    return Fingerprint(int(record["rank"]), int(record["step"]), tuple(modules))


def to_record(print_: Fingerprint, whole: bool) -> dict[str, Any]:
    """The record again: whole, or the digests only (what a team's task shares of a far-off step)."""
    modules = []
    for module in print_.modules:
        found: dict[str, Any] = {
            "module": module.module,
            "group": list(module.group),
            "digest": module.digest,
            "kind": module.kind,
        }
        if whole and module.exact is not None:
            found.update(
                names=list(module.names or ()), exact=list(module.exact), sums=list(module.sums or ())
            )
        modules.append(found)
    return {"rank": print_.rank, "step": print_.step, "modules": modules}


def nonfinite_from_record(record: dict[str, Any]) -> NonFinite:
    return NonFinite(
        int(record["rank"]),
        int(record["step"]),
        str(record.get("where", "gradient")),
        tuple(record.get("parameters") or ()),
        int(record.get("count", 1)),
    )


def judge(prints: Iterable[Fingerprint], nonfinite: Iterable[NonFinite] = ()) -> Judgement:
    """The first step at which a replica group's ranks disagree, and who made the first NaN."""
    by_step: dict[int, dict[int, Fingerprint]] = defaultdict(dict)
    for found in prints:
        by_step[found.step][found.rank] = found
    judgement = Judgement(ranks=sorted({r for ranks in by_step.values() for r in ranks}))
    for step, at_step in sorted(by_step.items()):
        for found in at_step.values():
            judgement.groups.update(m.group for m in found.modules)
            judgement.kinds.update(m.kind for m in found.modules)
        if len(at_step) >= 2:
            judgement.steps.append(step)
        if judgement.divergence is None:
            judgement.divergence = _first_split(step, at_step, by_step)
    ordered = sorted(nonfinite, key=lambda n: (n.step, n.rank))
    if ordered:
        first = ordered[0].step
        judgement.first_nan = [n for n in ordered if n.step == first]
        judgement.later_nan = [n for n in ordered if n.step != first]
    else:
        judgement.unseen_nan = _first_nonfinite_sums(by_step)
    return judgement


def _first_nonfinite_sums(by_step: dict[int, dict[int, Fingerprint]]) -> tuple[int, tuple[int, ...]] | None:
    """The first step at which some rank's parameters or buffers sum to NaN or Inf, and those ranks."""
    for step, at_step in sorted(by_step.items()):
        ranks = tuple(sorted(rank for rank, found in at_step.items() if not _finite(found)))
        if ranks:
            return step, ranks
    return None


def _finite(found: Fingerprint) -> bool:
    return all(math.isfinite(v) for m in found.modules for v in m.sums or ())


def _first_split(
    step: int, at_step: dict[int, Fingerprint], by_step: dict[int, dict[int, Fingerprint]]
) -> Divergence | None:
    """The first module whose replicas disagree at `step`, by group (a module's index on every rank)."""
    groups: dict[tuple[int, tuple[int, ...]], dict[int, ModulePrint]] = defaultdict(dict)
    for rank, found in at_step.items():
        for index, module in enumerate(found.modules):
            groups[(index, module.group)][rank] = module
    for (index, _), members in sorted(groups.items()):
        if len(members) < 2:
            continue
        counts = Counter(m.digest for m in members.values())
        if len(counts) == 1:
            continue
        common, most = counts.most_common(1)[0]
        has_majority = most * 2 > len(members)
        odd = tuple(sorted(r for r, m in members.items() if not has_majority or m.digest != common))
        majority = tuple(sorted(r for r, m in members.items() if has_majority and m.digest == common))
        first = odd[0]
        reference = (
            majority[0] if majority else min(r for r in odd if members[r].digest != members[first].digest)
        )
        parameter, odd_sum, majority_sum = _first_parameter(index, first, reference, step, by_step)
        return Divergence(
            step, members[first].module, odd, majority, parameter, odd_sum, majority_sum, members[first].kind
        )
    return None


def _first_parameter(
    index: int, odd: int, reference: int, step: int, by_step: dict[int, dict[int, Fingerprint]]
) -> tuple[str | None, float | None, float | None]:
    """(name, the odd rank's sum, the reference rank's sum) of the first tensor that differs; where this
    step kept only digests, the first later step kept whole where the two still differ says it."""
    for at in sorted(s for s in by_step if s >= step):
        found = by_step[at]
        if odd not in found or reference not in found or len(found[odd].modules) <= index:
            continue
        mine, theirs = found[odd].modules[index], found[reference].modules[index]
        if mine.exact is None or theirs.exact is None or mine.names is None or mine.digest == theirs.digest:
            continue
        for position, (a, b) in enumerate(zip(mine.exact, theirs.exact, strict=False)):
            if a != b:
                return mine.names[position], _at(mine.sums, position), _at(theirs.sums, position)
    return None, None, None


def _at(values: tuple[float, ...] | None, position: int) -> float | None:
    return values[position] if values is not None and position < len(values) else None


# ------------------------------------------------------------ words: the line, the checks, the table
def line(judgement: Judgement) -> str | None:
    """The stderr line while the job runs (None: nothing to say)."""
    said = []
    if judgement.divergence is not None:
        said.append(f"ddpcheck watch: {_divergence_words(judgement.divergence)}")
    if judgement.nan_found:  # who received it later grows step by step: the line says the maker once
        said.append(f"ddpcheck watch: {_nan_words(judgement, with_receivers=False)}")
    return "\n".join(said) or None


def _divergence_words(found: Divergence) -> str:
    who = span(list(found.odd))
    shard = found.kind == HSDP  # the group is the ranks that hold the same shard
    if found.majority:
        verb = "differs" if len(found.odd) == 1 else "differ"
        whose = "its" if len(found.odd) == 1 else "their"
        replicas = f"the other replicas of {whose} shard" if shard else f"{whose} replicas"
        words = f"{who} {verb} from {replicas} ({span(list(found.majority))})"
    else:
        words = (
            f"{who}, the replicas of one shard, differ (no majority to say which is right)"
            if shard
            else f"the replicas {who} differ (no majority to say which is right)"
        )
    words += f" at step {found.step}"
    if found.parameter is not None:
        words += f": {found.parameter} first"
        if found.difference is not None:
            words += f", sum {found.odd_sum:.9g} against {found.majority_sum:.9g} (by {found.difference:.3g})"
    return words


def _nan_words(judgement: Judgement, with_receivers: bool = True) -> str:
    if not judgement.first_nan and judgement.unseen_nan is not None:
        step, ranks = judgement.unseen_nan
        return (
            f"the parameters of {span(list(ranks))} hold NaN/Inf at step {step}; the rank that made it "
            "was not seen (its NaN fell between the gradient check's samples, or came before its first step)"
        )
    first = judgement.first_nan  # the first's parameters said: the others made it at the same step
    more = f" and {first[0].count - 2} more" if first[0].count > 2 else ""
    where = f"{first[0].where} of {', '.join(first[0].parameters[:2]) or 'a parameter'}{more}"
    who = span([n.rank for n in first])
    words = f"{who} made the first NaN/Inf at step {first[0].step} ({where}), before the all_reduce"
    if judgement.later_nan and with_receivers:
        words += f"; {span(sorted({n.rank for n in judgement.later_nan}))} received it later"
    return words


def checks(judgement: Judgement, every: int) -> list[Check]:
    """The `replicas agree` check (PASS or FAIL), and the `first nan` check when a rank made one."""
    found = []
    if (divergence := judgement.divergence) is not None:
        found.append(Check(CHECK, Status.FAIL, _divergence_words(divergence), ranks=list(divergence.odd)))
    else:
        last = max(judgement.steps, default=0)
        what = "parameters and buffers" if judgement.kinds != {HSDP} else "parameter shards"
        within = f" within their {len(judgement.groups)} replica groups" if len(judgement.groups) > 1 else ""
        detail = (
            f"{len(judgement.ranks)} ranks' {what} identical{within} at "
            f"{len(judgement.steps)} steps (every {every}, up to step {last})"
        )
        found.append(Check(CHECK, Status.PASS, detail))
    if judgement.nan_found:
        found.append(
            Check(NAN_CHECK, Status.FAIL, _nan_words(judgement), ranks=[n.rank for n in judgement.first_nan])
        )
    return found


def table(judgement: Judgement, prints: Iterable[Fingerprint]) -> Table:
    """Per rank: the steps fingerprinted, whether it agreed, where it first differed, its first NaN."""
    steps: dict[int, list[int]] = defaultdict(list)
    for found in prints:
        steps[found.rank].append(found.step)
    divergence = judgement.divergence
    nans = {n.rank: n for n in [*judgement.first_nan, *judgement.later_nan]}
    rows = []
    for rank in sorted(set(steps) | set(nans)):
        named = divergence is not None and rank in divergence.odd
        nan = nans.get(rank)
        rows.append(
            {
                "rank": rank,
                "fingerprints": len(steps.get(rank, [])),
                "last_step": max(steps.get(rank, [0])),
                "agrees": not named,
                "diverged_at_step": divergence.step if named and divergence else None,
                "parameter": divergence.parameter if named and divergence else None,
                "difference": divergence.difference if named and divergence else None,
                "first_nan_step": nan.step if nan else None,
                "made_nan": bool(nan and nan in judgement.first_nan),
            }
        )
    return Table(
        TABLE,
        "Replicas (exact fingerprints after the optimizer's step)",
        {
            "rank": "rank",
            "fingerprints": "fingerprints",
            "last_step": "last step",
            "agrees": "agrees",
            "diverged_at_step": "differs from step",
            "parameter": "first parameter",
            "difference": "by",
            "first_nan_step": "first NaN step",
        },
        rows,
    )
