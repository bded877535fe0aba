"""Which node of a multi-node torchrun a command is, read from the command itself (torchrun's options).

`ddpcheck watch -- torchrun --nnodes 2 --node-rank 1 --master-addr a --master-port 29500 train.py`
runs on each node; the watches of one job find each other through this: the number of nodes,
this node's rank, and the address every node already reaches (the master's, or the rendezvous
endpoint's). A command that is no torchrun, a single node, an elastic range of nodes
(`--nnodes 1:4`) or no `--node-rank` is not a team: None.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from ddpcheck.failure.processes import TORCHRUN_MODULES

DEFAULT_MASTER_PORT = 29500  # torchrun's own default
FLAGS = frozenset({"standalone", "no-python", "run-path", "module", "use-env"})  # no value follows


@dataclass(frozen=True)
class TorchrunNode:
    nnodes: int
    node_rank: int
    host: str  # the address every node reaches: --master-addr, or --rdzv-endpoint's host
    port: int  # ...and its port, which torchrun's own store holds


def torchrun_options(command: list[str]) -> list[str] | None:
    """The options given to torchrun (what comes before the script), or None when it is not torchrun."""
    if not command:
        return None
    if os.path.basename(command[0]) == "torchrun":
        return command[1:]
    python = len(command) >= 3 and os.path.basename(command[0]).startswith("python")
    if python and command[1] == "-m" and command[2] in TORCHRUN_MODULES:
        return command[3:]
    return None


def _values(options: list[str]) -> dict[str, str]:
    """--name value and --name=value, names with _ read as -, up to the script (the first bare word)."""
    found: dict[str, str] = {}
    i = 0
    while i < len(options):
        word = options[i]
        if not word.startswith("-"):
            break  # the script: its own options are not torchrun's
        name, equals, value = word.lstrip("-").partition("=")
        name = name.replace("_", "-")
        flag = name in FLAGS or not word.startswith("--")  # -m: the module name that follows is the script
        if not equals and not flag and i + 1 < len(options) and not options[i + 1].startswith("-"):
            value = options[i + 1]
            i += 1
        found[name] = value
        i += 1
    return found


def node_of(command: list[str]) -> TorchrunNode | None:
    """This node of a multi-node torchrun command, or None (see the module's docstring)."""
    options = torchrun_options(command)
    if options is None:
        return None
    values = _values(options)
    try:
        nnodes = int(values.get("nnodes", "1"))  # "1:4": elastic, ValueError: no fixed team
        node_rank = int(values["node-rank"])
    except (KeyError, ValueError):
        return None
    if nnodes < 2 or not 0 <= node_rank < nnodes or "standalone" in values:
        return None
    endpoint = values.get("rdzv-endpoint", "")
    if endpoint and values.get("rdzv-backend", "static") != "static":
        host, _, port = endpoint.rpartition(":")
        if not host:
            host, port = endpoint, ""
    else:
        host = values.get("master-addr", "")
        port = values.get("master-port", "")
    if not host:
        return None
    try:
        number = int(port) if port else DEFAULT_MASTER_PORT
    except ValueError:
        return None
    return TorchrunNode(nnodes, node_rank, host.strip("[]"), number)
