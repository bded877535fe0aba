"""The environment probe behind `ddpcheck env`, and the fingerprint every rank compares.

Two halves, as everywhere in ddpcheck (DESIGN.md, principle 1):

- `probe()` collects plain, JSON-able facts in one process. It spawns no rank;
  its only external effects are bounded: `nvidia-smi` under a timeout, a DNS
  lookup of MASTER_ADDR under a timeout, and either a bind test of MASTER_PORT
  on this host or one TCP connect (short timeout) toward the MASTER_ADDR the
  user configured - never anywhere else.
- `judge_*()` are pure functions from facts to `Check`s. Every WARN and FAIL
  says what is wrong, why it matters and how to fix it. Tests call them with
  synthetic facts.

Torch is imported inside functions only: `ddpcheck --help` must not pay for it.
Values of secret-looking environment variables never reach the facts at all:
`distributed_env()` redacts them as it collects, so no later step can leak them.
"""

from __future__ import annotations

import errno
import ipaddress
import os
import platform
import re
import resource
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ddpcheck.report import Check, Report, Status, Table

GIB = 1024**3
MIB = 1024**2
SHM_MIN_BYTES = 1 * GIB  # NCCL's shared-memory transport; Docker's default is 64 MB
MEMLOCK_MIN_BYTES = 64 * MIB  # below this, RDMA memory registration fails outright
OMP_MANY_CORES = 16  # from here on, one OpenMP thread per core per rank oversubscribes badly
REDACTED = "<redacted>"
UNLIMITED = "unlimited"

# --------------------------------------------------------------------- secrets
# Names are split into words on '_' (and other separators); a name is secret when
# one word is a secret word, or ends/starts with one (APIKEY, DBPASSWORD,
# AUTHTOKEN). Whole words only for KEY and AUTH, so NCCL_IB_PKEY (an InfiniBand
# partition key, needed to debug IB) and GIT_AUTHOR_NAME stay readable.
SECRET_WORDS = frozenset(
    {
        "TOKEN",
        "TOKENS",
        "KEY",
        "KEYS",
        "SECRET",
        "SECRETS",
        "PASSWORD",
        "PASSWORDS",
        "PASSWD",
        "PASS",
        "PASSPHRASE",
        "CREDENTIAL",
        "CREDENTIALS",
        "CREDS",
        "AUTH",
        "AUTHORIZATION",
        "COOKIE",
        "COOKIES",
        "SESSION",
        "PRIVATE",
        "JWT",  # SLURM_JWT: slurmrestd's bearer token, and it is a SLURM_* variable
        "SIGNATURE",
        "SALT",
    }
)
SECRET_SUFFIXES = (
    "TOKEN",
    "SECRET",
    "PASSWORD",
    "PASSWD",
    "APIKEY",
    "ACCESSKEY",
    "PRIVATEKEY",
    "CREDENTIALS",
)
SECRET_PREFIXES = ("PASSWORD", "SECRET", "TOKEN", "CREDENTIAL", "AUTHORIZ", "COOKIE", "SESSION", "PRIVATE")
# PWD alone is the working directory; as one word of a longer name (DB_PWD) it is a password.
SECRET_WORDS_IN_LONGER_NAMES = frozenset({"PWD"})
_URL_CREDENTIALS = re.compile(r"(?P<head>[a-zA-Z][\w+.-]*://[^:/@\s]+:)[^@/\s]+@")


def is_secret_name(name: str) -> bool:
    """Whether an environment variable's name says its value is a secret."""
    words = [w for w in re.split(r"[^A-Z0-9]+", name.upper()) if w]
    for word in words:
        if word in SECRET_WORDS or (len(words) > 1 and word in SECRET_WORDS_IN_LONGER_NAMES):
            return True
        if word.endswith(SECRET_SUFFIXES) or word.startswith(SECRET_PREFIXES):
            return True
    return False


def redact_value(name: str, value: str) -> str:
    """The value as it may be shown: `<redacted>` for secret names, URL passwords removed."""
    if is_secret_name(name):
        return REDACTED
    # An endpoint such as etcd://user:pw@host carries its password in the value.
    return _URL_CREDENTIALS.sub(rf"\g<head>{REDACTED}@", value)


# ------------------------------------------------------ the distributed env
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
    picked = {
        name: redact_value(name, value)
        for name, value in environ.items()
        if name in DIST_ENV_NAMES or name.startswith(DIST_ENV_PREFIXES)
    }
    return dict(sorted(picked.items()))


def in_launch(env: Mapping[str, str]) -> bool:
    """Already inside a launched job (torchrun/srun-wrapper set the rank variables)."""
    return "RANK" in env and "WORLD_SIZE" in env


def under_slurm(env: Mapping[str, str]) -> bool:
    return "SLURM_JOB_ID" in env or "SLURM_PROCID" in env


# ------------------------------------------------------------ probe config
@dataclass(frozen=True)
class ProbeConfig:
    """Where the probe looks, and its bounds; every path is injectable for tests."""

    environ: Mapping[str, str] | None = None  # None: os.environ
    shm_path: str = "/dev/shm"
    shm_bytes: int | None = None  # overrides the measured size of shm_path (tests)
    ib_root: str = "/sys/class/infiniband"
    nvidia_proc: str = "/proc/driver/nvidia"
    nvidia_smi: str | None = "nvidia-smi"  # None: never run it
    local_addresses: frozenset[str] | None = None  # None: this host's interface addresses
    resolve_timeout_s: float = 1.0
    port_timeout_s: float = 1.0
    smi_timeout_s: float = 2.0


