"""`ddpcheck attach`'s parts without a job: the verdict from synthetic evidence, the nodes agreeing through a
directory, the debug-info pipe, the dumps on disk, NCCL's RAS answer asked once (a service on loopback)."""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path

import pytest
from rich.console import Console

from ddpcheck.checks.attach import AttachOptions, check, evidence, nodes
from ddpcheck.checks.attach.evidence import Seen
from ddpcheck.checks.attach.find import Job
from ddpcheck.errors import UsageError
from ddpcheck.failure import processes, ras
from ddpcheck.failure.hangs import RankView
from ddpcheck.failure.rank_env import node_count
from ddpcheck.failure.ras.status import NO_SERVICE_VERDICT
from ddpcheck.report.model import Report, Status
from ddpcheck.report.terminal import render_report
from tests.support.fr_dumps import dump, entry, write_pickle
from tests.test_ras import HEALTHY, PROBLEM, RasService
from tests.test_watch_judge import ALL_REDUCE, BACKWARD, SLEEPING

BROADCAST = (ALL_REDUCE[0].__class__("broadcast", ALL_REDUCE[0].file, 2900), *ALL_REDUCE[1:])


def views(*stacks, states: str = "") -> list[RankView]:
    return [
        RankView(rank, "node-a", 100 + rank, (states[rank] if states else "S"), stack, None, [stack])
        for rank, stack in enumerate(stacks)
    ]


def seen(found: list[RankView], **kwargs) -> Seen:
    return Seen(found, kwargs.pop("changed", []), kwargs.pop("gone", []), kwargs.pop("moving", []), **kwargs)


def error(report) -> dict:
    found = next(c for c in report.checks if c.status is Status.ERROR)
    return {"name": found.name, "ranks": found.ranks, "detail": found.detail}


def test_a_rank_outside_the_collective_its_peers_wait_in_is_named() -> None:
    report = check.judge(seen(views(ALL_REDUCE, SLEEPING, ALL_REDUCE)), 1.0)
    found = error(report)
    assert found["name"] == "hang" and found["ranks"] == [1]
    assert "load_batch (/home/me/train.py:42)" in found["detail"] and "pid 101" in found["detail"]
    assert report.command == "attach" and report.verdict.exit_code == 3


def test_a_rank_in_another_collective_is_a_mismatch() -> None:
    found = error(check.judge(seen(views(ALL_REDUCE, BROADCAST, ALL_REDUCE)), 1.0))
    assert found["name"] == "collective mismatch" and found["ranks"] == [1] and "broadcast" in found["detail"]


def test_a_stopped_rank_is_named_even_where_its_peers_move() -> None:
    report = check.judge(seen(views(ALL_REDUCE, ALL_REDUCE, BACKWARD, states="SST"), changed=[0]), 1.0)
    assert error(report)["ranks"] == [2] and "is stopped" in error(report)["detail"]


def test_a_changed_stack_is_progress() -> None:
    report = check.judge(seen(views(ALL_REDUCE, ALL_REDUCE), changed=[1]), 1.0)
    assert report.verdict.exit_code == 0 and "making progress" in report.checks[0].detail


def test_every_rank_moving_data_is_progress_but_some_ranks_are_not() -> None:
    same = views(ALL_REDUCE, ALL_REDUCE, ALL_REDUCE)
    assert check.judge(seen(same, moving=[0, 1, 2]), 1.0).verdict.exit_code == 0
    # Two ranks talking to each other while the third is silent: no progress of the job.
    assert check.judge(seen(same, moving=[0, 2]), 1.0).verdict.exit_code == 3


def test_a_rank_that_ended_while_read_is_named() -> None:
    found = views(ALL_REDUCE, ALL_REDUCE, None)
    found[2].state = "gone"
    report = check.judge(seen(found, gone=[2]), 1.0)
    gone = next(c for c in report.checks if c.name == "ranks")
    assert gone.ranks == [2] and "ended while attach read it" in gone.detail
    assert len(report.tables[0].rows) == 3  # the ended rank is still listed


def test_nodes_agree_on_the_union_of_their_evidence(tmp_path: Path) -> None:
    other = views(ALL_REDUCE, SLEEPING)[1]
    other.host = "node-b"
    from ddpcheck.failure.hangs import view_to_dict

    written = {"host": "node-b", "views": [view_to_dict(other)], "changed": [], "moving": [], "gone": [],
               "notes": []}  # fmt: skip
    (tmp_path / "node-b.json").write_text(json.dumps(written))
    mine = seen(views(ALL_REDUCE))
    merged, missing = nodes.agree(mine, str(tmp_path), 2)
    assert missing == [] and [v.rank for v in merged.views] == [0, 1]
    found = error(check.judge(merged, 1.0))
    assert found["ranks"] == [1] and "host node-b" in found["detail"]


def test_a_node_that_never_writes_is_named_missing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(nodes, "WAIT_S", 0.3)
    merged, missing = nodes.agree(seen(views(ALL_REDUCE)), str(tmp_path), 2)
    assert missing == ["1 of 2 node(s)"] and len(merged.views) == 1


def test_the_step_folder_and_node_count_come_from_srun() -> None:
    env = {"SLURM_JOB_ID": "7", "SLURM_STEP_ID": "3", "SLURM_STEP_NUM_NODES": "4"}
    assert nodes.step_dir("/d", env) == "/d/7.3" and node_count(env) == 4
    assert nodes.step_dir("/d", {}) == "/d" and node_count({}) == 1


