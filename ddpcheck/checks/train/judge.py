"""`ddpcheck train`'s verdicts: pure, over every rank's plain data (what check.measure returns).

Apart from the measuring so that the judgement alone can be tested, and mutated
(docs/testing.md), without ranks.
"""

from __future__ import annotations

import math
from collections import defaultdict
from typing import Any

from ddpcheck.checks.train import TrainOptions
from ddpcheck.rank.rankmap import judge_rank_map, rank_map_table
from ddpcheck.report.model import Check, Report, Status, Table
from ddpcheck.report.naming import all_of, counted, hosts_of, listed, where

# DDP's averaged gradient vs the mean of local gradients computed here: the same products summed
# in another order, so they agree to a few float32 ulps of the largest gradient element.
GRAD_RTOL = 1e-5
# DDP's weights vs one process on the global batch, as a fraction of how far training moved the
# weights. Different matmul shapes round differently, and Adam divides by sqrt(v): an element whose
# gradient is at rounding level can move by a good part of lr either way.
REF_RTOL = 0.1
# ...plus float32 rounding of the weights themselves (ulps of the largest weight).
REF_ULPS = 8
FLOAT32_EPS = 2.0**-23
SHOWN_RANK_COLUMNS = 4  # the loss table fits 80 columns; the JSON has every rank's loss


def judge(data: list[dict[str, Any]], identities: list[dict[str, Any]], opts: TrainOptions) -> Report:
    """Six verdicts over every rank's plain data; pure, so tests feed it synthetic ranks."""
    report = Report(command="train")
    nonfinite = first_nonfinite_loss(data)
    weights = weight_split(data)
    report.checks.append(judge_rank_map(identities))
    report.checks.append(judge_broadcast(data, identities))
    report.checks.append(judge_gradients(data, identities, nonfinite, weights))
    report.checks.append(judge_loss(data, identities, nonfinite))
    report.checks.append(judge_weights(data, identities, weights))
    upstream = _upstream_culprits(report.checks)
    report.checks.append(judge_big_batch(data, identities, opts, upstream))
    report.tables.append(loss_table(data, weights))
    report.tables.append(parity_table(data, identities, report.checks))
    report.tables.append(rank_map_table(identities))
    return report


def first_nonfinite_loss(data: list[dict[str, Any]]) -> tuple[int, list[int]] | None:
    """(step, ranks) where a rank's local loss was first NaN or infinite."""
    for step in range(len(data[0]["steps"])):
        ranks = [r for r, d in enumerate(data) if not math.isfinite(d["steps"][step]["loss"])]
        if ranks:
            return step, ranks
    return None


def split_groups(
    fingerprints: list[Any], closeness: list[float] | None = None
) -> tuple[list[int], list[int]] | None:
    """(agreeing ranks, odd ranks) when fingerprints disagree, else None.

    The largest group of equal fingerprints is taken as right. When groups
    tie (two ranks disagreeing), the group closer to the single-process
    reference (`closeness`, smaller is closer) is right; failing that, the
    one holding rank 0.
    """
    groups: dict[str, list[int]] = defaultdict(list)
    for rank, fp in enumerate(fingerprints):
        groups[repr(fp)].append(rank)
    if len(groups) == 1:
        return None

    def rank_of(members: list[int]) -> tuple[int, float, int]:
        near = max((_nan_last(closeness[r]) for r in members), default=0.0) if closeness else 0.0
        return (-len(members), near, 0 if 0 in members else 1)

    right, *others = sorted(groups.values(), key=rank_of)
    return right, sorted(r for g in others for r in g)


def _nan_last(value: float) -> float:
    return math.inf if math.isnan(value) else value


def weight_split(data: list[dict[str, Any]]) -> tuple[int, list[int], list[int]] | None:
    """(step, agreeing ranks, odd ranks) at the first step after which weights differ; -1: from the start."""
    if split := split_groups([d["init"]["after"]["fingerprint"] for d in data]):
        return -1, *split
    for step in range(len(data[0]["steps"])):
        fps = [d["steps"][step]["weight_fingerprint"] for d in data]
        closeness = [max(map(_nan_last, d["steps"][step]["reference_dev"])) for d in data]
        if split := split_groups(fps, closeness):
            return step, *split
    return None


def _named(ranks: list[int], identities: list[dict[str, Any]], limit: int = 8) -> str:
    text = ", ".join(where(r, identities) for r in ranks[:limit])
    return text + (f" and {len(ranks) - limit} more" if len(ranks) > limit else "")