# ----------------------------------------------------------------- probing
def probe(config: ProbeConfig | None = None) -> dict[str, Any]:
    """Collect every fact `ddpcheck env` judges. Never raises for a missing tool or file.

    The slow, independent parts overlap: nvidia-smi runs as a subprocess and the
    MASTER_ADDR/MASTER_PORT probe in a thread while torch imports here.
    """
    config = config or ProbeConfig()
    environ = os.environ if config.environ is None else config.environ
    problems: list[str] = []
    env = distributed_env(environ)
    smi_bin = shutil.which(config.nvidia_smi) if config.nvidia_smi else None
    nvidia_proc = Path(config.nvidia_proc)
    topo = _start(smi_bin, ["topo", "-m"])
    # Without the driver's /proc files, nvidia-smi is the other way to list physical GPUs.
    smi_list = None if (nvidia_proc / "gpus").is_dir() else _start(smi_bin, ["-L"])
    interfaces = network_interfaces()
    is_local = _locality(config.local_addresses, interfaces)
    master_probe = _Background(
        lambda: probe_master(environ.get("MASTER_ADDR"), environ.get("MASTER_PORT"), is_local, config)
    )
    torch_info = torch_facts(problems)
    listed = _finish(smi_list, config.smi_timeout_s, "nvidia-smi -L", problems)  # reap what was started
    physical = physical_gpus(nvidia_proc)
    if physical is None:
        physical = parse_nvidia_smi_list(listed)
    topology_text = _finish(topo, config.smi_timeout_s, "nvidia-smi topo -m", problems)
    if smi_bin is None and physical:
        problems.append("nvidia-smi not found: no GPU topology")
    master = master_probe.result(config.resolve_timeout_s + config.port_timeout_s + 1.0)
    if master is None:
        master = {"error": "the probe did not finish in time"}
    # Whatever became of the probe, the judge still sees what the user configured.
    master = {
        "addr": environ.get("MASTER_ADDR"),
        "port_text": environ.get("MASTER_PORT"),
        "port": parse_port(environ.get("MASTER_PORT")),
        **master,
    }
    return {
        "python": {
            "version": platform.python_version(),
            "implementation": platform.python_implementation(),
            "executable": sys.executable,
        },
        "torch": torch_info,
        "driver": nvidia_driver_version(nvidia_proc),
        "physical_gpus": physical,
        "topology": parse_topology(topology_text) if topology_text else [],
        "host": host_facts(config, environ),
        "interfaces": interfaces,
        "infiniband": infiniband_ports(Path(config.ib_root)),
        "env": env,
        "in_launch": in_launch(env),
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
        "cuda_available": False,
        "gpus": [],
        "cuda_warnings": [],
    }
    # torch reports a driver too old for its CUDA, or a GPU it was not built for,
    # only as warnings: they are the diagnosis, so keep them.
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            facts["cuda_available"] = bool(torch.cuda.is_available())
            if facts["cuda_available"]:
                facts["gpus"] = _torch_gpus(torch)
            if torch.backends.cudnn.is_available():
                facts["cudnn"] = torch.backends.cudnn.version()
            get_driver = getattr(torch._C, "_cuda_getDriverVersion", None)
            if get_driver is not None and (facts["cuda_build"] or facts["hip_build"]):
                facts["driver_cuda"] = _cuda_version_text(get_driver())
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


def nccl_version(torch: Any) -> str | None:
    """NCCL's version as 'major.minor.patch', or None on builds without NCCL."""
    try:
        version = torch.cuda.nccl.version()
    except Exception:  # CPU builds lack the binding altogether
        return None
    if isinstance(version, tuple):
        return ".".join(map(str, version))
    # Old torch: one integer, major*1000 + minor*100 + patch (or *10000 from 2.9).
    major, rest = divmod(int(version), 10000 if version >= 20900 else 1000)
    minor, patch = divmod(rest, 100)
    return f"{major}.{minor}.{patch}"


def _cuda_version_text(value: int) -> str | None:
    """CUDA's integer version (12040) as '12.4'."""
    if not value:
        return None
    return f"{value // 1000}.{value % 1000 // 10}"


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


def parse_nvidia_smi_list(text: str | None) -> list[dict[str, Any]] | None:
    """`nvidia-smi -L` lines 'GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-...)' -> GPUs."""
    if text is None:
        return None
    gpus = []
    for match in re.finditer(r"^GPU \d+: (?P<model>.+?) \(UUID: (?P<uuid>[^)]+)\)", text, re.M):
        gpus.append({"model": match["model"], "uuid": match["uuid"], "bus": None})
    return gpus


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
    rows = []
    for cells in matrix[1:]:
        cells = [c for c in cells if c] if "" in cells[1:] else cells
        rows.append({key: value for key, value in zip(header, cells, strict=False)})
    return rows


def host_facts(config: ProbeConfig, environ: Mapping[str, str]) -> dict[str, Any]:
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
        "shm": shm_facts(config),
        "memlock": _rlimit("RLIMIT_MEMLOCK"),
        "nofile": _rlimit("RLIMIT_NOFILE"),
    }


def shm_facts(config: ProbeConfig) -> dict[str, Any]:
    if config.shm_bytes is not None:
        return {"path": config.shm_path, "total": config.shm_bytes, "free": config.shm_bytes}
    try:
        usage = shutil.disk_usage(config.shm_path)
    except OSError:
        return {"path": config.shm_path, "total": None, "free": None}
    return {"path": config.shm_path, "total": usage.total, "free": usage.free}


def _rlimit(name: str) -> dict[str, int | str] | None:
    which = getattr(resource, name, None)
    if which is None:
        return None
    soft, hard = resource.getrlimit(which)

    def show(value: int) -> int | str:
        return UNLIMITED if value == resource.RLIM_INFINITY else value

    return {"soft": show(soft), "hard": show(hard)}


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


def local_addresses(interfaces: Mapping[str, Mapping[str, Any]]) -> frozenset[str]:
    return frozenset(a.split("%")[0] for i in interfaces.values() for a in i["addresses"])


def _locality(
    given: frozenset[str] | None, interfaces: Mapping[str, Mapping[str, Any]]
) -> Callable[[str], bool]:
    """Is an address this host? Given addresses are taken as the whole truth (tests use
    that to make 127.0.0.1 look remote); otherwise any interface address or loopback."""
    if given is not None:
        return lambda address: address.split("%")[0] in given
    mine = local_addresses(interfaces)
    return lambda address: address.split("%")[0] in mine or _is_loopback(address)


def infiniband_ports(root: Path) -> list[dict[str, Any]]:
    """One row per port of each device under /sys/class/infiniband (IB and RoCE alike)."""
    if not root.is_dir():
        return []
    ports = []
    for device in sorted(root.iterdir()):
        port_dir = device / "ports"
        for port in sorted(port_dir.iterdir()) if port_dir.is_dir() else []:
            ports.append(
                {
                    "device": device.name,
                    "port": port.name,
                    "state": _read(port / "state"),
                    "rate": _read(port / "rate"),
                    "link_layer": _read(port / "link_layer"),
                }
            )
    return ports


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None


# --------------------------------------------- MASTER_ADDR / MASTER_PORT
def parse_port(text: str | None) -> int | None:
    """A TCP port 1..65535, or None when the text is not one."""
    if text is None or not text.strip().isdigit():
        return None
    port = int(text.strip())
    return port if 1 <= port <= 65535 else None


def resolve(host: str, timeout_s: float) -> tuple[list[str], str | None]:
    """getaddrinfo has no timeout of its own: run it in a daemon thread and stop waiting."""
    box: dict[str, Any] = {}

    def work() -> None:
        try:
            infos = socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)
            box["addrs"] = list(dict.fromkeys(str(info[4][0]) for info in infos))
        except Exception as exc:  # OSError mostly; whatever it is, it is a finding, not a crash
            box["error"] = str(exc) or type(exc).__name__

    thread = threading.Thread(target=work, name="ddpcheck-resolve", daemon=True)
    thread.start()
    thread.join(timeout_s)
    if thread.is_alive():
        return [], f"timeout: the resolver did not answer within {timeout_s:g} s"
    return box.get("addrs", []), box.get("error")


