"""Pure: NCCL's flight-recorder states judged, from the real dump of the H200 run.

Under NCCL an entry is `scheduled` (the CPU enqueued it; the stream has not reached it), `started`
(its kernel runs: with peers, waiting for them inside it) or `completed`. A rank has arrived at a
collective when its kernel started there. The dump in tests/fixtures/h200 was taken with #15 of
group 0 enqueued behind a kernel that never ends: `scheduled`, as a hung rank's is. Grown to 8
ranks (tests/support/fr_dumps.py), the peers' #15 is `started`.
"""

from __future__ import annotations

import os
import pickle
from pathlib import Path
from typing import Any

from ddpcheck.checks.postmortem.check import examine
from ddpcheck.failure.flight import RankTrace, parse_trace
from ddpcheck.failure.flight_judge import judge
from ddpcheck.failure.recorders import dump_every_recorder, merge, poke_debug_pipes
from ddpcheck.report.model import Check, Status
from tests.support.fr_dumps import dump, entry, grown_h200_dump, h200_dump, write_pickle

ARRIVED = "group 0 (default_pg): every rank arrived"
GROUP_1 = "group 1: every rank arrived"
LAST = "all_reduce #15 (4.0 MiB float32, [1048576]) at fr_capture.py:30 in <module>"
BEFORE = "all_reduce #14 (16 B bfloat16, [8]) at fr_capture.py:27 in <module>"


def check(checks: list[Check], name: str) -> Check:
    return next(c for c in checks if c.name == name)


def world(dumps: dict[int, dict[str, Any]]) -> dict[int, RankTrace]:
    return {rank: parse_trace(data, rank=rank) for rank, data in dumps.items()}


def test_the_real_dump_reads_as_nccl_with_15_enqueued_and_14_started() -> None:
    trace = parse_trace(h200_dump(), rank=0)
    assert trace.backend == "nccl" and trace.backend_of("0") == "nccl"
    assert (trace.last_enqueued("0"), trace.last_started("0")) == (15, 14)
    assert (trace.last_enqueued("1"), trace.last_started("1")) == (1, 1)
    assert trace.collectives("0")[15].state == "scheduled"


def test_one_rank_whose_last_collective_never_started_is_stuck_before_it() -> None:
    """World 1: nobody to wait for, yet #15 never started: the GPU stream is stuck before it."""
    judged = judge(world({0: h200_dump()}))
    arrived = check(judged.checks, ARRIVED)
    assert arrived.status is Status.ERROR and arrived.ranks == [0]
    assert arrived.detail == (
        f"rank 0 enqueued {LAST} but its kernel never started: its GPU stream is stuck before it "
        "(a kernel that never ends, or a wait on the host)"
    )
    assert check(judged.checks, GROUP_1).status is Status.PASS


def test_among_eight_the_rank_whose_15_is_scheduled_is_named_while_its_peers_started_it() -> None:
    dumps = {r: grown_h200_dump(r, 8, states={15: "started"}) for r in range(8)}
    dumps[3] = grown_h200_dump(3, 8)  # #15 as recorded: scheduled
    judged = judge(world(dumps), hosts={3: "node-b"})
    arrived = check(judged.checks, ARRIVED)
    assert arrived.status is Status.ERROR and arrived.ranks == [3] and arrived.hosts == ["node-b"]
    assert arrived.detail == (
        f"rank 3 enqueued {LAST} but its kernel never started: its GPU stream is stuck before it "
        "(a kernel that never ends, or a wait on the host); "
        f"ranks 0, 1, 2, 4, 5, 6, 7 wait in {LAST} (its kernel started)"
    )


def test_a_scheduled_rank_and_a_rank_that_never_called_it_are_both_named_each_as_what_it_is() -> None:
    dumps = {r: grown_h200_dump(r, 8, states={15: "started"}, group_1=[0, 1, 2, 3]) for r in range(8)}
    dumps[5] = grown_h200_dump(5, 8, group_1=[0, 1, 2, 3])
    dumps[6] = grown_h200_dump(6, 8, last=14, group_1=[0, 1, 2, 3])
    judged = judge(world(dumps))
    arrived = check(judged.checks, ARRIVED)
    assert arrived.ranks == [5, 6]
    assert arrived.detail == (
        f"rank 5 enqueued {LAST} but its kernel never started: its GPU stream is stuck before it "
        "(a kernel that never ends, or a wait on the host); "
        f"rank 6 never called {LAST}: its last collective is {BEFORE}; "
        f"ranks 0, 1, 2, 3, 4, 7 wait in {LAST} (its kernel started)"
    )
    group_1 = check(judged.checks, GROUP_1)
    assert group_1.status is Status.PASS and "ranks 0-3" in group_1.detail
    rows = {(row["rank"], row["group"]): row for row in judged.table.rows}
    assert rows[(5, "0")]["state"] == "scheduled" and rows[(0, "0")]["state"] == "started"
    assert rows[(6, "0")]["seq_id"] == 14 and (4, "1") not in rows


