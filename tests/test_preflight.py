"""ddpcheck.preflight(): the checks inside the user's own job (docs/preflight.md).

The pure tests check the arguments, the store's arrival protocol (threads on one HashStore) and
the one-line message; the others start real torchrun jobs of gloo ranks on CPU. A launch costs
seconds (torch imported by the launcher and every rank), so the API's scenarios share two jobs of
fixtures/preflight/scenarios.py, each scenario reported on its own line: three ranks for a corrupted
rank and a disagreeing torch; two for the plain, Lightning and Accelerate recipes (each on a process
group of its own, the frameworks' when installed), a healthy group, bad arguments, the bound beside
a busy core and, last, a rank that never comes. The command line's verdicts (0, 1, 3) are a launch
each; its usage errors (2) need none: they are refused before any group.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import psutil
import pytest

import ddpcheck
from ddpcheck.preflight import options
from ddpcheck.preflight.attendance import Attendance, arrive
from ddpcheck.preflight.failed import PreflightFailed
from ddpcheck.preflight.options import PreflightUsageError
from ddpcheck.report.model import Check, Report, Status

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "preflight"
DOC = Path(__file__).resolve().parent.parent / "docs" / "preflight.md"
CPU_BUDGET_S = options.DEFAULT_BUDGET_S["cpu"]
JOB_TIMEOUT_S = 240


# ---------------------------------------------------------------- pure
@pytest.mark.parametrize(
    ("kwargs", "words"),
    [
        ({"checks": ["sum", "nope"]}, "unknown check 'nope'"),
        ({"checks": []}, "checks is empty"),
        ({"checks": 3}, "checks must be a list"),
        ({"budget_s": 0.5}, "budget_s must be between 1 and 3600"),
        ({"budget_s": "5"}, "budget_s must be a number"),
        ({"min_busbw": -1}, "min_busbw must be at least 0"),
        ({"raise_on_failure": "no"}, "raise_on_failure must be True or False"),
        ({"inject": "melt@1"}, "unknown inject fault 'melt@1'"),
        ({"inject": ["corrupt"]}, "malformed inject 'corrupt'"),
    ],
)
def test_bad_arguments_are_one_line_before_the_group_is_even_looked_at(kwargs, words) -> None:
    # No process group exists here: the argument is what is refused, before anything else.
    with pytest.raises(PreflightUsageError) as caught:
        ddpcheck.preflight(**kwargs)
    assert words in str(caught.value) and "\n" not in str(caught.value)
    assert isinstance(caught.value, ValueError)  # what a caller catches for a bad argument


def test_without_a_process_group_it_says_what_to_call() -> None:
    with pytest.raises(ddpcheck.PreflightUsageError, match="init_process_group"):
        ddpcheck.preflight()


def test_the_package_is_the_function() -> None:
    # `import ddpcheck.preflight` makes the attribute the package: it is callable all the same.
    import ddpcheck.preflight as module

    assert ddpcheck.preflight is module and callable(module)
    assert ddpcheck.PreflightFailed is PreflightFailed


def _arrive_in_threads(store, world: int, absent: set[int], late: dict[int, float], wait_s: float):
    results: dict[int, tuple[Attendance, float]] = {}

    def one(rank: int) -> None:
        time.sleep(late.get(rank, 0.0))
        began = time.monotonic()
        me = {"rank": rank, "host": f"h{rank // 2}", "node": rank // 2, "local_world": 2}
        got = arrive(store, rank, world, me, wait_s, call=0, absent=rank in absent)
        results[rank] = (got, time.monotonic() - began)

    threads = [threading.Thread(target=one, args=(r,)) for r in range(world)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    return results


def test_arrival_names_the_rank_that_never_came_and_its_host_within_the_wait() -> None:
    import torch.distributed as dist

    results = _arrive_in_threads(dist.HashStore(), 4, absent={3}, late={}, wait_s=0.5)
    for rank, (arrival, seconds) in results.items():
        assert arrival.missing == [3], rank
        assert arrival.host_of(3) == "h1"  # its node's other rank said where it runs
        assert seconds < 0.5 + 1.0
    (arrival, _), *_ = results.values()
    assert sorted(arrival.present) == [0, 1, 2]


def test_a_rank_that_comes_after_the_others_gave_up_is_told_so() -> None:
    # One decision for all: the late rank must not enter a collective its peers left.
    import torch.distributed as dist

    results = _arrive_in_threads(dist.HashStore(), 2, absent=set(), late={1: 0.6}, wait_s=0.2)
    assert results[0][0].missing == [1]
    assert results[1][0].missing == [1]
    on_time = _arrive_in_threads(dist.HashStore(), 2, absent=set(), late={1: 0.1}, wait_s=2.0)
    assert [a.missing for a, _ in on_time.values()] == [[], []]


def test_host_of_says_nothing_when_the_layout_is_not_torchruns() -> None:
    present = {0: {"host": "a", "node": 0, "local_world": 2}, 2: {"host": "b", "node": 0, "local_world": 2}}
    assert Attendance(4, [1, 3], present).host_of(1) is None


def test_the_exception_is_one_line_naming_ranks_and_hosts() -> None:
    report = Report(command="preflight")
    report.checks = [
        Check("arrival", Status.PASS, "2 ranks arrived"),
        Check("all_reduce sum", Status.FAIL, "wrong elements\nafter all_reduce", [1], ["node7"]),
    ]
    failed = PreflightFailed(report)
    assert str(failed) == (
        "ddpcheck preflight failed: all_reduce sum: rank 1 on host node7: wrong elements after all_reduce"
    )
    assert (failed.ranks, failed.hosts, failed.exit_code) == ([1], ["node7"], 1)


# ---------------------------------------------------------------- real ranks
FRAMEWORKS = ("lightning", "accelerate")


@dataclass(frozen=True)
class Job:
    """A finished torchrun job of fixtures/preflight/scenarios.py, and when it ended (wall clock)."""

    done: subprocess.CompletedProcess
    ended_at: float

    def scenario(self, name: str, ranks: list[int]) -> dict[int, dict]:
        """Each rank's RESULT line for the scenario `name`: exactly `ranks` reported it."""
        found = {}
        decoder = json.JSONDecoder()
        for line in self.done.stdout.splitlines():
            # A line is written whole, but another rank's unfinished line may stand before it.
            if "RESULT {" in line:
                result, _ = decoder.raw_decode(line, line.index("RESULT {") + len("RESULT "))
                if result["scenario"] == name:
                    found[result.pop("rank")] = result
        assert sorted(found) == ranks, (name, self.done.stdout[-5000:] + self.done.stderr[-5000:])
        return found


