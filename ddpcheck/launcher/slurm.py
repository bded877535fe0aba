"""Running under `srun`: Slurm's task variables mapped onto torch.distributed's.

`srun --ntasks-per-node=G ddpcheck allreduce` starts one process per rank; each
maps SLURM_PROCID/SLURM_NTASKS/SLURM_LOCALID to RANK/WORLD_SIZE/LOCAL_RANK, takes
the first host of SLURM_JOB_NODELIST as MASTER_ADDR and derives MASTER_PORT from
the job id, so every task of the step agrees without talking to the others.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from ddpcheck.errors import UsageError
from ddpcheck.failure.rank_env import srun_step
from ddpcheck.launcher.options import LaunchOptions

PORT_BASE = 20000
# Ports 20000..32767: above the well-known range and below every usual ephemeral range (Linux's
# 32768..60999, IANA's 49152..65535). In one, an outgoing connection's local port could hold the
# job's port when rank 0 binds it (EADDRINUSE).
PORT_SPAN = 12768


def expand_nodelist(nodelist: str) -> list[str]:
    """'gpu[01-04,07],login1' -> ['gpu01', 'gpu02', 'gpu03', 'gpu04', 'gpu07', 'login1'].

    Slurm's compressed host list: comma-separated groups, each a prefix with an
    optional bracketed list of numbers and ranges (zero padding kept) and an
    optional suffix. Nested brackets (several bracket groups in one name) are
    expanded left to right.
    """
    hosts = [host for group in _split_groups(nodelist.strip()) for host in _expand_group(group)]
    if not hosts:
        raise UsageError(f"empty Slurm node list {nodelist!r}")
    return hosts


def _split_groups(text: str) -> list[str]:
    groups, depth, current = [], 0, []
    for char in text:
        if char == "[":
            depth += 1
        elif char == "]":
            depth -= 1
            if depth < 0:
                raise UsageError(f"malformed Slurm node list {text!r}: unbalanced ']'")
        if char == "," and depth == 0:
            groups.append("".join(current))
            current = []
        else:
            current.append(char)
    if depth != 0:
        raise UsageError(f"malformed Slurm node list {text!r}: unbalanced '['")
    groups.append("".join(current))
    return [g for g in (g.strip() for g in groups) if g]


def _expand_group(group: str) -> list[str]:
    start = group.find("[")
    if start < 0:
        return [group]
    end = group.index("]", start)
    prefix, body, rest = group[:start], group[start + 1 : end], group[end + 1 :]
    names = []
    for item in body.split(","):
        low, sep, high = item.strip().partition("-")
        if not low.isdigit() or (sep and not high.isdigit()):
            raise UsageError(f"malformed range {item!r} in Slurm node list group {group!r}")
        width = len(low)
        for number in range(int(low), int(high if sep else low) + 1):
            names.extend(prefix + str(number).zfill(width) + tail for tail in _expand_group(rest))
    return names


def tasks_on_node(tasks_per_node: str, node_id: int) -> int:
    """SLURM_TASKS_PER_NODE ('4(x2),3') -> how many tasks run on node `node_id`."""
    counts: list[int] = []
    for item in tasks_per_node.split(","):
        match = re.fullmatch(r"\s*(\d+)(?:\(x(\d+)\))?\s*", item)
        if not match:
            raise UsageError(f"malformed SLURM_TASKS_PER_NODE {tasks_per_node!r}")
        counts += [int(match.group(1))] * int(match.group(2) or 1)
    return counts[node_id] if node_id < len(counts) else counts[-1]


def port_for_job(job_id: str, step_id: str = "0") -> int:
    """A port every task of one step derives alike; steps of one job running at once differ."""
    digits = "".join(c for c in job_id if c.isdigit()) or "0"
    step = int(step_id) if step_id.isdigit() else 0
    return PORT_BASE + (int(digits) * 7919 + step) % PORT_SPAN


def step_port(environ: Mapping[str, str]) -> int:
    """port_for_job of this task's job and step."""
    return port_for_job(
        environ.get("SLURM_JOB_ID", environ.get("SLURM_JOBID", "0")), srun_step(environ) or "0"
    )


def under_srun(environ: Mapping[str, str]) -> bool:
    """A task of an srun step with several tasks (not the batch script itself)."""
    return (
        srun_step(environ) is not None
        and "SLURM_PROCID" in environ
        and int(environ.get("SLURM_NTASKS", "1")) > 1
    )


def torch_environment(environ: Mapping[str, str]) -> dict[str, str]:
    """The RANK/WORLD_SIZE/LOCAL_RANK/... variables this srun task stands for."""
    try:
        rank = int(environ["SLURM_PROCID"])
        world = int(environ["SLURM_NTASKS"])
        local_rank = int(environ.get("SLURM_LOCALID", "0"))
        node_id = int(environ.get("SLURM_NODEID", "0"))
        nodelist = environ.get("SLURM_STEP_NODELIST") or environ["SLURM_JOB_NODELIST"]
    except (KeyError, ValueError) as exc:
        raise UsageError(f"incomplete Slurm environment: {exc} is missing or not a number") from None
    if "SLURM_STEP_TASKS_PER_NODE" in environ or "SLURM_TASKS_PER_NODE" in environ:
        per_node = environ.get("SLURM_STEP_TASKS_PER_NODE") or environ["SLURM_TASKS_PER_NODE"]
        local_world = tasks_on_node(per_node, node_id)
    else:
        local_world = int(environ.get("SLURM_NTASKS_PER_NODE", world))
    return {
        "RANK": str(rank),
        "WORLD_SIZE": str(world),
        "LOCAL_RANK": str(local_rank),
        "LOCAL_WORLD_SIZE": str(local_world),
        "GROUP_RANK": str(node_id),
        "MASTER_ADDR": environ.get("MASTER_ADDR") or expand_nodelist(nodelist)[0],
        "MASTER_PORT": environ.get("MASTER_PORT") or str(step_port(environ)),
    }


def default_node_rank(opts: LaunchOptions, environ: Mapping[str, str]) -> int:
    """--node-rank defaults to Slurm's node id when a multi-node launch runs one task per node."""
    if opts.nnodes > 1 and opts.node_rank == 0 and environ.get("SLURM_NODEID", "").isdigit():
        return int(environ["SLURM_NODEID"])
    return opts.node_rank
