"""A GPU's plain facts, read through NVML or from `nvidia-smi -q -x`: devices' health check,
preflight's, and watch's look at a slow rank's GPU read them the same way.

`read()` asks NVML through nvidia-ml-py, NVIDIA's own bindings, imported only here and only on GPU
ranks, and where they are missing `from_smi()` runs `nvidia-smi -q -x` (bounded) and
`from_smi_xml()` reads what it printed; `from_nvml()` reads one handle. Facts (None where the GPU
or the source does not say): index, uuid, pci_bus_id, name; ecc_enabled; ecc_volatile_uncorrected,
ecc_aggregate_uncorrected; retired_pending; remap_pending, remap_failure;
pcie_gen, pcie_gen_max, pcie_width, pcie_width_max; nvlink_up, nvlink_links; persistence, mig,
compute_mode; temperature_c, slowdown_c; power_w; sm_clock_mhz, sm_clock_max_mhz;
throttle (active reasons); xid (codes seen in the kernel log for this GPU); error (why nothing was
read). Judged in checks/devices/health.py.
"""

from __future__ import annotations

import contextlib
import re
import subprocess
import xml.etree.ElementTree as ET
from typing import TYPE_CHECKING, Any

from ddpcheck.failure.processes import output_within, started

if TYPE_CHECKING:
    import torch

INSTALL_HINT = "pip install nvidia-ml-py"

# NVML's clock event (throttle) reason bits, and what each means for a training job.
THROTTLE_BITS = {
    0x4: "power cap",
    0x8: "hardware slowdown",
    0x20: "thermal (software)",
    0x40: "thermal (hardware)",
    0x80: "power brake",
}
COMPUTE_MODES = {0: "Default", 1: "Exclusive_Thread", 2: "Prohibited", 3: "Exclusive_Process"}
NVLINK_MAX_LINKS = 18  # H100/H200 SXM; older GPUs answer NotSupported beyond their own count
SMI_TIMEOUT_S = 10.0  # nvidia-smi answers in seconds; a hung driver never does


def read(device: torch.device) -> dict[str, Any]:
    """This rank's GPU, through NVML, or from `nvidia-smi -q -x` where the bindings are missing;
    {"error": ...} when neither can be asked."""
    import torch

    props = torch.cuda.get_device_properties(device)
    bus = f"{getattr(props, 'pci_domain_id', 0):08x}:{props.pci_bus_id:02x}:{props.pci_device_id:02x}.0"
    try:
        import pynvml
    except ImportError:
        facts = from_smi(bus, "nvidia-smi")
    else:
        facts = _from_nvml_at(pynvml, bus)
    if "error" not in facts:
        facts["xid"] = xid_codes(kernel_log(), facts.get("pci_bus_id") or bus)
    return facts


def from_smi(bus: str, binary: str) -> dict[str, Any]:
    """The GPU at PCI `bus` as `binary -q -x` describes it (a hung driver is killed at SMI_TIMEOUT_S)."""
    missing = f"nvidia-ml-py is not installed ({INSTALL_HINT})"
    try:
        proc = started([binary, "-q", "-x"])
    except OSError as exc:
        return {"error": f"{missing}, and {binary} could not run: {exc.strerror}"}
    out = output_within(proc, SMI_TIMEOUT_S)
    if out is None or proc.returncode != 0:
        late = out is None
        why = f"did not answer within {SMI_TIMEOUT_S:g} s" if late else f"exited with {proc.returncode}"
        return {"error": f"{missing}, and {binary} -q -x {why}"}
    try:
        gpus = from_smi_xml(out)
    except ET.ParseError as exc:
        return {"error": f"{missing}, and {binary} -q -x printed no XML it could read: {exc}"}
    found = (gpu for gpu in gpus if _bus_address(str(gpu.get("pci_bus_id") or "")) == _bus_address(bus))
    return next(found, {"error": f"{missing}, and {binary} -q -x lists no GPU at {bus}"})


def _bus_address(bus: str) -> tuple[int, ...] | None:
    """'00000000:3B:00.0' and '0000:3b:00.0' as one address (domain, bus, device, function)."""
    try:
        return tuple(int(part, 16) for part in re.split(r"[:.]", bus.strip()))
    except ValueError:
        return None


def _from_nvml_at(pynvml: Any, bus: str) -> dict[str, Any]:
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as exc:
        return {"error": f"NVML did not start: {exc}"}
    try:
        return from_nvml(pynvml, pynvml.nvmlDeviceGetHandleByPciBusId(bus))
    except pynvml.NVMLError as exc:
        return {"error": f"NVML could not read GPU {bus}: {exc}"}
    finally:
        with contextlib.suppress(Exception):  # shutting NVML down after a failed read: nothing more to say
            pynvml.nvmlShutdown()


