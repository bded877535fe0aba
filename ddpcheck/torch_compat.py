"""What differs between the torch releases ddpcheck runs on, in one place.

ddpcheck installs into the environment people train with, so it meets every torch
from the floor in pyproject.toml up. Each shim names the release that changed the
behaviour it smooths over; tests/compat/run.sh runs the suite on an older release.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import signal
import socket
import threading
from pathlib import Path
from typing import Any


def fields_known_to(cls: type, wanted: dict[str, Any]) -> dict[str, Any]:
    """The entries of `wanted` that dataclass `cls` has a field for.

    LaunchConfig gains fields over releases (2.13 has shutdown_timeout, 2.11 not): one this torch
    lacks is left out, and what it would set keeps this torch's own behaviour.
    """
    known = {f.name for f in dataclasses.fields(cls)}
    return {name: value for name, value in wanted.items() if name in known}


def rank_log_fields(log_dir: Path) -> dict[str, Any]:
    """LaunchConfig's fields that send each rank's stdout and stderr to files under log_dir, not the terminal.

    2.3 moved log_dir, redirects and tee into one logs_specs field. The files lie at
    log_dir/<run id>_<random>/attempt_<n>/<local rank>/std{out,err}.log in both.
    """
    from torch.distributed.elastic.multiprocessing import Std

    try:
        from torch.distributed.elastic.multiprocessing import DefaultLogsSpecs
    except ImportError:  # before 2.3
        return {"log_dir": str(log_dir), "redirects": Std.ALL, "tee": Std.NONE}
    return {"logs_specs": DefaultLogsSpecs(log_dir=str(log_dir), redirects=Std.ALL, tee=Std.NONE)}


def takes_device_id() -> bool:
    """Whether init_process_group takes device_id (2.3 on): NCCL then sets up its communicator at once."""
    import torch.distributed as dist

    return "device_id" in inspect.signature(dist.init_process_group).parameters


def teardown_may_deadlock() -> bool:
    """Whether destroy_process_group can deadlock on this torch: before 2.8 it could.

    Its ProcessGroup destructor held the GIL while joining the backend's worker threads,
    and a worker still dropping a finished collective's tensors needs the GIL
    (pytorch#56297; pytorch#154976, merged June 2025, releases it there from 2.8); what it
    did here: docs/testing.md.
    """
    import torch

    return torch.__version__ < (2, 8)  # a TorchVersion: compared as a version, not a string


def store_has(store: Any, key: str) -> bool:
    """Whether `key` is set in a torch.distributed Store, without waiting for it.

    2.2 binds no Store.check (2.4 does); there, a wait of a millisecond answers.
    """
    if hasattr(store, "check"):
        return bool(store.check([key]))
    from datetime import timedelta

    try:
        store.wait([key], timedelta(milliseconds=1))
    except RuntimeError:  # timed out (DistStoreError is a RuntimeError)
        return False
    return True


class _MainThreadSignals:
    """The `signal` module as torch's elastic process context sees it: handlers only from the main thread.

    Before 2.5 its start() installs SIGTERM/SIGINT/SIGHUP/SIGQUIT handlers
    unconditionally, which raises ValueError off the main thread, where ddpcheck
    runs the agent. Later releases skip them there themselves; the launcher's main
    thread handles those signals either way.
    """

    def __getattr__(self, name: str) -> Any:
        return getattr(signal, name)

    @staticmethod
    def signal(signum: int, handler: Any) -> Any:
        if threading.current_thread() is threading.main_thread():
            return signal.signal(signum, handler)
        return signal.getsignal(signum)


def allow_agent_off_main_thread() -> None:
    """Let torch's elastic agent start workers from a thread other than the main one."""
    from torch.distributed.elastic.multiprocessing import api

    if not isinstance(api.signal, _MainThreadSignals):
        api.signal = _MainThreadSignals()


def share_rendezvous_port() -> None:
    """Let the c10d rendezvous open its store on the port that presence.py's store already holds.

    Both live in the launcher's process on the node that hosts the endpoint. From 2.5
    the rendezvous backend opens its TCPStore with multi_tenant=True, sharing the
    server; before, it binds the port anew and fails with "Address already in use".
    """
    from torch.distributed import TCPStore
    from torch.distributed.elastic.rendezvous import c10d_rendezvous_backend as backend

    backend.TCPStore = functools.partial(TCPStore, multi_tenant=True)  # type: ignore[attr-defined]


class _AdvertisedSocket:
    """The `socket` module as 2.4's rendezvous API sees it: this host's name is the advertised address."""

    def __init__(self, address: str) -> None:
        self.address = address

    def __getattr__(self, name: str) -> Any:
        return getattr(socket, name)

    def getfqdn(self, name: str = "") -> str:
        return socket.getfqdn(name) if name else self.address


def advertise_store_address(address: str | None) -> None:
    """Make the node of rank 0 give workers `address` as MASTER_ADDR, as LaunchConfig.local_addr asks.

    2.4's RendezvousStoreInfo.build ignores local_addr and advertises socket.getfqdn():
    where that name does not resolve on the other nodes, every worker waits in
    init_process_group until the timeout. 2.2 and 2.5 on honour local_addr themselves.
    """
    from torch.distributed.elastic.rendezvous import api

    store_info = getattr(api, "RendezvousStoreInfo", None)
    if store_info is None or "local_addr" in inspect.signature(store_info.build).parameters:
        return
    api.socket = _AdvertisedSocket(address) if address else socket  # type: ignore[attr-defined]
