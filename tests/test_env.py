"""`ddpcheck env`: the probe over a monkeypatched environment, the pure judges, and a real run.

Network probes in these tests only ever touch 127.0.0.1. GPUs are faked with a
/proc/driver/nvidia tree in a temporary directory, so the GPU judgements run on CPU.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from ddpcheck.checks.env import check as env_check
from ddpcheck.checks.env import judge, master, probe, redact, variables
from ddpcheck.rank import agreement
from ddpcheck.rank.fingerprint import rank_fingerprint
from ddpcheck.report import units
from ddpcheck.report.formats.json import write as write_json
from ddpcheck.report.model import Check, Report, Status, Verdict
from tests.conftest import needs_gpu
from tests.support.hung_tool import all_end, started_children, write_hung_tool

SECRET = "s3cr3t-value-never-printed"


# ------------------------------------------------------------------ fixtures
@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    """No distributed variable of the machine running the tests leaks in."""
    for name in list(os.environ):
        if name in variables.DIST_ENV_NAMES or name.startswith(variables.DIST_ENV_PREFIXES):
            monkeypatch.delenv(name)
    return monkeypatch


def fake_nvidia(root: Path, gpus: int = 4, driver: str = "550.54.15", model: str = "NVIDIA H100") -> Path:
    """A /proc/driver/nvidia tree: the driver version and one information file per GPU."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "version").write_text(
        f"NVRM version: NVIDIA UNIX x86_64 Kernel Module  {driver}  Tue Mar  5 22:23:56 UTC 2024\n"
        "GCC version:  gcc version 12.2.0\n"
    )
    for i in range(gpus):
        bus = f"0000:{0x18 + i:02x}:00.0"
        (root / "gpus" / bus).mkdir(parents=True)
        (root / "gpus" / bus / "information").write_text(
            f"Model: \t\t {model}\nIRQ:   \t\t 17\nGPU UUID: \t GPU-0000000{i}-aaaa-bbbb-cccc-dddddddddddd\n"
            f"Bus Location: \t {bus}\nDevice Minor: \t {i}\n"
        )
    return root


@pytest.fixture
def run_probe(clean_env: pytest.MonkeyPatch, tmp_path: Path) -> Callable[..., Report]:
    """Probe with os.environ as monkeypatched, no nvidia-smi, and optional fakes."""

    def run(gpus: int | None = None, **overrides: Any) -> Report:
        config: dict[str, Any] = {"nvidia_smi": None, "nvidia_proc": str(tmp_path / "no-nvidia")}
        if gpus is not None:
            config["nvidia_proc"] = str(fake_nvidia(tmp_path / f"nvidia{gpus}", gpus))
        config.update(overrides)
        return env_check.run_env(probe.ProbeConfig(**config))

    return run


def check(report: Report, name: str) -> Check:
    return next(c for c in report.checks if c.name == name)


def rendered(report: Report) -> str:
    from rich.console import Console

    from ddpcheck.report import terminal as render

    out = io.StringIO()
    render.render_report(report, Console(file=out, width=250, no_color=True), quiet=False)
    return out.getvalue()