def try_bind(address: str, port: int) -> str:
    """Can a store listen on this port here? 'free', 'in use', 'denied' or the error.

    Binds the wildcard address as torch's TCPStore does, with SO_REUSEADDR as it
    does, so a connection lingering in TIME_WAIT does not count as 'in use'.
    """
    family = socket.AF_INET6 if ":" in address else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("::" if family == socket.AF_INET6 else "0.0.0.0", port))
        return "free"
    except OSError as exc:
        if exc.errno == errno.EADDRINUSE:
            return "in use"
        if exc.errno == errno.EACCES:
            return "denied"
        return str(exc)
    finally:
        sock.close()


def try_connect(address: str, port: int, timeout_s: float) -> str:
    """One TCP connect: 'open', 'refused', 'timeout' or the error text."""
    try:
        with socket.create_connection((address, port), timeout=timeout_s):
            return "open"
    except ConnectionRefusedError:
        return "refused"
    except TimeoutError:
        return "timeout"
    except OSError as exc:
        return str(exc)


def probe_master(
    addr: str | None,
    port_text: str | None,
    is_local: Callable[[str], bool],
    config: ProbeConfig,
) -> dict[str, Any]:
    """Resolve MASTER_ADDR; then bind-test MASTER_PORT if the master is this host, else connect to it."""
    facts: dict[str, Any] = {
        "addr": addr,
        "port_text": port_text,
        "port": parse_port(port_text),
        "resolved": [],
        "resolve_error": None,
        "local": None,
        "bind": None,
        "connect": None,
    }
    if not addr:
        return facts
    facts["resolved"], facts["resolve_error"] = resolve(addr, config.resolve_timeout_s)
    if not facts["resolved"]:
        return facts
    facts["local"] = addr == socket.gethostname() or any(is_local(a) for a in facts["resolved"])
    port = facts["port"]
    if port is None:
        return facts
    if facts["local"]:
        facts["bind"] = try_bind(facts["resolved"][0], port)
    else:
        # The only traffic this probe sends off the host: toward the configured master.
        facts["connect"] = try_connect(facts["resolved"][0], port, config.port_timeout_s)
    return facts


def _is_loopback(address: str) -> bool:
    try:
        return ipaddress.ip_address(address.split("%")[0]).is_loopback
    except ValueError:
        return False


# ---------------------------------------------------------------- judging
def judge(facts: Mapping[str, Any]) -> list[Check]:
    """Every verdict `ddpcheck env` gives, in a stable order (JUnit keeps history by name)."""
    env = facts["env"]
    torch_info = facts["torch"]
    interfaces = facts["interfaces"]
    host = facts["host"]
    visible = len(torch_info["gpus"])
    return [
        judge_backends(torch_info["backends"], visible),
        judge_cuda_build(
            torch_info, facts["physical_gpus"], facts["driver"], env.get("CUDA_VISIBLE_DEVICES")
        ),
        judge_visible_devices(env.get("CUDA_VISIBLE_DEVICES"), facts["physical_gpus"], visible),
        judge_local_rank(env, facts["physical_gpus"], visible),
        judge_socket_ifname("NCCL_SOCKET_IFNAME", env.get("NCCL_SOCKET_IFNAME"), interfaces),
        judge_socket_ifname("GLOO_SOCKET_IFNAME", env.get("GLOO_SOCKET_IFNAME"), interfaces),
        *judge_master(facts["master"], env),
        judge_shm(host["shm"]["total"], host["shm"]["path"]),
        judge_infiniband(facts["infiniband"]),
        judge_memlock(host["memlock"], facts["infiniband"]),
        judge_omp(env.get("OMP_NUM_THREADS"), host["cpu_usable"]),
    ]


def judge_backends(backends: Mapping[str, bool], visible_gpus: int) -> Check:
    name = "distributed backends"
    if not backends.get("distributed"):
        return Check(
            name,
            Status.FAIL,
            "torch.distributed is not available in this torch build: no process group can start. "
            "Fix: install a torch build with distributed support (the PyPI wheels for Linux have it).",
        )
    have = [b for b in ("nccl", "gloo", "mpi", "ucc") if backends.get(b)]
    listed = ", ".join(have) or "none"
    if visible_gpus and not backends.get("nccl"):
        return Check(
            name,
            Status.FAIL,
            f"available: {listed}; {visible_gpus} GPUs visible but no nccl: GPU ranks cannot "
            "communicate at GPU speed. Fix: install a CUDA build of torch from pytorch.org.",
        )
    if not backends.get("gloo"):
        return Check(
            name,
            Status.WARN,
            f"available: {listed}; no gloo: CPU ranks and CPU-side collectives (object gathers, "
            "barriers in many libraries) cannot run. Fix: a standard torch build includes gloo.",
        )
    return Check(name, Status.PASS, f"available: {listed}")


def judge_cuda_build(
    torch_info: Mapping[str, Any],
    physical: Sequence[Mapping[str, Any]] | None,
    driver: str | None,
    cuda_visible: str | None,
) -> Check:
    """A CUDA torch that sees no GPU, or a CPU torch on a GPU host."""
    name = "CUDA build vs GPUs"
    build = torch_info.get("cuda_build") or torch_info.get("hip_build")
    visible = len(torch_info.get("gpus") or [])
    host_gpus = len(physical or [])
    has_driver = host_gpus > 0 or driver is not None
    said = (
        "; torch warned: " + " | ".join(torch_info["cuda_warnings"])
        if torch_info.get("cuda_warnings")
        else ""
    )
    if build and visible:
        models = sorted({g["name"] for g in torch_info["gpus"]})
        status = Status.WARN if said else Status.PASS
        detail = (
            f"{visible} GPU{'s' if visible > 1 else ''} visible to torch (CUDA {build}): {', '.join(models)}"
        )
        return Check(name, status, detail + said)
    if build and cuda_visible is not None and _hides_everything(cuda_visible) and has_driver:
        return Check(
            name,
            Status.WARN,
            f"CUDA_VISIBLE_DEVICES={cuda_visible!r} hides every GPU of this host from torch: ranks "
            "will run on CPU. Fix: unset it, or list the GPUs this job may use.",
        )
    if build and has_driver:
        where = (
            f"this host has {host_gpus} NVIDIA GPU{'s' if host_gpus != 1 else ''}"
            if host_gpus
            else "an NVIDIA driver is loaded"
        )
        return Check(
            name,
            Status.FAIL,
            f"torch is built with CUDA {build} and {where}"
            f"{f' (driver {driver})' if driver else ''}, but torch sees no GPU{said}. Usually the "
            "driver is older than torch's CUDA needs, or a container was started without GPU "
            "access. Fix: update the driver or install the torch wheel for its CUDA version "
            "(nvidia-smi shows the highest CUDA it supports); in Docker use --gpus all.",
        )
    if build:
        return Check(
            name,
            Status.WARN,
            f"torch is built with CUDA {build} but this host has no NVIDIA GPU or driver: only CPU ranks "
            "over gloo can run here. Fine for CI; on a GPU node, install the NVIDIA driver.",
        )
    if host_gpus:
        return Check(
            name,
            Status.WARN,
            f"torch {torch_info.get('version')} is a CPU-only build but this host has {host_gpus} NVIDIA "
            "GPU(s): every rank will run on CPU over gloo. Fix: install a CUDA build from pytorch.org.",
        )
    return Check(name, Status.PASS, "CPU-only torch on a host without GPUs: CPU ranks over gloo")


