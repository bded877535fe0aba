"""Reading flight-recorder dumps: torch's per-rank record of the collectives each rank enqueued.

Pure readers, no torch: a dump is a pickle of plain dicts and lists (written by
`torch._C._distributed_c10d._dump_fr_trace()`, or by NCCL's watchdog on a timeout with
`TORCH_NCCL_DUMP_ON_TIMEOUT=1`), or the same data as JSON (`_dump_fr_trace_json()`).
A dump names no rank: the rank is the file name's trailing digits, whatever comes before
them (torch names the files `TORCH_FR_DUMP_TEMP_FILE` + rank).

Why not torch's own loader (`torch.distributed.flight_recorder.components.loader`): its
`read_dump` keeps `entries`, `version` and `pg_config` but drops `pg_status` (each group's last
enqueued collective, what tells a rank that is behind); it reads pickles only; `read_dir`
stops at the first file it cannot read and needs one prefix for the whole tree, while a job's
directory holds logs and error files beside the dumps. Its analyser (`fr_trace`) stops with a
KeyError on every dump gloo writes on torch 2.13, whose `pg_config` is empty. And its pickles
are read here with an unpickler that refuses every class: a dump is plain data, and a file
in a dead job's directory should not run code when read.
"""

from __future__ import annotations

import ast
import json
import math
import os
import pickle
import re
from dataclasses import dataclass, field
from typing import Any

from ddpcheck.failure.stacks import Frame, user_frame
from ddpcheck.report.units import human_bytes

# The rank is the name's trailing digits; whatever precedes them is the prefix.
_RANKED_NAME = re.compile(r"^(?P<prefix>.*?)(?P<rank>\d+)$")
# How each form of dump starts: the PROTO opcode (every pickle of protocol 2 or later), a JSON object.
_FORMS = ((b"\x80", "pickle"), (b"{", "json"))


# NCCL's states: the CPU enqueued the collective (`scheduled`), its kernel runs (`started`: with
# peers, waiting for them inside it), or it is done. Gloo leaves every entry `scheduled`.
SCHEDULED, STARTED, COMPLETED = "scheduled", "started", "completed"
REACHED = (STARTED, COMPLETED)
# The backends whose entries move through those states; for the others only enqueueing counts.
STATEFUL_BACKENDS = ("nccl",)


class NotADump(ValueError):
    """The file is not a flight-recorder dump, or not a whole one; the message says why, in one line."""


@dataclass(frozen=True)
class FrEntry:
    """One collective (or point-to-point operation) a rank enqueued, as its dump recorded it."""

    pg: str  # the process group's name, the same on every rank ("0" is the default group)
    pg_desc: str  # "default_pg", or what new_group(group_desc=...) said
    seq_id: int  # collective_seq_id: the n-th collective of this group on this rank
    op: str  # "all_reduce": profiling_name without its backend ("gloo:all_reduce")
    backend: str  # "gloo", "nccl", ...
    input_sizes: list[list[int]]
    input_dtypes: list[str]  # torch's names: "Float", "Long", "BFloat16"
    state: str  # "scheduled", "started", "completed" (gloo leaves every entry "scheduled")
    is_p2p: bool = False
    time_created_ns: int | None = None
    duration_ms: float | None = None  # its kernels' GPU time, once completed (NCCL with timing on)
    frames: list[Frame] = field(default_factory=list)

    def user_frame(self) -> Frame | None:
        """The innermost frame outside torch: the line of the job that called the collective."""
        return user_frame(self.frames, outside_torch=True)

    def signature(self) -> tuple[str, tuple[tuple[int, ...], ...], tuple[str, ...]]:
        """What every rank of the group must agree on for this collective to complete."""
        return (self.op, tuple(tuple(s) for s in self.input_sizes), tuple(self.input_dtypes))


@dataclass(frozen=True)
class GroupStatus:
    """A group's sequence ids on one rank when it dumped (-1: none yet)."""

    last_enqueued: int
    last_started: int


