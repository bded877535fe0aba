"""The launch plan on machines of one GPU, several, or none: what runs, and the line that says so."""

from __future__ import annotations

import pytest

from ddpcheck.launcher.options import LaunchOptions
from ddpcheck.launcher.plan import plan_launch


@pytest.fixture
def gpus(monkeypatch: pytest.MonkeyPatch):
    import torch

    def visible(count: int) -> None:
        monkeypatch.setattr(torch.cuda, "is_available", lambda: count > 0)
        monkeypatch.setattr(torch.cuda, "device_count", lambda: count)

    return visible


def test_more_ranks_than_gpus_run_on_cpu_and_say_so(gpus) -> None:
    """On the one-GPU H200, `--nproc 2` passed over gloo without a word: now one line says why."""
    gpus(1)
    plan = plan_launch(LaunchOptions(nproc=2))
    assert (plan.nproc, plan.device, plan.backend) == (2, "cpu", "gloo")
    assert plan.notes == [
        "--nproc 2 is more ranks than this machine's 1 GPU (NCCL refuses two ranks on one GPU): "
        "running 2 CPU ranks over gloo"
    ]


def test_ranks_that_fit_the_gpus_or_an_asked_backend_say_nothing(gpus) -> None:
    gpus(2)
    plan = plan_launch(LaunchOptions(nproc=2))
    assert (plan.device, plan.notes) == ("cuda", [])
    gpus(1)
    assert plan_launch(LaunchOptions(nproc=2, backend="gloo")).notes == []


def test_no_gpu_says_the_default(gpus) -> None:
    gpus(0)
    assert plan_launch(LaunchOptions()).notes == ["no GPU visible: running 2 CPU ranks over gloo"]
    assert plan_launch(LaunchOptions(nproc=3)).notes == []
