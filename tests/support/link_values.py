"""The links judge (checks/links/outliers.find_slow_links) over a dict, as the outlier tests write links."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from ddpcheck.checks.links.outliers import Findings, Pair, find_slow_links


def find_slow(
    values: Mapping[Pair, float], threshold: float, best: Mapping[Pair, float] | None = None
) -> Findings:
    """find_slow_links over a dict of (src, dst) -> value (and of each link's best measurement)."""
    pairs = sorted(values)
    src = np.array([p[0] for p in pairs], dtype=np.int64)
    dst = np.array([p[1] for p in pairs], dtype=np.int64)
    value = np.array([values[p] for p in pairs], dtype=np.float64)
    fastest = None if best is None else np.array([best[p] for p in pairs], dtype=np.float64)
    return find_slow_links(src, dst, value, threshold, fastest)
