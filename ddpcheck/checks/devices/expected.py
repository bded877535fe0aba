"""What known GPUs should do: dense matrix-multiply peaks and pinned copy rates, for `ddpcheck devices`.

Each figure is a vendor peak or a public measurement (what an H200 measured is in
docs/devices.md), and a device is only warned about far below it (a clock-locked, throttled or
PCIe-downgraded GPU), never failed: its peers judge it first.
"""

from __future__ import annotations

# Warn when a product rate is below this fraction of the dense peak: tuned cuBLAS reaches
# 70-80% of it at 8192^3 on H100 and A100, so half means clocks or power are held down.
COMPUTE_FRACTION = 0.5
# Warn when a pinned copy is below this fraction of what the link does.
COPY_FRACTION = 0.6

# (fragment of the device name, bf16 dense TFLOP/s, tf32 dense TFLOP/s, pinned copy GB/s each way),
# most specific fragment first; docs/devices.md says where each figure comes from.
GPUS: tuple[tuple[str, float, float, float], ...] = (
    ("H200", 989.0, 494.0, 55.0),
    ("H100 PCIe", 756.0, 378.0, 55.0),
    ("H100", 989.0, 494.0, 55.0),
    ("A100", 312.0, 156.0, 25.0),
)


def _known(device_name: str) -> tuple[str, float, float, float] | None:
    name = device_name.upper()
    return next((entry for entry in GPUS if entry[0].upper() in name), None)


def compute_warning(key: str, device_name: str, value: float) -> str | None:
    known = _known(device_name)
    if known is None or key not in ("gemm_tflops", "tf32_tflops"):
        return None
    peak = known[1] if key == "gemm_tflops" else known[2]
    if value >= COMPUTE_FRACTION * peak:
        return None
    dtype = "bf16" if key == "gemm_tflops" else "tf32"
    return (
        f"{dtype} products at {value:.3g} TFLOP/s, {value / peak:.0%} of a {known[0]}'s dense peak "
        f"{peak:g} (expected above {COMPUTE_FRACTION:.0%}): clocks or power held down?"
    )


def copy_warning(key: str, device_name: str, value: float) -> str | None:
    known = _known(device_name)
    if known is None or key not in ("h2d_gbps", "d2h_gbps"):
        return None
    if value >= COPY_FRACTION * known[3]:
        return None
    return (
        f"{key[:3].upper()} copies at {value:.3g} GB/s, expected about {known[3]:g} on a {known[0]} "
        "host: a PCIe link below its generation or width?"
    )