def _hides_everything(value: str) -> bool:
    entries, _ = parse_visible_devices(value)
    return not entries


def parse_visible_devices(value: str) -> tuple[list[str], str | None]:
    """CUDA's reading of CUDA_VISIBLE_DEVICES: the entries it keeps, and why it stopped early.

    Mirrors torch.cuda._parse_visible_devices: an entry that is not a device
    ends the list (everything after it is silently ignored); a repeated device
    makes the list empty; UUID lists (GPU-/MIG-) keep only entries of that kind.
    """
    items = [item.strip() for item in value.split(",")]
    kept: list[str] = []
    if items and items[0].startswith(("GPU-", "MIG-")):
        prefix = items[0][:4]
        for item in items:
            if item in kept:
                return [], f"{item} is listed twice (CUDA then shows no device at all)"
            if not item.startswith(prefix):
                return kept, f"{item!r} is not a {prefix} UUID, so it and everything after it is ignored"
            kept.append(item)
        return kept, None
    for item in items:
        match = re.match(r"[+-]?\d+", item)
        if not match or int(match.group()) < 0:
            stop = "an empty entry" if not item else repr(item)
            return kept, f"{stop} is not a device number, so it and everything after it is ignored"
        ordinal = str(int(match.group()))
        if ordinal in kept:
            return [], f"device {ordinal} is listed twice (CUDA then shows no device at all)"
        kept.append(ordinal)
    return kept, None


def judge_visible_devices(
    value: str | None, physical: Sequence[Mapping[str, Any]] | None, visible: int
) -> Check:
    """CUDA_VISIBLE_DEVICES names only devices this host has."""
    name = "CUDA_VISIBLE_DEVICES"
    if value is None:
        return Check(name, Status.PASS, "unset: every GPU of this host is visible")
    entries, stopped = parse_visible_devices(value)
    fix = "Fix: list device numbers 0..N-1 (or UUIDs from nvidia-smi -L) of GPUs this host has, each once."
    if physical is None:
        if entries and visible < len(entries) and visible > 0:
            return Check(
                name,
                Status.FAIL,
                f"CUDA_VISIBLE_DEVICES={value} lists {len(entries)} devices but CUDA shows {visible}: "
                f"some named devices do not exist. {fix}",
            )
        if stopped:
            return Check(name, Status.WARN, f"CUDA_VISIBLE_DEVICES={value}: {stopped}. {fix}")
        return Check(
            name, Status.SKIP, f"CUDA_VISIBLE_DEVICES={value}; no NVIDIA driver here to check it against"
        )
    count = len(physical)
    uuids = [g.get("uuid") or "" for g in physical]
    absent = []
    for entry in entries:
        if entry.startswith("MIG-"):
            continue  # MIG instances are not in the driver's GPU list; CUDA checks them itself
        if entry.startswith("GPU-"):
            if not any(u.startswith(entry) for u in uuids):
                absent.append(entry)
        elif int(entry) >= count:
            absent.append(entry)
    if absent:
        first = entries.index(absent[0])
        survivors = ", ".join(entries[:first]) or "none"
        have = f"{count} GPU{'s' if count != 1 else ''}" + (f" (0..{count - 1})" if count else "")
        return Check(
            name,
            Status.FAIL,
            f"CUDA_VISIBLE_DEVICES={value} names {', '.join(absent)}, which this host does not have "
            f"(it has {have}). CUDA stops at the first absent device, so only these stay visible: "
            f"{survivors}; ranks expecting the rest fail with 'invalid device ordinal'. {fix}",
        )
    if stopped:
        return Check(
            name,
            Status.FAIL if not entries else Status.WARN,
            f"CUDA_VISIBLE_DEVICES={value}: {stopped}. {fix}",
        )
    if not entries:
        return Check(name, Status.WARN, f"CUDA_VISIBLE_DEVICES={value!r} hides every GPU: ranks run on CPU")
    return Check(name, Status.PASS, f"CUDA_VISIBLE_DEVICES={value}: {len(entries)} of {count} GPUs visible")


def judge_local_rank(
    env: Mapping[str, str], physical: Sequence[Mapping[str, Any]] | None, visible: int
) -> Check:
    """LOCAL_RANK must index a visible GPU: set_device(LOCAL_RANK) is what every DDP script does.

    The classic mix of conventions: Slurm narrows CUDA_VISIBLE_DEVICES to the
    task's own GPU (so it is cuda:0 inside the task) while LOCAL_RANK, or
    SLURM_LOCALID used as one, still counts GPUs of the whole node.
    """
    name = "LOCAL_RANK vs visible GPUs"
    source = "LOCAL_RANK" if "LOCAL_RANK" in env else "SLURM_LOCALID" if "SLURM_LOCALID" in env else None
    if source is None:
        return Check(name, Status.SKIP, "not inside a launch (no LOCAL_RANK or SLURM_LOCALID)")
    text = env[source]
    if not text.strip().isdigit():
        return Check(name, Status.FAIL, f"{source}={text!r} is not a non-negative integer")
    local_rank = int(text)
    cuda_visible = env.get("CUDA_VISIBLE_DEVICES")
    if cuda_visible is not None:
        count = len(parse_visible_devices(cuda_visible)[0])
        seen = f"CUDA_VISIBLE_DEVICES={cuda_visible} leaves {count} visible"
    else:
        count = visible or len(physical or [])
        seen = f"{count} visible"
    if count == 0 or (not visible and not physical):
        # No GPU here at all: ranks run on CPU and never call set_device.
        return Check(name, Status.PASS, f"{source}={local_rank}; no GPU visible, so CPU ranks over gloo")
    if local_rank < count:
        return Check(name, Status.PASS, f"{source}={local_rank} indexes one of the {count} visible GPUs")
    if under_slurm(env) and cuda_visible is not None:
        why = (
            "Slurm narrowed CUDA_VISIBLE_DEVICES to this task's GPU (it is cuda:0 inside the task) "
            f"while {source} still counts the node's GPUs"
        )
        fix = (
            "Fix: in the script use torch.cuda.set_device(local_rank % torch.cuda.device_count()), "
            "or request GPUs per node (--gpus-per-node, no --gpus-per-task/--gpu-bind) so every task "
            "sees them all, or launch torchrun once per node."
        )
    else:
        why = f"{source} is meant to index the GPUs visible to this process"
        fix = "Fix: run no more ranks per node than visible GPUs, or widen CUDA_VISIBLE_DEVICES."
    return Check(
        name,
        Status.FAIL,
        f"{source}={local_rank} but {seen}: torch.cuda.set_device({local_rank}) fails with "
        f"'invalid device ordinal'. {why}. {fix}",
    )


