"""Fleet operations: --hostlist names exactly the culprit hosts, --prom parses as Prometheus reads it,
--drain drains and resumes real Slurm nodes (and never resumes an admin's drain)."""

from __future__ import annotations

import json
import math
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
from prometheus_client.parser import text_string_to_metric_families

from ddpcheck.checks.links import LinksOptions
from ddpcheck.checks.links.check import judge as judge_links
from ddpcheck.errors import UsageError
from ddpcheck.failure.explain import judge_stall
from ddpcheck.failure.liveness import Stall
from ddpcheck.failure.statuses import SeenStatus
from ddpcheck.launcher.drain import PREFIX, REASON_MAX, act_on, reason
from ddpcheck.report.fleet import FleetOptions, compressed, culprit_hosts
from ddpcheck.report.formats.prometheus import STATUS_VALUE, text_of
from ddpcheck.report.model import Check, Report, Status, report_from_dict
from tests.conftest import assert_nothing_left, assert_usage_error, worker_processes
from tests.support.scale_data import links_data, rank_identities
from tests.support.synthetic_reports import collectives_report, links_report

GOLDEN = Path(__file__).parent / "golden" / "reports"
FIVE_HOSTS = ["gpu-a001", "gpu-a002", "gpu-a003", "gpu-a004", "gpu-a017"]


# ------------------------------------------------------------------ --hostlist: pure
def _status(
    rank: int, host: str, stage: str, seq: int, state: str = "sleeping", age: float = 0.3
) -> SeenStatus:
    return {
        "rank": rank,
        "local_rank": rank % 2,
        "host": host,
        "pid": 1000 + rank,
        "stage": stage,
        "seq": seq,
        "heartbeat_age_s": age,
        "proc_state": state,
        "error": None,
    }


