"""The figures a baseline compares in `profile` reports: phases, TFLOP/s and each rank's compute."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from ddpcheck.report.figures import Figure, FigureKind, positive, rows_of
from ddpcheck.report.metrics import MILLI, TERA, Metric, Tables, number, rank_and_host

_COMPUTE_NEEDS = ("device", "device_name", "hidden", "batch", "ranks_per_host")
COMPUTE = FigureKind("compute", "compute phases and TFLOP/s", _COMPUTE_NEEDS)
COMM_PHASE = FigureKind(
    "comm phase",
    "phases with communication",
    (*_COMPUTE_NEEDS, "world_size", "layout", "backend", "bucket_cap_mb"),
)
RANK_COMPUTE = FigureKind("rank compute", "per-rank compute", (*_COMPUTE_NEEDS, "layout"))

# Profile phases compared: each rank's median over steady steps, then the median across
# ranks. exposed_comm is left out: it is a difference of two timings, near or below zero
# on a healthy run, so its ratio means nothing.
PROFILE_PHASES = ("forward", "backward", "backward_compute", "update", "step", "compute")
COMMUNICATING_PHASES = {"backward", "step"}


def profile_figures(report: dict[str, Any]) -> list[Figure]:
    """Each phase's steady-state time, the TFLOP/s figures, and each rank's compute time."""
    figures = []
    for row in rows_of(report, "summary"):
        phase, value = row.get("phase"), positive(row.get("median_ms"))
        if phase in PROFILE_PHASES and value is not None:
            slowest = row.get("slowest_rank")
            figures.append(
                Figure(
                    COMM_PHASE if phase in COMMUNICATING_PHASES else COMPUTE,
                    ("phase", phase),
                    f"{row.get('label') or phase} time (median rank)",
                    "ms",
                    value,
                    False,
                    ranks=(slowest,) if isinstance(slowest, int) else (),
                    hosts=(row["slowest_host"],) if row.get("slowest_host") else (),
                )
            )
    for row in rows_of(report, "figures")[:1]:
        for key in ("forward_tflops", "backward_tflops", "step_tflops"):
            value = positive(row.get(key))
            if value is not None:
                label = key.replace("_tflops", " TFLOP/s")  # "forward TFLOP/s"
                figures.append(Figure(COMPUTE, ("tflops", key), label, "TFLOP/s", value, True))
    for row in rows_of(report, "per_rank"):
        value, rank = positive(row.get("compute_ms")), row.get("rank")
        if value is not None and isinstance(rank, int):
            figures.append(
                Figure(
                    RANK_COMPUTE,
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


def profile_metrics(tables: Tables) -> Iterator[Metric]:
    """Each rank's step, compute and exposed communication; each phase; the model's rates, for --prom."""
    per_rank = tables.get("per_rank", [])
    for key, name, what in (
        ("step_ms", "ddpcheck_step_duration_seconds", "Each rank's median training step time."),
        ("compute_ms", "ddpcheck_compute_duration_seconds", "Each rank's median compute time per step."),
        (
            "exposed_comm_ms",
            "ddpcheck_exposed_communication_seconds",
            "Each rank's median communication per step that compute did not hide.",
        ),
    ):
        samples = [(rank_and_host(r), number(r.get(key), MILLI)) for r in per_rank]
        yield Metric(name, what, ("rank", "host"), samples)
    yield Metric(
        "ddpcheck_phase_duration_seconds",
        "Each phase of a step: the median rank's median over the steady steps.",
        ("phase",),
        [([str(r.get("phase"))], number(r.get("median_ms"), MILLI)) for r in tables.get("summary", [])],
    )
    yield Metric(
        "ddpcheck_model_flops_per_second",
        "The model's achieved rate per phase, in floating-point operations per second.",
        ("phase",),
        [
            ([phase], number(r.get(f"{phase}_tflops"), TERA))
            for r in tables.get("figures", [])[:1]
            for phase in ("forward", "backward", "step")
        ],
    )