def _fail(name: str, detail: str, ranks: list[int], identities: list[dict[str, Any]]) -> Check:
    return Check(name, Status.FAIL, detail, sorted(ranks), hosts_of(sorted(ranks), identities))


def _fmt(value: float) -> str:
    return f"{value:.3g}" if math.isfinite(value) else str(value)


def _worst(values: list[float], names: list[str]) -> tuple[float, str]:
    """The largest value (NaN counts as largest) and the tensor it belongs to."""
    index = max(range(len(values)), key=lambda i: _nan_last(values[i]))
    return values[index], names[index]


def judge_broadcast(data: list[dict[str, Any]], identities: list[dict[str, Any]]) -> Check:
    name = "initial broadcast"
    names = data[0]["params"]
    n = len(data)
    rank0 = data[0]["init"]["after"]["fingerprint"]
    wrong = [r for r, d in enumerate(data) if d["init"]["after"]["fingerprint"] != rank0]
    if wrong:
        evidence = "; ".join(
            _evidence(r, data[r]["init"]["after"]["diff_from_rank0"], names, identities) for r in wrong[:8]
        )
        return _fail(
            name,
            f"after DDP's construction {len(wrong)} of {n} ranks "
            f"{'does' if len(wrong) == 1 else 'do'} not hold rank 0's weights: "
            f"{evidence} (was the model changed after wrapping, or built differently there?)",
            wrong,
            identities,
        )
    differed = [r for r, d in enumerate(data) if d["init"]["before"]["fingerprint"] != rank0]
    spread = max(
        (max(map(_nan_last, data[r]["init"]["before"]["diff_from_rank0"])) for r in differed), default=0
    )
    if n == 1:
        return Check(name, Status.PASS, "one rank: nothing to broadcast; its weights are rank 0's")
    if not differed:
        return Check(
            name,
            Status.PASS,
            f"{all_of(n, 'rank')} hold rank 0's weights bit for bit (they already did before wrapping)",
        )
    others = "every other rank" if len(differed) == n - 1 else f"{len(differed)} of the {n - 1} other ranks"
    whose = "their" if 1 < len(differed) < n - 1 else "its"  # "every other rank ... its own"
    return Check(
        name,
        Status.PASS,
        f"{others} started from {whose} own initialisation (up to {_fmt(spread)} from rank 0's); "
        f"after DDP's construction {all_of(n, 'rank')} hold rank 0's weights bit for bit",
    )


def _evidence(rank: int, values: list[float], names: list[str], identities: list[dict[str, Any]]) -> str:
    value, tensor = _worst(values, names)
    return f"{where(rank, identities)}: max |difference| {_fmt(value)} in {tensor}"


def judge_gradients(
    data: list[dict[str, Any]],
    identities: list[dict[str, Any]],
    nonfinite: tuple[int, list[int]] | None,
    weights: tuple[int, list[int], list[int]] | None,
) -> Check:
    """Identical on every rank at every step, and the mean of the local gradients where that is defined."""
    name = "gradient synchronisation"
    names = data[0]["params"]
    steps = len(data[0]["steps"])
    for step in range(steps):
        split = split_groups(
            [d["steps"][step]["grad_fingerprint"] for d in data],
            [max(map(_nan_last, d["steps"][step]["grad_dev"])) for d in data],
        )
        if split:
            right, odd = split
            return _fail(name, _grad_split_detail(data, identities, step, right, odd, names), odd, identities)
    # The mean of local gradients is defined only while every rank has the same weights and a finite loss.
    last = steps - 1
    if weights is not None:
        last = min(last, weights[0])
    if nonfinite is not None:
        last = min(last, nonfinite[0] - 1)
    for step in range(last + 1):
        off = [r for r, d in enumerate(data) if not _grad_within(d["steps"][step])]
        if off:
            return _fail(name, _grad_mean_detail(data, identities, step, off, names), off, identities)
    detail = (
        f"after backward() the gradients are identical on {all_of(len(data), 'rank')} "
        f"at {all_of(steps, 'step')}"
    )
    if last >= 0:
        tol = f"{GRAD_RTOL:g} x max |mean gradient|"
        worst = max(_grad_ratio(d["steps"][s]) for d in data for s in range(last + 1))
        detail += (
            f", and equal the mean of every rank's local gradient, computed here without DDP, "
            f"at steps 0..{last} (largest difference {worst:.2g} of the tolerance {tol})"
        )
    if last < steps - 1:
        detail += _grad_skip_reason(last, nonfinite, weights, identities)
    return Check(name, Status.PASS, detail)