def parse_nccl_ifname(value: str) -> tuple[bool, bool, list[str]]:
    """NCCL_SOCKET_IFNAME -> (exclude, exact, entries).

    NCCL's syntax: a comma-separated list of name prefixes; a leading '^' excludes
    them instead; then a leading '=' makes them exact names ('^=docker0').
    """
    text = value.strip()
    exclude = text.startswith("^")
    text = text[1:] if exclude else text
    exact = text.startswith("=")
    text = text[1:] if exact else text
    return exclude, exact, [e.strip() for e in text.split(",") if e.strip()]


def _usable(info: Mapping[str, Any]) -> bool:
    # A socket transport needs the interface up and holding an IP address.
    return bool(info["up"] and info["addresses"])


def _describe(names: Sequence[str], interfaces: Mapping[str, Mapping[str, Any]]) -> str:
    parts = []
    for n in names:
        info = interfaces[n]
        state = "up" if info["up"] else "down"
        if info["up"] and not info["addresses"]:
            state = "up, no address"
        parts.append(f"{n} ({state})")
    return ", ".join(parts) or "none"


def judge_socket_ifname(var: str, value: str | None, interfaces: Mapping[str, Mapping[str, Any]]) -> Check:
    """NCCL_SOCKET_IFNAME / GLOO_SOCKET_IFNAME select interfaces that exist and are up."""
    if value is None or not value.strip():
        chooser = (
            "NCCL picks (ib* first, then any up interface but lo and docker*)"
            if var.startswith("NCCL")
            else "gloo uses the address the hostname resolves to"
        )
        return Check(var, Status.PASS, f"unset: {chooser}")
    everything = f"interfaces here: {_describe(list(interfaces), interfaces)}"
    if var.startswith("GLOO"):
        return _judge_gloo_ifname(var, value, interfaces, everything)
    exclude, exact, entries = parse_nccl_ifname(value)

    def matches(iface: str, entry: str) -> bool:
        return iface == entry if exact else iface.startswith(entry)

    why = "NCCL finds no socket interface and init fails ('no socket interface found') or hangs"
    if exclude:
        left = [i for i in interfaces if not any(matches(i, e) for e in entries)]
        usable = [i for i in left if _usable(interfaces[i])]
        if not usable:
            return Check(
                var,
                Status.FAIL,
                f"{var}={value} excludes every interface that is up ({everything}): {why}. "
                f"Fix: exclude less, or name the interface to use, e.g. {var}={_suggest(interfaces)}.",
            )
        return Check(var, Status.PASS, f"{var}={value} leaves {_describe(usable, interfaces)}")
    matched = [i for i in interfaces if any(matches(i, e) for e in entries)]
    usable = [i for i in matched if _usable(interfaces[i])]
    unmatched = [e for e in entries if not any(matches(i, e) for i in interfaces)]
    if not usable:
        what = (
            f"matches {_describe(matched, interfaces)}, none up with an address"
            if matched
            else "matches no interface"
        )
        return Check(
            var,
            Status.FAIL,
            f"{var}={value} {what} on this host ({everything}): {why}. "
            f"Fix: set it to an interface that is up on every node, e.g. {var}={_suggest(interfaces)} "
            "('ip -br addr' lists them), or unset it.",
        )
    if unmatched:
        return Check(
            var,
            Status.WARN,
            f"{var}={value} uses {_describe(usable, interfaces)}, but {', '.join(unmatched)} matches "
            "nothing here: a typo, or an interface other nodes have and this one lacks.",
        )
    return Check(var, Status.PASS, f"{var}={value} uses {_describe(usable, interfaces)}")


def _judge_gloo_ifname(
    var: str, value: str, interfaces: Mapping[str, Mapping[str, Any]], everything: str
) -> Check:
    # Gloo takes exact names, comma-separated; no prefixes and no '^' (measured:
    # GLOO_SOCKET_IFNAME=eth fails with 'Unable to find address for: eth').
    names = [n.strip() for n in value.split(",") if n.strip()]
    if value.strip().startswith(("^", "=")):
        return Check(
            var,
            Status.FAIL,
            f"{var}={value}: gloo takes exact interface names, not NCCL's ^/= syntax; init fails with "
            f"'Unable to find address for: {names[0] if names else value}'. "
            f"Fix: name the interface, e.g. {var}={_suggest(interfaces)}.",
        )
    bad = [n for n in names if n not in interfaces or not _usable(interfaces[n])]
    if bad:
        missing = [n for n in bad if n not in interfaces]
        down = [n for n in bad if n in interfaces]
        problems = []
        if missing:
            prefix_hint = [i for i in interfaces if any(i.startswith(n) for n in missing)]
            hint = (
                f" (gloo does not take prefixes; did you mean {', '.join(prefix_hint)}?)"
                if prefix_hint
                else ""
            )
            problems.append(f"{', '.join(missing)} does not exist{hint}")
        if down:
            problems.append(f"{_describe(down, interfaces)} cannot carry traffic")
        return Check(
            var,
            Status.FAIL,
            f"{var}={value}: {'; '.join(problems)} ({everything}): gloo init fails with 'Unable to "
            f"find address for: ...'. Fix: name an interface that is up, e.g. {var}={_suggest(interfaces)}.",
        )
    return Check(var, Status.PASS, f"{var}={value} uses {_describe(names, interfaces)}")


def _suggest(interfaces: Mapping[str, Mapping[str, Any]]) -> str:
    """The first usable non-loopback interface, as an example for a fix."""
    for name, info in interfaces.items():
        if _usable(info) and not all(_is_loopback(a) for a in info["addresses"]):
            return name
    return "eth0"


def judge_master(master: Mapping[str, Any], env: Mapping[str, str]) -> list[Check]:
    return [_judge_master_addr(master, env), _judge_master_port(master, in_launch(env))]


def _multi_node(env: Mapping[str, str]) -> bool:
    for key in ("SLURM_NNODES", "SLURM_JOB_NUM_NODES"):
        if env.get(key, "").isdigit() and int(env[key]) > 1:
            return True
    world, local = env.get("WORLD_SIZE", ""), env.get("LOCAL_WORLD_SIZE", "")
    return world.isdigit() and local.isdigit() and int(world) > int(local)


