"""What `nvidia-smi -q -x` prints, read as the facts devices/health.py judges (NVML's, but NVLink).

The package reads a GPU through NVML only; the hand-written dumps in tests/fixtures/nvidia-smi/
(in that layout) reach the judge through this.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from typing import Any


def from_smi_xml(text: str) -> list[dict[str, Any]]:
    """Every GPU in what `nvidia-smi -q -x` printed, as the same facts NVML gives (NVLink is not there)."""
    root = ET.fromstring(text)
    gpus = []
    for index, gpu in enumerate(root.iter("gpu")):

        def get(path: str, node: ET.Element = gpu) -> str | None:
            found = node.find(path)
            value = found.text.strip() if found is not None and found.text else None
            return None if value in (None, "N/A", "Unknown Error", "[N/A]") else value

        def first(*paths: str) -> str | None:
            return next((v for v in map(get, paths) if v is not None), None)

        reasons_node = gpu.find("clocks_event_reasons")
        if reasons_node is None:
            reasons_node = gpu.find("clocks_throttle_reasons")
        throttle = []
        if reasons_node is not None:
            for child in reasons_node:
                if (child.text or "").strip() == "Active":
                    name = _smi_throttle_name(child.tag)
                    if name:
                        throttle.append(name)
        minor = get("minor_number")
        gpus.append(
            {
                "index": int(minor) if minor and minor.isdigit() else index,
                "uuid": get("uuid"),
                "pci_bus_id": gpu.get("id") or get("pci/pci_bus_id"),
                "name": get("product_name"),
                "ecc_enabled": _yes(get("ecc_mode/current_ecc"), "Enabled"),
                "ecc_volatile_uncorrected": _int(
                    first("ecc_errors/volatile/dram_uncorrectable", "ecc_errors/volatile/double_bit/total")
                ),
                "ecc_aggregate_uncorrected": _int(
                    first("ecc_errors/aggregate/dram_uncorrectable", "ecc_errors/aggregate/double_bit/total")
                ),
                "retired_pages_dbe": _int(get("retired_pages/double_bit_retirement/retired_count")),
                "retired_pending": _yes(
                    first("retired_pages/pending_retirement", "retired_pages/pending_blacklist")
                ),
                "remap_pending": _yes(get("remapped_rows/remapped_row_pending")),
                "remap_failure": _yes(get("remapped_rows/remapped_row_failure")),
                "pcie_gen": _int(get("pci/pci_gpu_link_info/pcie_gen/current_link_gen")),
                "pcie_gen_max": _int(get("pci/pci_gpu_link_info/pcie_gen/max_link_gen")),
                "pcie_width": _int(get("pci/pci_gpu_link_info/link_widths/current_link_width")),
                "pcie_width_max": _int(get("pci/pci_gpu_link_info/link_widths/max_link_width")),
                "nvlink_up": None,
                "nvlink_links": None,
                "persistence": _yes(get("persistence_mode"), "Enabled"),
                "mig": _yes(get("mig_mode/current_mig"), "Enabled"),
                "compute_mode": get("compute_mode"),
                "temperature_c": _number(get("temperature/gpu_temp")),
                "slowdown_c": _number(get("temperature/gpu_temp_slow_threshold")),
                "power_w": _number(first("gpu_power_readings/power_draw", "power_readings/power_draw")),
                "power_limit_w": _number(
                    first(
                        "gpu_power_readings/current_power_limit",
                        "power_readings/enforced_power_limit",
                        "power_readings/power_limit",
                    )
                ),
                "sm_clock_mhz": _number(get("clocks/sm_clock")),
                "sm_clock_max_mhz": _number(get("max_clocks/sm_clock")),
                "throttle": throttle,
                "xid": [],
            }
        )
    return gpus


_SMI_THROTTLE = {
    "sw_power_cap": "power cap",
    "hw_slowdown": "hardware slowdown",
    "sw_thermal_slowdown": "thermal (software)",
    "hw_thermal_slowdown": "thermal (hardware)",
    "hw_power_brake_slowdown": "power brake",
}


def _smi_throttle_name(tag: str) -> str | None:
    for suffix, name in _SMI_THROTTLE.items():
        if tag.endswith(suffix):
            return name
    return None


def _yes(value: str | None, word: str = "Yes") -> bool | None:
    return None if value is None else value.strip().lower() == word.lower()


def _int(value: str | None) -> int | None:
    if value is None:
        return None
    digits = re.match(r"\s*(\d+)", value)
    return int(digits.group(1)) if digits else None


def _number(value: str | None) -> float | None:
    if value is None:
        return None
    found = re.match(r"\s*([0-9.]+)", value)
    return float(found.group(1)) if found else None
