"""The straggler sampling of `ddpcheck watch`: every --sample-every seconds, each rank's flight recorder.

The watcher's loop calls `Sampler.tick` (it never blocks): a numbered request is written to the
watch directory, each rank's in-process agent answers it with a dump (agent.py), and once every
live rank answered (or ANSWER_S passed) the answers are read, kept (History: each collective once
per rank) and judged by failure/stragglers/. A verdict that names a rank is one line on stderr,
said again only when it changes. At the end the whole run is judged once more for the report: the
`stragglers` check, its per-rank table and the heat map's rows (report/html/stragglers.py).

One watcher per task (team.py): every task samples its own ranks and publishes what is new to the
team's store (Exchange); task 0 alone takes the others' in, judges and speaks.
"""

from __future__ import annotations

import contextlib
import json
import os
import statistics
import time
from collections import OrderedDict, deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from ddpcheck.checks.watch import agent
from ddpcheck.checks.watch.looks import GpuReader, Seen, read_stack, read_tick
from ddpcheck.errors import say
from ddpcheck.failure.flight import NotADump, read_raw
from ddpcheck.failure.process_records import write_whole
from ddpcheck.failure.stragglers import words
from ddpcheck.failure.stragglers.judge import Judgement, Unjudged, explained, judge
from ddpcheck.failure.stragglers.samples import Sample, sample_from_dumps
from ddpcheck.report.model import Report, Table
from ddpcheck.torch_compat import store_has

ANSWER_S = 2.0  # how long the ranks have to answer one request (the agent looks twice a second)
KEPT_PER_GROUP = 10_000  # a rank's collectives of one group kept for the report (the oldest go)
RECENT_PER_GROUP = 1_000  # ...and judged while the job runs (the judge's window is the last 60 s)
# The keys of a dump entry the judge reads: the rest (sizes, stacks, states) is left behind.
SLIM_KEYS = ("process_group", "collective_seq_id", "profiling_name", "time_created_ns", "duration_ms")
DUMP_VERSION = "2.10"  # what a slim dump says it is (parse_trace wants a 2.x)
OFFSETS_KEPT = 100  # a rank's latest clock offsets: their median is the one used
# A verdict is said while the job runs once its window holds this much of the job: in a shorter one
# the job's first steps (DDP's setup, a first iteration's lazy start) weigh as much as a straggler
# (docs/stragglers.md). The report's verdict, over the whole run, is not held to it.
SPOKEN_WINDOW_S = 2.0


@dataclass
class Shared:
    """What the other tasks published since task 0 last looked: their ranks' new collectives, hosts,
    and their hosts' clock offsets from task 0's (clocks.py; a rank of a task that measured none: absent)."""

    entries: dict[int, list[dict[str, Any]]] = field(default_factory=dict)
    hosts: dict[int, str] = field(default_factory=dict)
    clock_offsets_ns: dict[int, list[int]] = field(default_factory=dict)  # every one measured
    looks: dict[int, dict[str, list[Any]]] = field(default_factory=dict)  # looks.Seen.unpublished's


class Exchange(Protocol):
    """How one task's watcher shares its ranks' collectives with task 0's (team.py's store)."""

    def publish(
        self,
        entries: Mapping[int, list[dict[str, Any]]],
        hosts: Mapping[int, str],
        looks: Mapping[int, Mapping[str, list[Any]]] | None = None,
    ) -> None: ...
    def others(self) -> Shared: ...


def slim(raw: Any) -> list[dict[str, Any]]:
    """A dump's collectives (no point-to-point operation), each with only what the judge reads."""
    if not isinstance(raw, dict):
        return []
    return [
        {key: entry[key] for key in SLIM_KEYS if entry.get(key) is not None}
        for entry in raw.get("entries") or []
        if isinstance(entry, dict) and not entry.get("is_p2p") and entry.get("time_created_ns")
    ]


