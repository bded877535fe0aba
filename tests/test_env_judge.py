"""Boundary tests of `ddpcheck env`'s pure judges (`checks/env/judge.py`, `rank/agreement.py`).

Each test pins one rule: the status on either side of a threshold, which variable, device,
interface, rank or host a verdict names, and the detail sentence word for word.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest

from ddpcheck.checks.env import judge, master
from ddpcheck.rank import agreement
from ddpcheck.report.model import Check, Status, Table
from ddpcheck.report.units import GIB, MIB, UNLIMITED

FIX_VISIBLE = (
    "Fix: list device numbers 0..N-1 (or UUIDs from nvidia-smi -L) of GPUs this host has, each once."
)
NCCL_WHY = "NCCL finds no socket interface and init fails ('no socket interface found') or hangs"
MEMLOCK_FIX = (
    "Fix: set 'ulimit -l unlimited' (memlock in /etc/security/limits.conf; for Docker "
    "--ulimit memlock=-1; under Slurm, PropagateResourceLimits or the slurmd unit's LimitMEMLOCK)."
)


def gpus(count: int) -> list[dict[str, Any]]:
    """A host's GPUs as the driver lists them (`physical_gpus`)."""
    return [{"model": "H100", "uuid": f"GPU-{i}abc"} for i in range(count)]


# ------------------------------------------------------------------ backends
def test_no_distributed_fails_whatever_else_is_there() -> None:
    """Without torch.distributed nothing can start: FAIL, the other backends are not even listed."""
    found = judge.judge_backends({"distributed": False, "nccl": True, "gloo": True}, 0)
    assert found == Check(
        "distributed backends",
        Status.FAIL,
        "torch.distributed is not available in this torch build: no process group can start. "
        "Fix: install a torch build with distributed support (the PyPI wheels for Linux have it).",
    )


@pytest.mark.parametrize(
    ("backends", "visible", "status", "detail"),
    [
        (
            {"gloo": True, "mpi": True},
            1,
            Status.FAIL,
            "available: gloo, mpi; 1 GPUs visible but no nccl: GPU ranks cannot communicate at GPU "
            "speed. Fix: install a CUDA build of torch from pytorch.org.",
        ),
        (
            {"ucc": True, "nccl": True},
            0,
            Status.WARN,
            "available: nccl, ucc; no gloo: CPU ranks and CPU-side collectives (object gathers, barriers "
            "in many libraries) cannot run. Fix: a standard torch build includes gloo.",
        ),
        (
            {"mpi": False},
            0,
            Status.WARN,
            "available: none; no gloo: CPU ranks and CPU-side collectives (object gathers, barriers "
            "in many libraries) cannot run. Fix: a standard torch build includes gloo.",
        ),
        ({"gloo": True}, 0, Status.PASS, "available: gloo"),  # no GPU: no nccl needed
        (
            {"ucc": True, "mpi": True, "gloo": True, "nccl": True},
            8,
            Status.PASS,
            "available: nccl, gloo, mpi, ucc",
        ),
    ],
)
def test_backends(backends: dict[str, bool], visible: int, status: Status, detail: str) -> None:
    """nccl is required from one visible GPU on, gloo always; listed in nccl, gloo, mpi, ucc order."""
    assert judge.judge_backends({"distributed": True, **backends}, visible) == Check(
        "distributed backends", status, detail
    )


# ------------------------------------------------------------------ CUDA build
def cuda_torch(*names: str, warnings: list[str] | None = None, key: str = "cuda_build") -> dict[str, Any]:
    """torch facts of a CUDA (or ROCm, key='hip_build') build seeing GPUs of these models."""
    return {key: "12.4", "version": "2.5.0", "gpus": [{"name": n} for n in names], "cuda_warnings": warnings}


def test_cuda_build_seeing_gpus_lists_their_models_once_sorted() -> None:
    found = judge.judge_cuda_build(cuda_torch("B200", "A100", "B200"), gpus(3), "550.1", None)
    assert found == Check(
        "CUDA build vs GPUs", Status.PASS, "3 GPUs visible to torch (CUDA 12.4): A100, B200"
    )
    one = judge.judge_cuda_build(cuda_torch("A100", key="hip_build"), None, None, None)
    assert one == Check("CUDA build vs GPUs", Status.PASS, "1 GPU visible to torch (CUDA 12.4): A100")


def test_cuda_build_seeing_gpus_with_a_warning_warns_quoting_it() -> None:
    found = judge.judge_cuda_build(cuda_torch("A100", warnings=["w1", "w2"]), gpus(1), None, None)
    assert found == Check(
        "CUDA build vs GPUs",
        Status.WARN,
        "1 GPU visible to torch (CUDA 12.4): A100; torch warned: w1 | w2",
    )


@pytest.mark.parametrize("hidden", ["", "-1", "GPU-a,GPU-a"])
def test_cuda_visible_devices_hiding_every_gpu_warns_when_a_driver_is_there(hidden: str) -> None:
    """Hidden on purpose (a driver is loaded, even with no GPU listed): a WARN, not a broken driver."""
    found = judge.judge_cuda_build(cuda_torch(), None, "550.1", hidden)
    assert found == Check(
        "CUDA build vs GPUs",
        Status.WARN,
        f"CUDA_VISIBLE_DEVICES={hidden!r} hides every GPU of this host from torch: ranks will run on "
        "CPU. Fix: unset it, or list the GPUs this job may use.",
    )


def test_cuda_visible_devices_hiding_nothing_on_a_host_without_driver_is_the_ci_warning() -> None:
    found = judge.judge_cuda_build(cuda_torch(), None, None, "")
    assert found.status == Status.WARN and found.detail.startswith("torch is built with CUDA 12.4 but this")


TORCH_SEES_NONE = (
    ", but torch sees no GPU{said}. Usually the driver is older than torch's CUDA needs, or a container "
    "was started without GPU access. Fix: update the driver or install the torch wheel for its CUDA "
    "version (nvidia-smi shows the highest CUDA it supports); in Docker use --gpus all."
)


@pytest.mark.parametrize(
    ("physical", "driver", "cuda_visible", "where"),
    [
        (gpus(1), "470.57", None, "this host has 1 NVIDIA GPU (driver 470.57)"),
        (gpus(2), None, "0", "this host has 2 NVIDIA GPUs"),  # a visible list that hides nothing
        ([], "470.57", None, "an NVIDIA driver is loaded (driver 470.57)"),
    ],
)
def test_cuda_build_seeing_no_gpu_on_a_gpu_host_fails(
    physical: list[dict[str, Any]], driver: str | None, cuda_visible: str | None, where: str
) -> None:
    found = judge.judge_cuda_build(cuda_torch(), physical, driver, cuda_visible)
    assert found == Check(
        "CUDA build vs GPUs",
        Status.FAIL,
        f"torch is built with CUDA 12.4 and {where}" + TORCH_SEES_NONE.format(said=""),
    )


