"""`ddpcheck links` across real hosts: network namespaces on a bridge, one host's link limited by tc."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tests.conftest import assert_nothing_left
from tests.support.netns import bridged_or_skip, free_port, on_host

HOSTS = 5  # --hostlist must name the slow host alone, not the four that exchanged with it
SLOW = 2  # the host whose outgoing link tc limits
RATE = "100mbit"  # 0.0125 GB/s: far below what a veth carries here (~1-2 GB/s)


@pytest.fixture
def bridged_hosts():
    """HOSTS namespaces, each joined by a veth pair to a bridge in a namespace of its own."""
    yield from bridged_or_skip("wt13", "10.231.13", HOSTS, tools=("ip", "tc", "unshare"))


@pytest.mark.netns
def test_the_host_behind_a_slow_link_is_named(bridged_hosts, scratch, tmp_path: Path) -> None:
    slow = bridged_hosts[SLOW]
    limit = ["tc", "qdisc", "add", "dev", slow["device"], "root", "tbf", "rate", RATE]
    limit += ["burst", "32kbit", "latency", "400ms"]
    result = subprocess.run(["ip", "netns", "exec", slow["netns"], *limit], capture_output=True, text=True)
    if result.returncode != 0:
        pytest.skip(f"tc cannot limit a veth here: {result.stderr.strip()}")
    endpoint = f"{bridged_hosts[0]['address']}:{free_port()}"
    procs = []
    for node, host in enumerate(bridged_hosts):
        args = ["links", "--nproc", "1", "--size", "128K", "--iters", "5", "--nnodes", str(HOSTS)]
        args += ["--node-rank", str(node), "--rdzv-endpoint", endpoint, "--timeout", "60"]
        args += ["--hostlist", str(tmp_path / f"n{node}.hosts")]
        procs.append(on_host(host, [*args, "--json", str(tmp_path / f"n{node}.json")], scratch))
    outputs = [p.communicate(timeout=240) for p in procs]
    assert [p.returncode for p in procs] == [1] * HOSTS, outputs
    report = json.loads((tmp_path / "n0.json").read_text())
    bandwidth = next(c for c in report["checks"] if c["name"] == "link bandwidth")
    assert bandwidth["status"] == "FAIL" and bandwidth["hosts"] == [slow["hostname"]], bandwidth
    assert bandwidth["ranks"] == [SLOW]
    # tc shapes what the host sends; gloo's pair then paces both ways, so "from" or "of" the host.
    # "every link" or, when one of its links measured near its peers' on a busy run (seen once in
    # CI), "most links": the host is named either way.
    assert bandwidth["detail"].startswith(("every link ", "most links "))
    assert f" host {slow['hostname']}: " in bandwidth["detail"]
    assert "its NIC, cable or switch port" in bandwidth["detail"]
    assert {tuple(p) for p in bandwidth["links"]} >= {(SLOW, n) for n in range(HOSTS) if n != SLOW}
    assert all(SLOW in pair for pair in bandwidth["links"])
    rows = report["tables"]["links"]
    assert {r["kind"] for r in rows} == {"inter"} and len(rows) == HOSTS * (HOSTS - 1)
    slowed = [r["gbps"] for r in rows if r["src"] == SLOW]
    assert max(slowed) < 0.0125 * 1.2  # tc's rate, and no faster
    hosts = {r["host"]: r["status"] for r in report["tables"]["link_hosts"]}
    assert hosts[slow["hostname"]] == "FAIL"
    # --hostlist: written once, by the node that writes the report, naming the slow host alone.
    assert (tmp_path / "n0.hosts").read_text() == f"{slow['hostname']}\n"
    assert not any((tmp_path / f"n{node}.hosts").exists() for node in range(1, HOSTS))
    assert_nothing_left(scratch)