def _ours(scratch: Path) -> list[psutil.Process]:
    """Every process started with TMPDIR `scratch` (the job's ranks, torchrun, a spinner)."""
    found = []
    for proc in psutil.process_iter():
        try:
            if proc.pid != os.getpid() and proc.environ().get("TMPDIR") == str(scratch):
                found.append(proc)
        except psutil.Error:
            continue
    return found


def _assert_nothing_left(scratch: Path) -> None:
    deadline = time.monotonic() + 5
    while _ours(scratch) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _ours(scratch), [p.cmdline() for p in _ours(scratch)]


def _torchrun(scratch: Path, nproc: int, *args: str) -> subprocess.CompletedProcess:
    """`torchrun --standalone --nproc-per-node N ARGS` to its end, in a session of its own; then
    nothing of it may be left."""
    env = {**os.environ, "TMPDIR": str(scratch), "OMP_NUM_THREADS": "1", "COLUMNS": "200"}
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(nproc)]
    proc = subprocess.Popen(
        [*command, *args],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        out, err = proc.communicate(timeout=JOB_TIMEOUT_S)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, 9)
            proc.wait()
    _assert_nothing_left(scratch)
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def _scenarios(tmp_path_factory: pytest.TempPathFactory, nproc: int, *scenarios: str) -> Job:
    scratch = tmp_path_factory.mktemp(f"preflight-{nproc}-ranks") / "tmp"
    scratch.mkdir()
    done = _torchrun(scratch, nproc, str(FIXTURES / "scenarios.py"), *scenarios)
    return Job(done, time.time())


def _installed(package: str) -> bool:
    return importlib.util.find_spec(package) is not None  # found, not imported: seconds saved here


@pytest.fixture(scope="module")
def three_ranks(tmp_path_factory: pytest.TempPathFactory) -> Job:
    return _scenarios(tmp_path_factory, 3, "corrupt", "torch")


@pytest.fixture(scope="module")
def two_ranks(tmp_path_factory: pytest.TempPathFactory) -> Job:
    recipes = ["torchrun"] + [p for p in FRAMEWORKS if _installed(p)]
    scenarios = [f"recipe:{name}_train.py" for name in recipes]
    # "missing" last: rank 1 never comes back from it, and rank 0 ends the job.
    return _scenarios(tmp_path_factory, 2, *scenarios, "pass", "usage", "busy", "missing")


