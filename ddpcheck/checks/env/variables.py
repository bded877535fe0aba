"""The environment variables that steer a distributed job: which are collected, and what they say.

`distributed_env()` picks them from an environment and redacts secret values as
it does; `in_launch()` and `under_slurm()` read the picked variables.
"""

from __future__ import annotations

from collections.abc import Mapping

from ddpcheck.checks.env.redact import redact_value

DIST_ENV_NAMES = (
    "MASTER_ADDR",
    "MASTER_PORT",
    "RANK",
    "WORLD_SIZE",
    "LOCAL_RANK",
    "LOCAL_WORLD_SIZE",
    "GROUP_RANK",
    "NODE_RANK",
    "CUDA_VISIBLE_DEVICES",
    "CUDA_DEVICE_ORDER",
    "NVIDIA_VISIBLE_DEVICES",
    "TORCH_DISTRIBUTED_DEBUG",
    "OMP_NUM_THREADS",
)
DIST_ENV_PREFIXES = ("SLURM_", "NCCL_", "TORCH_NCCL_", "GLOO_", "TORCHELASTIC_")


def distributed_env(environ: Mapping[str, str]) -> dict[str, str]:
    """The variables that steer a distributed job, sorted, secrets already redacted."""
    return {
        name: redact_value(name, value)
        for name, value in sorted(environ.items())
        if name in DIST_ENV_NAMES or name.startswith(DIST_ENV_PREFIXES)
    }


def in_launch(env: Mapping[str, str]) -> bool:
    """Already inside a launched job (torchrun/srun-wrapper set the rank variables)."""
    return "RANK" in env and "WORLD_SIZE" in env


def under_slurm(env: Mapping[str, str]) -> bool:
    return "SLURM_JOB_ID" in env or "SLURM_PROCID" in env