def _key(entry: Mapping[str, Any]) -> tuple[str, int]:
    group = entry.get("process_group") or ("",)
    return (str(group[0]), int(entry.get("collective_seq_id", 0)))


class History:
    """Every collective seen of every rank, once per (group, sequence id): the latest copy wins (an NCCL
    entry gets its duration once it completed), the oldest go beyond KEPT_PER_GROUP."""

    def __init__(self) -> None:
        self.entries: dict[int, dict[str, OrderedDict[int, dict[str, Any]]]] = {}
        self.hosts: dict[int, str] = {}
        self.offsets_ns: dict[int, deque[int]] = {}

    def offset(self, rank: int, offset_ns: int) -> None:
        """The rank's host's clock minus the judging watcher's, measured once more."""
        self.offsets_ns.setdefault(rank, deque(maxlen=OFFSETS_KEPT)).append(int(offset_ns))

    def add(self, rank: int, entries: list[dict[str, Any]], host: str = "") -> list[dict[str, Any]]:
        """Kept; returns the entries not held before, or changed (what a team's task publishes)."""
        if host:
            self.hosts[rank] = host
        groups = self.entries.setdefault(rank, {})
        fresh = []
        for entry in entries:
            group, seq = _key(entry)
            held = groups.setdefault(group, OrderedDict())
            if held.get(seq) != entry:
                fresh.append(entry)
            held[seq] = entry
            held.move_to_end(seq)
            if len(held) > KEPT_PER_GROUP:
                held.popitem(last=False)
        return fresh

    def sample(self, last: int | None = None) -> Sample:
        """One Sample of what is kept: of each rank's groups, the `last` collectives (all: None)."""
        dumps = {
            rank: {
                "version": DUMP_VERSION,
                "entries": [e for held in groups.values() for e in list(held.values())[-(last or 0) :]],
            }
            for rank, groups in self.entries.items()
        }
        offsets = {rank: round(statistics.median(found)) for rank, found in self.offsets_ns.items()}
        return sample_from_dumps(dumps, hosts=self.hosts, clock_offsets_ns=offsets)


@dataclass
class _Pending:
    number: int
    asked: float
    ranks: dict[int, str]  # rank -> host, the live ranks asked