def _grad_within(step: dict[str, Any]) -> bool:
    return all(
        dev <= GRAD_RTOL * scale for dev, scale in zip(step["grad_dev"], step["grad_scale"], strict=True)
    )


def _grad_ratio(step: dict[str, Any]) -> float:
    return max(
        dev / (GRAD_RTOL * scale) if scale > 0 else 0.0
        for dev, scale in zip(step["grad_dev"], step["grad_scale"], strict=True)
    )


def _grad_split_detail(
    data: list[dict[str, Any]],
    identities: list[dict[str, Any]],
    step: int,
    right: list[int],
    odd: list[int],
    names: list[str],
) -> str:
    source = right[0] if 0 in odd else odd[0]  # rank 0 is the odd one: any agreeing rank holds the difference
    diffs = data[source]["steps"][step].get("grad_diff_from_rank0")
    evidence = ""
    if diffs:
        value, tensor = _worst(diffs, names)
        evidence = f"; max |difference| from rank 0 {_fmt(value)} in {tensor}.grad"
    return (
        f"after backward() at step {step}, {_named(odd, identities)} "
        f"{'holds' if len(odd) == 1 else 'hold'} gradients that differ from the other "
        f"{counted(len(right), 'rank')}{evidence}: the all-reduce did not reach "
        "every rank alike (a skipped hook, find_unused_parameters, or a bad link)"
    )


def _grad_mean_detail(
    data: list[dict[str, Any]], identities: list[dict[str, Any]], step: int, off: list[int], names: list[str]
) -> str:
    parts = []
    for r in off[:8]:
        record = data[r]["steps"][step]
        dev, tensor = _worst(record["grad_dev"], names)
        scale = record["grad_scale"][names.index(tensor)]
        parts.append(
            f"{where(r, identities)}: max |difference| {_fmt(dev)} in {tensor}.grad (scale {scale:.3g})"
        )
    everyone = len(off) == len(data)
    cause = (
        "every rank agrees but not with the mean: the reduction sums instead of averaging, or a rank's "
        "contribution is missing or scaled"
        if everyone
        else "these ranks' averaged gradients are wrong while others' are right"
    )
    return (
        f"at step {step} the synchronised gradient is not the mean of the ranks' local gradients "
        f"(tolerance {GRAD_RTOL:g} x scale): {'; '.join(parts)}; {cause}"
    )


def _grad_skip_reason(
    last: int,
    nonfinite: tuple[int, list[int]] | None,
    weights: tuple[int, list[int], list[int]] | None,
    identities: list[dict[str, Any]],
) -> str:
    if nonfinite is not None and (weights is None or nonfinite[0] - 1 <= weights[0]):
        return (
            f"; from step {last + 1} not compared with the mean: the loss of "
            f"{_named(nonfinite[1], identities)} was non-finite (see loss descent)"
        )
    assert weights is not None
    return (
        f"; from step {last + 1} not compared with the mean: the weights of "
        f"{_named(weights[2], identities)} already differed (see weight equality)"
    )


def judge_loss(
    data: list[dict[str, Any]], identities: list[dict[str, Any]], nonfinite: tuple[int, list[int]] | None
) -> Check:
    name = "loss descent"
    steps = len(data[0]["steps"])
    if nonfinite is not None:
        step, ranks = nonfinite
        values = ", ".join(f"{data[r]['steps'][step]['loss']}" for r in ranks[:8])
        detail = f"the loss turned non-finite ({values}) at step {step} on {_named(ranks, identities)}"
        later = [
            s for s in range(step + 1, steps) if all(not math.isfinite(d["steps"][s]["loss"]) for d in data)
        ]
        if later:
            detail += f"; from step {later[0]} on every rank: the gradient all-reduce spread it"
        detail += " (a bad batch, an overflow, or a faulty device on that rank)"
        return _fail(name, detail, ranks, identities)
    mean = [sum(d["steps"][s]["loss"] for d in data) / len(data) for s in range(steps)]
    if steps == 1:
        return Check(name, Status.PASS, f"finite on every rank ({mean[0]:.4f}); one step: nothing to compare")
    if mean[-1] < mean[0]:
        return Check(
            name,
            Status.PASS,
            f"finite on every rank at every step; the mean loss fell from {mean[0]:.4f} at step 0 "
            f"to {mean[-1]:.4f} at step {steps - 1}",
        )
    rose = [r for r, d in enumerate(data) if d["steps"][-1]["loss"] >= d["steps"][0]["loss"]]
    culprits = rose if len(rose) < len(data) else []
    return _fail(
        name,
        f"the mean loss did not fall: {mean[0]:.4f} at step 0, {mean[-1]:.4f} at step {steps - 1}"
        + (f" (it rose on {_named(rose, identities)})" if culprits else "")
        + "; suspect gradient synchronisation before the learning rate",
        culprits,
        identities,
    )