@dataclass
class RankTrace:
    """One rank's dump."""

    rank: int
    path: str
    version: str
    pg_config: dict[str, list[int]]  # each group's global ranks, by its name; [] when the dump does not say
    pg_status: dict[str, GroupStatus]  # by group name
    entries: list[FrEntry]

    @property
    def backend(self) -> str | None:
        return next((e.backend for e in self.entries if e.backend), None)

    def collectives(self, pg: str) -> dict[int, FrEntry]:
        """The group's collectives (not point-to-point) still in the ring buffer, by sequence id."""
        return {e.seq_id: e for e in self.entries if e.pg == pg and not e.is_p2p}

    def last_enqueued(self, pg: str) -> int:
        """The group's last collective enqueued on this rank: pg_status, or the entries without it."""
        status = self.pg_status.get(pg)
        if status is not None:
            return status.last_enqueued
        return max(self.collectives(pg), default=-1)

    def last_started(self, pg: str) -> int:
        """The group's last collective whose kernel started on this rank (NCCL's `started` or
        `completed`): pg_status, or the entries without it."""
        status = self.pg_status.get(pg)
        if status is not None and status.last_started >= 0:
            return status.last_started
        return max((seq for seq, e in self.collectives(pg).items() if e.state in REACHED), default=-1)

    def backend_of(self, pg: str) -> str:
        """The backend that recorded the group's collectives here ('nccl', 'gloo'), '' when none."""
        return next((e.backend for e in self.entries if e.pg == pg and e.backend), "")

    def groups(self) -> set[str]:
        return {e.pg for e in self.entries} | set(self.pg_status)


def group_order(pg: str) -> tuple[int, int | str]:
    """Process groups in torch's numbering ('0', '1', ..., '10'), named ones after."""
    return (0, int(pg)) if pg.isdigit() else (1, pg)


@dataclass
class FoundDumps:
    """Every dump under a directory, by rank, and the files that looked like dumps but could not be read."""

    traces: dict[int, RankTrace] = field(default_factory=dict)
    skipped: list[tuple[str, str]] = field(default_factory=list)  # (path, why), as the logs' are


class _PlainUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        raise pickle.UnpicklingError(f"it names a class ({module}.{name}); a dump holds plain data only")


def rank_of(path: str | os.PathLike[str]) -> int | None:
    """The rank a dump's file name gives (its trailing digits), None when it ends otherwise."""
    found = _RANKED_NAME.match(os.path.basename(os.fspath(path)))
    return int(found["rank"]) if found else None


def sniff(path: str | os.PathLike[str]) -> str | None:
    """'pickle' or 'json' when the file starts like a dump of that form, '' when empty, else None."""
    with open(path, "rb") as stream:
        start = stream.read(64).lstrip()
    if not start:
        return ""
    return next((form for magic, form in _FORMS if start.startswith(magic)), None)


def read_dump(path: str | os.PathLike[str], rank: int) -> RankTrace:
    """One dump as rank `rank`'s RankTrace. Raises NotADump."""
    path = os.fspath(path)
    return parse_trace(read_raw(path), rank=rank, path=path)


def read_raw(path: str | os.PathLike[str]) -> Any:
    """A dump file's data, undecoded into a RankTrace, read without running code. Raises NotADump."""
    try:
        form = sniff(path)
        if form:
            with open(path, "rb") as stream:
                return _PlainUnpickler(stream).load() if form == "pickle" else json.load(stream)
    except (OSError, pickle.UnpicklingError, EOFError, ValueError, UnicodeDecodeError) as exc:
        raise NotADump(
            f"unreadable: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}"
        ) from None
    if form == "":
        raise NotADump("empty (the rank was likely ended while it dumped)")
    raise NotADump("neither a pickle nor JSON")


def parse_trace(raw: Any, *, rank: int, path: str = "") -> RankTrace:
    """A dump's data (the unpickled or JSON-decoded dict) as a RankTrace. Raises NotADump."""
    if not isinstance(raw, dict) or "entries" not in raw or "version" not in raw:
        raise NotADump("not a flight-recorder dump (no 'version' and 'entries')")
    if not str(raw["version"]).startswith("2."):
        raise NotADump(f"flight-recorder format {raw['version']}, not 2.x")
    try:
        entries = [_collective(e) for e in raw["entries"]]
        config = {str(name): _members(info) for name, info in (raw.get("pg_config") or {}).items()}
        # pg_status is keyed by the group's id on this rank; the entries say which name each id has.
        names = {str(e.get("pg_id")): _pg(e)[0] for e in raw["entries"] if "pg_id" in e}
        status = {
            names.get(str(pg_id), str(pg_id)): GroupStatus(
                int(s["last_enqueued_collective"]),
                int(s.get("last_started_collective", -1)),
            )
            for pg_id, s in (raw.get("pg_status") or {}).items()
        }
    except (KeyError, TypeError, ValueError, AttributeError, SyntaxError) as exc:
        raise NotADump(f"a malformed flight-recorder dump ({type(exc).__name__}: {exc})") from None
    config = {name: ranks for name, ranks in config.items() if name or ranks}  # gloo's placeholder entry
    return RankTrace(rank, path, str(raw["version"]), config, status, entries)


