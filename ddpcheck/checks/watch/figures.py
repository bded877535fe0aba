"""The Prometheus metrics a watch report exports from its tables (the declaration's `metrics`)."""

from __future__ import annotations

from collections.abc import Iterator

from ddpcheck.failure.replicas import TABLE
from ddpcheck.report.metrics import Metric, Tables, number, rank_and_host


def watch_metrics(tables: Tables) -> Iterator[Metric]:
    """Each rank's replica: whether it agrees, the step it first differed at, the step of its first NaN."""
    rows = tables.get(TABLE)
    if not rows:
        return
    yield Metric(
        "ddpcheck_watch_replica_agrees",
        "1 when the rank's parameters and buffers matched its replicas' at every step fingerprinted, else 0.",
        ("rank", "host"),
        [(rank_and_host(r), 1.0 if r.get("agrees") else 0.0) for r in rows],
    )
    yield Metric(
        "ddpcheck_watch_replica_diverged_step",
        "The first optimizer step at which the rank's fingerprint differed from its replicas'.",
        ("rank", "host"),
        [(rank_and_host(r), number(r.get("diverged_at_step"))) for r in rows],
    )
    yield Metric(
        "ddpcheck_watch_replica_difference",
        "By how much the first differing tensor's sum differed from its replicas' (float64 sums).",
        ("rank", "host"),
        [(rank_and_host(r), number(r.get("difference"))) for r in rows],
    )
    yield Metric(
        "ddpcheck_watch_first_nan_step",
        "The step at which the rank's own gradients (before the all_reduce) first held a NaN or Inf.",
        ("rank", "host"),
        [(rank_and_host(r), number(r.get("first_nan_step"))) for r in rows],
    )
