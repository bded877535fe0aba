"""The checks of `ddpcheck env` that need no rank and whose failure no run survives.

Run by the CLI before any rank starts (and by every rank under torchrun, srun or mpirun):
a host-wide setting that makes every rank fail (a socket interface that does not exist or is
down, a MASTER_ADDR that does not resolve) is one line and exit 2, with env's Fix line,
instead of every rank reported as crashed. Cheap: no torch, no subprocess, one bounded
name lookup at most.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from ddpcheck.checks.env.judge import judge_master, judge_socket_ifname
from ddpcheck.checks.env.master import RESOLVE_TIMEOUT_S, resolved
from ddpcheck.report.model import Check, Status

# Which variable picks the interface of which backend's sockets.
IFNAME_OF = {"gloo": "GLOO_SOCKET_IFNAME", "nccl": "NCCL_SOCKET_IFNAME"}
CONNECT_TIMEOUT_S = 2.0
NVIDIA_GPUS = Path("/proc/driver/nvidia/gpus")


def backend_without_torch(chosen: str, nvidia_gpus: Path = NVIDIA_GPUS) -> str | None:
    """The backend a run will use when that is known before torch is imported, else None.

    --backend gloo or nccl says it; `auto` on a host without NVIDIA's driver is CPU ranks over gloo.
    """
    if chosen in IFNAME_OF:
        return chosen
    if chosen == "auto" and not (nvidia_gpus.is_dir() and any(nvidia_gpus.iterdir())):
        return "gloo"
    return None


def fatal_setting(environ: Mapping[str, str], backend: str, inline: bool) -> Check | None:
    """The first env check that fails for this run, before anything starts; None when none does.

    MASTER_ADDR and MASTER_PORT are judged only inline: ddpcheck's own launcher sets them
    for its ranks, whatever the shell holds.
    """
    var = IFNAME_OF.get(backend)
    if var and (environ.get(var) or "").strip():
        from ddpcheck.checks.env.probe import network_interfaces

        check = judge_socket_ifname(var, environ[var], network_interfaces())
        if check.status == Status.FAIL:
            return check
    if inline:
        for check in judge_master(resolved(environ, RESOLVE_TIMEOUT_S), environ):
            if check.status == Status.FAIL:
                return check
    return None


def store_unreachable(environ: Mapping[str, str], waited_s: float) -> str:
    """Why this rank could not reach rank 0's store (MASTER_ADDR:MASTER_PORT) in `waited_s`: what
    `ddpcheck env` finds wrong with them now, in one line. Bounded: one name lookup, one connect."""
    from ddpcheck.checks.env.master import try_connect

    master = resolved(environ, RESOLVE_TIMEOUT_S)
    if master.get("resolved") and master["port"] is not None:
        master["connect"] = try_connect(master["resolved"][0], master["port"], CONNECT_TIMEOUT_S)
    launched = {"RANK": "1", "WORLD_SIZE": "2", **environ}  # only a rank asks: judged as inside its launch
    found = [c.detail for c in judge_master(master, launched) if c.status in (Status.FAIL, Status.WARN)]
    where = f"{master['addr']}:{master['port_text']}"
    said = "; ".join(found) if found else f"{where} answers now: rank 0 opened its store late, or it was busy"
    return f"could not reach rank 0's store at {where} within {waited_s:g} s: {said}"
