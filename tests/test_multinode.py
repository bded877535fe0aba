"""Many nodes: c10d rendezvous between launchers, srun and torchrun inline runs, two real hosts."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest

from ddpcheck.errors import UsageError
from ddpcheck.launcher.options import LaunchOptions
from ddpcheck.launcher.slurm import (
    default_node_rank,
    expand_nodelist,
    port_for_job,
    tasks_on_node,
    torch_environment,
    under_srun,
)
from ddpcheck.rank.rankmap import hosts_table, judge_rank_map
from ddpcheck.report.model import Check, Status
from ddpcheck.report.naming import describe_ranks
from tests.conftest import assert_nothing_left, worker_processes
from tests.support.netns import free_port, on_host, popen, veth_pair

QUICK = ("--sizes", "1K:4K", "--iters", "1")


# ------------------------------------------------------------------ Slurm, pure
@pytest.mark.parametrize(
    ("nodelist", "hosts"),
    [
        ("gpu01", ["gpu01"]),
        ("gpu[01-04,07]", ["gpu01", "gpu02", "gpu03", "gpu04", "gpu07"]),
        ("gpu[8-11]", ["gpu8", "gpu9", "gpu10", "gpu11"]),
        ("gpu[098-101]", ["gpu098", "gpu099", "gpu100", "gpu101"]),
        ("a[1-2],b3,c[05]", ["a1", "a2", "b3", "c05"]),
        ("rack[1-2]-n[1-2]", ["rack1-n1", "rack1-n2", "rack2-n1", "rack2-n2"]),
        ("node-[1,3]-ib", ["node-1-ib", "node-3-ib"]),
    ],
)
def test_expand_nodelist(nodelist: str, hosts: list[str]) -> None:
    assert expand_nodelist(nodelist) == hosts


@pytest.mark.parametrize("bad", ["", "gpu[01-", "gpu]01[", "gpu[a-b]", "gpu[1-x]"])
def test_expand_nodelist_rejects_malformed(bad: str) -> None:
    with pytest.raises(UsageError):
        expand_nodelist(bad)


def test_tasks_per_node_compressed_form() -> None:
    assert [tasks_on_node("4(x2),3", n) for n in range(3)] == [4, 4, 3]
    assert tasks_on_node("8", 0) == 8


def test_port_is_derived_from_the_job_id() -> None:
    assert port_for_job("123456") == port_for_job("123456")
    assert 20000 <= port_for_job("123456") < 32768
    assert port_for_job("7") != port_for_job("8")


def test_every_derived_port_lies_below_the_ephemeral_ports() -> None:
    """An outgoing connection takes its local port from the ephemeral range: a job's port there could
    be held when rank 0 binds it (EADDRINUSE). Linux's range starts at 32768 unless changed."""
    from ddpcheck.launcher import mpi

    low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    ports = {port_for_job(str(job), str(step)) for job in range(0, 200_000, 7) for step in range(3)}
    ports |= {mpi.port_for_job(f"prterun-host-{pid}@1") for pid in range(30_000)}
    assert min(ports) == 20000 and max(ports) == 32767 and max(ports) < min(low, 49152)


