"""Hosts made from network namespaces, and ddpcheck started on them: shared by the tests that need real hosts.

Each namespace gets its own hostname (unshare --uts) and address on a veth pair, so a
multi-node launch across them crosses a real (virtual) link that `tc` can slow down.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest


def popen(args: list[str], scratch: Path, extra_env: dict[str, str] | None = None) -> subprocess.Popen:
    """Start a command with TMPDIR in the test's scratch directory, its output captured."""
    env = {
        **os.environ,
        "TMPDIR": str(scratch),
        "OMP_NUM_THREADS": "1",
        "COLUMNS": "200",
        **(extra_env or {}),
    }
    return subprocess.Popen(args, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True)


def on_host(
    host: dict[str, Any], args: list[str], scratch: Path, extra_env: dict[str, str] | None = None
) -> subprocess.Popen:
    """`ddpcheck ARGS` inside the host's namespace, under the host's own name."""
    command = " ".join(["exec", sys.executable, "-m", "ddpcheck", *args])
    script = f"hostname {host['hostname']} && GLOO_SOCKET_IFNAME={host['device']} {command}"
    argv = ["ip", "netns", "exec", host["netns"], "unshare", "--uts", "sh", "-c", script]
    return popen(argv, scratch, extra_env)


def veth_pair(
    prefix: str, subnet: str, tools: tuple[str, ...] = ("ip", "unshare")
) -> Iterator[list[dict[str, Any]]]:
    """Two namespaces joined by a veth pair, {subnet}.1 and .2; skips where they cannot be made."""
    if os.geteuid() != 0 or not all(shutil.which(t) for t in tools):
        pytest.skip(f"needs root and {', '.join(tools)} to build network namespaces")
    tag = uuid.uuid4().hex[:6]
    names = [f"{prefix}{tag}a", f"{prefix}{tag}b"]
    try:
        for ns in names:
            ip("netns", "add", ns)
    except subprocess.CalledProcessError as exc:
        pytest.skip(f"ip netns is unavailable here: {exc.stderr.decode().strip()}")
    try:
        ip("link", "add", f"v{tag}a", "type", "veth", "peer", "name", f"v{tag}b")
        hosts = []
        for index, ns in enumerate(names):
            dev, address = f"v{tag}{'ab'[index]}", f"{subnet}.{index + 1}"
            ip("link", "set", dev, "netns", ns)
            ip("-n", ns, "addr", "add", f"{address}/24", "dev", dev)
            ip("-n", ns, "link", "set", dev, "up")
            ip("-n", ns, "link", "set", "lo", "up")
            hosts.append(
                {"netns": ns, "device": dev, "address": address, "hostname": f"{prefix}{'ab'[index]}-{tag}"}
            )
        yield hosts
    finally:
        for ns in names:
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)
