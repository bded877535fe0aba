"""The collective sweep, and one small definition per collective (nccl-tests' common.cu, its op files)."""

from __future__ import annotations

from typing import Any

from ddpcheck.command import HARNESS_FAULTS, Setup

# What every command that sweeps declares alike (allreduce, collectives): its own --inject kind
# (faults.py strikes it), its chart, HTML, figures, judges and the known plateaus.
SWEEP_DECLARATION: dict[str, Any] = {
    "faults": {
        "corrupt": "rank R adds 1 to every 13th element it contributes (to each receiver)",
        **HARNESS_FAULTS,
    },
    "fault_actions": "ddpcheck.checks.sweep.faults:SweepFaults",
    "charts": {"bandwidth": "ddpcheck.checks.sweep.terminal:render_bandwidth_chart"},
    "html_charts": ("ddpcheck.checks.sweep.html",),
    "family": "bandwidth",
    "figures": "ddpcheck.checks.sweep.figures:bandwidth_figures",
    "setup": (Setup("dtype", "dtype", ("dtype",)),),
    "expected": "ddpcheck.checks.sweep.expected:judge_expected",
    "metrics": "ddpcheck.checks.sweep.figures:bandwidth_metrics",
    "judges": ("ddpcheck.checks.sweep.judge", "ddpcheck.checks.sweep.bisection"),
    "budgeted": True,
}
