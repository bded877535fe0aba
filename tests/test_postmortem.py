"""`ddpcheck postmortem DIR`: flight-recorder dumps and logs of a dead job, read and judged.

Pure tests of the readers and judges on synthetic dumps (and NCCL's layout, hand-written from the
format), then real gloo jobs under torchrun that leave real dumps and logs: run once for the module.
"""

from __future__ import annotations

import json
import os
import pickle
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from ddpcheck.checks.postmortem import PostmortemOptions
from ddpcheck.checks.postmortem.check import NothingToRead, examine
from ddpcheck.checks.postmortem.logs import (
    FoundLogs,
    find_logs,
    judge_logs,
    parse_error_file,
    scan_text,
    summary_exits,
)
from ddpcheck.checks.postmortem.logs import (
    earliest_error as first_failure,
)
from ddpcheck.errors import UsageError
from ddpcheck.failure.collectives import last_collective_line, with_last_collectives
from ddpcheck.failure.flight import NotADump, find_dumps, parse_trace, rank_of, read_dump
from ddpcheck.failure.flight_judge import judge
from ddpcheck.rank import rundir
from ddpcheck.report.model import Check, Status
from tests.conftest import Run, assert_usage_error
from tests.support.fr_dumps import dump, entry, nccl_dump, write_json, write_pickle

JOB = Path(__file__).parent / "support" / "fr_job.py"


def traces(*dumps: dict) -> dict:
    return {rank: parse_trace(data, rank=rank) for rank, data in enumerate(dumps)}


def healthy(last: int = 4, **kwargs) -> dict:
    return dump([entry(seq, **kwargs) for seq in range(1, last + 1)])


def check(judged, suffix: str):
    return next(c for c in judged.checks if c.name.endswith(suffix))


# ---------------------------------------------------------------- reading dumps
def test_the_rank_is_the_names_trailing_digits_whatever_the_prefix() -> None:
    assert rank_of("/x/fr_rank_12") == 12
    assert rank_of("nccl_trace_rank_3") == 3
    assert rank_of("7") == 7
    assert rank_of("dump.pkl") is None and rank_of("rank_2.json") is None


def test_pickle_and_json_forms_read_alike(tmp_path: Path) -> None:
    data = dump([entry(1), entry(2, dtype="BFloat16", sizes=[[4, 8]])])
    from_pickle = read_dump(write_pickle(tmp_path / "fr_1", data), 1)
    from_json = read_dump(write_json(tmp_path / "json_1", data), 1)
    for trace in (from_pickle, from_json):
        assert trace.rank == 1 and trace.version == "2.10" and trace.backend == "gloo"
        assert trace.last_enqueued("0") == 2
        assert trace.pg_config == {}  # gloo's placeholder entry is no group
        last = trace.collectives("0")[2]
        assert (last.op, last.input_sizes, last.input_dtypes) == ("all_reduce", [[4, 8]], ["BFloat16"])
    assert str(from_pickle.collectives("0")[2].user_frame()) == "train.py:10 in step"
    assert from_json.collectives("0")[2].frames == []  # the JSON form has no frames


def test_nccls_dump_layout_reads_its_members_and_states(tmp_path: Path) -> None:
    trace = read_dump(write_pickle(tmp_path / "nccl_trace_rank_5", nccl_dump(5, world=8, last=7)), 5)
    assert trace.pg_config["0"] == list(range(8))
    assert trace.pg_status["0"].last_started == 7
    assert [c.state for c in trace.collectives("0").values()][-2:] == ["completed", "started"]


def test_a_pickle_naming_a_class_is_refused_unrun(tmp_path: Path) -> None:
    # A file in a dead job's directory must not run code when read: no class is loaded.
    evil = tmp_path / "fr_0"
    evil.write_bytes(pickle.dumps(os.system))
    with pytest.raises(NotADump, match="names a class"):
        read_dump(evil, 0)