def test_cuda_build_seeing_no_gpu_quotes_torchs_warnings() -> None:
    found = judge.judge_cuda_build(cuda_torch(warnings=["old driver"]), gpus(1), None, None)
    assert found.detail == (
        "torch is built with CUDA 12.4 and this host has 1 NVIDIA GPU"
        + TORCH_SEES_NONE.format(said="; torch warned: old driver")
    )


def test_cuda_build_on_a_host_without_gpu_or_driver_warns() -> None:
    assert judge.judge_cuda_build(cuda_torch(), None, None, None) == Check(
        "CUDA build vs GPUs",
        Status.WARN,
        "torch is built with CUDA 12.4 but this host has no NVIDIA GPU or driver: only CPU ranks over "
        "gloo can run here. Fine for CI; on a GPU node, install the NVIDIA driver.",
    )


def test_cpu_torch_on_a_gpu_host_warns_and_on_a_cpu_host_passes() -> None:
    cpu = {"cuda_build": None, "version": "2.5.0+cpu", "gpus": []}
    assert judge.judge_cuda_build(cpu, gpus(2), "550.1", None) == Check(
        "CUDA build vs GPUs",
        Status.WARN,
        "torch 2.5.0+cpu is a CPU-only build but this host has 2 NVIDIA GPU(s): every rank will run "
        "on CPU over gloo. Fix: install a CUDA build from pytorch.org.",
    )
    # A driver without GPUs does not make a CPU build wrong.
    assert judge.judge_cuda_build(cpu, [], "550.1", None) == Check(
        "CUDA build vs GPUs", Status.PASS, "CPU-only torch on a host without GPUs: CPU ranks over gloo"
    )


# ------------------------------------------------------------------ CUDA_VISIBLE_DEVICES
@pytest.mark.parametrize(
    ("value", "kept", "stopped"),
    [
        ("0, 1", ["0", "1"], None),
        ("+1,02,3x", ["1", "2", "3"], None),  # CUDA reads the leading number of each entry
        ("0", ["0"], None),
        ("-0", ["0"], None),
        ("1,-1,2", ["1"], "'-1' is not a device number, so it and everything after it is ignored"),
        ("0,,1", ["0"], "an empty entry is not a device number, so it and everything after it is ignored"),
        ("2,x", ["2"], "'x' is not a device number, so it and everything after it is ignored"),
        ("1,01", [], "device 1 is listed twice (CUDA then shows no device at all)"),
        ("GPU-a, GPU-b", ["GPU-a", "GPU-b"], None),
        ("GPU-a,GPU-a", [], "GPU-a is listed twice (CUDA then shows no device at all)"),
        ("GPU-a,0,GPU-b", ["GPU-a"], "'0' is not a GPU- UUID, so it and everything after it is ignored"),
        ("MIG-a,GPU-b", ["MIG-a"], "'GPU-b' is not a MIG- UUID, so it and everything after it is ignored"),
    ],
)
def test_parse_visible_devices(value: str, kept: list[str], stopped: str | None) -> None:
    """CUDA's reading: numbers normalised, the list cut at the first non-device, emptied by a repeat."""
    assert judge.parse_visible_devices(value) == (kept, stopped)


def visible_check(status: Status, detail: str) -> Check:
    return Check("CUDA_VISIBLE_DEVICES", status, detail)


def test_visible_devices_unset_passes() -> None:
    assert judge.judge_visible_devices(None, gpus(2), 2) == visible_check(
        Status.PASS, "unset: every GPU of this host is visible"
    )


@pytest.mark.parametrize(
    ("value", "visible", "expected"),
    [
        (
            "0,1,2",
            2,
            visible_check(
                Status.FAIL,
                f"CUDA_VISIBLE_DEVICES=0,1,2 lists 3 devices but CUDA shows 2: some named devices do not "
                f"exist. {FIX_VISIBLE}",
            ),
        ),
        (
            "0,1,x",
            1,  # one fewer than kept, though the list stopped early: the count wins
            visible_check(
                Status.FAIL,
                f"CUDA_VISIBLE_DEVICES=0,1,x lists 2 devices but CUDA shows 1: some named devices do not "
                f"exist. {FIX_VISIBLE}",
            ),
        ),
        (
            "0,1,x",
            2,
            visible_check(
                Status.WARN,
                "CUDA_VISIBLE_DEVICES=0,1,x: 'x' is not a device number, so it and everything after it "
                f"is ignored. {FIX_VISIBLE}",
            ),
        ),
        (
            "0,1",
            0,  # torch saw nothing: no count to hold the list against
            visible_check(Status.SKIP, "CUDA_VISIBLE_DEVICES=0,1; no NVIDIA driver here to check it against"),
        ),
        (
            "0,1",
            2,
            visible_check(Status.SKIP, "CUDA_VISIBLE_DEVICES=0,1; no NVIDIA driver here to check it against"),
        ),
    ],
)
def test_visible_devices_without_driver_list(value: str, visible: int, expected: Check) -> None:
    """No driver list: only torch's count can show a named device missing."""
    assert judge.judge_visible_devices(value, None, visible) == expected


@pytest.mark.parametrize(
    ("value", "count", "absent", "have", "survivors"),
    [
        ("0,4,1", 4, "4", "4 GPUs (0..3)", "0"),  # 4 is one past the last
        ("2,0,7,1", 4, "7", "4 GPUs (0..3)", "2, 0"),
        ("4", 4, "4", "4 GPUs (0..3)", "none"),
        ("1,2,0", 2, "2", "2 GPUs (0..1)", "1"),
        ("0,1", 1, "1", "1 GPU (0..0)", "0"),
        ("0", 0, "0", "0 GPUs", "none"),
        ("GPU-1abc,GPU-7,GPU-0", 2, "GPU-7", "2 GPUs (0..1)", "GPU-1abc"),  # by UUID prefix
    ],
)
def test_visible_devices_naming_an_absent_device_fails(
    value: str, count: int, absent: str, have: str, survivors: str
) -> None:
    """Every absent device is named; those before the first absent one are what stays visible."""
    assert judge.judge_visible_devices(value, gpus(count), 0) == visible_check(
        Status.FAIL,
        f"CUDA_VISIBLE_DEVICES={value} names {absent}, which this host does not have (it has {have}). "
        f"CUDA stops at the first absent device, so only these stay visible: {survivors}; ranks "
        f"expecting the rest fail with 'invalid device ordinal'. {FIX_VISIBLE}",
    )


def test_visible_devices_names_every_absent_number() -> None:
    found = judge.judge_visible_devices("3,0,5", gpus(2), 0)
    assert found.status == Status.FAIL and "names 3, 5, which" in found.detail
    assert "only these stay visible: none;" in found.detail


def test_mig_instances_and_uuid_prefixes_are_not_held_against_the_driver_list() -> None:
    """MIG UUIDs are not in the driver's GPU list; a GPU UUID may be given by a prefix."""
    assert judge.judge_visible_devices("MIG-zzz", gpus(1), 0) == visible_check(
        Status.PASS, "CUDA_VISIBLE_DEVICES=MIG-zzz: 1 of 1 GPUs visible"
    )
    assert judge.judge_visible_devices("GPU-1a", gpus(2), 0) == visible_check(
        Status.PASS, "CUDA_VISIBLE_DEVICES=GPU-1a: 1 of 2 GPUs visible"
    )