@pytest.fixture
def listening() -> Iterator[int]:
    """A port on 127.0.0.1 that something listens on."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield sock.getsockname()[1]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


INTERFACES: dict[str, dict[str, Any]] = {
    "lo": {"up": True, "addresses": ["127.0.0.1"], "speed_mbps": None, "mtu": 65536},
    "eth0": {"up": True, "addresses": ["10.0.0.5"], "speed_mbps": 25000, "mtu": 9000},
    "eth1": {"up": False, "addresses": ["10.1.0.5"], "speed_mbps": None, "mtu": 1500},
    "docker0": {"up": True, "addresses": ["172.17.0.1"], "speed_mbps": None, "mtu": 1500},
    "ib0": {"up": True, "addresses": [], "speed_mbps": None, "mtu": 2044},
}


# -------------------------------------------------- socket interface names
@pytest.mark.integration
def test_bad_nccl_socket_ifname_fails_naming_it(run_probe: Callable[..., Report], clean_env: Any) -> None:
    clean_env.setenv("NCCL_SOCKET_IFNAME", "bogus7")
    report = run_probe()
    found = check(report, "NCCL_SOCKET_IFNAME")
    assert found.status == Status.FAIL
    assert "bogus7" in found.detail and "Fix:" in found.detail
    assert report.verdict == Verdict.FAIL


@pytest.mark.integration
def test_loopback_nccl_socket_ifname_passes_on_this_host(
    run_probe: Callable[..., Report], clean_env: Any
) -> None:
    clean_env.setenv("NCCL_SOCKET_IFNAME", "lo")
    assert check(run_probe(), "NCCL_SOCKET_IFNAME").status == Status.PASS


@pytest.mark.parametrize(
    ("value", "status", "named"),
    [
        ("eth", Status.PASS, "eth0"),  # a prefix: eth0 (up) and eth1 (down) match
        ("=eth", Status.FAIL, "matches no interface"),  # '=': exact names only
        ("=eth0", Status.PASS, "eth0"),
        ("eth1", Status.FAIL, "eth1 (down)"),
        ("ib", Status.FAIL, "ib0 (up, no address)"),
        ("eth0,eht1", Status.WARN, "eht1"),  # a typo beside a working name
        ("^docker,lo", Status.PASS, "eth0"),  # exclusion leaves eth0
        ("^=eth0", Status.PASS, "lo"),  # exact exclusion: eth1 is down, lo and docker0 left
        ("^eth,lo,docker", Status.FAIL, "excludes every interface that is up"),
        (None, Status.PASS, "unset"),
    ],
)
def test_nccl_socket_ifname_syntax(value: str | None, status: Status, named: str) -> None:
    found = judge.judge_socket_ifname("NCCL_SOCKET_IFNAME", value, INTERFACES)
    assert found.status == status, found.detail
    assert named in found.detail


@pytest.mark.parametrize(
    ("value", "status", "named"),
    [
        ("eth0", Status.PASS, "eth0"),
        ("eth0,lo", Status.PASS, "lo"),
        ("eth", Status.FAIL, "did you mean eth0, eth1"),  # gloo takes no prefixes (measured)
        ("^lo", Status.FAIL, "not NCCL's ^/= syntax"),
        ("eth1", Status.FAIL, "eth1 (down)"),
    ],
)
def test_gloo_socket_ifname_takes_exact_names(value: str, status: Status, named: str) -> None:
    found = judge.judge_socket_ifname("GLOO_SOCKET_IFNAME", value, INTERFACES)
    assert found.status == status, found.detail
    assert named in found.detail


def test_parse_nccl_ifname() -> None:
    assert judge.parse_nccl_ifname("^=docker0, lo") == (True, True, ["docker0", "lo"])
    assert judge.parse_nccl_ifname("eth,ib") == (False, False, ["eth", "ib"])


# ---------------------------------------------------------------- secrets
@pytest.mark.parametrize(
    "name",
    [
        "WANDB_API_KEY",
        "HF_TOKEN",
        "SLURM_JWT",
        "AWS_SECRET_ACCESS_KEY",
        "DB_PASSWORD",
        "MY_APIKEY",
        "GITHUBTOKEN",
        "NCCL_FAKE_PASSWD",
        "session_cookie",
        "DB_PWD",
        "HTTP_AUTH",
        "GOOGLE_APPLICATION_CREDENTIALS",
        "SSH_PRIVATE_KEY_PATH",
    ],
)
def test_secret_names(name: str) -> None:
    assert redact.is_secret_name(name)


@pytest.mark.parametrize(
    "name",
    [
        "NCCL_IB_HCA",
        "NCCL_IB_PKEY",  # an InfiniBand partition key: needed to debug IB, not a secret
        "NCCL_SOCKET_IFNAME",
        "MASTER_ADDR",
        "SLURM_JOB_ID",
        "SLURM_CPUS_PER_TASK",
        "TORCH_NCCL_ASYNC_ERROR_HANDLING",
        "CUDA_VISIBLE_DEVICES",
        "PWD",
        "GIT_AUTHOR_NAME",
        "NCCL_P2P_DISABLE",
    ],
)
def test_harmless_names_are_not_redacted(name: str) -> None:
    assert not redact.is_secret_name(name)


@pytest.mark.integration
def test_secret_redacted_in_table_and_json(
    run_probe: Callable[..., Report], clean_env: Any, tmp_path: Path
) -> None:
    clean_env.setenv("SLURM_JWT", SECRET)
    clean_env.setenv("NCCL_FAKE_API_TOKEN", SECRET)
    clean_env.setenv("TORCHELASTIC_RDZV_ENDPOINT", f"etcd://alice:{SECRET}@127.0.0.1:2379")
    clean_env.setenv("NCCL_IB_HCA", "mlx5_0:1")
    report = run_probe()
    path = tmp_path / "env.json"
    write_json(report, str(path))
    for text in (path.read_text(), rendered(report)):
        assert SECRET not in text
        assert "<redacted>" in text
        assert "mlx5_0:1" in text  # harmless values stay readable
        assert "etcd://alice:<redacted>@127.0.0.1:2379" in text
    rows = {r["name"]: r["value"] for r in json.loads(path.read_text())["tables"]["environment"]}
    assert rows["SLURM_JWT"] == rows["NCCL_FAKE_API_TOKEN"] == "<redacted>"


# --------------------------------------------------------------- /dev/shm
@pytest.mark.integration
def test_small_shm_warns_and_still_exits_0(
    run_probe: Callable[..., Report], monkeypatch: pytest.MonkeyPatch
) -> None:
    small = SimpleNamespace(total=64 * units.MIB, free=64 * units.MIB)
    monkeypatch.setattr(probe.shutil, "disk_usage", lambda path: small)  # a container's default /dev/shm
    report = run_probe()
    found = check(report, "/dev/shm")
    assert found.status == Status.WARN
    assert "64.0 MiB" in found.detail and "--shm-size" in found.detail
    assert report.verdict == Verdict.PASS  # a warning alone does not fail the command


@pytest.mark.integration
def test_shm_path_is_injectable(run_probe: Callable[..., Report], tmp_path: Path) -> None:
    measured = check(run_probe(shm_path=str(tmp_path)), "/dev/shm")
    assert str(tmp_path) in measured.detail
    assert check(run_probe(shm_path=str(tmp_path / "absent")), "/dev/shm").status == Status.SKIP


def test_shm_thresholds() -> None:
    assert judge.judge_shm(16 * units.GIB).status == Status.PASS
    assert judge.judge_shm(units.GIB - 1).status == Status.WARN
    assert judge.judge_shm(None).status == Status.SKIP


# ------------------------------------------------------ GPUs and devices
@pytest.mark.integration
def test_cuda_visible_devices_naming_absent_devices_fails(
    run_probe: Callable[..., Report], clean_env: Any
) -> None:
    clean_env.setenv("CUDA_VISIBLE_DEVICES", "0,5,1")
    found = check(run_probe(gpus=4), "CUDA_VISIBLE_DEVICES")
    assert found.status == Status.FAIL
    assert "names 5" in found.detail and "4 GPUs (0..3)" in found.detail
    # CUDA stops at the first absent device: 1, listed after 5, is dropped too.
    assert "only these stay visible: 0;" in found.detail


@pytest.mark.parametrize(
    ("value", "status", "named"),
    [
        ("0,1", Status.PASS, "2 of 4 GPUs"),
        ("3", Status.PASS, "1 of 4"),
        ("GPU-00000002", Status.PASS, "1 of 4"),  # CUDA accepts a UUID prefix
        ("GPU-deadbeef", Status.FAIL, "GPU-deadbeef"),
        ("0,0", Status.FAIL, "listed twice"),
        ("0,abc,1", Status.WARN, "'abc' is not a device number"),
        ("", Status.FAIL, "empty entry"),
        ("-1", Status.FAIL, "'-1' is not a device number"),
    ],
)
def test_visible_devices_judge(value: str, status: Status, named: str, tmp_path: Path) -> None:
    physical = probe.physical_gpus(fake_nvidia(tmp_path / "nvidia", 4))
    found = judge.judge_visible_devices(value, physical, visible=0)
    assert found.status == status, found.detail
    assert named in found.detail


def test_visible_devices_without_driver_info() -> None:
    assert judge.judge_visible_devices("0,1", None, visible=0).status == Status.SKIP
    assert judge.judge_visible_devices("0,1,2", None, visible=2).status == Status.FAIL
    assert judge.judge_visible_devices(None, None, visible=0).status == Status.PASS


@pytest.mark.integration
def test_slurm_narrowed_visible_devices_with_local_rank_fails(
    run_probe: Callable[..., Report], clean_env: Any
) -> None:
    """srun --gpus-per-task=1: the task sees one GPU, but LOCAL_RANK still counts the node's."""
    for name, value in {
        "SLURM_JOB_ID": "4242",
        "SLURM_PROCID": "3",
        "SLURM_LOCALID": "3",
        "LOCAL_RANK": "3",
        "CUDA_VISIBLE_DEVICES": "3",
    }.items():
        clean_env.setenv(name, value)
    report = run_probe(gpus=4)
    assert check(report, "CUDA_VISIBLE_DEVICES").status == Status.PASS  # GPU 3 exists
    found = check(report, "LOCAL_RANK vs visible GPUs")
    assert found.status == Status.FAIL
    assert "LOCAL_RANK=3" in found.detail and "leaves 1 visible" in found.detail
    assert "Slurm narrowed" in found.detail and "invalid device ordinal" in found.detail