def srun_env(rank: int, ntasks: int, per_node: int, nodelist: str = "gpu[01-02]") -> dict[str, str]:
    """A task of a real srun step: Slurm 22.05 sets these (measured under slurmd; see test_launchers)."""
    return {
        "SLURM_STEP_ID": "0",
        "SLURM_STEPID": "0",
        "SLURM_STEP_NUM_TASKS": str(ntasks),
        "SLURM_STEP_NUM_NODES": str(ntasks // per_node),
        "SLURM_STEP_NODELIST": nodelist,
        "SLURM_STEP_TASKS_PER_NODE": f"{per_node}(x{ntasks // per_node})",
        "SLURM_PROCID": str(rank),
        "SLURM_NTASKS": str(ntasks),
        "SLURM_LOCALID": str(rank % per_node),
        "SLURM_NODEID": str(rank // per_node),
        "SLURM_JOB_NODELIST": nodelist,
        "SLURM_TASKS_PER_NODE": f"{per_node}(x{ntasks // per_node})",
        "SLURM_JOB_ID": "4242",
    }


def test_slurm_mapping() -> None:
    env = torch_environment(srun_env(5, 8, 4))
    assert env == {
        "RANK": "5",
        "WORLD_SIZE": "8",
        "LOCAL_RANK": "1",
        "LOCAL_WORLD_SIZE": "4",
        "GROUP_RANK": "1",
        "MASTER_ADDR": "gpu01",
        "MASTER_PORT": str(port_for_job("4242")),
    }
    assert torch_environment({**srun_env(0, 2, 2), "MASTER_PORT": "29999"})["MASTER_PORT"] == "29999"


def test_only_a_multi_task_srun_step_runs_inline() -> None:
    assert under_srun(srun_env(0, 8, 4))
    assert not under_srun({**srun_env(0, 8, 4), "SLURM_STEP_ID": "batch"})
    # The batch script itself has none of a step's variables.
    batch_script = {k: v for k, v in srun_env(0, 8, 4).items() if not k.startswith("SLURM_STEP")}
    assert not under_srun(batch_script)
    assert not under_srun(srun_env(0, 1, 1))


def test_node_rank_defaults_to_the_slurm_node_id() -> None:
    opts = LaunchOptions(nnodes=4, rdzv_endpoint="gpu01:29500")
    assert default_node_rank(opts, {"SLURM_NODEID": "3"}) == 3
    assert default_node_rank(LaunchOptions(nnodes=4, node_rank=2), {"SLURM_NODEID": "3"}) == 2
    assert default_node_rank(LaunchOptions(), {"SLURM_NODEID": "3"}) == 0


# ------------------------------------------------------------------ grouping by host
def idents(hosts: list[str], per_host: int) -> list[dict]:
    return [
        {"rank": h * per_host + i, "local_rank": i, "host": host, "node": h, "device": "cpu"}
        for h, host in enumerate(hosts)
        for i in range(per_host)
    ]


def test_a_whole_failing_host_is_named_as_the_host() -> None:
    ids = idents(["a", "b", "c"], 4)
    assert describe_ranks([4, 5, 6, 7], ids) == "every rank of host b (ranks 4-7)"
    assert describe_ranks([4, 5, 9], ids) == "rank 4 on host b, rank 5 on host b, rank 9 on host c"
    table = hosts_table(ids, [Check("x", Status.FAIL, "", [4, 5, 6, 7])])
    assert [r["status"] for r in table.rows] == ["PASS", "FAIL", "PASS"]
    assert table.rows[1]["ranks"] == "ranks 4-7"


def test_rank_map_checks_local_ranks_per_node() -> None:
    ids = idents(["a", "b"], 2)
    assert judge_rank_map(ids).status == Status.PASS
    ids[3]["local_rank"] = 0
    check = judge_rank_map(ids)
    assert check.status == Status.FAIL and check.ranks == [2, 3] and check.hosts == ["b"]


def test_rank_map_catches_two_ranks_on_one_gpu() -> None:
    ids = idents(["a"], 2)
    for ident in ids:
        ident.update(device="cuda:0", device_uuid="GPU-1234")
    check = judge_rank_map(ids)
    assert check.status == Status.FAIL and "share one GPU" in check.detail and check.ranks == [0, 1]


# ------------------------------------------------------------------ real runs
@pytest.mark.integration
@pytest.mark.parametrize(
    # Two launches of two launchers each (seconds each here): a healthy world, and the sbatch recipe's
    # with a corrupt rank on the second node.
    ("fault", "code", "one_task_per_node"),
    [(None, 0, False), ("corrupt@3", 1, True)],
)
def test_two_launchers_make_one_world(
    scratch, tmp_path: Path, fault: str | None, code: int, one_task_per_node: bool
) -> None:
    endpoint = f"127.0.0.1:{free_port()}"
    procs, reports = [], []
    for node in (0, 1):
        report = tmp_path / f"node{node}.json"
        reports.append(report)
        args = [sys.executable, "-m", "ddpcheck", "allreduce", "--nproc", "2", *QUICK, "--nnodes", "2"]
        args += ["--rdzv-endpoint", endpoint, "--timeout", "30", "--json", str(report)]
        args += ["--inject", fault] if fault else []
        if one_task_per_node:
            # The sbatch recipe: one srun task per node; --node-rank comes from SLURM_NODEID.
            env = {**srun_env(node, 2, 1, nodelist="localhost"), "SLURM_NNODES": "2"}
            procs.append(popen(args, scratch, env))
        else:
            procs.append(popen([*args, "--node-rank", str(node)], scratch))
    outputs = [p.communicate(timeout=180) for p in procs]
    assert [p.returncode for p in procs] == [code, code], outputs
    loaded = [json.loads(r.read_text()) for r in reports]
    full = [r for r in loaded if r["ranks"]]
    assert len(full) == 1 and len(full[0]["ranks"]) == 4  # exactly one node prints the world's report
    (one_line,) = [out for (out, _), r in zip(outputs, loaded, strict=True) if not r["ranks"]]
    assert len(one_line.strip().splitlines()) == 1 and "the report is on host" in one_line
    assert full[0]["world"]["nodes"] == 2
    assert [row["ranks"] for row in full[0]["tables"]["hosts"]] == ["ranks 0, 1", "ranks 2, 3"]
    if fault:
        assert {c["name"]: c["ranks"] for c in full[0]["checks"] if c["status"] == "FAIL"} == {
            "classic all_reduce": [3],
            "data integrity": [3],
        }
    assert_nothing_left(scratch)


def test_a_node_that_never_arrives_is_bounded(ddpcheck, scratch) -> None:
    endpoint = f"127.0.0.1:{free_port()}"
    run = ddpcheck(
        "allreduce", "--nproc", "1", *QUICK, "--nnodes", "2", "--rdzv-endpoint", endpoint, "--timeout", "5"
    )
    assert run.code == 3
    (launch,) = run.failing()
    assert endpoint in launch["detail"] and "node rank(s) 1 never arrived" in launch["detail"]
    assert run.report["elapsed_s"] < 5 + 10
    assert_nothing_left(scratch, run)


@pytest.mark.integration
def test_srun_tasks_run_as_their_ranks(scratch, tmp_path: Path) -> None:
    procs = []
    port = str(free_port())
    for rank in range(3):
        env = {**srun_env(rank, 3, 3, nodelist="localhost"), "MASTER_PORT": port}
        args = [sys.executable, "-m", "ddpcheck", "allreduce", *QUICK, "--inject", "corrupt@2"]
        args += ["--json", str(tmp_path / f"rank{rank}.json")]
        procs.append(popen(args, scratch, env))
    outputs = [p.communicate(timeout=180) for p in procs]
    assert [p.returncode for p in procs] == [1, 1, 1], outputs
    report = json.loads((tmp_path / "rank0.json").read_text())
    assert report["world"]["size"] == 3
    assert report["tables"]["classic"][2]["got"] == 4.0
    assert {c["name"]: c["ranks"] for c in report["checks"] if c["status"] == "FAIL"}["data integrity"] == [2]
    assert not (tmp_path / "rank1.json").exists()  # only rank 0 reports
    assert outputs[1] == ("", "") and outputs[2] == ("", "")
    assert_nothing_left(scratch)


@pytest.mark.integration
def test_under_torchrun_each_process_is_a_rank(scratch, tmp_path: Path) -> None:
    report = tmp_path / "report.json"
    args = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "3"]
    args += ["-m", "ddpcheck", "allreduce", *QUICK, "--json", str(report)]
    proc = popen(args, scratch)
    out, err = proc.communicate(timeout=180)
    assert proc.returncode == 0, out + err
    data = json.loads(report.read_text())
    assert data["world"]["size"] == 3 and data["verdict"] == "pass"
    assert not worker_processes(scratch)


# ------------------------------------------------------------------ two hosts of our own
@pytest.fixture
def two_hosts():
    """Two network namespaces joined by a veth pair: 10.231.7.1 and 10.231.7.2."""
    yield from veth_pair("node", "10.231.7")


@pytest.mark.netns
def test_two_hosts_in_network_namespaces(two_hosts, scratch, tmp_path: Path) -> None:
    endpoint = f"{two_hosts[0]['address']}:29400"
    procs = []
    for node, host in enumerate(two_hosts):
        args = ["allreduce", "--nproc", "2", *QUICK, "--nnodes", "2", "--node-rank", str(node)]
        args += ["--rdzv-endpoint", endpoint, "--timeout", "30", "--json", str(tmp_path / f"n{node}.json")]
        procs.append(on_host(host, args, scratch))
    outputs = [p.communicate(timeout=180) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outputs
    report = json.loads((tmp_path / "n0.json").read_text())
    rows = report["tables"]["hosts"]
    assert [(r["host"], r["address"]) for r in rows] == [(h["hostname"], h["address"]) for h in two_hosts]
    assert report["world"]["hosts"] == [h["hostname"] for h in two_hosts]
    assert "the report is on host " + two_hosts[0]["hostname"] in outputs[1][0]
    assert_nothing_left(scratch)


@pytest.mark.netns
def test_a_host_pointed_where_nobody_listens(two_hosts, scratch, tmp_path: Path) -> None:
    endpoint = f"{two_hosts[0]['address']}:29400"  # host A runs nothing
    args = ["allreduce", "--nproc", "2", *QUICK, "--nnodes", "2", "--node-rank", "1"]
    args += ["--rdzv-endpoint", endpoint, "--timeout", "5", "--json", str(tmp_path / "n1.json")]
    proc = on_host(two_hosts[1], args, scratch)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 3, out + err
    report = json.loads((tmp_path / "n1.json").read_text())
    (launch,) = [c for c in report["checks"] if c["status"] == "ERROR"]
    assert endpoint in launch["detail"]
    assert report["elapsed_s"] < 5 + 15
    assert_nothing_left(scratch)


@pytest.mark.integration
@pytest.mark.parametrize(
    ("fault", "check", "words"),
    [
        # A crash that says nothing (SIGKILL) is the hard one to carry across; a raised one is carried
        # by the same status record (test_failures.py names it on one node).
        ("hang@1", "hang", "is behind"),
        ("kill@1", "rank crashed", "killed by SIGKILL"),
    ],
)
def test_a_fault_on_another_node_is_named_by_both(
    scratch, tmp_path: Path, fault: str, check: str, words: str
) -> None:
    """Each node sees only its own ranks' status files; the rendezvous store carries the rest."""
    endpoint = f"127.0.0.1:{free_port()}"
    procs = []
    for node in (0, 1):
        args = [sys.executable, "-m", "ddpcheck", "allreduce", "--nproc", "1", *QUICK, "--nnodes", "2"]
        args += ["--node-rank", str(node), "--rdzv-endpoint", endpoint, "--timeout", "6", "--inject", fault]
        procs.append(popen([*args, "--json", str(tmp_path / f"n{node}.json")], scratch))
    outputs = [p.communicate(timeout=180) for p in procs]
    reports = [json.loads((tmp_path / f"n{node}.json").read_text()) for node in (0, 1)]
    assert [p.returncode for p in procs] == [3, 3], [
        (o, r["checks"]) for o, r in zip(outputs, reports, strict=True)
    ]
    for node in (0, 1):
        report = json.loads((tmp_path / f"n{node}.json").read_text())
        failing = [c for c in report["checks"] if c["status"] == "ERROR"]
        assert [(c["name"], c["ranks"]) for c in failing] == [(check, [1])], (node, failing)
        assert words in failing[0]["detail"]
    for node in (0, 1):
        log_dir = json.loads((tmp_path / f"n{node}.json").read_text())["log_dir"]
        if log_dir:
            shutil.rmtree(log_dir)
    assert_nothing_left(scratch)


def test_rank_map_names_a_node_with_fewer_ranks() -> None:
    ids = idents(["a", "b", "c"], 2)
    ids = [i for i in ids if i["rank"] != 5]  # host c lost a GPU: one rank fewer
    check = judge_rank_map(ids)
    assert check.status == Status.FAIL and check.hosts == ["c"] and check.ranks == [4]
    assert "runs 1 rank, the other nodes 2" in check.detail


@pytest.mark.integration
def test_under_torchrun_a_hang_is_named_by_rank_0(scratch, tmp_path: Path) -> None:
    report = tmp_path / "report.json"
    args = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "3"]
    args += [
        "-m",
        "ddpcheck",
        "allreduce",
        *QUICK,
        "--inject",
        "hang@1",
        "--timeout",
        "5",
        "--json",
        str(report),
    ]
    proc = popen(args, scratch)
    _, err = proc.communicate(timeout=180)
    assert proc.returncode != 0
    data = json.loads(report.read_text())
    (hang,) = [c for c in data["checks"] if c["status"] == "ERROR"]
    assert hang["name"] == "hang" and hang["ranks"] == [1], hang
    assert "rank 0 gave up after 5 s" in hang["detail"]
    assert (
        "ddpcheck: rank 0 failed:" in err and "ddpcheck/rank/harness.py" not in err
    )  # (torchrun's own traceback follows)
    assert not worker_processes(scratch)
    assert not list(
        scratch.glob("ddpcheck-*")
    )  # the hung rank, stopped by torchrun, removed its run directory


def test_counts_read_as_english() -> None:
    assert judge_rank_map(idents(["a"], 1)).detail.startswith("1 rank on 1 node,")
    assert judge_rank_map(idents(["a", "b"], 2)).detail.startswith("4 ranks on 2 nodes,")