def test_visible_devices_of_existing_gpus_pass_up_to_the_last_one() -> None:
    assert judge.judge_visible_devices("3,0", gpus(4), 4) == visible_check(
        Status.PASS, "CUDA_VISIBLE_DEVICES=3,0: 2 of 4 GPUs visible"
    )


@pytest.mark.parametrize(
    ("value", "status", "stopped"),
    [
        ("1,1", Status.FAIL, "device 1 is listed twice (CUDA then shows no device at all)"),
        ("", Status.FAIL, "an empty entry is not a device number, so it and everything after it is ignored"),
        ("1,abc", Status.WARN, "'abc' is not a device number, so it and everything after it is ignored"),
    ],
)
def test_a_list_cut_short_fails_when_nothing_is_left_and_warns_otherwise(
    value: str, status: Status, stopped: str
) -> None:
    assert judge.judge_visible_devices(value, gpus(2), 0) == visible_check(
        status, f"CUDA_VISIBLE_DEVICES={value}: {stopped}. {FIX_VISIBLE}"
    )


# ------------------------------------------------------------------ LOCAL_RANK
LOCAL = "LOCAL_RANK vs visible GPUs"
ORDINAL = "torch.cuda.set_device({r}) fails with 'invalid device ordinal'"
SLURM_WHY = (
    "Slurm narrowed CUDA_VISIBLE_DEVICES to this task's GPU (it is cuda:0 inside the task) while {s} still "
    "counts the node's GPUs. Fix: in the script use torch.cuda.set_device(local_rank % "
    "torch.cuda.device_count()), or request GPUs per node (--gpus-per-node, no --gpus-per-task/--gpu-bind) "
    "so every task sees them all, or launch torchrun once per node."
)
PLAIN_WHY = (
    "{s} is meant to index the GPUs visible to this process. Fix: run no more ranks per node than "
    "visible GPUs, or widen CUDA_VISIBLE_DEVICES."
)


def test_local_rank_outside_a_launch_is_skipped() -> None:
    assert judge.judge_local_rank({"RANK": "0"}, gpus(2), 2) == Check(
        LOCAL, Status.SKIP, "not inside a launch (no LOCAL_RANK or SLURM_LOCALID)"
    )


@pytest.mark.parametrize("text", ["-1", "x", ""])
def test_a_local_rank_that_is_no_number_fails(text: str) -> None:
    """LOCAL_RANK is read before SLURM_LOCALID."""
    found = judge.judge_local_rank({"LOCAL_RANK": text, "SLURM_LOCALID": "0"}, gpus(2), 2)
    assert found == Check(LOCAL, Status.FAIL, f"LOCAL_RANK={text!r} is not a non-negative integer")


@pytest.mark.parametrize(
    ("env", "physical", "visible", "detail"),
    [
        ({"LOCAL_RANK": " 1"}, gpus(2), 0, "LOCAL_RANK=1 indexes one of the 2 visible GPUs"),
        ({"SLURM_LOCALID": "2"}, None, 3, "SLURM_LOCALID=2 indexes one of the 3 visible GPUs"),
        (
            {"LOCAL_RANK": "0", "CUDA_VISIBLE_DEVICES": "5"},
            gpus(8),
            1,
            "LOCAL_RANK=0 indexes one of the 1 visible GPUs",
        ),
        ({"LOCAL_RANK": "3"}, None, 0, "LOCAL_RANK=3; no GPU visible, so CPU ranks over gloo"),
        ({"LOCAL_RANK": "3"}, [], 0, "LOCAL_RANK=3; no GPU visible, so CPU ranks over gloo"),
        # CUDA_VISIBLE_DEVICES names GPUs, but none is here: CPU ranks never call set_device.
        (
            {"LOCAL_RANK": "3", "CUDA_VISIBLE_DEVICES": "0,1"},
            None,
            0,
            "LOCAL_RANK=3; no GPU visible, so CPU ranks over gloo",
        ),
        (
            {"LOCAL_RANK": "0", "CUDA_VISIBLE_DEVICES": ""},
            gpus(2),
            0,
            "LOCAL_RANK=0; no GPU visible, so CPU ranks over gloo",
        ),
    ],
)
def test_local_rank_passes(
    env: dict[str, str], physical: list[dict[str, Any]] | None, visible: int, detail: str
) -> None:
    assert judge.judge_local_rank(env, physical, visible) == Check(LOCAL, Status.PASS, detail)


@pytest.mark.parametrize(
    ("env", "visible", "seen", "why"),
    [
        ({"LOCAL_RANK": "2"}, 2, "2 visible", PLAIN_WHY.format(s="LOCAL_RANK")),
        ({"LOCAL_RANK": "2"}, 0, "2 visible", PLAIN_WHY.format(s="LOCAL_RANK")),  # the driver's count
        (
            {"SLURM_JOB_ID": "7", "SLURM_LOCALID": "1", "CUDA_VISIBLE_DEVICES": "1"},
            1,
            "CUDA_VISIBLE_DEVICES=1 leaves 1 visible",
            SLURM_WHY.format(s="SLURM_LOCALID"),
        ),
        (
            {"SLURM_PROCID": "3", "LOCAL_RANK": "3", "CUDA_VISIBLE_DEVICES": "2,3"},
            2,
            "CUDA_VISIBLE_DEVICES=2,3 leaves 2 visible",
            SLURM_WHY.format(s="LOCAL_RANK"),
        ),
        (  # Slurm, but nothing narrowed the GPUs: the plain reason
            {"SLURM_JOB_ID": "7", "LOCAL_RANK": "2"},
            2,
            "2 visible",
            PLAIN_WHY.format(s="LOCAL_RANK"),
        ),
        (  # narrowed, but not by Slurm
            {"LOCAL_RANK": "1", "CUDA_VISIBLE_DEVICES": "0"},
            1,
            "CUDA_VISIBLE_DEVICES=0 leaves 1 visible",
            PLAIN_WHY.format(s="LOCAL_RANK"),
        ),
    ],
)
def test_local_rank_at_or_past_the_visible_count_fails(
    env: dict[str, str], visible: int, seen: str, why: str
) -> None:
    """The first rank that indexes no visible GPU fails, with Slurm's reason only when Slurm narrowed it."""
    rank = int(env.get("LOCAL_RANK", env.get("SLURM_LOCALID", "")))
    source = "LOCAL_RANK" if "LOCAL_RANK" in env else "SLURM_LOCALID"
    assert judge.judge_local_rank(env, gpus(2), visible) == Check(
        LOCAL, Status.FAIL, f"{source}={rank} but {seen}: {ORDINAL.format(r=rank)}. {why}"
    )


# ------------------------------------------------------------------ socket interfaces
INTERFACES: dict[str, dict[str, Any]] = {
    "lo": {"up": True, "addresses": ["127.0.0.1"]},
    "eth0": {"up": True, "addresses": ["10.0.0.5"]},
    "eth1": {"up": False, "addresses": ["10.1.0.5"]},
    "docker0": {"up": True, "addresses": ["172.17.0.1"]},
    "ib0": {"up": True, "addresses": []},
}
EVERYTHING = "interfaces here: lo (up), eth0 (up), eth1 (down), docker0 (up), ib0 (up, no address)"


