"""Jobs for `ddpcheck attach` to read (tests/support/attach_job.py): found, ended, proved gone; and a
job across nodes made of namespaces, with one attach per node.

Shared by tests/test_attach.py, tests/test_attach_netns.py and tests/perf/bench_attach.py.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil

from tests.support.netns import free_port, in_node, node_init, start_node

JOB = str(Path(__file__).parent / "attach_job.py")
RANK_NAMES = ("RANK", "OMPI_COMM_WORLD_RANK", "SLURM_PROCID")
PER_NODE = 2  # ranks on each node of a job across nodes
PORT = 29500  # the rendezvous on the first node's own network: no other run's port can be there
READY_S = 180.0  # 3 torchruns and 6 ranks importing torch on 2 busy cores


def job_processes(scratch: Path) -> list[psutil.Process]:
    """The job's processes, launchers included (its TMPDIR tells them from any other run's)."""
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        with contextlib.suppress(psutil.Error):
            if JOB in " ".join(proc.info["cmdline"] or []) and proc.environ().get("TMPDIR") == str(scratch):
                found.append(proc)
    return found


def rank_pid(scratch: Path, rank: int) -> int:
    """The rank's pid as this machine numbers it (a node's pid namespace numbers it otherwise)."""
    for proc in job_processes(scratch):
        environ = proc.environ()
        if any(environ.get(n) == str(rank) for n in RANK_NAMES):
            return proc.pid
    raise AssertionError(f"no process of rank {rank}")


def py_spies(scratch: Path) -> list[int]:
    """py-spy processes an attach given this TMPDIR started and left running (there must be none)."""
    found = []
    for proc in psutil.process_iter(["name"]):
        with contextlib.suppress(psutil.Error):
            if proc.info["name"] == "py-spy" and proc.environ().get("TMPDIR") == str(scratch):
                found.append(proc.pid)
    return found


@contextlib.contextmanager
def torchrun_job(nproc: int, scratch: Path, env: dict[str, str]) -> Iterator[subprocess.Popen]:
    """The job under torchrun on this node (TMPDIR `scratch`, its output in scratch/job.log) once
    ready; every process of it ended after (a benchmark's: a test's asserts more, test_attach.started)."""
    log = scratch / "job.log"
    argv = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(nproc), "--master-port",
            str(free_port()), JOB]  # fmt: skip
    with open(log, "w") as out:
        job = subprocess.Popen(
            argv,
            env={**env, "TMPDIR": str(scratch)},
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        deadline = time.monotonic() + 300
        while "ready" not in log.read_text():
            if job.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(log.read_text())
            time.sleep(0.2)
        yield job
    finally:
        # torchrun starts each rank in a session of its own: its group's SIGKILL leaves them running.
        ranks = job_processes(scratch)
        with contextlib.suppress(OSError):
            os.killpg(job.pid, signal.SIGKILL)
        for rank in ranks:
            with contextlib.suppress(psutil.Error):
                rank.kill()
        job.wait()
        psutil.wait_procs(ranks, timeout=10)


def gone_within(scratch: Path, seconds: float) -> list[psutil.Process]:
    """The job's processes still there after `seconds` (none, when it ended)."""
    deadline = time.monotonic() + seconds
    while job_processes(scratch) and time.monotonic() < deadline:
        time.sleep(0.1)
    return job_processes(scratch)


@contextlib.contextmanager
def across_nodes(
    hosts: list[dict[str, Any]], scratch: Path, logs: Path, mode: str, culprit: int = 1
) -> Iterator[list[int]]:
    """The job across `hosts`, torchrun as each node's pid 1 with PER_NODE ranks (node<i>.log in
    `logs`), once every rank stepped and the fault is planted: yields each node's pid 1. Ended
    after, and proved gone."""
    nodes: list[subprocess.Popen] = []
    log = logs / "node0.log"
    try:
        for index, host in enumerate(hosts):
            argv = [sys.executable, "-m", "torch.distributed.run", "--nnodes", str(len(hosts)), "--node-rank",
                    str(index), "--nproc-per-node", str(PER_NODE), "--master-addr", hosts[0]["address"],
                    "--master-port", str(PORT), JOB]  # fmt: skip
            env = {
                "ATTACH_JOB_MODE": mode,
                "ATTACH_JOB_RANK": str(culprit),
                "GLOO_SOCKET_IFNAME": host["device"],
            }
            with open(logs / f"node{index}.log", "w") as out:
                nodes.append(start_node(host, argv, scratch, env, out))
        inits = [node_init(node) for node in nodes]
        deadline = time.monotonic() + READY_S
        while "ready" not in log.read_text():
            assert all(node.poll() is None for node in nodes), log.read_text()
            assert time.monotonic() < deadline, log.read_text()
            time.sleep(0.2)
        time.sleep(1.0)  # the fault planted, every rank where it stays
        yield inits
    finally:
        for node in nodes:  # unshare --kill-child: its pid 1 goes, and with it every process of the node
            with contextlib.suppress(OSError):
                node.send_signal(signal.SIGKILL)
        for node in nodes:
            node.wait(timeout=30)
        assert gone_within(scratch, 10) == []


def attach_on_nodes(inits: list[int], directory: Path, scratch: Path, reports: list[Path],
                    *extra: str) -> list[subprocess.Popen]:  # fmt: skip
    """`ddpcheck attach --all --dir DIRECTORY` on every node at once (as pdsh would start them)."""
    argv = [sys.executable, "-m", "ddpcheck", "attach", "--all", "--dir", str(directory)]
    argv += ["--nodes", str(len(inits))]
    return [in_node(init, [*argv, *extra, "--json", str(report)], scratch)
            for init, report in zip(inits, reports, strict=True)]  # fmt: skip