def test_local_rank_judge_cases() -> None:
    physical = [{"model": "H100", "uuid": f"GPU-{i}"} for i in range(8)]
    slurm_zero = {"SLURM_JOB_ID": "1", "SLURM_LOCALID": "0", "CUDA_VISIBLE_DEVICES": "5"}
    assert judge.judge_local_rank(slurm_zero, physical, 0).status == Status.PASS
    # Without LOCAL_RANK, SLURM_LOCALID is what scripts use as the local rank.
    slurm_two = {"SLURM_JOB_ID": "1", "SLURM_LOCALID": "2", "CUDA_VISIBLE_DEVICES": "2"}
    assert "SLURM_LOCALID=2" in judge.judge_local_rank(slurm_two, physical, 0).detail
    assert judge.judge_local_rank({"LOCAL_RANK": "9"}, physical, 8).status == Status.FAIL
    assert judge.judge_local_rank({"LOCAL_RANK": "7"}, physical, 8).status == Status.PASS
    assert judge.judge_local_rank({}, physical, 8).status == Status.SKIP
    assert judge.judge_local_rank({"LOCAL_RANK": "3"}, None, 0).status == Status.PASS  # CPU ranks


def test_cuda_build_judge() -> None:
    physical = [{"model": "H100", "uuid": "GPU-0"}]
    cuda = {"cuda_build": "12.4", "gpus": [], "cuda_warnings": ["driver too old (found version 11040)"]}
    broken = judge.judge_cuda_build(cuda, physical, "470.57", None)
    assert broken.status == Status.FAIL and "driver too old" in broken.detail
    assert judge.judge_cuda_build(cuda, physical, "470.57", "").status == Status.WARN  # hid all on purpose
    assert judge.judge_cuda_build(cuda, None, None, None).status == Status.WARN  # CI box, CUDA wheel
    cpu = {"cuda_build": None, "version": "2.13.0+cpu", "gpus": []}
    assert judge.judge_cuda_build(cpu, physical, "550.1", None).status == Status.WARN
    assert judge.judge_cuda_build(cpu, None, None, None).status == Status.PASS


