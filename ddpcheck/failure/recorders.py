"""Every flight recorder of a process, dumped as one: NCCL's and the other backends'.

torch keeps two recorders: NCCL groups record into the one `_dump_nccl_trace()` returns, every
other backend (gloo) into `_dump_fr_trace()`'s. A job can have groups of both. Standard library
only: the watch agent loads this file by its path inside the user's job.
"""

from __future__ import annotations

import errno
import glob
import os
import pickle
import stat
from collections.abc import Callable
from typing import Any

NCCL_RECORDER = "_dump_nccl_trace"
OTHER_RECORDER = "_dump_fr_trace"
PIPE_SUFFIX = ".pipe"  # torch's debug-info pipe: TORCH_NCCL_DEBUG_INFO_PIPE_FILE + rank + ".pipe"


def dump_every_recorder(native: Any, *, nccl_stacks: bool = True) -> bytes | None:
    """One pickled dump of every recorder `native` (torch._C._distributed_c10d) has, None when
    none holds an entry. Gloo's stacks are left out: taken while a gloo collective waits, they
    block until it ends."""
    dumps = []
    nccl = getattr(native, NCCL_RECORDER, None)
    if nccl is not None:
        dumps.append(_loaded(lambda: nccl(includeStackTraces=nccl_stacks)))
    other = getattr(native, OTHER_RECORDER, None)
    if other is not None:
        dumps.append(_loaded(lambda: other(includeStackTraces=False)))
    merged = merge([d for d in dumps if d is not None])
    return pickle.dumps(merged) if merged is not None else None


def merge(dumps: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The dumps as one: entries, groups' configs and statuses together, NCCL's first. A group both
    recorders report (one group with a CPU and a CUDA backend) is kept apart: the later recorder's
    entries of it are renamed "<group>:<backend>", since each backend numbers its collectives."""
    holding = [d for d in dumps if d.get("entries")]
    if not holding:
        return dumps[0] if dumps else None
    merged = {**holding[0], "entries": [], "pg_config": {}, "pg_status": {}}
    for dump in holding:
        taken = set(merged["pg_status"]) | {str(e.get("pg_id")) for e in merged["entries"]}
        renamed = {str(e.get("pg_id")) for e in dump["entries"]} & taken
        for entry in dump["entries"]:
            pg_id = str(entry.get("pg_id"))
            if pg_id in renamed:
                backend = str(entry.get("profiling_name", "")).partition(":")[0]
                name, desc = [*(entry.get("process_group") or ()), "", ""][:2]
                entry = {**entry, "pg_id": f"{pg_id}:{backend}", "process_group": (f"{name}:{backend}", desc)}
            merged["entries"].append(entry)
        for name, config in (dump.get("pg_config") or {}).items():
            if name and name not in merged["pg_config"]:
                merged["pg_config"][name] = config
        for pg_id, status in (dump.get("pg_status") or {}).items():
            if str(pg_id) not in renamed:
                merged["pg_status"].setdefault(str(pg_id), status)
    return merged


def _loaded(take: Callable[[], bytes]) -> dict[str, Any] | None:
    try:
        data = pickle.loads(take())
    except Exception:
        return None
    return data if isinstance(data, dict) else None


def poke(path: str) -> str | None:
    """Ask the NCCL watchdog reading the debug-info pipe at `path` to dump its recorder (one byte
    written, never blocking): it answers even while the rank's Python cannot run. None once taken;
    else why not, "" where there is no such pipe; one with no reader (its rank gone, or NCCL not up)
    is passed over, never waited on."""
    try:
        if not stat.S_ISFIFO(os.stat(path).st_mode):
            return ""
        pipe = os.open(path, os.O_WRONLY | os.O_NONBLOCK)
    except FileNotFoundError:
        return ""
    except OSError as error:
        return "nobody reads it" if error.errno == errno.ENXIO else (error.strerror or str(error))
    try:
        os.write(pipe, b"1")
    except OSError as error:
        return error.strerror or str(error)
    finally:
        os.close(pipe)
    return None


def poke_debug_pipes(prefix: str) -> list[str]:
    """Every rank's debug-info pipe (`<prefix><rank>.pipe`) poked: those that took it."""
    return [path for path in sorted(glob.glob(glob.escape(prefix) + "*" + PIPE_SUFFIX)) if poke(path) is None]
