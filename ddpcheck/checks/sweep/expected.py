"""What the hardware should do: expected all_reduce plateaus of known GPU systems (`expected`).

Pure and torch-free: judged on the launcher side from the JSON report (the ranks' device
names, the world, the bandwidth table), when no --baseline is given. Unknown hardware
and CPU ranks have no expectation, and the check says so in one line.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ddpcheck.report.model import Check, Status

# WARN when the measured plateau is below this fraction of the expected one. Operators read
# "more than 20% below the reference" as something off (a stale NCCL_P2P_DISABLE, a downed
# NVLink lane): source in the table's comments.
WARN_FRACTION = 0.8
CHECK_NAME = "expected bandwidth"


@dataclass(frozen=True)
class Expectation:
    system: str
    gpus: int  # ranks on one node, one per GPU
    busbw_gbps: float  # all_reduce busbw at the plateau
    plateau_bytes: int  # the smallest message size that reaches it
    why: str


# Each entry: 8 GPUs of one node over NCCL, nccl-tests' all_reduce busbw at large sizes.
EXPECTATIONS = (
    # NVLink 4 is 450 GB/s per direction; NCCL's protocols leave ~370 GB/s of it, the busbw
    # of every collective over the ring (and of all_reduce with NCCL_ALGO=RING). With
    # NVLink SHARP (NVLS, the default from NCCL 2.17 on NVSwitch systems) all_reduce reaches
    # ~480 GB/s, at sizes above 256M. Source: S. Jeaugey (NVIDIA), github.com/NVIDIA/nccl-tests
    # issue 212; 460-480 GB/s in the Alaya NeW nccl-tests guide (docs.alayanew.com, 2026-05-06).
    # The expectation is the ring figure, so that a node without NVLS is not flagged.
    Expectation("H100 SXM", 8, 370.0, 1024**3, "NVLink 4 through NVSwitch, 450 GB/s per direction"),
    # H200 SXM: the same NVLink 4 and NVSwitch as H100 SXM (HGX H200), the same figures.
    Expectation("H200 SXM", 8, 370.0, 1024**3, "NVLink 4 through NVSwitch, 450 GB/s per direction"),
    # NVLink 3 is 300 GB/s per direction; nccl-tests all_reduce reaches 230-250 GB/s on
    # 8x A100 SXM4. Source: the Alaya NeW nccl-tests guide (docs.alayanew.com, 2026-05-06);
    # 208 GB/s over a subset of links in github.com/NVIDIA/nccl-tests issue 178.
    Expectation("A100 SXM", 8, 230.0, 1024**3, "NVLink 3 through NVSwitch, 300 GB/s per direction"),
    # 8x H100 PCIe without NVLink bridges: 35-45 GB/s, limited by PCIe Gen5 and the host's
    # memory (S. Jeaugey in github.com/NVIDIA/nccl issue 1639: on PCIe systems the CPU and
    # memory set the figure). Source: the Alaya NeW nccl-tests guide (docs.alayanew.com).
    Expectation("H100 PCIe", 8, 35.0, 1024**3, "PCIe Gen5 only, no NVLink: the host's bandwidth"),
)


def _model_of(device_name: str) -> str | None:
    """torch's device name -> the system of an entry ('NVIDIA H100 80GB HBM3' is the SXM part)."""
    name = device_name.upper()
    if "H100" in name:
        return "H100 PCIe" if "PCIE" in name else ("H100 SXM" if "NVL" not in name else None)
    if "H200" in name:
        return None if "NVL" in name else "H200 SXM"  # H200 NVL is a PCIe card with bridges
    if "A100" in name and "SXM" in name:
        return "A100 SXM"
    return None


def judge_expected(report: dict[str, Any]) -> Check:
    """The all_reduce plateau against the table; SKIP (one line) where nothing is expected."""
    world = report.get("world", {})
    ranks = report.get("ranks", []) or []
    if world.get("device") != "cuda":
        return Check(CHECK_NAME, Status.SKIP, f"no expectation for {world.get('device') or 'these'} ranks")
    names = sorted({str(r.get("device_name")) for r in ranks})
    if len(names) != 1:
        return Check(CHECK_NAME, Status.SKIP, f"no expectation for mixed GPUs ({', '.join(names)})")
    system = _model_of(names[0])
    entry = next((e for e in EXPECTATIONS if e.system == system), None)
    if entry is None:
        return Check(CHECK_NAME, Status.SKIP, f"no expectation for {names[0]}: not in ddpcheck's table")
    setup = f"{world.get('size')} ranks on {world.get('nodes')} node(s) over {world.get('backend')}"
    if world.get("backend") != "nccl" or world.get("size") != entry.gpus or world.get("nodes") != 1:
        return Check(
            CHECK_NAME,
            Status.SKIP,
            f"no expectation for {setup}: the {entry.system} figure is for "
            f"{entry.gpus} GPUs of one node over nccl",
        )
    rows = [
        r
        for r in report.get("tables", {}).get("bandwidth", [])
        if (r.get("op") or "all_reduce") == "all_reduce" and not r.get("wrong")
    ]
    if not rows:
        return Check(CHECK_NAME, Status.SKIP, "no all_reduce busbw in this report to compare")
    largest = max(r["size_bytes"] for r in rows)
    if largest < entry.plateau_bytes:
        return Check(
            CHECK_NAME,
            Status.SKIP,
            f"the sweep stops at {largest:,} bytes, below the {entry.plateau_bytes:,} where "
            f"{entry.gpus}x {entry.system} reaches its plateau: no expectation judged",
        )
    plateau = max(r["busbw_gbps"] for r in rows if r["size_bytes"] >= entry.plateau_bytes)
    expected = (
        f"{entry.gpus}x {entry.system} should reach about {entry.busbw_gbps:g} GB/s all_reduce busbw "
        f"({entry.why})"
    )
    if plateau < WARN_FRACTION * entry.busbw_gbps:
        return Check(
            CHECK_NAME,
            Status.WARN,
            f"plateau busbw {plateau:g} GB/s is {plateau / entry.busbw_gbps:.0%} of the expected: "
            f"{expected}; check NVLink state (nvidia-smi nvlink -s), NCCL_P2P_DISABLE / "
            "NCCL_NVLS_ENABLE and the topology",
        )
    return Check(CHECK_NAME, Status.PASS, f"plateau busbw {plateau:g} GB/s: {expected}")