def test_nvidia_proc_files_parse(tmp_path: Path) -> None:
    root = fake_nvidia(tmp_path / "nvidia", 2, driver="560.35.03", model="NVIDIA H200")
    assert probe.nvidia_driver_version(root) == "560.35.03"
    gpus = probe.physical_gpus(root)
    assert gpus is not None and [g["model"] for g in gpus] == ["NVIDIA H200"] * 2
    assert gpus[1]["uuid"].startswith("GPU-00000001") and gpus[1]["bus"] == "0000:19:00.0"
    assert probe.physical_gpus(tmp_path / "absent") is None


TOPO = (
    "\t\x1b[4mGPU0\tGPU1\tNIC0\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\x1b[0m\n"
    "GPU0\t X \tNV18\tPXB\t0-47\t0\t\tN/A\n"
    "GPU1\tNV18\t X \tSYS\t48-95\t1\t\tN/A\n"
    "NIC0\tPXB\tSYS\t X \t\t\t\t\n"
    "\n"
    "Legend:\n\n  X    = Self\n  NV#  = Connection traversing a bonded set of # NVLinks\n"
)


def test_topology_parse() -> None:
    rows = probe.parse_topology(TOPO)
    assert [r["device"] for r in rows] == ["GPU0", "GPU1", "NIC0"]
    assert rows[0]["GPU1"] == "NV18" and rows[1]["CPU Affinity"] == "48-95"
    assert rows[0]["GPU NUMA ID"] == "N/A"
    assert probe.parse_topology("") == []