def _assert_the_recipe_passes(job: Job, name: str, only_rank_0: bool = True) -> None:
    recipe = FIXTURES / f"{name}_train.py"
    assert recipe.read_text() in DOC.read_text()  # the page shows what runs here
    ran = job.scenario(f"recipe:{recipe.name}", [0, 1])
    for rank, result in ran.items():
        assert result["exit_code"] == 0, (rank, result["error"], job.done.stderr[-3000:])
    printed = "".join(result["stdout"] for result in ran.values())
    if not only_rank_0:
        assert "PASS  ddpcheck preflight (2 ranks, gloo, cpu)" in printed, printed
        return
    verdicts = [line for line in printed.splitlines() if "ddpcheck preflight" in line]
    assert len(verdicts) == 1 and verdicts[0].startswith("PASS  ddpcheck preflight (2 ranks, gloo, cpu)"), (
        printed
    )


@pytest.mark.integration
def test_import_ddpcheck_and_reaching_preflight_load_no_torch() -> None:
    code = "import sys, ddpcheck; ddpcheck.preflight; ddpcheck.PreflightFailed; print('torch' in sys.modules)"
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    assert done.stdout.strip() == "False"


@pytest.mark.integration
def test_the_plain_torchrun_recipe_passes_and_rank_0_prints_the_verdict(two_ranks) -> None:
    _assert_the_recipe_passes(two_ranks, "torchrun")


@pytest.mark.integration
def test_a_healthy_group_passes_every_check_on_every_rank(two_ranks) -> None:
    for rank, ran in two_ranks.scenario("pass", [0, 1]).items():
        (result,) = ran["results"]
        assert result["verdict"] == "pass", (rank, result)
        assert result["checks"] == {
            "arrival": "PASS",
            "all_reduce sum": "PASS",
            "bandwidth": "PASS",
            "health": "SKIP",  # CPU ranks
            "rank map": "PASS",
            "nodes agree": "PASS",
        }
        assert result["seconds"] <= CPU_BUDGET_S


@pytest.mark.integration
def test_a_corrupted_rank_is_named_on_every_rank(three_ranks) -> None:
    for rank, ran in three_ranks.scenario("corrupt", [0, 1, 2]).items():
        (result,) = ran["results"]
        assert result["raised"] == "PreflightFailed", (rank, result)
        assert result["ranks"] == [1] and result["exit_code"] == 1
        assert result["message"].startswith("ddpcheck preflight failed: all_reduce sum: rank 1 on host ")
        assert "localised by re-running on subgroups: rank 1" in result["message"]


@pytest.mark.integration
def test_a_rank_that_never_arrives_is_named_within_the_budget(two_ranks) -> None:
    # Rank 1 never calls (it sleeps 60 s); rank 0 raised, printed, and exited 1; torchrun then ended rank 1.
    (ran,) = two_ranks.scenario("missing", [0]).values()
    assert two_ranks.done.returncode != 0, two_ranks.done.stderr[-3000:]
    assert two_ranks.ended_at - ran["began_at"] < 60, two_ranks.done.stderr[-3000:]
    (result,) = ran["results"]
    assert result["raised"] == "PreflightFailed" and result["ranks"] == [1] and result["exit_code"] == 3
    assert result["message"].startswith("ddpcheck preflight could not complete: arrival: rank 1 on host ")
    assert "did not arrive within 2.5 s (1 of 2 ranks came)" in result["message"]
    assert result["seconds"] <= CPU_BUDGET_S


@pytest.mark.integration
def test_a_disagreeing_torch_is_named(three_ranks) -> None:
    # Simulated: rank 2's fingerprint says another torch (inject="torch@2"). The judge votes by host, and
    # one machine is one host: no majority, so it names every rank of it, and rank 2 as the odd one.
    for rank, ran in three_ranks.scenario("torch", [0, 1, 2]).items():
        (result,) = ran["results"]
        assert result["raised"] == "PreflightFailed" and 2 in result["ranks"], (rank, result)
        assert result["message"].startswith("ddpcheck preflight failed: nodes agree: ranks 0, 1, 2 on host ")
        assert "torch differs" in result["message"], result["message"]
        assert re.search(r"on \S+ \(ranks 0, 1\); \S+\+injected on \S+ \(rank 2\)", result["message"])