def judge_weights(
    data: list[dict[str, Any]],
    identities: list[dict[str, Any]],
    weights: tuple[int, list[int], list[int]] | None,
) -> Check:
    name = "weight equality"
    names = data[0]["params"]
    steps = len(data[0]["steps"])
    if weights is None:
        detail = (
            f"after {all_of(steps, 'step')}, {all_of(len(data), 'rank')} "
            f"{'holds' if len(data) == 1 else 'hold'} the same weights, bit for bit"
        )
        bad = [s for s in range(steps) if not all(d["steps"][s]["weight_finite"] for d in data)]
        if bad:
            detail += f" (non-finite from step {bad[0]}: see loss descent)"
        return Check(name, Status.PASS, detail)
    step, right, odd = weights
    if step < 0:
        return _fail(
            name,
            f"{_named(odd, identities)} did not start from rank 0's weights (see initial broadcast)",
            odd,
            identities,
        )
    source = right[0] if 0 in odd else odd[0]
    first = data[source]["steps"][step].get("weight_diff_from_rank0")
    last = data[source]["steps"][-1].get("weight_diff_from_rank0")
    evidence = ""
    if first:
        value, tensor = _worst(first, names)
        evidence = f": max |difference| from rank 0 {_fmt(value)} in {tensor} after step {step}"
        if last and step != steps - 1:
            evidence += f", {_fmt(_worst(last, names)[0])} after step {steps - 1}"
    verb = "differs" if len(odd) == 1 else "differ"
    others = (
        ("the other rank" if len(right) == 1 else f"the other {len(right)} ranks, which agree,")
        if 0 in odd
        else "rank 0"
    )
    subject = f"{_named(odd, identities)} {verb} from {others}"
    return _fail(
        name,
        f"{subject} from step {step} on{evidence} (a rank skipped a step, changed its weights outside "
        "the optimizer, or ran a different optimizer)",
        odd,
        identities,
    )


def reference_tolerance(data: dict[str, Any], index: int) -> float:
    """How far a tensor may be from the single-process reference: see REF_RTOL and REF_ULPS."""
    return REF_RTOL * data["update_scale"][index] + REF_ULPS * FLOAT32_EPS * data["weight_scale"][index]


def judge_big_batch(
    data: list[dict[str, Any]],
    identities: list[dict[str, Any]],
    opts: TrainOptions,
    upstream: Check | None = None,
) -> Check:
    """Each rank's final weights against its own single-process reference.

    When an earlier check already named culprits, this failure is their
    consequence (every rank's weights move once one rank's do): it names them.
    """
    name = "same as one big batch"
    names = data[0]["params"]
    steps = len(data[0]["steps"])
    rows = len(data) * opts.batch
    off: list[int] = []
    worst: list[tuple[float, str, float]] = []
    for r, d in enumerate(data):
        devs = d["steps"][-1]["reference_dev"]
        tols = [reference_tolerance(d, i) for i in range(len(names))]
        ratios = [
            _nan_last(dev) / tol if tol > 0 else _nan_last(dev) * math.inf
            for dev, tol in zip(devs, tols, strict=True)
        ]
        i = max(range(len(names)), key=lambda k: ratios[k])
        worst.append((devs[i], names[i], tols[i]))
        if not all(dev <= tol for dev, tol in zip(devs, tols, strict=True)):
            off.append(r)
    if not off:
        value, tensor, tol = max(worst, key=lambda w: _nan_last(w[0]) / w[2] if w[2] > 0 else 0.0)
        return Check(
            name,
            Status.PASS,
            f"after {counted(steps, 'step')} every rank's weights match one process trained "
            f"on the {rows}-row global batch: max |difference| {_fmt(value)} in {tensor} "
            f"(tolerance {tol:.2g}: {REF_RTOL:g} of the update, {REF_ULPS} ulps of the weights)",
        )
    evidence = "; ".join(
        f"{where(r, identities)}: max |difference| {_fmt(worst[r][0])} in {worst[r][1]} "
        f"(tolerance {worst[r][2]:.2g})"
        for r in off[:8]
    )
    culprits = list(upstream.ranks) if upstream else off
    cause = (
        f"a consequence of the {upstream.name} failure of {_named(upstream.ranks, identities)}"
        if upstream
        else "every rank agrees with the others but not with large-batch training: the gradients are "
        "not averaged over the global batch (a rank's data or scaling differs)"
        if len(off) == len(data)
        else "these ranks' training departs from large-batch training"
    )
    return _fail(
        name,
        f"after {steps} steps the DDP weights differ from one process trained on the {rows}-row global "
        f"batch: {evidence}; {cause}",
        culprits,
        identities,
    )


