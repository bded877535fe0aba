"""Flight-recorder dumps for tests: synthetic ones built entry by entry, and NCCL's layout.

The NCCL dumps here are HAND-WRITTEN from the format (torch's FlightRecorder writer: the keys of
`entries`, `pg_config` by group name with ranks as text, `pg_status` by group id, states
scheduled/started/completed), not recorded on a GPU: no GPU was at hand.
"""

from __future__ import annotations

import json
import pickle
from pathlib import Path
from typing import Any

VERSION = "2.10"


def entry(
    seq: int,
    *,
    op: str = "all_reduce",
    backend: str = "gloo",
    sizes: list[list[int]] | None = None,
    dtype: str = "Float",
    pg: tuple[str, str] = ("0", "default_pg"),
    pg_id: int = 0,
    state: str = "scheduled",
    line: int = 10,
    is_p2p: bool = False,
) -> dict[str, Any]:
    sizes = sizes if sizes is not None else [[256]]
    return {
        "record_id": seq,
        "pg_id": pg_id,
        "process_group": pg,
        "collective_seq_id": 0 if is_p2p else seq,
        "p2p_seq_id": seq if is_p2p else 0,
        "op_id": seq,
        "profiling_name": f"{backend}:{op}",
        "time_created_ns": 1_700_000_000_000_000_000 + seq,
        "input_sizes": sizes,
        "input_dtypes": [dtype] * len(sizes),
        "output_sizes": sizes,
        "output_dtypes": [dtype] * len(sizes),
        "state": state,
        "time_discovered_started_ns": None,
        "time_discovered_completed_ns": None,
        "retired": False,
        "timeout_ms": 600000,
        "is_p2p": is_p2p,
        "thread_id": "1",
        "thread_name": "python3",
        "frames": [
            {
                "filename": "/usr/lib/python3/site-packages/torch/distributed/distributed_c10d.py",
                "line": 3245,
                "name": op,
            },
            {"filename": "/job/train.py", "line": line, "name": "step"},
        ],
    }


def dump(
    entries: list[dict[str, Any]], *, pg_config: dict | None = None, pg_status: dict | None = None
) -> dict:
    """A dump as gloo writes it on torch 2.13: an empty placeholder pg_config, pg_status by group id."""
    status = pg_status
    if status is None:
        status = {}
        for e in entries:
            if e["is_p2p"]:
                continue
            key = str(e["pg_id"])
            last = status.get(key, {"last_enqueued_collective": -1})["last_enqueued_collective"]
            status[key] = {
                "last_enqueued_collective": max(last, e["collective_seq_id"]),
                "last_started_collective": -1,
                "last_completed_collective": -1,
            }
    return {
        "version": VERSION,
        "comm_lib_version": "",
        "pg_config": pg_config if pg_config is not None else {"": {"name": "", "desc": "", "ranks": "[]"}},
        "pg_status": status,
        "entries": entries,
    }


def nccl_dump(rank: int, world: int, last: int, *, size: int = 1024) -> dict:
    """NCCL's dump on a watchdog timeout (hand-written from the format): `last` collectives enqueued,
    all but the last completed; pg_config names the members; nccl_comm_state present."""
    entries = []
    for seq in range(1, last + 1):
        e = entry(
            seq,
            backend="nccl",
            sizes=[[size]],
            dtype="BFloat16",
            state="completed" if seq < last else "started",
        )
        e["duration_ms"] = 1.5 if seq < last else None
        e["time_discovered_started_ns"] = 1_700_000_000_000_000_100 + seq
        if seq < last:
            e["time_discovered_completed_ns"] = 1_700_000_000_000_000_200 + seq
        entries.append(e)
    ranks = ", ".join(str(r) for r in range(world))
    return {
        "version": VERSION,
        "comm_lib_version": "2.21.5",
        "pg_config": {"0": {"name": "0", "desc": "default_pg", "ranks": f"[{ranks}]"}},
        "pg_status": {
            "0": {
                "last_enqueued_collective": last,
                "last_started_collective": last,
                "last_completed_collective": last - 1,
            }
        },
        "nccl_comm_state": {},
        "entries": entries,
    }


def write_pickle(path: Path, data: dict) -> Path:
    path.write_bytes(pickle.dumps(data))
    return path


def write_json(path: Path, data: dict) -> Path:
    # The JSON form (`_dump_fr_trace_json`) writes pg_status's numbers as text and no frames.
    data = json.loads(json.dumps(data))
    for status in data["pg_status"].values():
        for key in status:
            status[key] = str(status[key])
    for e in data["entries"]:
        e.pop("frames", None)
    path.write_text(json.dumps(data))
    return path


H200_DUMP = Path(__file__).resolve().parent.parent / "fixtures" / "h200" / "nccl_trace_rank_0"


def h200_dump() -> dict[str, Any]:
    """The real dump (tests/fixtures/h200): group 0's #1-#15, #15 `scheduled` behind a spinning kernel;
    group 1's #1."""
    return pickle.loads(H200_DUMP.read_bytes())


def grown_h200_dump(
    rank: int, world: int, *, states: dict[int, str] | None = None, last: int | None = None,
    group_1: list[int] | None = None,
) -> dict[str, Any]:  # fmt: skip
    """The real dump as rank `rank` of `world` would have written it: group 0 holds every rank,
    group 1 the ranks in `group_1` (default [0]); `states` sets group 0's entries' states by sequence
    id (with pg_status to match), `last` drops group 0's entries after it (a rank that never called them)."""
    data = h200_dump()
    members = group_1 if group_1 is not None else [0]
    data["pg_config"]["0"]["ranks"] = str(list(range(world)))
    data["pg_config"]["1"]["ranks"] = str(members)
    entries = []
    for e in data["entries"]:
        if e["pg_id"] == 1 and rank not in members:
            continue
        if e["pg_id"] == 0 and last is not None and e["collective_seq_id"] > last:
            continue
        if e["pg_id"] == 0 and states and e["collective_seq_id"] in states:
            e["state"] = states[e["collective_seq_id"]]
        entries.append(e)
    data["entries"] = entries
    group_0 = [e for e in entries if e["pg_id"] == 0]
    data["pg_status"]["0"] = {
        "last_enqueued_collective": max(e["collective_seq_id"] for e in group_0),
        "last_started_collective": max(
            (e["collective_seq_id"] for e in group_0 if e["state"] in ("started", "completed")), default=-1
        ),
        "last_completed_collective": max(
            (e["collective_seq_id"] for e in group_0 if e["state"] == "completed"), default=-1
        ),
    }
    if rank not in members:
        data["pg_status"].pop("1")
    return data