@pytest.mark.parametrize(
    ("var", "value", "chooser"),
    [
        ("NCCL_SOCKET_IFNAME", None, "NCCL picks (ib* first, then any up interface but lo and docker*)"),
        ("NCCL_SOCKET_IFNAME", "  ", "NCCL picks (ib* first, then any up interface but lo and docker*)"),
        ("GLOO_SOCKET_IFNAME", "", "gloo uses the address the hostname resolves to"),
    ],
)
def test_an_unset_or_blank_ifname_passes_saying_who_picks(var: str, value: str | None, chooser: str) -> None:
    assert judge.judge_socket_ifname(var, value, INTERFACES) == Check(var, Status.PASS, f"unset: {chooser}")


@pytest.mark.parametrize(
    ("value", "uses"),
    [
        ("eth", "eth0 (up)"),  # a prefix: eth1 matches too, but is down
        ("=eth0", "eth0 (up)"),
        ("docker0 , lo", "lo (up), docker0 (up)"),  # in the host's order
    ],
)
def test_nccl_ifname_using_an_up_interface_passes(value: str, uses: str) -> None:
    var = "NCCL_SOCKET_IFNAME"
    assert judge.judge_socket_ifname(var, value, INTERFACES) == Check(
        var, Status.PASS, f"{var}={value} uses {uses}"
    )


@pytest.mark.parametrize(
    ("value", "leaves"),
    [
        ("^docker,lo", "eth0 (up)"),
        ("^=eth", "lo (up), eth0 (up), docker0 (up)"),  # exact: 'eth' excludes no interface
        ("^=eth0", "lo (up), docker0 (up)"),
    ],
)
def test_nccl_ifname_exclusion_leaving_an_up_interface_passes(value: str, leaves: str) -> None:
    var = "NCCL_SOCKET_IFNAME"
    assert judge.judge_socket_ifname(var, value, INTERFACES) == Check(
        var, Status.PASS, f"{var}={value} leaves {leaves}"
    )


def test_nccl_ifname_excluding_every_up_interface_fails_with_an_example() -> None:
    var = "NCCL_SOCKET_IFNAME"
    assert judge.judge_socket_ifname(var, "^eth0,lo,docker", INTERFACES) == Check(
        var,
        Status.FAIL,
        f"{var}=^eth0,lo,docker excludes every interface that is up ({EVERYTHING}): {NCCL_WHY}. "
        f"Fix: exclude less, or name the interface to use, e.g. {var}=eth0.",
    )


@pytest.mark.parametrize(
    ("value", "what"),
    [
        ("=eth", "matches no interface"),
        ("wlan", "matches no interface"),
        ("eth1,ib", "matches eth1 (down), ib0 (up, no address), none up with an address"),
    ],
)
def test_nccl_ifname_matching_no_usable_interface_fails(value: str, what: str) -> None:
    var = "NCCL_SOCKET_IFNAME"
    assert judge.judge_socket_ifname(var, value, INTERFACES) == Check(
        var,
        Status.FAIL,
        f"{var}={value} {what} on this host ({EVERYTHING}): {NCCL_WHY}. Fix: set it to an interface that "
        f"is up on every node, e.g. {var}=eth0 ('ip -br addr' lists them), or unset it.",
    )


def test_a_host_without_interfaces_says_none() -> None:
    var = "NCCL_SOCKET_IFNAME"
    assert judge.judge_socket_ifname(var, "eth0", {}) == Check(
        var,
        Status.FAIL,
        f"{var}=eth0 matches no interface on this host (interfaces here: none): {NCCL_WHY}. Fix: set it to "
        f"an interface that is up on every node, e.g. {var}=eth0 ('ip -br addr' lists them), or unset it.",
    )


def test_nccl_ifname_with_one_entry_matching_nothing_warns_naming_it() -> None:
    var = "NCCL_SOCKET_IFNAME"
    assert judge.judge_socket_ifname(var, "eth0,eht1,wlan", INTERFACES) == Check(
        var,
        Status.WARN,
        f"{var}=eth0,eht1,wlan uses eth0 (up), but eht1, wlan matches nothing here: a typo, or an interface "
        "other nodes have and this one lacks.",
    )


def test_parse_nccl_ifname_reads_exclusion_then_exactness() -> None:
    assert judge.parse_nccl_ifname(" ^=a , ,b ") == (True, True, ["a", "b"])
    assert judge.parse_nccl_ifname("=^a") == (False, True, ["^a"])
    assert judge.parse_nccl_ifname("a,b") == (False, False, ["a", "b"])


@pytest.mark.parametrize(
    ("interfaces", "suggested"),
    [
        (INTERFACES, "eth0"),  # lo is up but loopback; eth1 down; first usable wins over docker0
        ({"lo": {"up": True, "addresses": ["127.0.0.1", "::1"]}}, "eth0"),  # nothing: the stock example
        ({"lo": {"up": True, "addresses": ["127.0.0.1", "10.9.9.9"]}}, "lo"),  # one routable address
        ({"ib0": {"up": True, "addresses": []}, "em1": {"up": True, "addresses": ["10.0.0.1"]}}, "em1"),
    ],
)
def test_the_suggested_interface_is_the_first_usable_non_loopback(
    interfaces: dict[str, dict[str, Any]], suggested: str
) -> None:
    var = "NCCL_SOCKET_IFNAME"
    found = judge.judge_socket_ifname(var, "^=" + ",".join(interfaces), interfaces)
    assert found.status == Status.FAIL and found.detail.endswith(f"e.g. {var}={suggested}.")


GLOO = "GLOO_SOCKET_IFNAME"


@pytest.mark.parametrize(("value", "uses"), [("eth0", "eth0 (up)"), (" lo, eth0 ,", "lo (up), eth0 (up)")])
def test_gloo_ifname_of_up_interfaces_passes_in_its_own_order(value: str, uses: str) -> None:
    assert judge.judge_socket_ifname(GLOO, value, INTERFACES) == Check(
        GLOO, Status.PASS, f"{GLOO}={value} uses {uses}"
    )


@pytest.mark.parametrize(("value", "first"), [("^lo", "^lo"), (" =eth0,lo", "=eth0"), ("=", "=")])
def test_gloo_ifname_in_nccl_syntax_fails_quoting_what_gloo_looks_for(value: str, first: str) -> None:
    assert judge.judge_socket_ifname(GLOO, value, INTERFACES) == Check(
        GLOO,
        Status.FAIL,
        f"{GLOO}={value}: gloo takes exact interface names, not NCCL's ^/= syntax; init fails with "
        f"'Unable to find address for: {first}'. Fix: name the interface, e.g. {GLOO}=eth0.",
    )