def _upstream_culprits(checks: list[Check]) -> Check | None:
    """The first failing training check that named ranks: later consequences name the same ranks."""
    return next((c for c in checks if c.status == Status.FAIL and c.ranks and c.name != "rank map"), None)


# ---------------------------------------------------------------- tables
def _value(x: float, digits: int = 6) -> float | str:
    """A float for JSON, or its name when not finite (JSON has no NaN)."""
    return round(x, digits) if math.isfinite(x) else str(x)


def loss_table(data: list[dict[str, Any]], weights: tuple[int, list[int], list[int]] | None) -> Table:
    """One row per step: the classic rank-0 printout, the mean, the reference, and each rank's loss."""
    n = len(data)
    rows = []
    for step in range(len(data[0]["steps"])):
        losses = [d["steps"][step]["loss"] for d in data]
        diverged = weights is not None and step >= weights[0]
        row: dict[str, Any] = {
            "step": step,
            "loss": _value(losses[0], 4),
            "mean_loss": _value(sum(losses) / n, 4),
            "reference_loss": _value(data[0]["steps"][step]["reference_loss"], 4),
            **{f"loss_rank{r}": _value(loss, 4) for r, loss in enumerate(losses)},
            "weights": (
                f"{listed(weights[2])} {'differ' if len(weights[2]) > 1 else 'differs'}"
                if diverged and weights
                else "equal"
            ),
            "max_grad_dev": _value(max(_nan_last(v) for d in data for v in d["steps"][step]["grad_dev"]), 9),
            "max_reference_dev": _value(
                max(_nan_last(v) for d in data for v in d["steps"][step]["reference_dev"]), 9
            ),
        }
        rows.append(row)
    # Rank 0's column is the classic printout (`loss` in the JSON, the same number).
    columns = {"step": "Step", "mean_loss": "mean", "reference_loss": "1 process"}
    shown = min(n, SHOWN_RANK_COLUMNS)
    columns.update({f"loss_rank{r}": f"rank {r}" for r in range(shown)})
    columns["weights"] = "weights"
    more = f"; ranks {shown} to {n - 1} in --json" if n > shown else ""
    title = (
        f"Training loss per step (each rank's local loss; 1 process = the global batch in one process{more})"
    )
    return Table("loss", title, columns, rows)


def parity_table(data: list[dict[str, Any]], identities: list[dict[str, Any]], checks: list[Check]) -> Table:
    """One row per rank: each check's verdict for that rank, and its distance from the reference."""
    verdicts = {c.name: c for c in checks}
    rows = []
    for r, d in enumerate(data):
        devs = d["steps"][-1]["reference_dev"]
        row: dict[str, Any] = {"rank": r, "host": identities[r]["host"]}
        for key, check in (
            ("broadcast", "initial broadcast"),
            ("gradients", "gradient synchronisation"),
            ("loss", "loss descent"),
            ("weights", "weight equality"),
            ("big_batch", "same as one big batch"),
        ):
            found = verdicts[check]
            row[key] = "FAIL" if found.status == Status.FAIL and r in found.ranks else "PASS"
        row["max_reference_dev"] = _value(max(_nan_last(v) for v in devs), 9)
        row["final_loss"] = _value(d["steps"][-1]["loss"], 4)
        rows.append(row)
    columns = {
        "rank": "rank",
        "host": "host",
        "broadcast": "broadcast",
        "gradients": "gradients",
        "loss": "loss",
        "weights": "weights",
        "big_batch": "1 process",
        "max_reference_dev": "max dev",
    }
    title = "Per rank: which checks name it (max dev = max |w - 1 process's w| after the last step)"
    return Table("parity", title, columns, rows)