def _job(environ: dict[str, str], started: float = 0.0) -> Job:
    return Job([1], {0: processes.RankProcess(0, os.getpid(), "node-a")}, {0: environ}, started)


def test_the_debug_info_pipe_is_written_without_blocking(tmp_path: Path) -> None:
    prefix = str(tmp_path / "pipe_rank_")
    notes: list[str] = []
    os.mkfifo(prefix + "0.pipe")
    assert evidence._ask_pipes(_job({evidence.PIPE_VARIABLE: prefix}), notes) is None  # nobody reads it
    assert "nobody reads it" in notes[0]
    got: list[bytes] = []
    reader = threading.Thread(target=lambda: got.append(Path(prefix + "0.pipe").read_bytes()))
    reader.start()
    deadline = time.monotonic() + 5
    asked = None
    while asked is None and time.monotonic() < deadline:  # until the reader has the pipe open
        asked = evidence._ask_pipes(_job({evidence.PIPE_VARIABLE: prefix}), [])
        time.sleep(0.05)
    reader.join(5)
    assert asked is not None and got and got[0].strip() == b"1"


def test_dumps_on_disk_are_read_by_the_ranks_prefix_and_an_older_jobs_left(tmp_path: Path) -> None:
    prefix = str(tmp_path / "fr_")
    write_pickle(Path(prefix + "0"), dump([entry(0), entry(1)]))
    environ = {"TORCH_FR_DUMP_TEMP_FILE": prefix}
    assert list(evidence.read_dumps(_job(environ, started=time.time() - 60), [])) == [0]
    assert evidence.read_dumps(_job(environ, started=time.time() + 60), []) == {}  # written before the job


def _asked_ras(monkeypatch: pytest.MonkeyPatch, pieces: list[str]) -> tuple[Seen, list[str]]:
    """What attach read of a one-rank job whose RAS service on loopback answers `pieces`, and the
    commands the service was sent."""
    service = RasService(pieces=pieces)
    try:
        monkeypatch.setattr(evidence, "maps_any", lambda pid, *libraries: True)
        monkeypatch.setattr(evidence, "sample", lambda job, interval: {0: [ALL_REDUCE]})  # no py-spy here
        return evidence.read(_job({"NCCL_RAS_ADDR": service.address}), 0.1), service.commands
    finally:
        service.close()


def test_nccl_ras_is_asked_once_and_its_verdict_stands_beside(monkeypatch: pytest.MonkeyPatch) -> None:
    found, commands = _asked_ras(monkeypatch, HEALTHY)
    assert [c for c in commands if c.upper().endswith("STATUS")] == ["STATUS"]
    ras_check = check.ras_check(found)
    assert ras_check.status is Status.PASS and "NCCL says" in ras_check.detail
    assert check.ras_answer(found) == []  # healthy: no answer to read


UNKNOWN_LAYOUT = ['{\n  "nccl_version": "2.29.2"\n}\n']


@pytest.mark.parametrize("pieces", [PROBLEM, UNKNOWN_LAYOUT], ids=["problems", "unknown"])
def test_nccl_ras_answer_not_healthy_is_in_the_report_line_by_line(
    monkeypatch: pytest.MonkeyPatch, pieces: list[str]
) -> None:
    """The verdict names what it could read; NCCL's answer itself is the nccl_ras table: in the JSON
    always, on the terminal with --verbose (a note says so without it)."""
    found, _ = _asked_ras(monkeypatch, pieces)
    assert check.ras_check(found).status is Status.WARN
    (table,) = check.ras_answer(found)
    assert [row["line"] for row in table.rows] == "".join(pieces).rstrip().splitlines()
    report = Report(command="attach", checks=[check.ras_check(found)], tables=[table])
    quiet = Console(record=True, width=120)
    render_report(report, quiet)
    assert "NCCL's RAS answer: with --verbose (-v), and in --json" in quiet.export_text()
    verbose = Console(record=True, width=200)
    render_report(report, verbose, verbose=True)
    first = next(row["line"].strip() for row in table.rows if row["line"].strip())
    assert first in verbose.export_text()


def test_ras_outcomes_map_to_checks() -> None:
    none = Seen([], [], [], ras=ras.RasStatus("localhost:28028", ras.Outcome.NO_SERVICE, NO_SERVICE_VERDICT))
    assert check.ras_check(none).status is Status.SKIP
    late = Seen([], [], [], ras=ras.RasStatus("localhost:28028", ras.Outcome.TIMEOUT, "timeout: no answer"))
    assert check.ras_check(late).status is Status.WARN
    cpu = Seen([], [], [], ras_skipped="the job loaded no NCCL library")
    assert check.ras_check(cpu).status is Status.SKIP


@pytest.mark.parametrize(
    ("fields", "words"),
    [
        ({}, "needs one job"),
        ({"pid": 1, "all": True}, "needs one job"),
        ({"all": True, "interval": 0}, "--interval"),
        ({"all": True, "nodes": 2}, "--nodes N needs --dir"),
    ],
)
def test_bad_options_are_usage_errors(fields: dict, words: str) -> None:
    with pytest.raises(UsageError, match=words):
        AttachOptions(**fields).validate()