@pytest.mark.parametrize(
    ("value", "problems"),
    [
        ("eth", "eth does not exist (gloo does not take prefixes; did you mean eth0, eth1?)"),
        ("wlan0,eth0", "wlan0 does not exist"),
        ("eth1,ib0", "eth1 (down), ib0 (up, no address) cannot carry traffic"),
        (
            "eth1,e,x",
            "e, x does not exist (gloo does not take prefixes; did you mean eth0, eth1?); "
            "eth1 (down) cannot carry traffic",
        ),
    ],
)
def test_gloo_ifname_naming_a_missing_or_unusable_interface_fails(value: str, problems: str) -> None:
    assert judge.judge_socket_ifname(GLOO, value, INTERFACES) == Check(
        GLOO,
        Status.FAIL,
        f"{GLOO}={value}: {problems} ({EVERYTHING}): gloo init fails with 'Unable to find address for: ...'. "
        f"Fix: name an interface that is up, e.g. {GLOO}=eth0.",
    )


# ------------------------------------------------------------------ MASTER_ADDR and MASTER_PORT
LAUNCHED = {"RANK": "0", "WORLD_SIZE": "2"}


def master_addr(master: Mapping[str, Any], env: Mapping[str, str] | None = None) -> Check:
    return judge.judge_master(master, env or {})[0]


def test_master_addr_unset_is_skipped_and_a_probe_error_warns() -> None:
    assert master_addr({}) == Check(
        "MASTER_ADDR",
        Status.SKIP,
        "unset: torchrun and ddpcheck set it per job; env:// init without a launcher needs it",
    )
    assert master_addr({"addr": "m", "error": "probe crashed", "resolved": ["10.0.0.1"]}) == Check(
        "MASTER_ADDR", Status.WARN, "MASTER_ADDR=m: probe crashed"
    )


def test_a_slow_resolver_warns_and_a_failed_one_fails() -> None:
    assert master_addr({"addr": "m", "resolve_error": "timeout after 2 s", "resolved": []}) == Check(
        "MASTER_ADDR",
        Status.WARN,
        "MASTER_ADDR=m: timeout after 2 s; a slow resolver delays or times out the rendezvous. Fix: use the "
        "master's IP address, or add it to /etc/hosts on every node.",
    )
    for facts, error in [
        (
            {"addr": "m", "resolve_error": "Name or service not known (timeout?)"},
            "Name or service not known (timeout?)",
        ),
        ({"addr": "m", "resolved": []}, None),
    ]:
        assert master_addr(facts) == Check(
            "MASTER_ADDR",
            Status.FAIL,
            f"MASTER_ADDR=m does not resolve ({error}): every rank fails in init_process_group. Fix: use the "
            "master's IP address or a name every node can resolve (DNS or /etc/hosts).",
        )


@pytest.mark.parametrize(
    "env",
    [
        {"SLURM_NNODES": "2"},
        {"SLURM_JOB_NUM_NODES": "3"},
        {"SLURM_NNODES": "1", "SLURM_JOB_NUM_NODES": "2"},
        {"WORLD_SIZE": "8", "LOCAL_WORLD_SIZE": "4"},
        {"SLURM_NNODES": "x", "WORLD_SIZE": "5", "LOCAL_WORLD_SIZE": "4"},
    ],
)
def test_a_loopback_master_of_a_multi_node_job_fails(env: dict[str, str]) -> None:
    master = {"addr": "localhost", "resolved": ["127.0.0.1", "::1"], "local": True}
    assert master_addr(master, env) == Check(
        "MASTER_ADDR",
        Status.FAIL,
        "MASTER_ADDR=localhost resolves to loopback (127.0.0.1, ::1) but the job spans several nodes: ranks "
        "on other nodes would look for the master on themselves and hang. Fix: use the master node's "
        "routable address, e.g. from `hostname -I` on it.",
    )


@pytest.mark.parametrize(
    "env",
    [
        {},
        {"SLURM_NNODES": "1", "SLURM_JOB_NUM_NODES": "1"},
        {"WORLD_SIZE": "4", "LOCAL_WORLD_SIZE": "4"},
        {"WORLD_SIZE": "8"},
        {"LOCAL_WORLD_SIZE": "4"},
        {"WORLD_SIZE": "8", "LOCAL_WORLD_SIZE": "x"},
    ],
)
def test_a_loopback_master_of_a_one_node_job_passes(env: dict[str, str]) -> None:
    master = {"addr": "localhost", "resolved": ["127.0.0.1"], "local": True}
    assert master_addr(master, env) == Check(
        "MASTER_ADDR", Status.PASS, "MASTER_ADDR=localhost resolves to 127.0.0.1 (this host)"
    )


def test_a_routable_master_passes_naming_four_addresses_at_most() -> None:
    resolved = ["127.0.0.1", "10.0.0.1", "10.0.0.2", "10.0.0.3", "10.0.0.4"]
    master = {"addr": "m", "resolved": resolved, "local": False}
    assert master_addr(master, {"SLURM_NNODES": "4"}) == Check(
        "MASTER_ADDR",
        Status.PASS,
        "MASTER_ADDR=m resolves to 127.0.0.1, 10.0.0.1, 10.0.0.2, 10.0.0.3 (another host)",
    )


def master_port(master: Mapping[str, Any], env: Mapping[str, str] | None = None) -> Check:
    return judge.judge_master({"port_text": str(master.get("port")), "addr": "m", **master}, env or {})[1]


def test_master_port_unset_is_skipped_and_garbage_fails() -> None:
    assert judge.judge_master({}, {})[1] == Check(
        "MASTER_PORT", Status.SKIP, "unset: torchrun and ddpcheck choose one per job"
    )
    assert judge.judge_master({"port_text": "70000", "port": None}, {})[1] == Check(
        "MASTER_PORT",
        Status.FAIL,
        "MASTER_PORT='70000' is not a TCP port (1-65535): init_process_group fails at once. Fix: set a "
        "free port, e.g. 29500.",
    )