def find_dumps(directory: str | os.PathLike[str]) -> FoundDumps:
    """Every dump under `directory` (recursively, any prefix), by rank.

    A file is taken for a dump when its name ends in digits and it starts as a pickle or JSON
    does (or is empty); one that then cannot be read is skipped with its reason, as is a second
    dump of a rank already read. Other files are not dumps and are passed over in silence.
    """
    found = FoundDumps()
    for root, dirs, files in os.walk(directory):
        dirs.sort()
        for name in sorted(files):
            path = os.path.join(root, name)
            rank = rank_of(name)
            if rank is None or not os.path.isfile(path):
                continue
            try:
                form = sniff(path)
            except OSError as exc:
                found.skipped.append((path, f"unreadable: {exc.strerror or exc}"))
                continue
            if form is None:
                continue
            try:
                trace = read_dump(path, rank)
            except NotADump as exc:
                if form == "json" and "not a flight-recorder dump" in str(exc):
                    continue  # some other JSON file whose name ends in a digit
                found.skipped.append((path, str(exc)))
                continue
            if rank in found.traces:
                found.skipped.append((path, f"a second dump of rank {rank} (read {found.traces[rank].path})"))
                continue
            found.traces[rank] = trace
    return found


def _pg(entry: dict[str, Any]) -> tuple[str, str]:
    group = entry.get("process_group") or ("", "")
    return str(group[0]), str(group[1]) if len(group) > 1 else ""


def _collective(entry: dict[str, Any]) -> FrEntry:
    backend, _, op = str(entry.get("profiling_name", "")).rpartition(":")
    pg, desc = _pg(entry)
    created, duration = entry.get("time_created_ns"), entry.get("duration_ms")
    return FrEntry(
        pg=pg,
        pg_desc=desc,
        seq_id=int(entry.get("collective_seq_id", 0)),
        op=op,
        backend=backend,
        input_sizes=[list(map(int, s)) for s in entry.get("input_sizes", [])],
        input_dtypes=[str(d) for d in entry.get("input_dtypes", [])],
        state=str(entry.get("state", "")),
        is_p2p=bool(entry.get("is_p2p", False)),
        time_created_ns=int(created) if created else None,
        duration_ms=None if duration is None else float(duration),
        frames=[
            Frame(str(f.get("name", "")), str(f.get("filename", "")), int(f.get("line", 0)))
            for f in entry.get("frames", [])
        ],
    )


def _members(info: dict[str, Any]) -> list[int]:
    ranks = info.get("ranks", "[]")
    # The dumps write the ranks as text, "[0, 1, 2, 3]"; literal_eval runs no code.
    listed = ast.literal_eval(ranks) if isinstance(ranks, str) else ranks
    return [int(r) for r in listed or []]


def dtype_name(torch_name: str) -> str:
    """torch's dtype names in dumps ("Float", "BFloat16") as Python users write them ("float32")."""
    return _DTYPES.get(torch_name, (torch_name.lower(), 0))[0]


def nbytes(collective: FrEntry) -> int | None:
    """The bytes of the collective's inputs, None when a dtype's size is not known."""
    total = 0
    for shape, dtype in zip(collective.input_sizes, collective.input_dtypes, strict=False):
        size = _DTYPES.get(dtype, ("", 0))[1]
        if not size:
            return None
        total += math.prod(shape) * size
    return total


def describe(collective: FrEntry) -> str:
    """'all_reduce #4 (1.0 KiB float32, [256])': how every finding names a collective."""
    shapes = ", ".join(str(s) for s in collective.input_sizes) or "no tensors"
    dtypes = "/".join(dict.fromkeys(dtype_name(d) for d in collective.input_dtypes))
    size = nbytes(collective)
    amount = f"{human_bytes(size, amount=True)} " if size is not None else ""
    return f"{collective.op} #{collective.seq_id} ({amount}{dtypes or '?'}, {shapes})"


# torch's dtype name in a dump -> (the Python name, bytes per element)
_DTYPES = {
    "Float": ("float32", 4),
    "Double": ("float64", 8),
    "Half": ("float16", 2),
    "BFloat16": ("bfloat16", 2),
    "Long": ("int64", 8),
    "Int": ("int32", 4),
    "Short": ("int16", 2),
    "Char": ("int8", 1),
    "Byte": ("uint8", 1),
    "Bool": ("bool", 1),
    "ComplexFloat": ("complex64", 8),
    "ComplexDouble": ("complex128", 16),
    "Float8_e4m3fn": ("float8_e4m3fn", 1),
    "Float8_e5m2": ("float8_e5m2", 1),
}
