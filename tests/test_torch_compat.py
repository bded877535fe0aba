"""The shims for older torch releases; tests/compat/run.sh runs the whole suite on one."""

from __future__ import annotations

import dataclasses
import signal
import threading
from pathlib import Path

from ddpcheck.launcher.launch import launch_config, launch_fields
from ddpcheck.launcher.options import LaunchOptions
from ddpcheck.launcher.plan import plan_launch
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


def test_teardown_is_skipped_only_before_the_release_that_fixed_it(monkeypatch) -> None:
    import torch
    from torch.torch_version import TorchVersion

    from ddpcheck.torch_compat import teardown_may_deadlock

    cases = (("2.2.2+cu121", True), ("2.7.1", True), ("2.8.0", False), ("2.13.0+cpu", False))
    for version, deadlocks in cases:
        monkeypatch.setattr(torch, "__version__", TorchVersion(version))
        assert teardown_may_deadlock() is deadlocks, version


def test_the_rendezvous_store_can_share_the_presence_port() -> None:
    from torch.distributed import TCPStore
    from torch.distributed.elastic.rendezvous import c10d_rendezvous_backend as backend

    from ddpcheck.torch_compat import share_rendezvous_port

    share_rendezvous_port()
    presence = TCPStore("127.0.0.1", 0, is_master=True, multi_tenant=True, wait_for_workers=False)
    # What the c10d backend does on the node that hosts the endpoint, after presence.py did.
    rendezvous = backend.TCPStore("127.0.0.1", presence.port, is_master=True, wait_for_workers=False)
    rendezvous.set("key", "value")
    assert presence.get("key") == b"value"


class WaitOnlyStore:
    """A store as 2.2 binds it: wait, but no check."""

    def __init__(self, store) -> None:
        self.wait, self.get, self.set, self.delete_key = store.wait, store.get, store.set, store.delete_key
        self.add, self.compare_set = store.add, store.compare_set


def test_a_key_is_looked_up_with_or_without_check() -> None:
    from torch.distributed import HashStore

    from ddpcheck.torch_compat import store_has

    store = HashStore()
    for view in (store, WaitOnlyStore(store)):
        assert not store_has(view, "missing")
    store.set("present", "1")
    for view in (store, WaitOnlyStore(store)):
        assert store_has(view, "present")


def test_a_watch_team_reads_its_store_on_a_torch_without_check() -> None:
    """team.py and sampling.py look keys up through store_has: on 2.2 they read, not raise."""
    import json
    import time

    from torch.distributed import HashStore

    from ddpcheck.checks.watch import team
    from ddpcheck.checks.watch.sampling import StoreExchange

    store = WaitOnlyStore(HashStore())
    assert team._get(store, "watch/decision") is None
    store.set("watch/decision", json.dumps({"decision": "hang"}))
    assert team._get(store, "watch/decision") == {"decision": "hang"}
    store.delete_key("watch/decision")  # on 2.2 the store gone reads as the key unset
    started = time.monotonic()
    team._wait_for_leader(store)
    assert time.monotonic() - started < 5
    StoreExchange(store, 1, 2).publish({2: []}, {2: "b"})
    assert StoreExchange(store, 0, 2).others().hosts == {2: "b"}


def test_preflight_and_an_inline_rank_read_their_store_on_a_torch_without_check() -> None:
    """preflight's attendance and an inline rank's wait for rank 0 look keys up through store_has."""
    import time
    from types import SimpleNamespace

    from torch.distributed import HashStore

    from ddpcheck.preflight.attendance import arrive
    from ddpcheck.rank.inline import Session

    store = WaitOnlyStore(HashStore())
    assert arrive(store, 0, 1, {"host": "a"}, wait_s=5, call=0).missing == []
    assert arrive(store, 0, 2, {"host": "a"}, wait_s=0.2, call=1).missing == [1]
    started = time.monotonic()  # its key unset: on 2.2 the store gone reads so, and the rank leaves
    Session.wait_for_rank0(SimpleNamespace(store=store, rank=1), bound_s=10)
    assert time.monotonic() - started < 5


def test_the_node_of_rank_0_advertises_its_route_address_where_torch_would_not(monkeypatch) -> None:
    import socket

    from torch.distributed.elastic.rendezvous import api

    from ddpcheck.torch_compat import advertise_store_address

    class StoreInfoOf24:
        """2.4's build(rank, store): rank 0's address is socket.getfqdn(), local_addr unheard of."""

        @staticmethod
        def build(rank: int, store: object) -> str:
            return api.socket.getfqdn()

    monkeypatch.setattr(api, "RendezvousStoreInfo", StoreInfoOf24, raising=False)
    monkeypatch.setattr(api, "socket", socket, raising=False)
    advertise_store_address("10.1.2.3")
    assert StoreInfoOf24.build(0, None) == "10.1.2.3"
    assert api.socket.gethostname() == socket.gethostname()  # the rest of the module passes through
    advertise_store_address(None)  # a single-node run: torch's own lookup again
    assert api.socket is socket


def test_this_torchs_rendezvous_api_is_patched_only_if_it_ignores_local_addr(monkeypatch) -> None:
    import inspect

    from torch.distributed.elastic.rendezvous import api

    from ddpcheck.torch_compat import advertise_store_address

    monkeypatch.setattr(api, "socket", getattr(api, "socket", None), raising=False)  # restored after
    before = api.socket
    advertise_store_address("10.1.2.3")
    store_info = getattr(api, "RendezvousStoreInfo", None)
    if store_info is None or "local_addr" in inspect.signature(store_info.build).parameters:
        assert api.socket is before  # 2.2, and 2.5 on
    else:
        assert api.socket.getfqdn() == "10.1.2.3"  # 2.4