def test_every_rank_inside_the_same_kernel_has_arrived() -> None:
    """All started #15, none completed: the collective itself waits (the network), no rank is late."""
    dumps = {r: grown_h200_dump(r, 8, states={15: "started"}) for r in range(8)}
    arrived = check(judge(world(dumps)).checks, ARRIVED)
    assert arrived.status is Status.PASS
    assert arrived.detail == f"the last collective started by ranks 0-7: {LAST}"


def test_gloo_entries_stay_scheduled_and_count_as_arrived_once_enqueued() -> None:
    """The same dump, recorded by gloo: its states mean nothing, so every rank at #15 has arrived."""

    def as_gloo(data: dict[str, Any]) -> dict[str, Any]:
        for e in data["entries"]:
            e["profiling_name"] = e["profiling_name"].replace("nccl:", "gloo:")
            e["state"] = "scheduled"
        return data

    judged = judge(world({r: as_gloo(grown_h200_dump(r, 2)) for r in range(2)}))
    assert check(judged.checks, ARRIVED).status is Status.PASS


def test_postmortem_of_eight_real_dumps_on_disk_names_the_stuck_rank(tmp_path: Path) -> None:
    for r in range(8):
        write_pickle(tmp_path / f"nccl_trace_rank_{r}", grown_h200_dump(r, 8, states={15: "started"}))
    write_pickle(tmp_path / "nccl_trace_rank_7", grown_h200_dump(7, 8))
    report = examine(tmp_path)
    assert report.verdict.value == "error"
    arrived = next(c for c in report.checks if c.name == ARRIVED)
    assert arrived.ranks == [7] and "kernel never started" in arrived.detail
    assert report.world["backend"] == "nccl" and report.world["size"] == 8


class Recorders:
    """torch._C._distributed_c10d as a job with an NCCL group and a gloo group has it."""

    def __init__(self, nccl: dict[str, Any] | None, other: dict[str, Any] | None) -> None:
        self.calls: list[tuple[str, dict[str, Any]]] = []
        if nccl is not None:
            self._dump_nccl_trace = self._recorder("nccl", nccl)
        if other is not None:
            self._dump_fr_trace = self._recorder("other", other)

    def _recorder(self, name: str, data: dict[str, Any]) -> Any:
        def dump(**kwargs: Any) -> bytes:
            self.calls.append((name, kwargs))
            return pickle.dumps(data)

        return dump


def test_both_recorders_are_dumped_as_one_so_an_nccl_jobs_collectives_are_not_lost() -> None:
    gloo = dump([entry(seq, pg=("2", "cpu_group"), pg_id=2) for seq in (1, 2)])
    native = Recorders(h200_dump(), gloo)
    trace = parse_trace(pickle.loads(dump_every_recorder(native)), rank=0)
    assert trace.groups() == {"0", "1", "2"}
    assert (trace.backend_of("0"), trace.backend_of("2")) == ("nccl", "gloo")
    assert (trace.last_enqueued("0"), trace.last_enqueued("2")) == (15, 2)
    assert ("other", {"includeStackTraces": False}) in native.calls  # gloo's stacks would block


def test_an_nccl_job_with_an_empty_other_recorder_keeps_every_nccl_entry() -> None:
    """What the H200 run measured: 0 entries in _dump_fr_trace(), 16 in _dump_nccl_trace()."""
    empty = {"version": "2.10", "pg_config": {}, "pg_status": {}, "entries": []}
    merged = pickle.loads(dump_every_recorder(Recorders(h200_dump(), empty)))
    assert len(merged["entries"]) == 16 and merged["pg_status"]["0"]["last_started_collective"] == 14
    assert dump_every_recorder(Recorders(None, empty)) is not None  # a dump with nothing: "nothing recorded"
    assert dump_every_recorder(Recorders(None, None)) is None


def test_one_group_recorded_by_both_backends_is_kept_apart() -> None:
    gloo = dump([entry(seq, pg=("0", "default_pg"), pg_id=0) for seq in (1, 2, 3)])
    merged = merge([h200_dump(), gloo])
    trace = parse_trace(merged, rank=0)
    assert trace.groups() == {"0", "1", "0:gloo"}
    assert (trace.last_enqueued("0"), trace.last_started("0")) == (15, 14)  # NCCL's status kept
    assert trace.last_enqueued("0:gloo") == 3 and trace.backend_of("0:gloo") == "gloo"


def test_nccls_debug_pipes_are_poked_and_a_pipe_without_reader_is_passed_over(tmp_path: Path) -> None:
    prefix = str(tmp_path / "nccl_pipe_rank_")
    os.mkfifo(f"{prefix}0.pipe")
    os.mkfifo(f"{prefix}1.pipe")  # its rank is gone: nobody reads
    reader = os.open(f"{prefix}0.pipe", os.O_RDONLY | os.O_NONBLOCK)
    try:
        assert poke_debug_pipes(prefix) == [f"{prefix}0.pipe"]
        assert os.read(reader, 16) == b"1"
    finally:
        os.close(reader)
    assert poke_debug_pipes(str(tmp_path / "none_")) == []
