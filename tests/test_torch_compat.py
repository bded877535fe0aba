"""The shims for older torch releases; tests/compat/run.sh runs the whole suite on one."""

from __future__ import annotations

import dataclasses
import signal
import threading
from pathlib import Path

from ddpcheck.launch import launch_config, launch_fields
from ddpcheck.options import LaunchOptions
from ddpcheck.plan import plan_launch
from ddpcheck.torch_compat import _MainThreadSignals, allow_agent_off_main_thread, fields_known_to


@dataclasses.dataclass
class OlderConfig:
    min_nodes: int
    max_nodes: int = 1


def test_fields_a_release_lacks_are_left_out() -> None:
    wanted = {"min_nodes": 2, "max_nodes": 2, "shutdown_timeout": 2}
    assert fields_known_to(OlderConfig, wanted) == {"min_nodes": 2, "max_nodes": 2}
    OlderConfig(**fields_known_to(OlderConfig, wanted))


def test_every_field_of_this_torchs_launch_config_is_chosen(tmp_path: Path) -> None:
    from torch.distributed.launcher.api import LaunchConfig

    plan = plan_launch(LaunchOptions(nproc=2, backend="gloo"))
    fields = launch_fields(plan, tmp_path)
    # A field a newer torch added would otherwise keep a default nobody here chose.
    missing = {f.name for f in dataclasses.fields(LaunchConfig)} - set(fields)
    assert not missing, f"LaunchConfig gained {sorted(missing)}: choose them in launch_fields()"
    config = launch_config(plan, tmp_path)
    assert config.rdzv_backend == "c10d" and config.max_restarts == 0 and config.nproc_per_node == 2


def test_handlers_from_another_thread_are_skipped_and_from_the_main_one_kept() -> None:
    shim = _MainThreadSignals()
    before = signal.getsignal(signal.SIGUSR1)
    errors: list[BaseException] = []

    def from_thread() -> None:
        try:
            assert shim.signal(signal.SIGUSR1, signal.SIG_IGN) == before
        except BaseException as exc:
            errors.append(exc)

    thread = threading.Thread(target=from_thread)
    thread.start()
    thread.join()
    assert errors == [] and signal.getsignal(signal.SIGUSR1) == before
    try:
        shim.signal(signal.SIGUSR1, signal.SIG_IGN)
        assert signal.getsignal(signal.SIGUSR1) == signal.SIG_IGN
    finally:
        signal.signal(signal.SIGUSR1, before)
    assert shim.SIGTERM == signal.SIGTERM  # the rest of the module passes through


def test_the_elastic_process_context_sees_the_shim() -> None:
    from torch.distributed.elastic.multiprocessing import api

    allow_agent_off_main_thread()
    allow_agent_off_main_thread()  # idempotent
    assert isinstance(api.signal, _MainThreadSignals)
    assert api.signal.SIGINT == signal.SIGINT
