"""Probing this host: collect plain, JSON-able facts in one process, for `ddpcheck env` to judge.

`probe()` spawns no rank; its only external effects are bounded: `nvidia-smi`
under a timeout, and the MASTER_ADDR/MASTER_PORT probe of `master.py` (a DNS
lookup under a timeout, then a bind test on this host or one TCP connect toward
the configured master). It never raises for a missing tool or file.

Torch is imported inside functions only: `ddpcheck --help` must not pay for it.
"""

from __future__ import annotations

import os
import platform
import re
import resource
import shutil
import socket
import sys
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ddpcheck.checks.env.bounded import Background, reap, spawn
from ddpcheck.checks.env.master import PROBE_MASTER_S, configured, is_loopback, probe_master
from ddpcheck.checks.env.variables import distributed_env
from ddpcheck.rank.fingerprint import nccl_version, nvidia_driver_version, physical_gpus
from ddpcheck.report.units import GIB, UNLIMITED


@dataclass(frozen=True)
class ProbeConfig:
    """Where the probe looks, and its bounds; every path is injectable for tests."""

    shm_path: str = "/dev/shm"
    ib_root: str = "/sys/class/infiniband"
    nvidia_proc: str = "/proc/driver/nvidia"
    nvidia_smi: str | None = "nvidia-smi"  # None: never run it
    smi_timeout_s: float = 2.0


def probe(config: ProbeConfig | None = None) -> dict[str, Any]:
    """Collect every fact `ddpcheck env` judges. Never raises for a missing tool or file.

    The slow, independent parts overlap: nvidia-smi runs as a subprocess and the
    MASTER_ADDR/MASTER_PORT probe in a thread while torch imports here.
    """
    config = config or ProbeConfig()
    problems: list[str] = []
    env = distributed_env(os.environ)
    smi_bin = shutil.which(config.nvidia_smi) if config.nvidia_smi else None
    nvidia_proc = Path(config.nvidia_proc)
    topo = spawn(smi_bin, ["topo", "-m"])
    # Without the driver's /proc files, nvidia-smi is the other way to list physical GPUs.
    smi_list = None if (nvidia_proc / "gpus").is_dir() else spawn(smi_bin, ["-L"])
    interfaces = network_interfaces()
    is_local = locality(interfaces)
    master_probe = Background(lambda: probe_master(os.environ, is_local))
    torch_info = torch_facts(problems)
    listed = reap(smi_list, config.smi_timeout_s, "nvidia-smi -L", problems)  # reap what was started
    physical = physical_gpus(nvidia_proc)
    if physical is None:
        physical = parse_nvidia_smi_list(listed)
    topology_text = reap(topo, config.smi_timeout_s, "nvidia-smi topo -m", problems)
    if smi_bin is None and physical:
        problems.append("nvidia-smi not found: no GPU topology")
    late = {"error": "the probe did not finish in time"}
    # Whatever became of the probe, the judge still sees what the user configured.
    master = {**configured(os.environ), **(master_probe.result(PROBE_MASTER_S + 1.0) or late)}
    return {
        "python": {
            "version": platform.python_version(),
            "executable": sys.executable,
        },
        "torch": torch_info,
        "driver": nvidia_driver_version(nvidia_proc),
        "physical_gpus": physical,
        "topology": parse_topology(topology_text) if topology_text else [],
        "host": host_facts(config),
        "interfaces": interfaces,
        "infiniband": infiniband_ports(Path(config.ib_root)),
        "env": env,
        "master": master,
        "problems": problems,
    }


def torch_facts(problems: list[str]) -> dict[str, Any]:
    """Versions, backends and visible GPUs, as torch sees them; warnings it raises are kept."""
    import torch

    facts: dict[str, Any] = {
        "version": torch.__version__,
        "git_version": getattr(torch.version, "git_version", None),
        "debug": bool(getattr(torch.version, "debug", False)),
        "cuda_build": torch.version.cuda,
        "hip_build": getattr(torch.version, "hip", None),
        "cudnn": None,
        "nccl": nccl_version(torch),
        "driver_cuda": None,
        "backends": _backends(),
        "gpus": [],
    }
    # torch reports a driver too old for its CUDA, or a GPU it was not built for,
    # only as warnings: they are the diagnosis, so keep them.
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            if torch.cuda.is_available():
                facts["gpus"] = _torch_gpus(torch)
            if torch.backends.cudnn.is_available():
                facts["cudnn"] = torch.backends.cudnn.version()
            if facts["cuda_build"] or facts["hip_build"]:
                facts["driver_cuda"] = driver_cuda_version(torch)
        except Exception as exc:  # a broken CUDA install must not crash the probe
            problems.append(f"torch.cuda: {type(exc).__name__}: {exc}")
    facts["cuda_warnings"] = [" ".join(str(w.message).split()) for w in caught]
    return facts


def _torch_gpus(torch: Any) -> list[dict[str, Any]]:
    gpus = []
    for index in range(torch.cuda.device_count()):
        props = torch.cuda.get_device_properties(index)
        uuid = str(getattr(props, "uuid", "") or "")
        gpus.append(
            {
                "index": index,
                "name": props.name,
                "memory_gib": round(props.total_memory / GIB, 1),
                "capability": f"{props.major}.{props.minor}",
                "multiprocessors": props.multi_processor_count,
                # torch prints the bare UUID; nvidia-smi and CUDA_VISIBLE_DEVICES use GPU-...
                "uuid": (uuid if uuid.startswith("GPU-") else f"GPU-{uuid}") if uuid else None,
            }
        )
    return gpus