@pytest.mark.parametrize(
    ("master", "env", "status", "detail"),
    [
        ({"port": 29500, "bind": "free"}, {}, Status.PASS, "port 29500 is free on this host (the master)"),
        (
            {"port": 29500, "bind": "in use"},
            LAUNCHED,
            Status.PASS,
            "port 29500 is in use on this host: this job's store listens there",
        ),
        (
            {"port": 29500, "bind": "in use"},
            {"RANK": "0"},  # RANK without WORLD_SIZE: not a launch
            Status.FAIL,
            "port 29500 is already in use on this host, the master: the store cannot listen and init fails "
            "with 'address already in use' (often a previous job still running). Fix: pick another "
            "MASTER_PORT, or find the holder with `ss -ltnp 'sport = :29500'`.",
        ),
        (
            {"port": 80, "bind": "denied"},
            LAUNCHED,
            Status.FAIL,
            "port 80 is privileged (below 1024) and this user may not listen on it. Fix: use a port above "
            "1024, e.g. 29500.",
        ),
        (
            {"port": 29500, "bind": "EADDRNOTAVAIL", "connect": "open"},
            {},
            Status.WARN,
            "port 29500: could not test it on this host (EADDRNOTAVAIL)",
        ),
        (
            {"port": 29500, "connect": "open"},
            {},
            Status.PASS,
            "m:29500 is reachable and something listens there",
        ),
        (
            {"port": 29500, "connect": "refused"},
            LAUNCHED,
            Status.WARN,
            "m:29500 refused the connection: inside a running job the master's store should listen there. "
            "Check that rank 0 started, and that MASTER_PORT is the same on every node.",
        ),
        (
            {"port": 29500, "connect": "refused"},
            {"WORLD_SIZE": "2"},
            Status.PASS,
            "m:29500 answered (nothing listens yet, as expected before the master starts): the port is not "
            "blocked",
        ),
        (
            {"port": 29500, "connect": "timeout"},
            {},
            Status.FAIL,
            "m:29500 did not answer within the timeout: a firewall drops the traffic or the route is wrong, "
            "and every rank would hang in init_process_group. Fix: open the port (and NCCL's high ports) "
            "between the nodes, or choose an address on the cluster network.",
        ),
        (
            {"port": 29500, "connect": "no route to host"},
            {},
            Status.FAIL,
            "m:29500 is unreachable (no route to host): ranks on this host cannot join. Fix: check the route "
            "to the master (ping, ip route), or use its cluster-network address.",
        ),
        (
            {"port": 29500},
            {},
            Status.PASS,
            "MASTER_PORT=29500 is a valid port (not probed: MASTER_ADDR unset or unresolved)",
        ),
    ],
)
def test_master_port(master: dict[str, Any], env: dict[str, str], status: Status, detail: str) -> None:
    """A bind test on the master itself, else one connect toward it; in a launch the store is expected."""
    assert master_port(master, env) == Check("MASTER_PORT", status, detail)


# ------------------------------------------------------------------ host limits
def test_shm_below_its_minimum_warns_and_from_it_passes() -> None:
    assert judge.judge_shm(judge.SHM_MIN_BYTES) == Check("/dev/shm", Status.PASS, "/dev/shm is 1.0 GiB")
    assert judge.judge_shm(judge.SHM_MIN_BYTES - 1, "/run/shm") == Check(
        "/dev/shm",
        Status.WARN,
        "/run/shm is 1024.0 MiB, below 1.0 GiB: NCCL keeps its intra-node buffers there and DataLoader "
        "workers pass batches through it, so with several GPUs the job fails with 'unhandled system "
        "error' or a bus error (containers default to 64 MB). Fix: docker run --shm-size=16g (or "
        "--ipc=host); on Kubernetes mount an emptyDir with medium: Memory at /dev/shm.",
    )
    assert judge.SHM_MIN_BYTES == GIB
    assert judge.judge_shm(None) == Check(
        "/dev/shm", Status.SKIP, "/dev/shm not found (not Linux?): NCCL's shared-memory transport needs it"
    )


def test_infiniband() -> None:
    """A port counts as up when its state says ACTIVE; at most eight are listed."""
    assert judge.judge_infiniband([]) == Check(
        "InfiniBand ports", Status.SKIP, "no InfiniBand/RoCE devices: NCCL uses TCP sockets between nodes"
    )
    down = [
        {"device": "mlx5_0", "port": 1, "state": "1: DOWN"},
        {"device": "mlx5_1", "port": 2, "state": None},
    ]
    assert judge.judge_infiniband(down) == Check(
        "InfiniBand ports",
        Status.WARN,
        "no port is ACTIVE (mlx5_0/1 1: DOWN, mlx5_1/2 ?): NCCL falls back to TCP sockets between nodes, "
        "many times slower. Fix: check cables and the subnet manager (ibstat), or set NCCL_IB_HCA to the "
        "working device.",
    )
    many = [
        {"device": f"mlx5_{i}", "port": 1, "state": "4: ACTIVE" if i == 8 else "1: DOWN"} for i in range(9)
    ]
    listed = ", ".join(f"mlx5_{i}/1 1: DOWN" for i in range(8))
    assert judge.judge_infiniband(many) == Check(
        "InfiniBand ports", Status.PASS, f"1 of 9 ports ACTIVE ({listed})"
    )


IB = [{"device": "mlx5_0", "port": 1, "state": "4: ACTIVE"}]


def test_memlock() -> None:
    """With InfiniBand, below MEMLOCK_MIN_BYTES fails, a bound from it on warns, unlimited passes."""
    name = "locked memory (RDMA)"
    assert judge.judge_memlock(None, IB) == Check(name, Status.SKIP, "no RLIMIT_MEMLOCK on this platform")
    assert judge.judge_memlock({"soft": 8 * MIB}, []) == Check(
        name, Status.PASS, "ulimit -l is 8.0 MiB; no InfiniBand devices, so no RDMA needs it"
    )
    assert judge.judge_memlock({"soft": UNLIMITED}, []) == Check(
        name, Status.PASS, "ulimit -l is unlimited; no InfiniBand devices, so no RDMA needs it"
    )
    assert judge.judge_memlock({"soft": UNLIMITED}, IB) == Check(
        name, Status.PASS, "ulimit -l is unlimited, as RDMA wants"
    )
    assert judge.MEMLOCK_MIN_BYTES == 64 * MIB
    assert judge.judge_memlock({"soft": 64 * MIB - 1}, IB) == Check(
        name,
        Status.FAIL,
        "ulimit -l is 64.0 MiB with InfiniBand present: NCCL cannot register its buffers for RDMA and "
        f"fails ('ibv_reg_mr failed') or falls back to slow sockets. {MEMLOCK_FIX}",
    )
    assert judge.judge_memlock({"soft": 64 * MIB}, IB) == Check(
        name,
        Status.WARN,
        f"ulimit -l is 64.0 MiB: large jobs can exhaust it while registering buffers. {MEMLOCK_FIX}",
    )


@pytest.mark.parametrize(
    ("value", "cores", "status", "detail"),
    [
        ("4", 64, Status.PASS, "OMP_NUM_THREADS=4"),
        ("1", None, Status.PASS, "OMP_NUM_THREADS=1"),
        ("0", 4, Status.WARN, "OMP_NUM_THREADS='0' is not a positive integer; OpenMP ignores it"),
        ("-2", 4, Status.WARN, "OMP_NUM_THREADS='-2' is not a positive integer; OpenMP ignores it"),
        ("", 4, Status.WARN, "OMP_NUM_THREADS='' is not a positive integer; OpenMP ignores it"),
        (None, 15, Status.PASS, "unset; 15 usable cores, too few to oversubscribe badly"),
        (None, None, Status.PASS, "unset; None usable cores, too few to oversubscribe badly"),
        (
            None,
            16,
            Status.WARN,
            "unset with 16 usable cores: every rank starts 16 OpenMP threads, so 8 ranks run 128 threads on "
            "16 cores and CPU work (data loading, the optimizer on CPU, gloo) crawls. torchrun sets 1 for "
            "you; srun, mpirun and mp.spawn do not. Fix: export OMP_NUM_THREADS=<cores / ranks per node>.",
        ),
    ],
)
def test_omp(value: str | None, cores: int | None, status: Status, detail: str) -> None:
    """Unset OMP_NUM_THREADS warns from OMP_MANY_CORES usable cores on; a set one must be positive."""
    assert judge.OMP_MANY_CORES == 16
    assert judge.judge_omp(value, cores) == Check("OMP_NUM_THREADS", status, detail)