def from_nvml(nvml: Any, handle: Any) -> dict[str, Any]:
    """The facts NVML gives for one GPU; each reading that this GPU or driver lacks is None."""

    def ask(name: str, *args: Any) -> Any:
        try:
            return getattr(nvml, name)(handle, *args)
        except (nvml.NVMLError, AttributeError):
            return None

    ecc = ask("nvmlDeviceGetEccMode")
    remapped = ask("nvmlDeviceGetRemappedRows")  # (correctable, uncorrectable, pending, failure)
    mig = ask("nvmlDeviceGetMigMode")
    reasons = ask("nvmlDeviceGetCurrentClocksEventReasons")
    if reasons is None:
        reasons = ask("nvmlDeviceGetCurrentClocksThrottleReasons")
    states = (ask("nvmlDeviceGetNvLinkState", link) for link in range(NVLINK_MAX_LINKS))
    links = [state for state in states if state is not None]
    power = ask("nvmlDeviceGetPowerUsage")
    pci = ask("nvmlDeviceGetPciInfo")
    return {
        "index": ask("nvmlDeviceGetIndex"),
        "uuid": _text(ask("nvmlDeviceGetUUID")),
        "pci_bus_id": _text(getattr(pci, "busId", None)),
        "name": _text(ask("nvmlDeviceGetName")),
        "ecc_enabled": bool(ecc[0]) if ecc else None,
        "ecc_volatile_uncorrected": ask(
            "nvmlDeviceGetTotalEccErrors", nvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, nvml.NVML_VOLATILE_ECC
        ),
        "ecc_aggregate_uncorrected": ask(
            "nvmlDeviceGetTotalEccErrors", nvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, nvml.NVML_AGGREGATE_ECC
        ),
        "retired_pending": _flag(ask("nvmlDeviceGetRetiredPagesPendingStatus")),
        "remap_pending": bool(remapped[2]) if remapped else None,
        "remap_failure": bool(remapped[3]) if remapped else None,
        "pcie_gen": ask("nvmlDeviceGetCurrPcieLinkGeneration"),
        "pcie_gen_max": ask("nvmlDeviceGetGpuMaxPcieLinkGeneration")
        or ask("nvmlDeviceGetMaxPcieLinkGeneration"),
        "pcie_width": ask("nvmlDeviceGetCurrPcieLinkWidth"),
        "pcie_width_max": ask("nvmlDeviceGetMaxPcieLinkWidth"),
        "nvlink_up": sum(1 for state in links if state) if links else None,
        "nvlink_links": len(links) if links else None,
        "persistence": _flag(ask("nvmlDeviceGetPersistenceMode")),
        "mig": bool(mig[0]) if mig else None,
        "compute_mode": COMPUTE_MODES.get(ask("nvmlDeviceGetComputeMode")),
        "temperature_c": ask("nvmlDeviceGetTemperature", nvml.NVML_TEMPERATURE_GPU),
        "slowdown_c": ask("nvmlDeviceGetTemperatureThreshold", nvml.NVML_TEMPERATURE_THRESHOLD_SLOWDOWN),
        "power_w": power / 1000 if power is not None else None,
        "sm_clock_mhz": ask("nvmlDeviceGetClockInfo", nvml.NVML_CLOCK_SM),
        "sm_clock_max_mhz": ask("nvmlDeviceGetMaxClockInfo", nvml.NVML_CLOCK_SM),
        "throttle": [name for bit, name in THROTTLE_BITS.items() if reasons and reasons & bit],
    }


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

        reasons = gpu.findall("clocks_event_reasons/*") or gpu.findall("clocks_throttle_reasons/*")
        active = [reason.tag for reason in reasons if (reason.text or "").strip() == "Active"]
        throttle = [name for tag in active for suffix, name in _SMI_THROTTLE.items() if tag.endswith(suffix)]
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
                "sm_clock_mhz": _number(get("clocks/sm_clock")),
                "sm_clock_max_mhz": _number(get("max_clocks/sm_clock")),
                "throttle": throttle,
                "xid": [],
            }
        )
    return gpus


# nvidia-smi's clock event (throttle) reasons, by the end of their tag, as THROTTLE_BITS names them.
_SMI_THROTTLE = {
    "sw_power_cap": "power cap",
    "hw_slowdown": "hardware slowdown",
    "sw_thermal_slowdown": "thermal (software)",
    "hw_thermal_slowdown": "thermal (hardware)",
    "hw_power_brake_slowdown": "power brake",
}


def kernel_log() -> str:
    """The kernel's ring buffer, where the driver writes XID errors ('' where it cannot be read)."""
    try:
        done = subprocess.run(["dmesg"], capture_output=True, text=True, timeout=3, check=False)
    except (OSError, subprocess.SubprocessError):
        return ""
    return done.stdout if done.returncode == 0 else ""


_XID = re.compile(r"NVRM: Xid \(PCI:([0-9a-fA-F:.]+)\): (\d+)")


def xid_codes(log: str, pci_bus_id: str) -> list[int]:
    """The XID codes the driver logged for this GPU, in order ('NVRM: Xid (PCI:0000:3b:00): 79, ...')."""
    wanted = (_bus_address(pci_bus_id) or ())[:3]  # the log names domain, bus and device, no function
    return [
        int(code) for bus, code in _XID.findall(log) if wanted and (_bus_address(bus) or ())[:3] == wanted
    ]


def _text(value: Any) -> str | None:
    return value.decode() if isinstance(value, bytes) else value


def _flag(value: Any) -> bool | None:
    return None if value is None else bool(value)


def _yes(value: str | None, word: str = "Yes") -> bool | None:
    return None if value is None else value.strip().lower() == word.lower()


def _int(value: str | None) -> int | None:
    digits = re.match(r"\s*(\d+)", value or "")
    return int(digits.group(1)) if digits else None


def _number(value: str | None) -> float | None:
    found = re.match(r"\s*([0-9.]+)", value or "")
    return float(found.group(1)) if found else None