def _judge_master_addr(master: Mapping[str, Any], env: Mapping[str, str]) -> Check:
    name = "MASTER_ADDR"
    addr = master.get("addr")
    if not addr:
        return Check(
            name,
            Status.SKIP,
            "unset: torchrun and ddpcheck set it per job; env:// init without a launcher needs it",
        )
    if master.get("error"):
        return Check(name, Status.WARN, f"MASTER_ADDR={addr}: {master['error']}")
    error = master.get("resolve_error")
    if error and error.startswith("timeout"):
        return Check(
            name,
            Status.WARN,
            f"MASTER_ADDR={addr}: {error}; a slow resolver delays or times out the rendezvous. "
            "Fix: use the master's IP address, or add it to /etc/hosts on every node.",
        )
    if error or not master.get("resolved"):
        return Check(
            name,
            Status.FAIL,
            f"MASTER_ADDR={addr} does not resolve ({error}): every rank fails in init_process_group. "
            "Fix: use the master's IP address or a name every node can resolve (DNS or /etc/hosts).",
        )
    resolved = ", ".join(master["resolved"][:4])
    loopback = all(_is_loopback(a) for a in master["resolved"])
    if loopback and _multi_node(env):
        return Check(
            name,
            Status.FAIL,
            f"MASTER_ADDR={addr} resolves to loopback ({resolved}) but the job spans several nodes: "
            "ranks on other nodes would look for the master on themselves and hang. Fix: use the "
            "master node's routable address, e.g. from `hostname -I` on it.",
        )
    where = "this host" if master.get("local") else "another host"
    return Check(name, Status.PASS, f"MASTER_ADDR={addr} resolves to {resolved} ({where})")


def _judge_master_port(master: Mapping[str, Any], launched: bool) -> Check:
    name = "MASTER_PORT"
    text = master.get("port_text")
    port = master.get("port")
    if text is None:
        return Check(name, Status.SKIP, "unset: torchrun and ddpcheck choose one per job")
    if port is None:
        return Check(
            name,
            Status.FAIL,
            f"MASTER_PORT={text!r} is not a TCP port (1-65535): init_process_group fails at once. "
            "Fix: set a free port, e.g. 29500.",
        )
    addr = master.get("addr")
    bind, connect = master.get("bind"), master.get("connect")
    if bind == "free":
        return Check(name, Status.PASS, f"port {port} is free on this host (the master)")
    if bind == "in use":
        if launched:
            return Check(
                name, Status.PASS, f"port {port} is in use on this host: this job's store listens there"
            )
        return Check(
            name,
            Status.FAIL,
            f"port {port} is already in use on this host, the master: the store cannot listen and "
            "init fails with 'address already in use' (often a previous job still running). Fix: "
            f"pick another MASTER_PORT, or find the holder with `ss -ltnp 'sport = :{port}'`.",
        )
    if bind == "denied":
        return Check(
            name,
            Status.FAIL,
            f"port {port} is privileged (below 1024) and this user may not listen on it. "
            "Fix: use a port above 1024, e.g. 29500.",
        )
    if bind:
        return Check(name, Status.WARN, f"port {port}: could not test it on this host ({bind})")
    if connect == "open":
        return Check(name, Status.PASS, f"{addr}:{port} is reachable and something listens there")
    if connect == "refused":
        if launched:
            return Check(
                name,
                Status.WARN,
                f"{addr}:{port} refused the connection: inside a running job the master's store "
                "should listen there. Check that rank 0 started, and that MASTER_PORT is the same on "
                "every node.",
            )
        return Check(
            name,
            Status.PASS,
            f"{addr}:{port} answered (nothing listens yet, as expected before the master starts): "
            "the port is not blocked",
        )
    if connect == "timeout":
        return Check(
            name,
            Status.FAIL,
            f"{addr}:{port} did not answer within the timeout: a firewall drops the traffic or the "
            "route is wrong, and every rank would hang in init_process_group. Fix: open the port "
            "(and NCCL's high ports) between the nodes, or choose an address on the cluster network.",
        )
    if connect:
        return Check(
            name,
            Status.FAIL,
            f"{addr}:{port} is unreachable ({connect}): ranks on this host cannot join. "
            "Fix: check the route to the master (ping, ip route), or use its cluster-network address.",
        )
    return Check(
        name, Status.PASS, f"MASTER_PORT={port} is a valid port (not probed: MASTER_ADDR unset or unresolved)"
    )


def judge_shm(total: int | None, path: str = "/dev/shm") -> Check:
    name = "/dev/shm"
    if total is None:
        return Check(
            name, Status.SKIP, f"{path} not found (not Linux?): NCCL's shared-memory transport needs it"
        )
    if total < SHM_MIN_BYTES:
        return Check(
            name,
            Status.WARN,
            f"{path} is {_size(total)}, below {_size(SHM_MIN_BYTES)}: NCCL keeps its intra-node buffers "
            "there and DataLoader workers pass batches through it, so with several GPUs the job fails "
            "with 'unhandled system error' or a bus error (containers default to 64 MB). Fix: docker "
            "run --shm-size=16g (or --ipc=host); on Kubernetes mount an emptyDir with medium: Memory "
            "at /dev/shm.",
        )
    return Check(name, Status.PASS, f"{path} is {_size(total)}")


def judge_infiniband(ports: Sequence[Mapping[str, Any]]) -> Check:
    name = "InfiniBand ports"
    if not ports:
        return Check(name, Status.SKIP, "no InfiniBand/RoCE devices: NCCL uses TCP sockets between nodes")
    active = [p for p in ports if "ACTIVE" in (p.get("state") or "")]
    listed = ", ".join(f"{p['device']}/{p['port']} {p.get('state') or '?'}" for p in ports[:8])
    if not active:
        return Check(
            name,
            Status.WARN,
            f"no port is ACTIVE ({listed}): NCCL falls back to TCP sockets between nodes, many times "
            "slower. Fix: check cables and the subnet manager (ibstat), or set NCCL_IB_HCA to the "
            "working device.",
        )
    return Check(name, Status.PASS, f"{len(active)} of {len(ports)} ports ACTIVE ({listed})")


