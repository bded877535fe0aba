"""One attach per node agreeing on one verdict: each writes what it saw to a shared directory, reads all.

`srun --overlap --jobid J --ntasks-per-node 1 ddpcheck attach --all --dir D` runs one attach on
each node. Each writes its ranks' views to D/<step>/<host>.json (<step>: srun's job and step ids,
so that a second attach into the same D does not read the first's) and waits until every node's
file is there; then each judges the same union, and so each gives the same verdict. A shared
directory needs no port, no leader and no store that dies with its host: the simplest robust way.
"""

from __future__ import annotations

import json
import os
import socket
import time

from ddpcheck.checks.attach.evidence import Seen
from ddpcheck.failure.hangs import view_from_dict, view_to_dict

WAIT_S = 30.0  # how long the other nodes' evidence is waited for


def step_dir(directory: str, environ: dict[str, str] | os._Environ[str]) -> str:
    job = environ.get("SLURM_JOB_ID", "")
    step = environ.get("SLURM_STEP_ID", "")
    return os.path.join(directory, f"{job}.{step}") if job and step else directory


def agree(seen: Seen, directory: str, nodes: int) -> tuple[Seen, list[str]]:
    """Every node's views (this one's included), and the hosts whose evidence never came."""
    os.makedirs(directory, exist_ok=True)
    host = socket.gethostname()
    mine = os.path.join(directory, f"{host}.json")
    data = {"host": host, "views": [view_to_dict(v) for v in seen.views], "changed": seen.changed,
            "moving": seen.moving, "gone": seen.gone, "notes": seen.notes,
            "expected": seen.expected}  # fmt: skip
    with open(mine + ".part", "w") as out:
        json.dump(data, out)
    os.replace(mine + ".part", mine)
    deadline = time.monotonic() + WAIT_S
    found: dict[str, dict] = {}
    while True:
        for name in sorted(os.listdir(directory)):
            if name.endswith(".json") and name[:-5] not in found:
                try:
                    with open(os.path.join(directory, name)) as f:
                        found[name[:-5]] = json.load(f)
                except (OSError, ValueError):
                    continue  # being written: read again at the next look
        if len(found) >= nodes or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    others = list(found.values())
    views = sorted((view_from_dict(v) for o in others for v in o["views"]), key=lambda v: v.rank)
    changed, gone, moving = ({r for o in others for r in o[key]} for key in ("changed", "gone", "moving"))
    expected = {r for o in others for r in o.get("expected", [])}
    notes = [f"{o['host']}: {n}" for o in others if o["host"] != host for n in o["notes"]]
    merged = Seen(views, sorted(changed), sorted(gone), sorted(moving), seen.traces, seen.ras,
                  seen.ras_skipped, seen.notes + notes, sorted(expected))  # fmt: skip
    missing = [] if len(found) >= nodes else [f"{nodes - len(found)} of {nodes} node(s)"]
    return merged, missing