# ------------------------------------------------------------------ all of them
def test_judge_feeds_each_judge_its_own_facts_in_a_stable_order() -> None:
    """Every fact reaches the judge it is for: each verdict below differs from what a mix-up gives."""
    env = {
        "CUDA_VISIBLE_DEVICES": "0,1",
        "LOCAL_RANK": "1",
        "RANK": "1",
        "WORLD_SIZE": "2",
        "NCCL_SOCKET_IFNAME": "eth",
        "GLOO_SOCKET_IFNAME": "lo",
        "OMP_NUM_THREADS": "2",
    }
    facts = {
        "env": env,
        "torch": {
            "cuda_build": "12.4",
            "gpus": [{"name": "A"}, {"name": "B"}],
            "backends": {"distributed": True, "gloo": True},
        },
        "interfaces": INTERFACES,
        "host": {"shm": {"total": 2 * GIB, "path": "/shm"}, "memlock": {"soft": 8 * MIB}, "cpu_usable": 32},
        "physical_gpus": gpus(4),
        "driver": "550.1",
        "master": {
            "addr": "m",
            "resolved": ["10.0.0.1"],
            "port_text": "29500",
            "port": 29500,
            "bind": "in use",
        },
        "infiniband": IB,
    }
    found = judge.judge(facts)
    assert [(c.name, c.status) for c in found] == [
        ("distributed backends", Status.FAIL),  # 2 GPUs visible, no nccl
        ("CUDA build vs GPUs", Status.PASS),
        ("CUDA_VISIBLE_DEVICES", Status.PASS),
        (LOCAL, Status.PASS),
        ("NCCL_SOCKET_IFNAME", Status.PASS),
        ("GLOO_SOCKET_IFNAME", Status.PASS),
        ("MASTER_ADDR", Status.PASS),
        ("MASTER_PORT", Status.PASS),  # launched: the store's own port
        ("/dev/shm", Status.PASS),
        ("InfiniBand ports", Status.PASS),
        ("locked memory (RDMA)", Status.FAIL),
        ("OMP_NUM_THREADS", Status.PASS),
    ]
    details = [c.detail for c in found]
    assert details[0].startswith("available: gloo; 2 GPUs visible")
    assert details[1] == "2 GPUs visible to torch (CUDA 12.4): A, B"
    assert details[2] == "CUDA_VISIBLE_DEVICES=0,1: 2 of 4 GPUs visible"
    assert details[3] == "LOCAL_RANK=1 indexes one of the 2 visible GPUs"
    assert details[4] == "NCCL_SOCKET_IFNAME=eth uses eth0 (up)"
    assert details[5] == "GLOO_SOCKET_IFNAME=lo uses lo (up)"
    assert details[8] == "/shm is 2.0 GiB"
    assert details[11] == "OMP_NUM_THREADS=2"


# ------------------------------------------------------------------ every node agrees
SAME = {
    "torch": "2.5.1",
    "cuda": "12.4",
    "nccl": "2.21.5",
    "driver": "550.1",
    "gpu": "H100",
    "python": "3.11.7",
}
SAME_TEXT = "torch 2.5.1, CUDA 12.4, NCCL 2.21.5, driver 550.1, GPU model H100, Python 3.11.7"
FAIL_FIX = "Fix: install the same torch wheel (and driver) on every node, e.g. from one container image."
WARN_FIX = (
    "Mixed drivers, GPUs or Pythons usually run, at the pace of the slowest, but point to a node set up "
    "differently."
)


def hosts_of(*hosts: str) -> list[dict[str, Any]]:
    """One identity per rank, on these hosts in rank order."""
    return [{"rank": rank, "host": host} for rank, host in enumerate(hosts)]


def fp(**changes: Any) -> dict[str, Any]:
    return {**SAME, **changes}


def test_agreeing_hosts_pass_counting_hosts_not_ranks() -> None:
    assert agreement.judge_agreement([fp()] * 3, hosts_of("a", "a", "b")) == Check(
        "nodes agree", Status.PASS, f"2 hosts agree: {SAME_TEXT}"
    )
    assert agreement.judge_agreement([fp()] * 2, hosts_of("a", "a")) == Check(
        "nodes agree", Status.PASS, f"1 host agrees: {SAME_TEXT}"
    )
    nothing = "torch none, CUDA none, NCCL none, driver none, GPU model none, Python none"
    assert agreement.judge_agreement([None, {}], hosts_of("a", "b")) == Check(
        "nodes agree", Status.PASS, f"2 hosts agree: {nothing}"
    )


def test_one_host_differing_is_named_against_the_others_count() -> None:
    found = agreement.judge_agreement(
        [fp(), fp(), fp(nccl="2.23.4"), fp(nccl="2.23.4"), fp(), fp()], hosts_of("a", "a", "b", "b", "c", "d")
    )
    assert found == Check(
        "nodes agree",
        Status.FAIL,
        f"NCCL differs: b has 2.23.4, the other 3 hosts 2.21.5. {FAIL_FIX}",
        [2, 3],
        ["b"],
    )


def test_a_fail_field_is_not_softened_by_a_later_warn_field() -> None:
    """torch (FAIL) then driver and Python (WARN): FAIL; each difference named in field order."""
    found = agreement.judge_agreement(
        [fp(python="3.12.1"), fp(torch="2.6.0", driver="560.2"), fp(), fp()], hosts_of("a", "b", "c", "d")
    )
    assert found == Check(
        "nodes agree",
        Status.FAIL,
        "torch differs: b has 2.6.0, the other 3 hosts 2.5.1; driver differs: b has 560.2, the other 3 hosts "
        f"550.1; Python differs: a has 3.12.1, the other 3 hosts 3.11.7. {FAIL_FIX}",
        [0, 1],
        ["a", "b"],
    )


def test_only_warn_fields_differing_warns() -> None:
    found = agreement.judge_agreement(
        [fp(), fp(gpu="A100"), fp(gpu="A100"), fp(), fp()], hosts_of("a", "b", "c", "d", "e")
    )
    assert found == Check(
        "nodes agree",
        Status.WARN,
        f"GPU model differs: b, c have A100, the other 3 hosts H100. {WARN_FIX}",
        [1, 2],
        ["b", "c"],
    )


def test_several_minorities_are_each_named_largest_first() -> None:
    found = agreement.judge_agreement(
        [fp(), fp(cuda="11.8"), fp(cuda="12.6"), fp(cuda="12.6"), fp(), fp(), fp(cuda=None)],
        hosts_of("a", "b", "c", "d", "e", "f", "g"),
    )
    assert found == Check(
        "nodes agree",
        Status.FAIL,
        f"CUDA differs: c, d have 12.6; b has 11.8; g has none, the other 3 hosts 12.4. {FAIL_FIX}",
        [1, 2, 3, 6],
        ["b", "c", "d", "g"],
    )