def judge_memlock(memlock: Mapping[str, Any] | None, ports: Sequence[Mapping[str, Any]]) -> Check:
    """RDMA pins memory; the locked-memory limit caps how much."""
    name = "locked memory (RDMA)"
    if memlock is None:
        return Check(name, Status.SKIP, "no RLIMIT_MEMLOCK on this platform")
    soft = memlock["soft"]
    shown = UNLIMITED if soft == UNLIMITED else _size(int(soft))
    if not ports:
        return Check(name, Status.PASS, f"ulimit -l is {shown}; no InfiniBand devices, so no RDMA needs it")
    if soft == UNLIMITED:
        return Check(name, Status.PASS, "ulimit -l is unlimited, as RDMA wants")
    fix = (
        "Fix: set 'ulimit -l unlimited' (memlock in /etc/security/limits.conf; for Docker "
        "--ulimit memlock=-1; under Slurm, PropagateResourceLimits or the slurmd unit's LimitMEMLOCK)."
    )
    if int(soft) < MEMLOCK_MIN_BYTES:
        return Check(
            name,
            Status.FAIL,
            f"ulimit -l is {shown} with InfiniBand present: NCCL cannot register its buffers for RDMA "
            f"and fails ('ibv_reg_mr failed') or falls back to slow sockets. {fix}",
        )
    return Check(
        name, Status.WARN, f"ulimit -l is {shown}: large jobs can exhaust it while registering buffers. {fix}"
    )


def judge_omp(value: str | None, cores: int | None) -> Check:
    name = "OMP_NUM_THREADS"
    if value is not None:
        if not value.strip().isdigit() or int(value) < 1:
            return Check(
                name, Status.WARN, f"OMP_NUM_THREADS={value!r} is not a positive integer; OpenMP ignores it"
            )
        return Check(name, Status.PASS, f"OMP_NUM_THREADS={value}")
    if cores and cores >= OMP_MANY_CORES:
        return Check(
            name,
            Status.WARN,
            f"unset with {cores} usable cores: every rank starts {cores} OpenMP threads, so 8 ranks "
            f"run {8 * cores} threads on {cores} cores and CPU work (data loading, the optimizer on "
            "CPU, gloo) crawls. torchrun sets 1 for you; srun, mpirun and mp.spawn do not. "
            "Fix: export OMP_NUM_THREADS=<cores / ranks per node>.",
        )
    return Check(name, Status.PASS, f"unset; {cores} usable cores, too few to oversubscribe badly")


# ------------------------------------------------------------ the report
def build_report(facts: Mapping[str, Any]) -> Report:
    torch_info = facts["torch"]
    report = Report(command="env", checks=judge(facts), tables=env_tables(facts))
    report.world = {
        "nodes": 1,
        "hosts": [facts["host"]["hostname"]],
        "torch": torch_info["version"],
        "cuda": torch_info["cuda_build"],
        "nccl": torch_info["nccl"],
    }
    report.notes = list(facts["problems"])
    return report


def run_env(config: ProbeConfig | None = None) -> Report:
    """`ddpcheck env`: probe this host, judge it, and time it."""
    start = time.perf_counter()
    report = build_report(probe(config))
    report.elapsed_s = time.perf_counter() - start
    return report


KV_COLUMNS = {"item": "item", "value": "value"}


def env_tables(facts: Mapping[str, Any]) -> list[Table]:
    tables = [
        Table("software", "Software", KV_COLUMNS, _software_rows(facts)),
        Table(
            "gpus",
            "GPUs visible to torch",
            {"index": "#", "name": "name", "memory_gib": "memory (GiB)", "capability": "cc", "uuid": "UUID"},
            facts["torch"]["gpus"],
        ),
        Table(
            "topology",
            "GPU topology (nvidia-smi topo -m)",
            _topology_columns(facts["topology"]),
            facts["topology"],
        ),
        Table("host", "Host", KV_COLUMNS, _host_rows(facts["host"])),
        Table(
            "network",
            "Network interfaces",
            {
                "name": "name",
                "state": "state",
                "speed_mbps": "speed (Mb/s)",
                "mtu": "MTU",
                "addresses": "addresses",
            },
            [
                {
                    "name": n,
                    "state": "up" if i["up"] else "down",
                    "speed_mbps": i["speed_mbps"],
                    "mtu": i["mtu"],
                    "addresses": ", ".join(i["addresses"]),
                }
                for n, i in facts["interfaces"].items()
            ],
        ),
        Table(
            "infiniband",
            "InfiniBand / RoCE ports",
            {"device": "device", "port": "port", "state": "state", "rate": "rate", "link_layer": "link"},
            facts["infiniband"],
        ),
        Table(
            "environment",
            "Distributed environment (secret-looking values redacted)",
            {"name": "name", "value": "value"},
            [{"name": k, "value": v} for k, v in facts["env"].items()],
        ),
    ]
    # An empty table says nothing in the terminal; JSON readers default to [].
    return [t for t in tables if t.rows]


def _topology_columns(rows: Sequence[Mapping[str, str]]) -> dict[str, str]:
    columns: dict[str, str] = {}
    for row in rows:
        columns.update({k: k for k in row if k not in columns})
    return columns


def _software_rows(facts: Mapping[str, Any]) -> list[dict[str, Any]]:
    t = facts["torch"]
    backends = t["backends"]
    rows = [
        ("python", f"{facts['python']['version']} ({facts['python']['executable']})"),
        ("torch", t["version"]),
        ("torch git", t["git_version"]),
        ("debug build", "yes" if t["debug"] else "no"),
        (
            "CUDA (torch built with)",
            t["cuda_build"] or (f"ROCm {t['hip_build']}" if t["hip_build"] else None),
        ),
        ("CUDA (driver supports)", t["driver_cuda"]),
        ("cuDNN", t["cudnn"]),
        ("NCCL", t["nccl"]),
        ("NVIDIA driver", facts["driver"]),
        ("backends", ", ".join(b for b in ("nccl", "gloo", "mpi", "ucc") if backends.get(b)) or "none"),
    ]
    return [{"item": k, "value": v} for k, v in rows]


def _host_rows(host: Mapping[str, Any]) -> list[dict[str, Any]]:
    shm = host["shm"]
    memlock, nofile = host["memlock"] or {}, host["nofile"] or {}
    rows: list[tuple[str, Any, Any]] = [
        ("hostname", host["hostname"], None),
        ("platform", host["platform"], None),
        (
            "CPU cores (usable / logical / physical)",
            f"{host['cpu_usable']} / {host['cpu_logical']} / {host['cpu_physical']}",
            host["cpu_usable"],
        ),
        ("load (1, 5, 15 min)", ", ".join(map(str, host["load"])) if host["load"] else None, None),
        (
            "memory (available / total)",
            f"{_size(host['memory_available'])} / {_size(host['memory_total'])}",
            host["memory_total"],
        ),
        (
            shm["path"],
            f"{_size(shm['free'])} free / {_size(shm['total'])}" if shm["total"] is not None else None,
            shm["total"],
        ),
        ("ulimit -l (locked memory)", _limit(memlock.get("soft")), memlock.get("soft")),
        ("ulimit -n (open files)", _limit(nofile.get("soft"), as_bytes=False), nofile.get("soft")),
    ]
    out = []
    for item, value, raw in rows:
        row: dict[str, Any] = {"item": item, "value": value}
        if raw is not None:
            row["raw"] = raw  # the number behind the text, for JSON readers
        out.append(row)
    return out