@pytest.mark.integration
def test_fake_nvidia_smi_gives_topology_and_a_hung_one_is_killed(
    run_probe: Callable[..., Report], tmp_path: Path
) -> None:
    smi = tmp_path / "nvidia-smi"
    smi.write_text(f"#!/bin/sh\ncat <<'EOF'\n{TOPO}EOF\n")
    smi.chmod(0o755)
    report = run_probe(nvidia_smi=str(smi))
    topology = report.table("topology")
    assert topology is not None and topology.rows[0]["GPU1"] == "NV18"

    # A hung nvidia-smi (and anything it started) is killed at the timeout, not left behind:
    # every call that got as far as starting its child is checked.
    pids = tmp_path / "pids"
    write_hung_tool(smi, pids, sleep_s=30)
    start = time.perf_counter()
    report = run_probe(nvidia_smi=str(smi), smi_timeout_s=1.0)
    assert time.perf_counter() - start < 8
    assert any("did not finish" in note for note in report.notes)
    children = started_children(pids)
    assert children  # within 1 s at least one shell started its sleep
    assert all_end(children)


@pytest.mark.integration
def test_absent_tools_are_tolerated(run_probe: Callable[..., Report]) -> None:
    report = run_probe(nvidia_smi="no-such-nvidia-smi", ib_root="/no/such/ib")
    assert check(report, "InfiniBand ports").status == Status.SKIP
    assert report.table("topology") is None and report.table("infiniband") is None


# ----------------------------------------------- InfiniBand, ulimits, OMP
def fake_ib(root: Path, state: str = "4: ACTIVE") -> Path:
    port = root / "mlx5_0" / "ports" / "1"
    port.mkdir(parents=True)
    (port / "state").write_text(state + "\n")
    (port / "rate").write_text("400 Gb/sec (4X NDR)\n")
    (port / "link_layer").write_text("InfiniBand\n")
    return root


@pytest.mark.integration
def test_infiniband_probe_and_memlock(run_probe: Callable[..., Report], tmp_path: Path) -> None:
    report = run_probe(ib_root=str(fake_ib(tmp_path / "ib")))
    table = report.table("infiniband")
    assert table is not None and table.rows[0]["rate"].startswith("400 Gb/sec")
    assert check(report, "InfiniBand ports").status == Status.PASS
    down = probe.infiniband_ports(fake_ib(tmp_path / "ib-down", "1: DOWN"))
    assert judge.judge_infiniband(down).status == Status.WARN


def test_memlock_judge() -> None:
    ports = [{"device": "mlx5_0", "port": "1", "state": "4: ACTIVE"}]
    assert judge.judge_memlock({"soft": 8 * units.MIB}, ports).status == Status.FAIL
    assert judge.judge_memlock({"soft": units.GIB}, ports).status == Status.WARN
    assert judge.judge_memlock({"soft": units.UNLIMITED}, ports).status == Status.PASS
    assert judge.judge_memlock({"soft": 64 * 1024}, []).status == Status.PASS  # no RDMA, no matter


def test_omp_judge() -> None:
    assert judge.judge_omp(None, 64).status == Status.WARN
    assert judge.judge_omp(None, 4).status == Status.PASS
    assert judge.judge_omp("8", 64).status == Status.PASS
    assert judge.judge_omp("zero", 64).status == Status.WARN


def test_backends_judge() -> None:
    assert judge.judge_backends({"distributed": False}, 0).status == Status.FAIL
    assert judge.judge_backends({"distributed": True, "gloo": True}, 8).status == Status.FAIL
    assert judge.judge_backends({"distributed": True, "gloo": True, "nccl": True}, 8).status == Status.PASS


# ------------------------------------------------ MASTER_ADDR / MASTER_PORT
@pytest.mark.integration
@pytest.mark.parametrize("port", ["abc", "0", "70000", "-1", " "])
def test_invalid_master_port_fails(run_probe: Callable[..., Report], clean_env: Any, port: str) -> None:
    clean_env.setenv("MASTER_ADDR", "127.0.0.1")
    clean_env.setenv("MASTER_PORT", port)
    found = check(run_probe(), "MASTER_PORT")
    assert found.status == Status.FAIL and "not a TCP port" in found.detail