def _backends() -> dict[str, bool]:
    try:
        import torch.distributed as dist
    except Exception:
        return {}
    if not dist.is_available():
        return {"distributed": False}
    found = {"distributed": True}
    for name in ("nccl", "gloo", "mpi", "ucc"):
        check = getattr(dist, f"is_{name}_available", None)
        found[name] = bool(check()) if check else False
    return found


def driver_cuda_version(torch: Any, libcuda: str = "libcuda.so.1") -> str | None:
    """The highest CUDA the installed driver supports ('13.0', what nvidia-smi shows): torch's binding
    where a release has it, else the driver's own cuDriverGetVersion (torch 2.11 has no binding)."""
    get_driver = getattr(torch._C, "_cuda_getDriverVersion", None)
    if get_driver is not None:
        return _cuda_version_text(get_driver())
    try:
        import ctypes

        version = ctypes.c_int(0)
        if ctypes.CDLL(libcuda).cuDriverGetVersion(ctypes.byref(version)) != 0:
            return None
    except (OSError, AttributeError):  # no driver library: a CPU host
        return None
    return _cuda_version_text(version.value)


def _cuda_version_text(value: int) -> str | None:
    """CUDA's integer version (12040) as '12.4'."""
    return f"{value // 1000}.{value % 1000 // 10}" if value else None


def parse_nvidia_smi_list(text: str | None) -> list[dict[str, Any]] | None:
    """`nvidia-smi -L` lines 'GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-...)' -> GPUs."""
    if text is None:
        return None
    found = re.finditer(r"^GPU \d+: (?P<model>.+?) \(UUID: (?P<uuid>[^)]+)\)", text, re.M)
    return [{"model": match["model"], "uuid": match["uuid"], "bus": None} for match in found]


_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def parse_topology(text: str) -> list[dict[str, str]]:
    """`nvidia-smi topo -m`'s matrix (tab-separated, header underlined with ANSI codes) -> rows."""
    lines = [_ANSI.sub("", line).rstrip() for line in text.splitlines()]
    matrix: list[list[str]] = []
    for line in lines:
        if not line.strip():
            if matrix:
                break  # the legend follows the first blank line
            continue
        cells = line.split("\t") if "\t" in line else re.split(r"\s{2,}", line)
        matrix.append([c.strip() for c in cells])
    if len(matrix) < 2:
        return []
    header = ["device", *(c for c in matrix[0][1:] if c)] if not matrix[0][0] else ["device", *matrix[0]]
    rows = ([c for c in cells if c] if "" in cells[1:] else cells for cells in matrix[1:])
    return [dict(zip(header, cells, strict=False)) for cells in rows]


def host_facts(config: ProbeConfig) -> dict[str, Any]:
    """CPU, memory, /dev/shm and the ulimits that matter to NCCL."""
    import psutil

    try:
        usable = len(os.sched_getaffinity(0))  # what a container or cpuset really grants
    except (AttributeError, OSError):
        usable = os.cpu_count()
    try:
        load = [round(x, 2) for x in os.getloadavg()]
    except OSError:
        load = None
    memory = psutil.virtual_memory()
    return {
        "hostname": socket.gethostname(),
        "platform": platform.platform(),
        "cpu_logical": os.cpu_count(),
        "cpu_physical": psutil.cpu_count(logical=False),
        "cpu_usable": usable,
        "load": load,
        "memory_total": memory.total,
        "memory_available": memory.available,
        "shm": shm_facts(config.shm_path),
        "memlock": _rlimit("RLIMIT_MEMLOCK"),
        "nofile": _rlimit("RLIMIT_NOFILE"),
    }


def shm_facts(path: str) -> dict[str, Any]:
    try:
        usage = shutil.disk_usage(path)
    except OSError:
        return {"path": path, "total": None, "free": None}
    return {"path": path, "total": usage.total, "free": usage.free}


def _rlimit(name: str) -> dict[str, int | str] | None:
    which = getattr(resource, name, None)
    if which is None:
        return None
    limits = zip(("soft", "hard"), resource.getrlimit(which), strict=True)
    return {key: UNLIMITED if value == resource.RLIM_INFINITY else value for key, value in limits}


def network_interfaces() -> dict[str, dict[str, Any]]:
    """name -> state, speed, MTU and IP addresses (no MAC addresses: not needed, less to leak)."""
    import psutil

    stats = psutil.net_if_stats()
    addrs = psutil.net_if_addrs()
    interfaces = {}
    for name in sorted(set(stats) | set(addrs)):
        st = stats.get(name)
        interfaces[name] = {
            "up": bool(st.isup) if st else False,
            "speed_mbps": st.speed if st and st.speed else None,
            "mtu": st.mtu if st else None,
            "addresses": [
                a.address
                for a in addrs.get(name, [])
                if a.family in (socket.AF_INET, socket.AF_INET6) and a.address
            ],
        }
    return interfaces


def locality(interfaces: Mapping[str, Mapping[str, Any]]) -> Callable[[str], bool]:
    """Is an address this host? Any of its interfaces' addresses, or loopback."""
    mine = frozenset(a.split("%")[0] for i in interfaces.values() for a in i["addresses"])
    return lambda address: address.split("%")[0] in mine or is_loopback(address)


def infiniband_ports(root: Path) -> list[dict[str, Any]]:
    """One row per port of each device under /sys/class/infiniband (IB and RoCE alike)."""
    if not root.is_dir():
        return []
    return [
        {
            "device": device.name,
            "port": port.name,
            "state": _read(port / "state"),
            "rate": _read(port / "rate"),
            "link_layer": _read(port / "link_layer"),
        }
        for device in sorted(root.iterdir())
        for port in (sorted((device / "ports").iterdir()) if (device / "ports").is_dir() else [])
    ]


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None
