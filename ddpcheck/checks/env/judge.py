"""Judging the facts: pure functions from the probe's facts to `Check`s.

Every WARN and FAIL says what is wrong, why it matters and how to fix it.
Tests call these with synthetic facts; nothing here probes or imports torch.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from ddpcheck.checks.env.master import is_loopback
from ddpcheck.checks.env.variables import in_launch, under_slurm
from ddpcheck.report.model import Check, Status
from ddpcheck.report.naming import counted
from ddpcheck.report.units import GIB, MIB, UNLIMITED, human_bytes

SHM_MIN_BYTES = 1 * GIB  # NCCL's shared-memory transport; Docker's default is 64 MB
MEMLOCK_MIN_BYTES = 64 * MIB  # below this, RDMA memory registration fails outright
OMP_MANY_CORES = 16  # from here on, one OpenMP thread per core per rank oversubscribes badly


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
    listed = ", ".join(b for b in ("nccl", "gloo", "mpi", "ucc") if backends.get(b)) or "none"
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
        detail = f"{counted(visible, 'GPU')} visible to torch (CUDA {build}): {', '.join(models)}"
        return Check(name, status, detail + said)
    if build and cuda_visible is not None and not parse_visible_devices(cuda_visible)[0] and has_driver:
        return Check(
            name,
            Status.WARN,
            f"CUDA_VISIBLE_DEVICES={cuda_visible!r} hides every GPU of this host from torch: ranks "
            "will run on CPU. Fix: unset it, or list the GPUs this job may use.",
        )
    if build and has_driver:
        where = (
            f"this host has {counted(host_gpus, 'NVIDIA GPU')}" if host_gpus else "an NVIDIA driver is loaded"
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

    def present(entry: str) -> bool:  # MIG instances are not in the driver's GPU list: CUDA checks them
        if entry.startswith("GPU-"):
            return any(u.startswith(entry) for u in uuids)
        return entry.startswith("MIG-") or int(entry) < count

    absent = [entry for entry in entries if not present(entry)]
    if absent:
        first = entries.index(absent[0])
        survivors = ", ".join(entries[:first]) or "none"
        have = counted(count, "GPU") + (f" (0..{count - 1})" if count else "")
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
    # No entries come only with a reason (parse_visible_devices): `stopped` has said it above.
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
    if not text.strip().isdecimal():
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
    text = text.removeprefix("^")
    exact = text.startswith("=")
    text = text.removeprefix("=")
    return exclude, exact, [e.strip() for e in text.split(",") if e.strip()]


def _usable(info: Mapping[str, Any]) -> bool:
    # A socket transport needs the interface up and holding an IP address.
    return bool(info["up"] and info["addresses"])


def _describe(names: Sequence[str], interfaces: Mapping[str, Mapping[str, Any]]) -> str:
    """'eth0 (up), ib0 (up, no address), eno1 (down)', or 'none'."""
    return ", ".join(f"{n} ({_state(interfaces[n])})" for n in names) or "none"


def _state(info: Mapping[str, Any]) -> str:
    return ("up" if info["addresses"] else "up, no address") if info["up"] else "down"


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
    # Gloo takes exact names, comma-separated; no prefixes and no '^' (GLOO_SOCKET_IFNAME=eth
    # fails with 'Unable to find address for: eth').
    names = [n.strip() for n in value.split(",") if n.strip()]
    if value.strip().startswith(("^", "=")):
        return Check(
            var,
            Status.FAIL,
            f"{var}={value}: gloo takes exact interface names, not NCCL's ^/= syntax; init fails with "
            f"'Unable to find address for: {names[0] if names else value}'. "
            f"Fix: name the interface, e.g. {var}={_suggest(interfaces)}.",
        )
    missing = [n for n in names if n not in interfaces]
    down = [n for n in names if n in interfaces and not _usable(interfaces[n])]
    if missing or down:
        near = [i for i in interfaces if any(i.startswith(n) for n in missing)]
        hint = f" (gloo does not take prefixes; did you mean {', '.join(near)}?)" if near else ""
        problems = [f"{', '.join(missing)} does not exist{hint}"] if missing else []
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
    found = (n for n, i in interfaces.items() if _usable(i) and not all(map(is_loopback, i["addresses"])))
    return next(found, "eth0")


def judge_master(master: Mapping[str, Any], env: Mapping[str, str]) -> list[Check]:
    return [_judge_master_addr(master, env), _judge_master_port(master, in_launch(env))]


def _multi_node(env: Mapping[str, str]) -> bool:
    for key in ("SLURM_NNODES", "SLURM_JOB_NUM_NODES"):
        if env.get(key, "").isdecimal() and int(env[key]) > 1:
            return True
    world, local = env.get("WORLD_SIZE", ""), env.get("LOCAL_WORLD_SIZE", "")
    return world.isdecimal() and local.isdecimal() and int(world) > int(local)


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
    if all(is_loopback(a) for a in master["resolved"]) and _multi_node(env):
        return Check(
            name,
            Status.FAIL,
            f"MASTER_ADDR={addr} resolves to loopback ({resolved}) but the job spans several nodes: "
            "ranks on other nodes would look for the master on themselves and hang. Fix: use the "
            "master node's routable address, e.g. from `hostname -I` on it.",
        )
    where = "this host" if master.get("local") else "another host"
    return Check(name, Status.PASS, f"MASTER_ADDR={addr} resolves to {resolved} ({where})")


# MASTER_PORT's verdict by what binding it on this host (the master) said, else what connecting to
# the master said, and whether a launch runs (None: either way). "other": an outcome not listed; "": none.
# fmt: off
_PORT_VERDICTS: dict[tuple[str, str, bool | None], tuple[Status, str]] = {
    ("free", "", None): (Status.PASS, "port {port} is free on this host (the master)"),
    ("in use", "", True): (Status.PASS, "port {port} is in use on this host: this job's store listens there"),
    ("in use", "", False): (Status.FAIL,
        "port {port} is already in use on this host, the master: the store cannot listen and init fails "
        "with 'address already in use' (often a previous job still running). Fix: pick another "
        "MASTER_PORT, or find the holder with `ss -ltnp 'sport = :{port}'`."),
    ("denied", "", None): (Status.FAIL,
        "port {port} is privileged (below 1024) and this user may not listen on it. "
        "Fix: use a port above 1024, e.g. 29500."),
    ("other", "", None): (Status.WARN, "port {port}: could not test it on this host ({bind})"),
    ("", "open", None): (Status.PASS, "{addr}:{port} is reachable and something listens there"),
    ("", "refused", True): (Status.WARN,
        "{addr}:{port} refused the connection: inside a running job the master's store should listen "
        "there. Check that rank 0 started, and that MASTER_PORT is the same on every node."),
    ("", "refused", False): (Status.PASS,
        "{addr}:{port} answered (nothing listens yet, as expected before the master starts): "
        "the port is not blocked"),
    ("", "timeout", None): (Status.FAIL,
        "{addr}:{port} did not answer within the timeout: a firewall drops the traffic or the route is "
        "wrong, and every rank would hang in init_process_group. Fix: open the port (and NCCL's high "
        "ports) between the nodes, or choose an address on the cluster network."),
    ("", "other", None): (Status.FAIL,
        "{addr}:{port} is unreachable ({connect}): ranks on this host cannot join. "
        "Fix: check the route to the master (ping, ip route), or use its cluster-network address."),
    ("", "", None): (Status.PASS,
        "MASTER_PORT={port} is a valid port (not probed: MASTER_ADDR unset or unresolved)"),
}
# fmt: on


def _judge_master_port(master: Mapping[str, Any], launched: bool) -> Check:
    name = "MASTER_PORT"
    text, port = master.get("port_text"), master.get("port")
    if text is None:
        return Check(name, Status.SKIP, "unset: torchrun and ddpcheck choose one per job")
    if port is None:
        return Check(
            name,
            Status.FAIL,
            f"MASTER_PORT={text!r} is not a TCP port (1-65535): init_process_group fails at once. "
            "Fix: set a free port, e.g. 29500.",
        )
    bind, connect = master.get("bind"), master.get("connect")
    # On the master the bind test decides; elsewhere the connect toward it.
    key = (_outcome(bind, 0), "") if bind else ("", _outcome(connect, 1))
    status, detail = _PORT_VERDICTS.get((*key, launched)) or _PORT_VERDICTS[(*key, None)]
    return Check(name, status, detail.format(port=port, addr=master.get("addr"), bind=bind, connect=connect))


def _outcome(value: str | None, column: int) -> str:
    """A probe's outcome as that column of _PORT_VERDICTS reads it: itself if listed, "other", or ""."""
    listed = {key[column] for key in _PORT_VERDICTS}
    return "" if not value else value if value in listed else "other"


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
            f"{path} is {human_bytes(total, amount=True)}, below {human_bytes(SHM_MIN_BYTES, amount=True)}: "
            "NCCL keeps its intra-node buffers there and DataLoader workers pass batches through it, so "
            "with several GPUs the job fails with 'unhandled system error' or a bus error (containers "
            "default to 64 MB). Fix: docker run --shm-size=16g (or --ipc=host); on Kubernetes mount an "
            "emptyDir with medium: Memory at /dev/shm.",
        )
    return Check(name, Status.PASS, f"{path} is {human_bytes(total, amount=True)}")


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
    shown = UNLIMITED if soft == UNLIMITED else human_bytes(int(soft), amount=True)
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
        if not value.strip().isdecimal() or int(value) < 1:
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