@pytest.mark.integration
def test_free_master_port_passes(run_probe: Callable[..., Report], clean_env: Any) -> None:
    clean_env.setenv("MASTER_ADDR", "127.0.0.1")
    clean_env.setenv("MASTER_PORT", str(free_port()))
    report = run_probe()
    assert check(report, "MASTER_ADDR").status == Status.PASS
    assert "this host" in check(report, "MASTER_ADDR").detail
    found = check(report, "MASTER_PORT")
    assert found.status == Status.PASS and "free" in found.detail


@pytest.mark.integration
def test_master_port_in_use_fails_outside_a_launch(
    run_probe: Callable[..., Report], clean_env: Any, listening: int
) -> None:
    clean_env.setenv("MASTER_ADDR", "127.0.0.1")
    clean_env.setenv("MASTER_PORT", str(listening))
    found = check(run_probe(), "MASTER_PORT")
    assert found.status == Status.FAIL
    assert f"port {listening} is already in use" in found.detail and "ss -ltnp" in found.detail
    # Inside a running job the port is held by the job's own store: that is fine.
    clean_env.setenv("RANK", "0")
    clean_env.setenv("WORLD_SIZE", "2")
    assert check(run_probe(), "MASTER_PORT").status == Status.PASS


@pytest.mark.integration
def test_remote_master_reachability_on_loopback(
    run_probe: Callable[..., Report], clean_env: Any, listening: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No address taken as this host's makes 127.0.0.1 look like another host: the probe connects
    instead of binding."""
    monkeypatch.setattr(probe, "locality", lambda interfaces: lambda address: False)
    clean_env.setenv("MASTER_ADDR", "127.0.0.1")
    clean_env.setenv("MASTER_PORT", str(listening))
    report = run_probe()
    assert "another host" in check(report, "MASTER_ADDR").detail
    assert "reachable" in check(report, "MASTER_PORT").detail
    clean_env.setenv("MASTER_PORT", str(free_port()))
    refused = check(run_probe(), "MASTER_PORT")
    assert refused.status == Status.PASS and "nothing listens yet" in refused.detail
    clean_env.setenv("RANK", "1")
    clean_env.setenv("WORLD_SIZE", "2")
    assert check(run_probe(), "MASTER_PORT").status == Status.WARN


def test_master_judge_failures_without_traffic() -> None:
    """Outcomes that would need a real network are judged from synthetic probe facts."""
    base = {"addr": "10.0.0.1", "port_text": "29500", "port": 29500, "resolved": ["10.0.0.1"], "local": False}
    timeout = judge.judge_master({**base, "connect": "timeout"}, {})[1]
    assert timeout.status == Status.FAIL and "firewall" in timeout.detail
    unresolved = {**base, "resolved": [], "resolve_error": "[Errno -2] Name or service not known"}
    assert judge.judge_master(unresolved, {})[0].status == Status.FAIL
    slow = {**base, "resolved": [], "resolve_error": "timeout: the resolver did not answer within 1 s"}
    assert judge.judge_master(slow, {})[0].status == Status.WARN
    loop = {**base, "addr": "localhost", "resolved": ["127.0.0.1"], "local": True, "bind": "free"}
    multi = judge.judge_master(loop, {"SLURM_NNODES": "2"})[0]
    assert multi.status == Status.FAIL and "loopback" in multi.detail
    assert judge.judge_master(loop, {"SLURM_NNODES": "1"})[0].status == Status.PASS
    assert judge.judge_master({**loop, "bind": "denied"}, {})[1].status == Status.FAIL
    unset = judge.judge_master({"addr": None, "port_text": None, "port": None}, {})
    assert [c.status for c in unset] == [Status.SKIP, Status.SKIP]


@pytest.mark.integration
def test_a_crashed_master_probe_is_a_finding(
    run_probe: Callable[..., Report], clean_env: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    def boom(*args: Any) -> Any:
        raise RuntimeError("probe exploded")

    monkeypatch.setattr(probe, "probe_master", boom)  # looked up in probe
    clean_env.setenv("MASTER_ADDR", "127.0.0.1")
    clean_env.setenv("MASTER_PORT", "29500")
    found = check(run_probe(), "MASTER_ADDR")
    assert found.status == Status.WARN and "probe exploded" in found.detail


def test_resolve_is_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    def hang(*args: Any, **kwargs: Any) -> Any:
        time.sleep(1)
        raise OSError("late")

    monkeypatch.setattr(socket, "getaddrinfo", hang)
    start = time.perf_counter()
    addrs, error = master.resolve("master.example", timeout_s=0.2)
    assert time.perf_counter() - start < 1
    assert addrs == [] and error is not None and error.startswith("timeout")


# ------------------------------------------------------- every node agrees
def fingerprint(**changes: Any) -> dict[str, Any]:
    base = {
        "torch": "2.5.1+cu124",
        "cuda": "12.4",
        "nccl": "2.21.5",
        "driver": "550.54.15",
        "gpu": "NVIDIA H100 80GB HBM3",
        "python": "3.11.7",
    }
    return {**base, **changes}


def identities(hosts: list[str], per_host: int) -> list[dict[str, Any]]:
    return [
        {"rank": h * per_host + i, "local_rank": i, "host": host}
        for h, host in enumerate(hosts)
        for i in range(per_host)
    ]


def test_one_upgraded_host_is_named() -> None:
    ids = identities(["node0", "node1", "node2", "node3"], 2)
    fps = [
        fingerprint(torch="2.6.0+cu126", nccl="2.23.4") if i["host"] == "node2" else fingerprint()
        for i in ids
    ]
    found = agreement.judge_agreement(fps, ids)
    assert found.status == Status.FAIL
    assert found.hosts == ["node2"] and found.ranks == [4, 5]
    assert "torch differs: node2 has 2.6.0+cu126, the other 3 hosts 2.5.1+cu124" in found.detail
    assert "NCCL differs: node2 has 2.23.4" in found.detail


def test_driver_or_gpu_difference_warns() -> None:
    ids = identities(["a", "b", "c"], 1)
    fps = [fingerprint(), fingerprint(driver="535.104.05"), fingerprint()]
    found = agreement.judge_agreement(fps, ids)
    assert found.status == Status.WARN and found.hosts == ["b"] and "driver differs" in found.detail


def test_majority_counts_hosts_not_ranks() -> None:
    """One node with 8 ranks is one upgrade, even against three nodes of one rank."""
    ids = identities(["big"], 8) + [{"rank": 8 + i, "local_rank": 0, "host": f"small{i}"} for i in range(3)]
    fps = [fingerprint(cuda="12.6")] * 8 + [fingerprint()] * 3
    found = agreement.judge_agreement(fps, ids)
    assert found.hosts == ["big"] and found.ranks == list(range(8))


def test_no_majority_names_every_host() -> None:
    ids = identities(["a", "b"], 1)
    found = agreement.judge_agreement([fingerprint(), fingerprint(torch="2.4.0")], ids)
    assert found.status == Status.FAIL and found.hosts == ["a", "b"] and "no majority" in found.detail


def test_agreeing_hosts_pass_and_a_missing_fingerprint_differs() -> None:
    ids = identities(["a", "b", "c"], 2)
    agree = agreement.judge_agreement([fingerprint()] * 6, ids)
    assert agree.status == Status.PASS and "3 hosts agree" in agree.detail and "NCCL 2.21.5" in agree.detail
    one = agreement.judge_agreement([fingerprint()] * 2, identities(["a"], 2))
    assert one.status == Status.PASS and one.detail.startswith("1 host agrees: ")
    fps: list[dict[str, Any] | None] = [fingerprint()] * 6
    fps[5] = None
    assert agreement.judge_agreement(fps, ids).ranks == [5]
    table = agreement.fingerprint_table([fingerprint()] * 6, ids)
    assert [r["host"] for r in table.rows] == ["a", "b", "c"] and table.rows[0]["ranks"] == "0, 1"


def test_rank_fingerprint_is_cheap_and_real() -> None:
    import platform

    import torch

    rank_fingerprint()  # the first call may touch files for the first time
    times = []
    for _ in range(5):
        start = time.perf_counter()
        fp = rank_fingerprint()
        times.append(time.perf_counter() - start)
    assert statistics.median(times) < 0.05
    assert fp["torch"] == torch.__version__ and fp["python"] == platform.python_version()
    assert set(fp) == {key for key, _, _ in agreement.FINGERPRINT_FIELDS}
    json.dumps(fp)  # travels through all_gather_object and into the JSON report


# ------------------------------------------------------------- end to end
def _clean_environ() -> dict[str, str]:
    return {
        k: v
        for k, v in os.environ.items()
        if not (k in variables.DIST_ENV_NAMES or k.startswith(variables.DIST_ENV_PREFIXES))
    }


@pytest.mark.integration
def test_real_run_on_this_machine(tmp_path: Path) -> None:
    path = tmp_path / "env.json"
    start = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "ddpcheck", "env", "--json", str(path), "--junit", str(tmp_path / "env.xml")],
        env={**_clean_environ(), "NO_COLOR": "1"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    wall = time.perf_counter() - start
    assert done.returncode == 0, done.stdout + done.stderr
    data = json.loads(path.read_text())
    assert data["command"] == "env" and data["verdict"] == "pass"
    names = [c["name"] for c in data["checks"]]
    assert names[:4] == [
        "distributed backends",
        "CUDA build vs GPUs",
        "CUDA_VISIBLE_DEVICES",
        "LOCAL_RANK vs visible GPUs",
    ]
    assert {"NCCL_SOCKET_IFNAME", "MASTER_PORT", "/dev/shm", "OMP_NUM_THREADS"} <= set(names)
    assert {"software", "host", "network"} <= set(data["tables"])
    assert data["world"]["torch"] and data["world"]["nodes"] == 1
    assert "Checks" in done.stdout and "ddpcheck env" in done.stdout
    assert (tmp_path / "env.xml").read_text().count("<testcase") == len(names)
    assert wall < 20  # the 3 s target is measured by tests/perf/bench_startup.py, not here


@pytest.mark.integration
def test_real_run_exits_1_on_a_failure_and_json_to_stdout() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "ddpcheck", "env", "--json", "-", "--quiet"],
        env={**_clean_environ(), "NCCL_SOCKET_IFNAME": "bogus7", "NO_COLOR": "1"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 1, done.stderr
    data = json.loads(done.stdout)  # the human output went to stderr
    failing = [c for c in data["checks"] if c["status"] == "FAIL"]
    assert [c["name"] for c in failing] == ["NCCL_SOCKET_IFNAME"]
    assert "FAIL NCCL_SOCKET_IFNAME" in done.stderr


@pytest.mark.integration
def test_unwritable_json_path_is_a_usage_error(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "ddpcheck", "env", "--json", str(tmp_path / "no" / "dir" / "x.json")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert done.stderr.startswith("ddpcheck: error: --json") and done.stderr.count("\n") == 1


@pytest.mark.integration
def test_help_and_env_module_import_no_torch() -> None:
    code = (
        "import sys, ddpcheck.cli, ddpcheck.checks.env; assert 'torch' not in sys.modules, 'torch imported'"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


# ------------------------------------------------------------------ on a GPU
@needs_gpu
def test_gpu_host_is_seen_whole() -> None:
    """On a CUDA machine: torch's GPUs, the driver's, nvidia-smi's topology and the fingerprint agree."""
    import torch

    report = env_check.run_env()
    assert check(report, "CUDA build vs GPUs").status == Status.PASS, check(report, "CUDA build vs GPUs")
    assert check(report, "distributed backends").status == Status.PASS
    gpus = report.table("gpus")
    assert gpus is not None and len(gpus.rows) == torch.cuda.device_count()
    physical = probe.physical_gpus(Path("/proc/driver/nvidia"))
    if physical is not None and "CUDA_VISIBLE_DEVICES" not in os.environ:
        # torch's UUIDs, once given the GPU- prefix, are the driver's.
        assert {g["uuid"] for g in gpus.rows} == {g["uuid"] for g in physical}
    if shutil.which("nvidia-smi"):
        topology = report.table("topology")
        assert topology is not None and topology.rows[0]["device"] == "GPU0"
    torch.cuda.set_device(0)  # as the harness does before it takes the fingerprint
    rank_fingerprint()
    start = time.perf_counter()
    fp = rank_fingerprint()
    assert time.perf_counter() - start < 0.05
    assert fp["gpu"] == torch.cuda.get_device_name(0) and fp["nccl"] and fp["cuda"] == torch.version.cuda