@pytest.mark.integration
def test_the_bound_holds_beside_a_busy_core(two_ranks) -> None:
    # One more process spinning than the machine had (rank 0 starts it): every call still ends within
    # the default budget.
    for rank, ran in two_ranks.scenario("busy", [0, 1]).items():
        calls = ran["results"]
        assert [c["verdict"] for c in calls] == ["pass"] * 3, (rank, calls)
        assert max(c["seconds"] for c in calls) <= CPU_BUDGET_S, (rank, calls)


@pytest.mark.integration
def test_bad_arguments_in_a_real_group_raise_at_once_and_leave_it_usable(two_ranks) -> None:
    for rank, ran in two_ranks.scenario("usage", [0, 1]).items():
        *bad, good = calls = ran["results"]
        assert [c.get("raised") for c in bad] == ["PreflightUsageError"] * 5, (rank, calls)
        assert all("\n" not in c["message"] and c["seconds"] < 1.0 for c in bad), calls
        assert "names rank 9, but the world has 2 ranks" in bad[3]["message"]
        expected = "group= has 1 of the 2 ranks" if rank == 0 else "group= does not hold this rank"
        assert expected in bad[4]["message"], bad[4]
        assert good["verdict"] == "pass", good  # no stray collective or key tripped the next call


@pytest.mark.integration
def test_the_command_line_exits_with_the_verdict(scratch, tmp_path) -> None:
    report = tmp_path / "preflight.json"
    done = _torchrun(scratch, 2, "-m", "ddpcheck.preflight", "-q", "--json", str(report))
    assert done.returncode == 0, done.stdout + done.stderr
    assert json.loads(report.read_text())["verdict"] == "pass"
    done = _torchrun(
        scratch, 2, "-m", "ddpcheck.preflight", "-q", "--json", str(report), "--inject", "corrupt@1"
    )
    assert done.returncode == 1 and "exitcode  : 1" in done.stderr, done.stderr
    saved = json.loads(report.read_text())
    assert saved["verdict"] == "fail"
    assert [c["ranks"] for c in saved["checks"] if c["status"] == "FAIL"] == [[1]]


@pytest.mark.integration
def test_the_command_line_names_a_missing_rank_with_exit_3(scratch, tmp_path) -> None:
    report = tmp_path / "preflight.json"
    done = _torchrun(scratch, 2, "-m", "ddpcheck.preflight", "--json", str(report), "--inject", "absent@1")
    assert "exitcode  : 3" in done.stderr, done.stdout + done.stderr
    saved = json.loads(report.read_text())
    assert saved["verdict"] == "error" and saved["checks"][0]["ranks"] == [1]
    assert "ERROR  ddpcheck preflight (2 ranks, gloo, cpu): 1 error" in done.stdout


@pytest.mark.integration
@pytest.mark.parametrize(
    ("args", "env", "words"),
    [
        (["--budget", "x"], {}, "argument --budget: invalid float value: 'x'"),
        ([], {}, "not started by a launcher"),
        (["--checks", "sum,nope"], {"RANK": "0", "WORLD_SIZE": "2"}, "unknown check 'nope'"),
        (["--inject", "corrupt@5"], {"RANK": "0", "WORLD_SIZE": "2"}, "names rank 5, but the world has 2"),
        (["--json", "/nonexistent/dir/r.json"], {"RANK": "0", "WORLD_SIZE": "2"}, "--json"),
    ],
)
def test_the_command_line_refuses_bad_usage_in_one_line(scratch, args, env, words) -> None:
    # Exit 2 before any group or store: no launcher needed, nothing joined.
    clean = {
        k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE") and not k.startswith("SLURM_")
    }
    full = {**clean, "TMPDIR": str(scratch), **env}
    done = subprocess.run(
        [sys.executable, "-m", "ddpcheck.preflight", *args],
        capture_output=True,
        text=True,
        env=full,
        timeout=60,
    )
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and len(lines) == 1 and lines[0].startswith("ddpcheck: error: "), done.stderr
    assert words in lines[0] and done.stdout == ""


@pytest.mark.integration
@pytest.mark.parametrize("package", FRAMEWORKS)
def test_the_framework_recipes_run_the_checks(request, package) -> None:
    if not _installed(package):
        pytest.skip(f"{package} is not installed: its recipe (docs/preflight.md) is not run")
    # Run in the two-rank job (whose recipes are those installed), on a process group of its own.
    _assert_the_recipe_passes(request.getfixturevalue("two_ranks"), package, only_rank_0=False)
