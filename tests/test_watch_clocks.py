"""The offsets between watchers' clocks (checks/watch/clocks.py) and which node of a torchrun a watch is
(launcher/torchrun_nodes.py): what makes one watch per node a team that judges all hosts' ranks."""

from __future__ import annotations

import socket

import pytest

from ddpcheck.checks.watch import clocks
from ddpcheck.checks.watch.team import PORT_OFFSET, task_of
from ddpcheck.launcher.torchrun_nodes import TorchrunNode, node_of


def test_an_offset_measured_against_this_hosts_own_clock_is_zero_within_half_its_round_trip() -> None:
    server = clocks.ClockServer()
    try:
        found = clocks.measure("127.0.0.1", server.port)
    finally:
        server.close()
    assert found is not None and found.usable
    assert abs(found.offset_ns) <= found.round_trip_ns // 2 + 1_000_000, found  # + 1 ms: the ns clock


def test_no_answer_is_no_offset() -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as silent:
        silent.bind(("127.0.0.1", 0))  # takes the questions, answers none
        assert clocks.measure("127.0.0.1", silent.getsockname()[1], tries=2) is None


def test_a_slow_answer_is_not_used() -> None:
    assert not clocks.Offset(offset_ns=5, round_trip_ns=clocks.MAX_ROUND_TRIP_NS + 1).usable


@pytest.mark.parametrize(("command", "node"), [
    (["torchrun", "--nnodes", "2", "--node-rank", "1", "--master-addr", "10.0.0.1", "--master-port", "1234",
      "train.py", "--nnodes", "9"], TorchrunNode(2, 1, "10.0.0.1", 1234)),
    (["/usr/bin/python3", "-m", "torch.distributed.run", "--nnodes=4", "--node_rank=0", "--rdzv-backend",
      "c10d", "--rdzv-endpoint", "n01:29400", "t.py"], TorchrunNode(4, 0, "n01", 29400)),
    (["torchrun", "--nnodes", "2", "--node-rank", "1", "--master-addr", "h", "t.py"],
     TorchrunNode(2, 1, "h", 29500)),
    (["torchrun", "--standalone", "--nnodes", "2", "--node-rank", "1", "t.py"], None),
    (["torchrun", "--nnodes", "1:4", "--node-rank", "1", "--master-addr", "h", "t.py"], None),  # elastic
    (["torchrun", "--nnodes", "2", "--master-addr", "h", "t.py"], None),  # no node rank: no team
    (["torchrun", "--nproc-per-node", "8", "train.py"], None),
    (["python", "train.py", "--nnodes", "2", "--node-rank", "1", "--master-addr", "h"], None),
])  # fmt: skip
def test_which_node_of_a_torchrun_a_command_is(command: list[str], node: TorchrunNode | None) -> None:
    assert node_of(command) == node


def test_one_watch_per_torchrun_node_is_a_task_of_a_team_beside_torchruns_own_port() -> None:
    command = [
        "torchrun",
        "--nnodes",
        "2",
        "--node-rank",
        "1",
        "--master-addr",
        "a",
        "--master-port",
        "29500",
    ]
    task = task_of({}, [*command, "train.py"])
    assert task is not None and (task.index, task.count, task.host, task.port) == (
        1,
        2,
        "a",
        29500 + PORT_OFFSET,
    )
    assert task_of({"RANK": "0"}, [*command, "train.py"]) is None  # watch run as a rank: watched from outside
