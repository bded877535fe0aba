"""Hosts made from network namespaces, and ddpcheck started on them: shared by the tests that need real hosts.

Each namespace gets its own hostname (unshare --uts) and address on a veth pair, so a
multi-node launch across them crosses a real (virtual) link that `tc` can slow down.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
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


class NamespacesUnavailable(Exception):
    """Network namespaces cannot be made here; the message says why."""


@contextlib.contextmanager
def bridged(
    prefix: str, subnet: str, count: int, tools: tuple[str, ...] = ("ip", "unshare")
) -> Iterator[list[dict[str, Any]]]:
    """`count` hosts ({subnet}.1, .2, ...), each a namespace joined by a veth pair to one bridge."""
    if os.geteuid() != 0 or not all(shutil.which(t) for t in tools):
        raise NamespacesUnavailable(f"needs root and {', '.join(tools)} to build network namespaces")
    tag = uuid.uuid4().hex[:5]
    bridge_ns = f"{prefix}{tag}br"
    names = [f"{prefix}{tag}h{i}" for i in range(count)]
    try:
        ip("netns", "add", bridge_ns)
    except subprocess.CalledProcessError as exc:
        raise NamespacesUnavailable(f"ip netns is unavailable here: {exc.stderr.decode().strip()}") from None
    try:
        ip("-n", bridge_ns, "link", "add", "br0", "type", "bridge")
        ip("-n", bridge_ns, "link", "set", "br0", "up")
        hosts = []
        for i, ns in enumerate(names):
            ip("netns", "add", ns)
            dev, peer, address = f"b{tag}h{i}", f"b{tag}p{i}", f"{subnet}.{i + 1}"
            ip("link", "add", dev, "type", "veth", "peer", "name", peer)
            ip("link", "set", dev, "netns", ns)
            ip("link", "set", peer, "netns", bridge_ns)
            ip("-n", bridge_ns, "link", "set", peer, "master", "br0")
            ip("-n", bridge_ns, "link", "set", peer, "up")
            ip("-n", ns, "addr", "add", f"{address}/24", "dev", dev)
            ip("-n", ns, "link", "set", dev, "up")
            ip("-n", ns, "link", "set", "lo", "up")
            hosts.append({"netns": ns, "device": dev, "address": address, "hostname": f"{prefix}-{tag}-{i}"})
        yield hosts
    finally:
        for ns in [*names, bridge_ns]:
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)


def bridged_or_skip(
    prefix: str, subnet: str, count: int, tools: tuple[str, ...] = ("ip", "unshare")
) -> Iterator[list[dict[str, Any]]]:
    """bridged() for a fixture (`yield from`): the test skips, with the reason, where it cannot be made."""
    try:
        with bridged(prefix, subnet, count, tools) as hosts:
            yield hosts
    except NamespacesUnavailable as exc:
        pytest.skip(str(exc))


def namespaces() -> list[str]:
    """The network namespaces on this machine, by name."""
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    return [line.split()[0] for line in listed.splitlines() if line.strip()]


def start_node(
    host: dict[str, Any], argv: list[str], scratch: Path, env: dict[str, str], out: int | Any
) -> subprocess.Popen:
    """`argv` as a whole node: the host's network, its name, pids and /proc of its own; argv is pid 1 there.

    Real nodes share no pids: a node's `ps` must not show the others' ranks. `--kill-child`: ending
    the returned process ends the node's pid 1, and the kernel then ends every process of the node.
    """
    script = 'hostname "$0" && exec "$@"'
    full = {**os.environ, "TMPDIR": str(scratch), "OMP_NUM_THREADS": "1", **env}
    argv = ["ip", "netns", "exec", host["netns"], "unshare", "--uts", "--pid", "--mount-proc",
            "--kill-child", "sh", "-c", script, host["hostname"], *argv]  # fmt: skip
    return subprocess.Popen(argv, env=full, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)


def node_init(node: subprocess.Popen, within_s: float = 10.0) -> int:
    """The node's pid 1, as this machine numbers it (unshare's child)."""
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        with contextlib.suppress(psutil.Error):
            children = psutil.Process(node.pid).children()
            if children:
                return children[0].pid
        time.sleep(0.05)
    raise AssertionError(f"node {node.pid} started no pid 1")


def in_node(init: int, argv: list[str], scratch: Path, env: dict[str, str] | None = None) -> subprocess.Popen:
    """`argv` on the node whose pid 1 is `init`: its network, name, pids and /proc (as ssh or pdsh would)."""
    enter = ["nsenter", "--target", str(init), "--net", "--uts", "--pid", "--mount", f"--wd={os.getcwd()}"]
    return popen([*enter, *argv], scratch, env)
