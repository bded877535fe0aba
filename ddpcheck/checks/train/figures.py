"""The figures a `train` report exports to Prometheus: each rank's final loss (no baseline compares it)."""

from __future__ import annotations

from collections.abc import Iterator

from ddpcheck.report.metrics import Metric, Tables, number, rank_and_host


def train_metrics(tables: Tables) -> Iterator[Metric]:
    """Each rank's loss after the last step, for --prom."""
    rows = tables.get("parity")
    if not rows:
        return
    yield Metric(
        "ddpcheck_train_final_loss",
        "Each rank's loss after the last step of `ddpcheck train`.",
        ("rank", "host"),
        [(rank_and_host(r), number(r.get("final_loss"))) for r in rows],
    )