def test_find_dumps_recurses_over_prefixes_and_skips_what_it_cannot_read(tmp_path: Path) -> None:
    (tmp_path / "a" / "b").mkdir(parents=True)
    write_pickle(tmp_path / "a" / "nccl_trace_rank_0", healthy())
    write_json(tmp_path / "a" / "b" / "fr_json_1", healthy())
    (tmp_path / "fr_2").write_bytes(b"")  # a rank ended while it dumped
    (tmp_path / "fr_3").write_bytes(pickle.dumps({"entries": []})[:-3])  # cut short
    write_pickle(tmp_path / "a" / "b" / "other_0", healthy())  # a second dump of rank 0, read later
    (tmp_path / "stderr_1").write_text("not a dump\n")  # passed over in silence
    (tmp_path / "metrics_4").write_text('{"loss": 1}')  # JSON that is no dump: also silent
    found = find_dumps(tmp_path)
    assert sorted(found.traces) == [0, 1]
    reasons = {Path(path).name: why for path, why in found.skipped}
    assert set(reasons) == {"fr_2", "fr_3", "other_0"}
    assert reasons["fr_2"].startswith("empty") and reasons["fr_3"].startswith("unreadable")
    assert "a second dump of rank 0" in reasons["other_0"]


def test_a_dump_caught_mid_write_is_no_rank(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The watchdog reads the flight folder while a late rank may still write its dump: the file it
    writes before the rename must not be read as a dump of the rank its pid names."""
    seen = []

    def read_then_rename(src: Path, dst: Path) -> None:
        seen.append(find_dumps(rundir.flight_dir(tmp_path)))
        os.rename(src, dst)

    monkeypatch.setattr(rundir.os, "replace", read_then_rename)
    rundir.flight_dir(tmp_path).mkdir()
    rundir.write_flight_dump(tmp_path, 1, pickle.dumps(healthy()))
    assert seen[0].traces == {} and seen[0].skipped == []
    assert sorted(find_dumps(rundir.flight_dir(tmp_path)).traces) == [1]


# ---------------------------------------------------------------- judging dumps
def test_all_agree() -> None:
    judged = judge(traces(healthy(), healthy(), healthy()))
    assert all(c.status is Status.PASS for c in judged.checks), judged.checks
    assert judged.world_size == 3 and check(judged, "every rank left a dump").ranks == []
    assert [r["seq_id"] for r in judged.table.rows] == [4, 4, 4]


def test_a_rank_behind_by_one_is_named_and_the_others_wait() -> None:
    judged = judge(traces(healthy(4), healthy(3), healthy(4)))
    arrived = check(judged, "every rank arrived")
    assert arrived.status is Status.ERROR and arrived.ranks == [1]
    assert arrived.detail.startswith("rank 1 never called all_reduce #4")
    assert "ranks 0, 2 wait in all_reduce #4" in arrived.detail and "train.py:10" in arrived.detail
    assert check(judged, "same collectives").status is Status.PASS  # #1-#3 agree
    assert last_collective_line(judged_traces := traces(healthy(4), healthy(3)), 1) == (
        "last collective: all_reduce #3 (1.0 KiB float32, [256]) at train.py:10 in step; "
        "rank 0 at #4 (all_reduce)"
    )
    assert last_collective_line(judged_traces, 7) is None
    assert last_collective_line({0: parse_trace(dump([]), rank=0), 1: judged_traces[1]}, 0) == (
        "last collective: none (no collective in this group yet); rank 1 at #3 (all_reduce)"
    )


def test_a_hang_finding_gains_the_stuck_ranks_last_collective() -> None:
    hang = Check("hang", Status.ERROR, "rank 1 is behind", ranks=[1])
    flight = traces(healthy(4), healthy(3))
    assert with_last_collectives(hang, flight).detail == (
        "rank 1 is behind; rank 1's last collective: all_reduce #3 (1.0 KiB float32, [256]) "
        "at train.py:10 in step; rank 0 at #4 (all_reduce)"
    )
    # A frozen rank cannot dump: where the others wait is what is left to say.
    frozen = Check("hang", Status.ERROR, "rank 2 is frozen", ranks=[2])
    assert with_last_collectives(frozen, flight).detail == (
        "rank 2 is frozen; rank 2 left no flight-recorder dump; rank 0's last collective: "
        "all_reduce #4 (1.0 KiB float32, [256]) at train.py:10 in step; rank 1 at #3 (all_reduce)"
    )
    untouched = Check("hang", Status.ERROR, "as it was", ranks=[1])
    assert with_last_collectives(untouched, {}).detail == "as it was"


def test_of_ranks_at_three_places_the_lowest_is_the_culprit() -> None:
    judged = judge(traces(healthy(5), healthy(3), healthy(4)))
    arrived = check(judged, "every rank arrived")
    assert arrived.ranks == [1]
    assert (
        "rank 0 waits in all_reduce #5" in arrived.detail
        and "rank 2 waits in all_reduce #4" in arrived.detail
    )


def test_a_size_mismatch_on_rank_2_names_rank_2() -> None:
    odd = dump([entry(1), entry(2, sizes=[[512]]), entry(3)])
    judged = judge(traces(healthy(3), healthy(3), odd, healthy(3)))
    agreed = check(judged, "same collectives")
    assert agreed.status is Status.FAIL and agreed.ranks == [2]
    assert agreed.detail.startswith("collective mismatch at #2 (another size)")
    assert "rank 2 called all_reduce #2 (2.0 KiB float32, [512])" in agreed.detail


def test_a_dtype_mismatch_is_said_as_such() -> None:
    odd = dump([entry(1), entry(2, dtype="Half")])
    agreed = check(judge(traces(healthy(2), odd, healthy(2))), "same collectives")
    assert agreed.ranks == [1] and "(another dtype)" in agreed.detail and "float16" in agreed.detail


def test_another_operation_and_no_majority_names_every_side() -> None:
    odd = dump([entry(1, op="broadcast")])
    agreed = check(judge(traces(healthy(1), odd)), "same collectives")
    assert (
        agreed.ranks == [0, 1] and "(another operation)" in agreed.detail and "no majority" in agreed.detail
    )


def test_point_to_point_and_all_to_all_sizes_are_not_compared() -> None:
    a = dump([entry(1, op="all_to_all", sizes=[[4]]), entry(1, op="send", is_p2p=True)])
    b = dump([entry(1, op="all_to_all", sizes=[[8]]), entry(1, op="recv", is_p2p=True)])
    assert check(judge(traces(a, b)), "same collectives").status is Status.PASS


def test_two_process_groups_are_judged_apart() -> None:
    pair = ("1", "tp")
    rank0 = dump([entry(1), entry(1, pg=pair, pg_id=1, sizes=[[8]]), entry(2)])
    rank1 = dump([entry(1), entry(1, pg=pair, pg_id=1, sizes=[[16]]), entry(2)])
    rank2 = dump([entry(1), entry(2)])
    judged = judge(traces(rank0, rank1, rank2))
    names = [c.name for c in judged.checks]
    assert "group 0 (default_pg): every rank arrived" in names and "group 1 (tp): every rank arrived" in names
    assert check(judged, "(default_pg): ranks called the same collectives").status is Status.PASS
    tp = check(judged, "(tp): ranks called the same collectives")
    assert tp.status is Status.FAIL and "ranks 0, 1" not in tp.detail.split(":")[0]  # only the two members
    assert {r["group"] for r in judged.table.rows} == {"0", "1"}


def test_missing_dumps_are_lost_ranks() -> None:
    found = traces(healthy(), healthy())
    del found[1]
    judged = judge(found, world_size=4)
    lost = check(judged, "every rank left a dump")
    assert lost.status is Status.ERROR and lost.ranks == [1, 2, 3]
    assert [r["op"] for r in judged.table.rows if r["rank"] in (1, 2, 3)] == ["(no dump)"] * 3
    # Without the world size, gloo's dumps say only the highest rank seen.
    assert judge(found).world_size == 1


def test_nccls_members_give_the_world_and_a_stuck_rank() -> None:
    found = {r: parse_trace(nccl_dump(r, world=4, last=9 if r != 3 else 8), rank=r) for r in (0, 1, 3)}
    judged = judge(found, hosts={3: "node-b"})
    assert judged.world_size == 4 and check(judged, "every rank left a dump").ranks == [2]
    arrived = check(judged, "every rank arrived")
    assert arrived.ranks == [3] and arrived.hosts == ["node-b"]
    assert "(2.0 KiB bfloat16, [1024])" in arrived.detail


# ---------------------------------------------------------------- reading logs
GLOO_ABORT = """terminate called after throwing an instance of 'gloo::EnforceNotMet'
  what():  [enforce fail at /__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:456] \
op.preamble.length <= op.nbytes. 344 vs 172. Received data size doesn't match expected size. \
Is there a distributed collective mismatch in your code?
Fatal Python error: Aborted
"""
PEER_DIED = """[rank0]: Traceback (most recent call last):
[rank0]:   File "/job/train.py", line 66, in main
[rank0]:     work.wait()
[rank0]: RuntimeError: [/__w/pytorch/gloo/transport/tcp/pair.cc:537] Read error [127.0.0.1]:6037: \
Connection reset by peer. This is typically caused by a remote worker hanging.
"""
SLURM_OUT = """0: step 10 loss 1.2
3: [E ProcessGroupNCCL.cpp:616] [Rank 3] Watchdog caught collective operation timeout: \
WorkNCCL(SeqNum=12, OpType=ALLREDUCE, NumelIn=262144, NumelOut=262144, Timeout(ms)=600000) ran for 600058 \
milliseconds before timing out.
node-b:4021:4090 [1] NCCL WARN NET/IB : Got async event : port error
"""
TORCHRUN_SUMMARY = """Failures:
[1]:
  time      : 2026-12-02_03:17:00
  host      : node-a
  rank      : 2 (local_rank: 2)
  exitcode  : -15 (pid: 11100)  (SIGTERM)
  error_file: <N/A>
------------------------------------------------------------
Root Cause (first observed failure):
[0]:
  time      : 2026-12-02_03:17:00
  host      : node-a
  rank      : 1 (local_rank: 1)
  exitcode  : -6 (pid: 11099)  (SIGABRT)
"""


def test_scan_text_finds_how_ranks_ended() -> None:
    found = scan_text(GLOO_ABORT, rank=1)
    assert [f.kind for f in found] == ["gloo_mismatch", "fatal"] and found[0].mismatch_bytes() == (344, 172)
    died = scan_text(PEER_DIED)
    assert [(f.kind, f.rank, f.peer_died) for f in died] == [("exception", 0, True)]
    slurm = scan_text(SLURM_OUT)
    assert [(f.kind, f.rank, f.host) for f in slurm] == [
        ("watchdog_timeout", 3, None),
        ("nccl_warn", None, "node-b"),
    ]
    assert scan_text("RuntimeError: not after a traceback\n") == []  # a bare line is not an exception


def test_torchruns_failure_summary_gives_exits_hosts_and_the_root_cause() -> None:
    found = summary_exits(TORCHRUN_SUMMARY)
    assert [(f.kind, f.rank, f.host, f.text) for f in found] == [
        ("rank_exit", 2, "node-a", "exit code -15 (SIGTERM)"),
        ("root_cause", 1, "node-a", "exit code -6 (SIGABRT)"),
    ]


def test_error_files_and_the_first_by_time() -> None:
    late = parse_error_file(
        json.dumps(
            {
                "message": {
                    "message": "ValueError: bad batch",
                    "extraInfo": {"py_callstack": "Tb", "timestamp": "20"},
                }
            }
        ),
        rank=3,
    )
    early = parse_error_file(
        json.dumps({"message": {"message": "RuntimeError: x", "extraInfo": {"timestamp": "10"}}}), rank=1
    )
    bare = parse_error_file(json.dumps({"message": "Signal 6 (SIGABRT) received by PID 7"}), rank=0)
    assert first_failure([late, bare, early]) is early and first_failure([]) is None
    assert (late.timestamp, bare.timestamp) == (20.0, None)
    with pytest.raises(ValueError):
        parse_error_file("[]")


def test_a_ranks_log_folder_is_its_rank_with_or_without_a_trailing_slash(tmp_path: Path) -> None:
    folder = tmp_path / "logs" / "attempt_0" / "3"
    folder.mkdir(parents=True)
    (folder / "error.json").write_text(json.dumps({"message": "Signal 6 (SIGABRT) received by PID 7"}))
    (folder / "stderr.log").write_text("a quiet line\n")
    for asked in (str(folder), str(folder) + os.sep):
        found = find_logs(asked)
        assert found.ranks_seen == {3} and [e.rank for e in found.errors] == [3]
        assert sorted(found.traced) == [str(folder / "error.json"), str(folder / "stderr.log")]


def test_gloo_aborts_the_receiver_which_is_never_blamed() -> None:
    logs = FoundLogs(
        files=["x"],
        findings=scan_text(GLOO_ABORT, rank=1) + scan_text(PEER_DIED) + summary_exits(TORCHRUN_SUMMARY),
    )
    checks = {c.name: c for c in judge_logs(logs, mismatch_culprits=[2])}
    mismatch = checks["no collective mismatch in the logs"]
    assert mismatch.status is Status.FAIL and mismatch.ranks == [2] and 1 not in mismatch.ranks
    assert "RECEIVES the wrong size" in mismatch.detail and "dumps name rank 2" in mismatch.detail
    ends = checks["the ranks ran to the end"]
    assert ends.status is Status.ERROR and ends.ranks == []  # every one a casualty
    assert "rank 1: aborted: gloo received a collective of another size" in ends.detail
    assert (
        "(a peer had died first)" in ends.detail
        and "rank 2: exit code -15 (SIGTERM) (ended by its launcher)" in ends.detail
    )
    without_dumps = judge_logs(logs)[0]
    assert (
        without_dumps.ranks == [] and "dumps (TORCH_FR_BUFFER_SIZE) would say which" in without_dumps.detail
    )


def test_a_watchdog_timeout_names_its_rank_and_nccl_warnings_their_host() -> None:
    checks = {c.name: c for c in judge_logs(FoundLogs(files=["slurm-1.out"], findings=scan_text(SLURM_OUT)))}
    assert checks["the ranks ran to the end"].ranks == [3]
    warned = checks["no NCCL warnings"]
    assert warned.status is Status.WARN and warned.hosts == ["node-b"]
    assert (
        warned.detail
        == "1 NCCL WARN line on node-b, the first: [1] NCCL WARN NET/IB : Got async event : port error"
    )
    assert judge_logs(FoundLogs(files=["a.log"]))[0].status is Status.PASS
    assert judge_logs(FoundLogs()) == []


# ---------------------------------------------------------------- the command on bad input
def _cli(*args: str, tmp_path: Path) -> Run:
    env = {**os.environ, "TMPDIR": str(tmp_path / "tmp")}
    (tmp_path / "tmp").mkdir(exist_ok=True)
    proc = subprocess.run(
        [sys.executable, "-m", "ddpcheck", "postmortem", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    return Run(proc.returncode, proc.stdout, proc.stderr, None, 0.0)


@pytest.mark.integration
def test_no_dir_a_missing_dir_and_nothing_readable_are_exit_2(tmp_path: Path) -> None:
    empty = tmp_path / "job"
    empty.mkdir()
    (empty / "model.pt").write_bytes(b"\x00" * 16)
    (empty / "fr_0").write_bytes(b"")  # a dump cut to nothing is not something to read
    for args in ((), (str(tmp_path / "nowhere"),), (str(empty),)):
        assert_usage_error(_cli(*args, tmp_path=tmp_path), tmp_path / "tmp")
    with pytest.raises(UsageError, match="--world-size must be at least 1"):
        PostmortemOptions(directory=str(empty), world_size=0).validate()
    with pytest.raises(NothingToRead, match="nothing to read"):
        examine(empty)
    with pytest.raises(UsageError, match="no such directory"):
        examine(tmp_path / "nowhere")


# ---------------------------------------------------------------- a real gloo job under torchrun
@pytest.fixture(scope="module")
def dead_job(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One real 3-rank gloo job (run once for the module): rank 1 skips the pair group's last
    all_reduce (behind), rank 2's last all_reduce on the world is twice the size (gloo aborts a
    rank that receives it). Its directory: the dumps, torchrun's --log-dir and its output."""
    directory = tmp_path_factory.mktemp("job")
    env = {
        **os.environ,
        "FR_JOB_SKIP_LAST": "1",
        "FR_JOB_BIGGER": "2",
        "FR_JOB_DUMP_PREFIX": str(directory / "fr_rank_"),
        "TORCH_FR_BUFFER_SIZE": "100",
        "OMP_NUM_THREADS": "1",
        # torch's compile cache would otherwise land in TMPDIR and outlive the test.
        "TORCHINDUCTOR_CACHE_DIR": str(directory / "inductor"),
    }
    argv = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "3"]
    argv += ["--log-dir", str(directory / "logs"), "-r", "3", str(JOB)]
    with open(directory / "torchrun.out", "w") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        try:
            proc.wait(timeout=150)
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
    assert proc.returncode != 0  # the job died, as planted
    return directory


