"""A rank's fingerprint: what must match across nodes (torch, CUDA, NCCL, driver, GPU model, Python),
read cheaply by every rank, and the host's GPU facts it rests on. `env` reads the same facts."""

from __future__ import annotations

import platform
import re
from pathlib import Path
from typing import Any


def rank_fingerprint() -> dict[str, str | None]:
    """What must match across nodes, cheaply (no subprocess, no CUDA init): a few ms once torch is loaded.

    Call it after the rank bound its device: the GPU model is then this rank's
    own GPU; without CUDA initialised it is the host's models from /proc.
    """
    import torch

    return {
        "torch": torch.__version__,
        "cuda": torch.version.cuda or getattr(torch.version, "hip", None),
        "nccl": nccl_version(torch),
        "driver": nvidia_driver_version(),
        "gpu": _fingerprint_gpu(torch),
        "python": platform.python_version(),
    }


def _fingerprint_gpu(torch: Any) -> str | None:
    try:
        if torch.cuda.is_initialized():
            return torch.cuda.get_device_name(torch.cuda.current_device())
    except Exception:
        pass
    gpus = physical_gpus(Path("/proc/driver/nvidia"))
    models = sorted({g["model"] for g in gpus or [] if g.get("model")})
    return ", ".join(models) or None


def nccl_version(torch: Any) -> str | None:
    """NCCL's version as 'major.minor.patch', or None on builds without NCCL."""
    try:
        version = torch.cuda.nccl.version()
    except Exception:  # CPU builds lack the binding altogether
        return None
    return ".".join(map(str, version))  # a tuple since torch 1.10, (major, minor, patch[, suffix])


def nvidia_driver_version(nvidia_proc: Path = Path("/proc/driver/nvidia")) -> str | None:
    """The kernel driver's version from /proc (no subprocess: the fingerprint uses it)."""
    try:
        text = (nvidia_proc / "version").read_text()
    except OSError:
        return None
    for line in text.splitlines():
        if line.startswith("NVRM"):
            match = re.search(r"\b(\d{3,}\.\d+(?:\.\d+)?)\b", line)
            return match.group(1) if match else None
    return None


def physical_gpus(nvidia_proc: Path) -> list[dict[str, Any]] | None:
    """Every GPU the driver knows, whatever CUDA_VISIBLE_DEVICES hides; None: no driver files.

    /proc/driver/nvidia/gpus/<bus id>/information holds 'Model:', 'GPU UUID:', 'Bus Location:'.
    """
    root = nvidia_proc / "gpus"
    if not root.is_dir():
        return None
    gpus = []
    for entry in sorted(root.iterdir()):
        try:
            text = (entry / "information").read_text()
        except OSError:
            continue
        fields = dict(
            (key.strip(), value.strip())
            for key, _, value in (line.partition(":") for line in text.splitlines())
        )
        gpus.append(
            {
                "model": fields.get("Model"),
                "uuid": fields.get("GPU UUID"),
                "bus": fields.get("Bus Location", entry.name),
            }
        )
    return gpus