class Sampler:
    """Asks, reads and judges; `tick` once per look of the watcher's loop."""

    def __init__(
        self,
        watch_dir: Path,
        every_s: float,
        speak: Callable[[str], None] = say,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.dir = watch_dir
        self.every_s = every_s
        self.speak = speak
        self.clock = clock
        self.next_at = clock() + every_s
        self.number = 0
        self.pending: _Pending | None = None
        self.history = History()
        self.exchange: Exchange | None = None
        self.judging = True  # False on a team's task other than 0: it publishes, task 0 judges
        self.said: dict[str, tuple[int, ...]] = {}  # group -> the ranks last said to slow it
        self.said_slowed: set[str] = set()  # the groups said to have slowed as a whole
        self.reasoned: set[str] = set()  # the groups whose named rank was said with why it is slow
        self.seen = Seen()  # each rank's /proc, stacks and GPU: why a named rank is slow
        self.gpus = GpuReader()
        self.pids: dict[int, int] = {}
        self.lines: list[str] = []  # every line said, for the report's notes and the tests

    def tick(self, live: Mapping[int, str], pids: Mapping[int, int] | None = None) -> None:
        """`live`: rank -> host of the ranks alive now, `pids` their processes (read in /proc each tick).
        Asks when due; takes the answers once all came."""
        now = self.clock()
        self.pids = {r: pid for r, pid in (pids or {}).items() if r in live}
        for rank, pid in self.pids.items():
            found = read_tick(pid, time.time())  # the clock of the ranks' enqueue times
            if found is not None:
                self.seen.tick(rank, found)
        if self.pending is None:
            if now >= self.next_at and live:
                self._ask(now, live)
            return
        pending = self.pending
        folder = str(self.dir)
        came = {r for r in pending.ranks if os.path.exists(agent.sample_file(folder, r, pending.number))}
        if len(came) < len(pending.ranks) and now < pending.asked + ANSWER_S:
            return
        self.pending = None
        self.next_at = max(pending.asked + self.every_s, now)
        self._take(pending, came)

    def _ask(self, now: float, live: Mapping[int, str]) -> None:
        self.number += 1
        # Whole: an agent never reads half a number.
        write_whole(str(self.dir / agent.SAMPLE_REQUEST), str(self.number).encode())
        self.pending = _Pending(self.number, now, dict(live))

    def _take(self, pending: _Pending, came: set[int]) -> None:
        new: dict[int, list[dict[str, Any]]] = {}
        for rank in sorted(came):
            path = agent.sample_file(str(self.dir), rank, pending.number)
            stack = read_stack(path + agent.WHERE_SUFFIX)
            if stack is not None:
                self.seen.stack(rank, stack)
            with contextlib.suppress(NotADump):
                new[rank] = slim(read_raw(path))
        self._sweep(pending.number)
        for rank, pid in self.pids.items():
            gpu = self.gpus.read(pid, time.time())
            if gpu is not None:
                self.seen.gpu(rank, gpu)
        looks = self.seen.unpublished()  # task 0 keeps its own: cleared all the same
        # A dump holds the whole ring buffer: only what this sample added goes to task 0.
        fresh = {
            rank: self.history.add(rank, entries, pending.ranks.get(rank, ""))
            for rank, entries in new.items()
        }
        if self.exchange is not None:
            self.exchange.publish(fresh, {r: pending.ranks.get(r, "") for r in new}, looks)
            if self.judging:  # task 0: its own ranks are on the clock the others are aligned to
                for rank in new:
                    self.history.offset(rank, 0)
        self._take_others()
        if self.judging and self.history.entries:
            judged = judge([self.history.sample(RECENT_PER_GROUP)])
            self._say_changes(explained(judged, self.seen.looks()))

    def _take_others(self) -> None:
        """Task 0 of a team: what the other tasks published since it last looked, kept with its own."""
        if self.exchange is None or not self.judging:
            return
        shared = self.exchange.others()
        for rank, entries in shared.entries.items():
            self.history.add(rank, entries, shared.hosts.get(rank, ""))
        for rank, measured in shared.clock_offsets_ns.items():
            for offset_ns in measured:
                self.history.offset(rank, offset_ns)
        self.seen.take(shared.looks)

    def _sweep(self, number: int) -> None:
        """Every answer to this request or an earlier one goes (a late one included)."""
        folder = self.dir / agent.SAMPLES
        for path in folder.glob(f"*{agent.SAMPLE_SUFFIX}*"):
            found = path.name.split("-", 1)[-1].split(".", 1)[0]
            if not found.isdigit() or int(found) <= number:
                path.unlink(missing_ok=True)

    def _say_changes(self, judgement: Judgement) -> None:
        """A verdict's line when new or changed; one line when a named rank no longer slows its group."""
        now = {v.group: v for v in judgement.verdicts if v.window_s >= SPOKEN_WINDOW_S}
        for group, verdict in now.items():
            reasoned = any(words.because(why, False) for why in verdict.why)
            # Said again once why is first seen: the first samples may hold no stack, no /proc span yet.
            if self.said.get(group) != verdict.ranks or (reasoned and group not in self.reasoned):
                self._speak(words.stderr_line(verdict))
                self.said[group] = verdict.ranks
                if reasoned:
                    self.reasoned.add(group)
        judged = {g.group for g in judgement.judged}
        for group in [g for g in self.said if g not in now and g in judged]:
            self._speak(words.recovered_line(group, self.said.pop(group)))
        for g, slowdown in judgement.slowdowns:
            if g.group not in self.said_slowed:
                self._speak(words.slowdown_line(g, slowdown))
                self.said_slowed.add(g.group)

    def _speak(self, line: str) -> None:
        self.lines.append(line)
        self.speak(line)

    # ------------------------------------------------------------ the report
    def judgement(self) -> Judgement:
        """The whole watched run judged (the report's; its window is the run's last minute)."""
        self._take_others()  # the other tasks' last samples, published after task 0's own last one
        self.gpus.close()
        if not self.history.entries:
            return Judgement(unjudged=Unjudged.NO_SAMPLE, requests=self.number)
        return explained(judge([self.history.sample()]), self.seen.looks())

    def add_to(self, report: Report) -> Report:
        """The `stragglers` check, its per-rank table and the heat map's rows, added to `report`."""
        judgement = self.judgement()
        reason = words.reason(judgement)
        if reason is not None:
            # Not judged (a job too short to sample, no collectives): a note, not a check, so that a
            # short healthy job's verdict stays its one line.
            report.notes.append(f"stragglers not judged: {reason}")
        else:
            report.checks.append(words.check(judgement))
        found = words.table(judgement)
        if found is not None:
            report.tables.append(found)
        for name, title, columns, rows in (
            (words.WHY, "Why the named rank is slow", dict(words.WHY_COLUMNS), words.why_rows(judgement)),
            (words.SLOWDOWN, "The job slowed", {}, words.slowdown_rows(judgement)),
            (words.HEAT, "Lag behind peers over time", {}, words.heat_rows(judgement)),
        ):
            if rows:
                report.tables.append(Table(name, title, columns, rows))
        report.notes += [f"while the job ran: {line.removeprefix('ddpcheck watch: ')}" for line in self.lines]
        return report


class StoreExchange:
    """The team's store as the Exchange: task i publishes watch/samples/i/<n>; task 0 reads them in turn."""

    def __init__(
        self, store: Any, index: int, count: int, clock: Callable[[], int | None] = lambda: None
    ) -> None:
        self.store = store
        self.index = index
        self.count = count
        self.clock = clock  # this host's clock minus task 0's, measured anew (None: not usable now)
        self.published = 0
        self.read = dict.fromkeys(range(count), 0)  # per task, the last of its publications read

    def publish(
        self,
        entries: Mapping[int, list[dict[str, Any]]],
        hosts: Mapping[int, str],
        looks: Mapping[int, Mapping[str, list[Any]]] | None = None,
    ) -> None:
        if self.index == 0:
            return  # task 0 keeps its own
        self.published += 1
        body: dict[str, Any] = {
            "entries": {str(r): e for r, e in entries.items()},
            "hosts": {str(r): h for r, h in hosts.items()},
            "looks": {str(r): dict(kinds) for r, kinds in (looks or {}).items()},
            "clock_offset_ns": self.clock(),  # None (null): no usable offset now, as task 0 reads it
        }
        with contextlib.suppress(RuntimeError):  # task 0's store gone: the job is ending
            self.store.set(f"watch/samples/{self.index}/{self.published}", json.dumps(body))

    def others(self) -> Shared:
        shared = Shared()
        for task in range(1, self.count):
            while True:
                key = f"watch/samples/{task}/{self.read[task] + 1}"
                try:
                    if not store_has(self.store, key):
                        break
                    body = json.loads(self.store.get(key))
                    self.store.delete_key(key)
                except (RuntimeError, ValueError):
                    break
                self.read[task] += 1
                for rank, found in body.get("entries", {}).items():
                    shared.entries.setdefault(int(rank), []).extend(found)
                shared.hosts.update({int(r): str(h) for r, h in body.get("hosts", {}).items()})
                for rank, kinds in body.get("looks", {}).items():
                    held = shared.looks.setdefault(int(rank), {})
                    for kind, found in kinds.items():
                        held.setdefault(kind, []).extend(found)
                if body.get("clock_offset_ns") is not None:
                    for rank in map(int, body.get("hosts", {})):
                        shared.clock_offsets_ns.setdefault(rank, []).append(int(body["clock_offset_ns"]))
        return shared