def test_a_real_job_with_a_rank_behind(dead_job: Path) -> None:
    found = find_dumps(dead_job)
    assert sorted(found.traces) == [0, 1, 2] and found.skipped == []
    # What gloo's dumps are on torch 2.13: no group members, every entry left "scheduled".
    assert found.traces[0].pg_config == {} and {e.state for e in found.traces[0].entries} == {"scheduled"}
    report = examine(dead_job)
    checks = {c.name: c for c in report.checks}
    arrived = checks["group 1: every rank arrived"]
    assert arrived.status is Status.ERROR and arrived.ranks == [1]
    assert arrived.detail.startswith("rank 1 never called all_reduce #2 (64 B int64, [8]) at fr_job.py:")
    assert "rank 0 waits in all_reduce #2" in arrived.detail
    assert checks["group 0 (default_pg): every rank arrived"].status is Status.PASS
    assert report.world["size"] == 3 and report.verdict.exit_code == 3


def test_a_real_collective_mismatch_names_the_caller_not_the_rank_gloo_aborted(
    dead_job: Path, tmp_path: Path
) -> None:
    out = tmp_path / "report.json"
    run = _cli(str(dead_job), "--json", str(out), "--quiet", tmp_path=tmp_path)
    assert run.code == 3, run.stdout + run.stderr
    report = json.loads(out.read_text())
    checks = {c["name"]: c for c in report["checks"]}
    agreed = checks["group 0 (default_pg): ranks called the same collectives"]
    assert agreed["status"] == "FAIL" and agreed["ranks"] == [2]
    assert "rank 2 called all_reduce #4 (2.0 KiB float32, [512])" in agreed["detail"]
    logs = checks["no collective mismatch in the logs"]
    assert logs["ranks"] == [2] and "RECEIVES the wrong size" in logs["detail"]
    # Which rank gloo aborts depends on who received first; whichever it was is not blamed.
    ended = checks["the ranks ran to the end"]
    aborted = [r for r in range(3) if f"rank {r}: aborted: gloo received" in ended["detail"]]
    assert (
        len(aborted) == 1 and aborted[0] != 2 and 2 not in ended["ranks"] and aborted[0] not in ended["ranks"]
    )
    rows = report["tables"]["last_collectives"]
    assert [row["bytes"] for row in rows if row["group"] == "0"] == [1024, 1024, 2048]


def test_a_real_job_whose_dump_was_deleted_names_the_rank_lost(dead_job: Path, tmp_path: Path) -> None:
    copy = tmp_path / "job"
    shutil.copytree(dead_job, copy)
    (copy / "fr_rank_2").unlink()
    report = examine(copy)
    lost = next(c for c in report.checks if c.name == "every rank left a dump")
    # The world comes from torchrun's log directories (attempt_0/0..2): gloo's dumps cannot say.
    assert lost.status is Status.ERROR and lost.ranks == [2] and report.world["size"] == 3
    row = next(r for r in report.tables[0].rows if r["rank"] == 2)
    assert row["op"] == "(no dump)"