def _limit(value: Any, as_bytes: bool = True) -> str | None:
    if value is None or value == UNLIMITED:
        return value
    return _size(int(value)) if as_bytes else str(value)


def _size(n: int | None) -> str:
    if n is None:
        return "?"
    for unit, scale in (("GiB", GIB), ("MiB", MIB), ("KiB", 1024)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} B"


# ---------------------------------------------------- subprocess, threads
def _start(binary: str | None, args: list[str]) -> subprocess.Popen[str] | None:
    if binary is None:
        return None
    try:
        # Its own session, so a timeout can kill it with anything it started.
        return subprocess.Popen(
            [binary, *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            stdin=subprocess.DEVNULL,
            text=True,
            start_new_session=True,
        )
    except OSError:
        return None


def _finish(
    proc: subprocess.Popen[str] | None, timeout_s: float, what: str, problems: list[str]
) -> str | None:
    """The output of a started command, or None; a command past its time is killed, not left behind."""
    if proc is None:
        return None
    try:
        out, _ = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except OSError:
            proc.kill()
        proc.communicate()
        problems.append(f"{what} did not finish within {timeout_s:g} s: skipped")
        return None
    if proc.returncode != 0:
        problems.append(f"{what} exited with {proc.returncode}")
        return None
    return out


class _Background:
    """Run a function in a daemon thread; wait for it at most a bound, never past exit."""

    def __init__(self, fn: Callable[[], Any]) -> None:
        self._box: dict[str, Any] = {}
        self._thread = threading.Thread(target=self._run, args=(fn,), name="ddpcheck-probe", daemon=True)
        self._thread.start()

    def _run(self, fn: Callable[[], Any]) -> None:
        try:
            self._box["value"] = fn()
        except Exception as exc:  # reported as a finding, not a crash
            self._box["value"] = {"error": f"{type(exc).__name__}: {exc}"}

    def result(self, timeout_s: float) -> Any:
        self._thread.join(timeout_s)
        return self._box.get("value")


# ------------------------------------------------- every node agrees
# (key, label, status when a host differs). torch, CUDA and NCCL must match for
# collectives to interoperate (a mixed NCCL can hang or corrupt); a different
# driver, GPU model or Python usually runs but is the "one node was upgraded" smell.
FINGERPRINT_FIELDS: tuple[tuple[str, str, Status], ...] = (
    ("torch", "torch", Status.FAIL),
    ("cuda", "CUDA", Status.FAIL),
    ("nccl", "NCCL", Status.FAIL),
    ("driver", "driver", Status.WARN),
    ("gpu", "GPU model", Status.WARN),
    ("python", "Python", Status.WARN),
)


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


def judge_agreement(
    fingerprints: Sequence[Mapping[str, Any] | None], identities: Sequence[Mapping[str, Any]]
) -> Check:
    """Name the hosts whose torch/CUDA/NCCL/driver/GPU model/Python differs from the majority.

    `fingerprints[r]` is rank r's `rank_fingerprint()`, `identities[r]` its
    identity (with 'host'). Votes are per host, not per rank: a node is one
    upgrade, however many ranks it runs.
    """
    name = "nodes agree"
    findings: list[str] = []
    status = Status.PASS
    culprits: set[int] = set()
    hosts_all = list(dict.fromkeys(str(i["host"]) for i in identities))
    for key, label, severity in FINGERPRINT_FIELDS:
        values = [(fp or {}).get(key) for fp in fingerprints]
        hosts_by_value: dict[Any, list[str]] = {}
        for rank, value in enumerate(values):
            hosts = hosts_by_value.setdefault(value, [])
            host = str(identities[rank]["host"])
            if host not in hosts:
                hosts.append(host)
        if len(hosts_by_value) < 2:
            continue
        ranked = sorted(hosts_by_value.items(), key=lambda kv: -len(kv[1]))
        tie = len(ranked[0][1]) == len(ranked[1][1])
        odd = [v for v, _ in ranked] if tie else [v for v, _ in ranked[1:]]
        culprits.update(r for r, v in enumerate(values) if v in odd)
        if status != Status.FAIL:
            status = severity
        if tie:
            groups = "; ".join(f"{_show(v)} on {', '.join(h)}" for v, h in ranked)
            findings.append(f"{label} differs with no majority: {groups}")
        else:
            majority, majority_hosts = ranked[0]
            parts = [f"{', '.join(h)} {'has' if len(h) == 1 else 'have'} {_show(v)}" for v, h in ranked[1:]]
            findings.append(
                f"{label} differs: {'; '.join(parts)}, the other {len(majority_hosts)} "
                f"host{'s' if len(majority_hosts) != 1 else ''} {_show(majority)}"
            )
    if not findings:
        first = next((fp for fp in fingerprints if fp), {}) or {}
        summary = ", ".join(f"{label} {_show(first.get(key))}" for key, label, _ in FINGERPRINT_FIELDS)
        n = len(hosts_all)
        return Check(name, Status.PASS, f"{n} host{'s' if n != 1 else ''} agree: {summary}")
    fix = (
        "Fix: install the same torch wheel (and driver) on every node, e.g. from one container image."
        if status == Status.FAIL
        else "Mixed drivers, GPUs or Pythons usually run, at the pace of the slowest, "
        "but point to a node set up differently."
    )
    ranks = sorted(culprits)
    hosts = list(dict.fromkeys(str(identities[r]["host"]) for r in ranks))
    return Check(name, status, f"{'; '.join(findings)}. {fix}", ranks, hosts)


def fingerprint_table(
    fingerprints: Sequence[Mapping[str, Any] | None], identities: Sequence[Mapping[str, Any]]
) -> Table:
    """One row per distinct (host, fingerprint): what each node runs, side by side."""
    rows: dict[tuple[Any, ...], dict[str, Any]] = {}
    for rank, fp in enumerate(fingerprints):
        fp = fp or {}
        key = (identities[rank]["host"], *(fp.get(k) for k, _, _ in FINGERPRINT_FIELDS))
        row = rows.setdefault(
            key,
            {
                "host": identities[rank]["host"],
                "ranks": [],
                **{k: fp.get(k) for k, _, _ in FINGERPRINT_FIELDS},
            },
        )
        row["ranks"].append(rank)
    for row in rows.values():
        row["ranks"] = ", ".join(map(str, row["ranks"]))
    columns = {"host": "host", "ranks": "ranks", **{k: label for k, label, _ in FINGERPRINT_FIELDS}}
    return Table("fingerprints", "Software on every node", columns, list(rows.values()))


def _show(value: Any) -> str:
    return "none" if value is None else str(value)
