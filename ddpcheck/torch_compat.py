"""What differs between the torch releases ddpcheck runs on, in one place.

ddpcheck installs into the environment people train with, so it meets every torch
from the floor in pyproject.toml up. Each shim names the release that changed the
behaviour it smooths over; tests/compat/run.sh runs the suite on an older release.
"""

from __future__ import annotations

import dataclasses
import signal
import threading
from pathlib import Path
from typing import Any


def fields_known_to(cls: type, wanted: dict[str, Any]) -> dict[str, Any]:
    """The entries of `wanted` that dataclass `cls` has a field for.

    LaunchConfig gains fields over releases (shutdown_timeout in 2.13): one this torch
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
    import inspect

    import torch.distributed as dist

    return "device_id" in inspect.signature(dist.init_process_group).parameters


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
