"""`ddpcheck attach --all` on each of 3 nodes: one gloo job across them, hung, and one verdict from all.

Each node is a network namespace on a bridge with a pid namespace, /proc and hostname of its own
(tests/support/netns.py), torchrun its pid 1 as in a container, 2 ranks each. One attach is
started on every node at once, as pdsh would (nsenter), sharing --dir: each sees only its own
node's ranks, and all three must name the same rank on another node.
"""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import pytest

from tests.support.attached import PER_NODE, across_nodes, attach_on_nodes, job_processes, py_spies, rank_pid
from tests.support.netns import bridged_or_skip, namespaces

pytestmark = pytest.mark.netns

NODES = 3
VERDICT_S = 20.0  # the issue's bound for 3 nodes, from the attaches' start to the last one's exit


@pytest.fixture
def nodes():
    made: list[dict] = []
    for hosts in bridged_or_skip("wt42", "10.231.42", NODES, tools=("ip", "unshare", "nsenter")):
        made = hosts
        yield hosts
    tag = made[0]["netns"][: -len("h0")]  # every namespace of these hosts, the bridge's too, starts so
    assert [name for name in namespaces() if name.startswith(tag)] == []


def attach_every_node(inits: list[int], scratch: Path, tmp_path: Path) -> tuple[list[dict], float]:
    """One attach per node, at once; their reports and the seconds until the last one exited."""
    reports = [tmp_path / f"attach{i}.json" for i in range(NODES)]
    began = time.monotonic()
    procs = attach_on_nodes(inits, tmp_path / "shared", scratch, reports)
    outputs = [p.communicate(timeout=120) for p in procs]
    seconds = time.monotonic() - began
    assert [p.returncode for p in procs] == [3] * NODES, outputs
    assert py_spies(scratch) == []
    assert len(job_processes(scratch)) == NODES * (2 + PER_NODE)  # unshare, torchrun, its ranks: all go on
    return [json.loads(r.read_text()) for r in reports], seconds


def assert_one_verdict(reports: list[dict], hosts: list[dict], name: str, rank: int, *words: str) -> None:
    """Every node names `rank`, on its own host, in the same words; each report shows every rank."""
    named = [next(c for c in r["checks"] if c["name"] == name) for r in reports]
    host = hosts[rank // PER_NODE]["hostname"]
    for check in named:
        assert check["status"] == "ERROR" and check["ranks"] == [rank] and check["hosts"] == [host], check
        assert all(word in check["detail"] for word in words), check["detail"]
    assert len({c["detail"] for c in named}) == 1, [c["detail"] for c in named]
    for report in reports:
        rows = report["tables"]["ranks"]
        assert [r["rank"] for r in rows] == list(range(NODES * PER_NODE))
        assert [r["host"] for r in rows] == [h["hostname"] for h in hosts for _ in range(PER_NODE)]
        assert not [c for c in report["checks"] if c["name"] == "nodes"]  # every node's evidence came


def test_a_rank_stopped_on_one_node_is_named_by_every_node(nodes, scratch, tmp_path) -> None:
    stopped = 3  # node 1's second rank: nodes 0 and 2 see only its peers waiting
    with across_nodes(nodes, scratch, tmp_path, "healthy") as inits:
        os.kill(rank_pid(scratch, stopped), signal.SIGSTOP)
        time.sleep(1.0)
        reports, seconds = attach_every_node(inits, scratch, tmp_path)
        assert_one_verdict(reports, nodes, "hang", stopped, "is stopped")
        assert seconds < VERDICT_S, seconds


def test_a_collective_mismatch_on_one_node_is_named_by_every_node(nodes, scratch, tmp_path) -> None:
    culprit = 5  # node 2's second rank calls broadcast; the five others wait in all_reduce
    with across_nodes(nodes, scratch, tmp_path, "mismatch", culprit) as inits:
        reports, seconds = attach_every_node(inits, scratch, tmp_path)
        assert_one_verdict(reports, nodes, "collective mismatch", culprit, "broadcast", "all_reduce")
        assert seconds < VERDICT_S, seconds