def test_a_hang_lists_the_stopped_ranks_host_not_the_hosts_that_waited_for_it() -> None:
    # Ten ranks on five hosts; rank 5 (gpu-a003) is stopped, the nine others wait in the collective.
    statuses = {
        r: _status(
            r, FIVE_HOSTS[r // 2], "measure: classic", 5 if r != 5 else 4, "stopped" if r == 5 else "sleeping"
        )
        for r in range(10)
    }
    hang = judge_stall(Stall(statuses, waited_s=20.0, world_size=10))
    report = Report("allreduce", checks=[Check("rank map", Status.PASS), hang])
    assert culprit_hosts(report) == ["gpu-a003"]
    assert compressed(culprit_hosts(report)) == "gpu-a003"


def test_a_slow_host_in_the_links_judge_is_the_only_host_listed() -> None:
    # The real links judge over 5 hosts x 2 ranks; every link out of gpu-a004 at a tenth.
    identities = rank_identities(FIVE_HOSTS, 2)
    data = links_data(identities, slow_hosts={"gpu-a004"})
    report = judge_links(data, identities, LinksOptions(size=2**20, iters=4, warmup=1, threshold=0.5))
    assert report.verdict.value == "fail"
    assert culprit_hosts(report) == ["gpu-a004"]


def test_several_culprits_compress_to_slurm_syntax_and_a_pass_lists_none() -> None:
    failing = Report(
        "devices",
        checks=[
            Check("compute", Status.FAIL, "slow", [0, 2], ["gpu-a017", "gpu-a001"]),
            Check("memory", Status.WARN, "warned hosts are not culprits", [4], ["gpu-a004"]),
            Check("health", Status.ERROR, "", [1, 3], ["gpu-a002", "gpu-a003", "gpu-a001"]),
        ],
    )
    assert culprit_hosts(failing) == ["gpu-a017", "gpu-a001", "gpu-a002", "gpu-a003"]
    assert compressed(culprit_hosts(failing)) == "gpu-a[001-003,017]"
    assert culprit_hosts(Report("devices", checks=[Check("compute", Status.PASS, "", [], [])])) == []


# ------------------------------------------------------------------ --prom: pure
def _families(report: Report) -> dict[str, list]:
    """Parsed by Prometheus' own parser: {family name: samples}."""
    return {f.name: f.samples for f in text_string_to_metric_families(text_of(report))}


def _status_of(families: dict[str, list], check: str, host: str) -> float:
    (sample,) = [
        s
        for s in families["ddpcheck_check_status"]
        if s.labels["check"] == check and s.labels["host"] == host
    ]
    return sample.value


@pytest.mark.parametrize("path", sorted(GOLDEN.glob("*.json")), ids=lambda p: p.stem)
def test_every_saved_report_parses_as_prometheus_text(path: Path) -> None:
    report = report_from_dict(json.loads(path.read_text()))  # rank 0 hands the launcher a saved report's form
    families = _families(report)
    assert families["ddpcheck_verdict"][0].value == report.verdict.exit_code
    for check in report.checks:
        hosts = check.hosts or [r["host"] for r in report.ranks][:1] or [""]
        assert _status_of(families, check.name, hosts[0]) == STATUS_VALUE[check.status]
    for name, samples in families.items():
        assert name.startswith("ddpcheck_")
        assert not any(unit in name for unit in ("gbps", "_ms", "_us", "tflops")), name
        assert all(math.isfinite(s.value) for s in samples), name


def test_busbw_is_in_bytes_per_second_and_a_culprit_host_fails_while_its_peers_pass() -> None:
    report = collectives_report(n=8, corrupt=3)
    families = _families(report)
    busbw = families["ddpcheck_busbw_bytes_per_second"]
    row = next(r for r in report.table("bandwidth").rows if r["op"] == busbw[0].labels["op"])
    assert {"command", "op", "size_bytes", "dtype"} <= set(busbw[0].labels)
    first = next(
        s for s in busbw if s.labels["size_bytes"] == str(row["size_bytes"]) and s.labels["op"] == row["op"]
    )
    assert first.value == pytest.approx(row["busbw_gbps"] * 1e9)
    failing = report.failing()[0]
    (culprit,) = failing.hosts
    others = {r["host"] for r in report.ranks} - {culprit}
    assert _status_of(families, failing.name, culprit) == 2
    assert all(_status_of(families, failing.name, h) == 0 for h in others)


def test_links_metrics_are_per_rank_and_the_slowest_links_not_every_link() -> None:
    report = links_report(n=64, per_host=8, slow=(13, 42))
    families = _families(report)
    assert families["ddpcheck_check_status"]
    links = len(report.table("links").rows) if report.table("links") else 0
    exported = sum(len(v) for k, v in families.items() if "link" in k)
    assert exported < links or links == 0


# ------------------------------------------------------------------ the drain reason: pure
def test_the_drain_reason_names_the_check_and_its_figure_and_is_cut_to_length() -> None:
    check = Check(
        "compute", Status.FAIL, 'rank 2 on host n1: 0.31 TFLOP/s, 0.42x "the" median ' * 20, [2], ["n1"]
    )
    text = reason(Report("devices", checks=[check]), "n1")
    assert text.startswith(f"{PREFIX} devices compute: rank 2 on host n1: 0.31 TFLOP/s")
    assert len(text) == REASON_MAX and text.endswith("...") and '"' not in text


# ------------------------------------------------------------------ bad input
@pytest.mark.parametrize(
    ("args", "words"),
    [
        (("--hostlist", "/no/such/dir/hosts"), "does not exist"),
        (("--drain", "--inject", "corrupt@1"), "--inject"),
    ],
)
def test_bad_fleet_options_are_one_line_and_exit_2(
    ddpcheck, scratch, args: tuple[str, ...], words: str
) -> None:
    run = ddpcheck("allreduce", "--nproc", "2", *args)
    assert_usage_error(run, scratch)
    assert words in run.stderr


@pytest.mark.parametrize(
    ("options", "words"),
    [
        (FleetOptions(prom_path="/no/such/dir/x.prom"), "does not exist"),
        (FleetOptions(prom_path="metrics.txt"), "reads only files ending .prom"),
        (FleetOptions(hostlist_path="-"), "needs a file path"),
    ],
)
def test_bad_fleet_paths_are_refused_before_anything_starts(options: FleetOptions, words: str) -> None:
    with pytest.raises(UsageError, match=words):
        options.check(injected=False)


# ------------------------------------------------------------------ real runs: a stopped rank, the real Slurm
def _start(scratch: Path, env: dict[str, str], *args: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "ddpcheck", "allreduce", "--nproc", "2", *args],
        env={**os.environ, **env, "TMPDIR": str(scratch), "OMP_NUM_THREADS": "1"},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )


def _stop_rank_1(scratch: Path) -> None:
    """SIGSTOP rank 1 once both ranks publish a status: a real hang, not a planted one."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        workers = worker_processes(scratch)
        if len(workers) == 2 and len(list(scratch.glob("ddpcheck-*/status/rank-*.json"))) == 2:
            victim = next(w for w in workers if w.environ().get("RANK") == "1")
            time.sleep(0.5)
            victim.suspend()
            return
        time.sleep(0.1)
    raise AssertionError("the ranks did not start")


def _node(env: dict[str, str]) -> dict[str, str]:
    shown = subprocess.run(
        ["scontrol", "show", "node", socket.gethostname(), "--oneliner"],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    state = shown.split(" State=", 1)[1].split()[0]
    why = shown.split(" Reason=", 1)[1].split(" [", 1)[0] if " Reason=" in shown else ""
    return {"state": state, "reason": why}


def test_a_real_hang_drains_this_node_a_pass_resumes_it_an_admins_drain_stays(
    slurm, scratch, tmp_path
) -> None:
    host = socket.gethostname()
    hosts, prom = tmp_path / "culprits", tmp_path / "node.prom"
    long = ("--sizes", "1K:4M", "--iters", "200", "--timeout", "4")
    proc = _start(scratch, slurm, *long, "--drain", "--hostlist", str(hosts), "--prom", str(prom))
    _stop_rank_1(scratch)
    out, err = proc.communicate(timeout=90)
    assert proc.returncode == 3, out + err
    assert hosts.read_text() == f"{host}\n"
    families = {f.name: f.samples for f in text_string_to_metric_families(prom.read_text())}
    assert families["ddpcheck_verdict"][0].value == 3
    assert any(s.labels["check"] == "hang" and s.value == 3 for s in families["ddpcheck_check_status"])
    node = _node(slurm)
    assert "DRAIN" in node["state"] and node["reason"].startswith("ddpcheck: allreduce hang: rank 1"), node
    assert f"drained Slurm node {host}" in out + err
    for w in psutil.process_iter():
        if w.pid == proc.pid:
            w.wait(5)
    assert_nothing_left(scratch, type("R", (), {"report": {"log_dir": _log_dir(out + err)}})())

    quick = ("--sizes", "1K", "--iters", "1")
    passed = _start(scratch, slurm, *quick, "--drain", "--hostlist", str(hosts))
    out, err = passed.communicate(timeout=90)
    assert passed.returncode == 0, out + err
    assert hosts.read_text() == ""
    assert f"resumed Slurm node {host}" in out + err
    assert "DRAIN" not in _node(slurm)["state"]

    # An admin's drain: a passing report of this host (the runs above proved the CLI's path) leaves it.
    subprocess.run(
        ["scontrol", "update", f"nodename={host}", "state=drain", "reason=admin: swapping a DIMM"],
        env={**os.environ, **slurm},
        check=True,
    )
    passing = Report(
        "allreduce", checks=[Check("classic all_reduce", Status.PASS)], ranks=[{"rank": 0, "host": host}]
    )
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("SLURM_CONF", slurm["SLURM_CONF"])
        lines = act_on(passing)
    assert lines == [f"--drain: {host} stays drained: an admin drained it (admin: swapping a DIMM)"]
    node = _node(slurm)
    assert "DRAIN" in node["state"] and node["reason"] == "admin: swapping a DIMM"
    subprocess.run(
        ["scontrol", "update", f"nodename={host}", "state=resume"], env={**os.environ, **slurm}, check=True
    )


def test_drain_without_scontrol_or_a_controller_says_so_in_one_line(monkeypatch, tmp_path) -> None:
    failing = Report("allreduce", checks=[Check("hang", Status.ERROR, "rank 1 stopped", [1], ["n1"])])
    monkeypatch.setenv("PATH", str(tmp_path))  # no scontrol: not a Slurm node
    assert act_on(failing) == ["--drain: could not drain: scontrol is not installed here (not a Slurm node)"]


@pytest.mark.parametrize("failing_call", ["ping", "update"])
def test_drain_whose_scontrol_fails_says_so_in_one_line(monkeypatch, failing_call: str) -> None:
    """scontrol that cannot run (or times out) on the ping or on a drain: one line, nothing raised."""
    from ddpcheck.launcher import drain

    def scontrol(args: list[str]) -> subprocess.CompletedProcess[str]:
        if args[0] == failing_call:
            raise subprocess.TimeoutExpired(["scontrol", *args], 20)
        return subprocess.CompletedProcess(args, 0, stdout="NodeName=n1 State=IDLE", stderr="")

    monkeypatch.setattr(drain.shutil, "which", lambda name: f"/usr/bin/{name}")
    monkeypatch.setattr(drain, "scontrol", scontrol)
    failing = Report("allreduce", checks=[Check("hang", Status.ERROR, "rank 1 stopped", [1], ["n1"])])
    command = "'['scontrol', 'ping']'" if failing_call == "ping" else "'['scontrol', 'update', 'nodename=n1'"
    (line,) = act_on(failing)
    assert line.startswith(f"--drain: could not drain: scontrol failed (Command {command}")
    assert line.endswith("timed out after 20 seconds)")


def _log_dir(text: str) -> str | None:
    marker = "rank logs kept in "
    # A path longer than the rest of its line stands whole on the next (report/fold.py).
    for line in text.replace("kept in\n", "kept in ").splitlines():
        if marker in line:
            return line.split(marker, 1)[1].strip()
    return None


@pytest.mark.integration
def test_under_torchrun_rank_0_writes_the_hostlist_and_the_metrics(scratch, tmp_path) -> None:
    """Inline (every rank runs the CLI): the files come from the one process that writes the report."""
    hosts, prom = tmp_path / "culprits", tmp_path / "run.prom"
    argv = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2"]
    argv += ["-m", "ddpcheck", "allreduce", "--sizes", "1K", "--iters", "1"]
    argv += ["--hostlist", str(hosts), "--prom", str(prom)]
    env = {**os.environ, "TMPDIR": str(scratch), "OMP_NUM_THREADS": "1"}
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    assert hosts.read_text() == ""
    families = {f.name: f.samples for f in text_string_to_metric_families(prom.read_text())}
    assert families["ddpcheck_verdict"][0].value == 0 and families["ddpcheck_ranks"][0].value == 2
    assert (done.stdout + done.stderr).count("wrote the culprit hostlist") == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["culprits", "run.prom", "tmp"]  # no temp file left


def test_devices_metrics_are_in_flops_and_bytes_per_second() -> None:
    from ddpcheck.checks.devices import DevicesOptions
    from ddpcheck.checks.devices.judge import judge as judge_devices
    from tests.support.scale_data import devices_data

    identities = rank_identities(FIVE_HOSTS, 2)
    data = devices_data(10)
    for one in data[7]["passes"]:
        one["gemm"] = {k: v / 3 for k, v in one["gemm"].items()}
    report = judge_devices(data, identities, DevicesOptions().for_device("cuda"))
    report.ranks = identities  # as rank 0's assembly adds them
    families = _families(report)
    rates = {s.labels["rank"]: s.value for s in families["ddpcheck_device_matmul_flops_per_second"]
             if s.labels["dtype"] == "bfloat16"}  # fmt: skip
    row = next(r for r in report.table("devices").rows if r["rank"] == 7)
    assert rates["7"] == pytest.approx(row["gemm_tflops"] * 1e12)
    assert {s.labels["direction"] for s in families["ddpcheck_device_copy_bytes_per_second"]} == {
        "device",
        "h2d",
        "d2h",
    }
    assert (
        _status_of(families, "compute", "gpu-a004") == 2 and _status_of(families, "compute", "gpu-a001") == 0
    )