def test_a_tie_for_the_majority_names_every_host() -> None:
    """Two values on two hosts each, one on a fifth: no majority, every host is named."""
    found = agreement.judge_agreement(
        [fp(), fp(torch="2.6"), fp(torch="2.6"), fp(), fp(torch="2.4")], hosts_of("a", "b", "c", "d", "e")
    )
    assert found == Check(
        "nodes agree",
        Status.FAIL,
        f"torch differs with no majority: 2.5.1 on a, d; 2.6 on b, c; 2.4 on e. {FAIL_FIX}",
        [0, 1, 2, 3, 4],
        ["a", "b", "c", "d", "e"],
    )


def test_a_rank_differing_from_its_own_host_names_that_host_once() -> None:
    found = agreement.judge_agreement([fp(), fp(), fp(), fp(python="3.9")], hosts_of("a", "a", "b", "b"))
    assert found.ranks == [3] and found.hosts == ["b"]
    # b holds both values: its rank is named, and the majority is no count of hosts (b is among them).
    assert found.detail.startswith("Python differs: b (rank 3) has 3.9, every other rank 3.11.7.")


def test_one_host_apart_from_two_counts_the_other_two() -> None:
    found = agreement.judge_agreement([fp(), fp(), fp(nccl="2.23.4")], hosts_of("a", "b", "c"))
    assert found.detail.startswith("NCCL differs: c has 2.23.4, the other 2 hosts 2.21.5.")


def test_ranks_of_a_host_holding_two_values_are_named_beside_whole_hosts() -> None:
    fingerprints = [fp(), fp(), fp(torch="2.6"), fp(torch="2.6"), fp(torch="2.6"), fp(), fp(), fp()]
    found = agreement.judge_agreement(fingerprints, hosts_of("a", "a", "b", "b", "c", "c", "d", "d"))
    assert found.detail.startswith("torch differs: b, c (rank 4) have 2.6, every other rank 2.5.1.")
    assert (found.ranks, found.hosts) == ([2, 3, 4], ["b", "c"])


def test_with_no_majority_a_host_holding_both_values_is_named_with_its_ranks_in_each() -> None:
    fingerprints = [fp(), fp(torch="2.6"), fp(torch="2.6"), fp(), fp(torch="2.6")]
    found = agreement.judge_agreement(fingerprints, hosts_of("a", "a", "a", "b", "c"))
    assert found.detail.startswith(
        "torch differs with no majority: 2.5.1 on a (rank 0), b; 2.6 on a (ranks 1, 2), c."
    )


def test_fingerprint_table_has_a_row_per_host_and_fingerprint() -> None:
    """Ranks of one host with one fingerprint share a row; a rank that differs gets its own."""
    table = agreement.fingerprint_table(
        [fp(), fp(), None, fp(gpu="A100"), fp()], hosts_of("a", "a", "b", "b", "a")
    )
    labels = {"torch": "torch", "cuda": "CUDA", "nccl": "NCCL", "driver": "driver", "gpu": "GPU model"}
    none = dict.fromkeys(SAME)
    assert table == Table(
        "fingerprints",
        "Software on every node",
        {"host": "host", "ranks": "ranks", **labels, "python": "Python"},
        [
            {"host": "a", "ranks": "0, 1, 4", **SAME},
            {"host": "b", "ranks": "2", **none},
            {"host": "b", "ranks": "3", **fp(gpu="A100")},
        ],
    )


def host_facts(env: dict[str, str], torch_gpus: int, physical: list[dict[str, Any]] | None) -> dict[str, Any]:
    """Facts of a host with a CUDA torch seeing `torch_gpus` GPUs, the driver listing `physical`."""
    return {
        "env": env,
        "torch": {
            "cuda_build": "12.4",
            "gpus": [{"name": "A"}] * torch_gpus,
            "backends": {"distributed": True, "gloo": True, "nccl": True},
        },
        "interfaces": INTERFACES,
        "host": {"shm": {"total": 2 * GIB, "path": "/dev/shm"}, "memlock": None, "cpu_usable": 32},
        "physical_gpus": physical,
        "driver": "550.1",
        "master": {},
        "infiniband": [],
    }


def verdicts(facts: dict[str, Any]) -> dict[str, Check]:
    return {c.name: c for c in judge.judge(facts)}


def test_judge_holds_the_driver_and_cuda_visible_devices_against_a_torch_seeing_no_gpu() -> None:
    """The driver's GPUs, its version and CUDA_VISIBLE_DEVICES reach the CUDA build's judge."""
    found = verdicts(host_facts({"CUDA_VISIBLE_DEVICES": "0"}, 0, gpus(4)))["CUDA build vs GPUs"]
    assert found.status == Status.FAIL
    assert found.detail.startswith(
        "torch is built with CUDA 12.4 and this host has 4 NVIDIA GPUs (driver 550.1)"
    )
    hidden = verdicts(host_facts({"CUDA_VISIBLE_DEVICES": ""}, 0, gpus(4)))["CUDA build vs GPUs"]
    assert hidden.status == Status.WARN and hidden.detail.startswith(
        "CUDA_VISIBLE_DEVICES='' hides every GPU"
    )


def test_judge_gives_local_rank_and_visible_devices_both_counts_of_gpus() -> None:
    """torch's count and the driver's: LOCAL_RANK is held against torch's, else the driver's."""
    by_driver = verdicts(host_facts({"LOCAL_RANK": "3"}, 0, gpus(4)))[LOCAL]
    assert by_driver.detail == "LOCAL_RANK=3 indexes one of the 4 visible GPUs"
    by_torch = verdicts(host_facts({"LOCAL_RANK": "3"}, 2, gpus(4)))[LOCAL]
    assert by_torch.status == Status.FAIL and by_torch.detail.startswith("LOCAL_RANK=3 but 2 visible:")
    no_driver = verdicts(host_facts({"CUDA_VISIBLE_DEVICES": "0,1"}, 1, None))["CUDA_VISIBLE_DEVICES"]
    assert no_driver.status == Status.FAIL and "lists 2 devices but CUDA shows 1" in no_driver.detail


def test_judge_holds_an_unset_omp_num_threads_against_the_usable_cores() -> None:
    found = verdicts(host_facts({}, 0, None))["OMP_NUM_THREADS"]
    assert found.status == Status.WARN and found.detail.startswith("unset with 32 usable cores")


def test_digits_int_cannot_read_are_judged_not_a_crash() -> None:
    """'²' is a digit to str.isdigit but not to int(): a bad value is a verdict, not a ValueError."""
    assert judge.judge_omp("²", 4).status == Status.WARN
    assert judge.judge_local_rank({"LOCAL_RANK": "²"}, gpus(2), 2) == Check(
        LOCAL, Status.FAIL, "LOCAL_RANK='²' is not a non-negative integer"
    )
    loopback = {"addr": "localhost", "resolved": ["127.0.0.1"], "local": True}
    for env in (
        {"SLURM_NNODES": "²"},
        {"WORLD_SIZE": "²", "LOCAL_WORLD_SIZE": "1"},
        {"WORLD_SIZE": "8", "LOCAL_WORLD_SIZE": "²"},
    ):
        assert master_addr(loopback, env).status == Status.PASS
    assert master.parse_port("²") is None and master.parse_port(" 29500 ") == 29500
