"""`ddpcheck watch --sample-every`: the option, the agent's repeated dumps, the lines said as verdicts change.

The option and the lines are pure (no job); the repeated dumps are a real one-rank gloo process
started in watch's environment, asked three times by the watcher's own Sampler.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import psutil
import pytest

from ddpcheck.checks.watch import WatchOptions, agent
from ddpcheck.checks.watch.environment import job_environment, make_watch_dir
from ddpcheck.checks.watch.sampling import (
    SPOKEN_WINDOW_S,
    History,
    Sampler,
    Shared,
    StoreExchange,
    _Pending,
    slim,
)
from ddpcheck.errors import UsageError
from ddpcheck.failure.stragglers import words
from ddpcheck.failure.stragglers.judge import GroupJudgement, Judgement, StragglerVerdict
from tests.conftest import Run, assert_usage_error
from tests.support.fr_dumps import dump, entry, write_pickle
from tests.support.saved_reports import run_ddpcheck


def _watch(scratch: Path, *args: str) -> Run:
    done = run_ddpcheck("watch", *args, "--", "true", env={"TMPDIR": str(scratch)}, timeout=60)
    return Run(done.returncode, done.stdout, done.stderr, None, 0.0)


@pytest.mark.integration
@pytest.mark.parametrize("value", ["-1", "0.1", "nan", "inf"])
def test_a_bad_sample_every_is_one_line_and_exit_2(tmp_path, value) -> None:
    run = _watch(tmp_path, "--sample-every", value)
    assert_usage_error(run, tmp_path)
    assert "--sample-every" in run.stderr and "e.g. --sample-every 10" in run.stderr, run.stderr


@pytest.mark.integration
def test_sample_every_that_is_not_a_number_is_exit_2(tmp_path) -> None:
    run = _watch(tmp_path, "--sample-every", "often")
    assert run.code == 2 and "Traceback" not in run.stderr, run.stderr


@pytest.mark.parametrize("value", [0.0, 0.5, 5.0, 600.0])
def test_sample_every_0_turns_it_off_and_half_a_second_is_the_least(value) -> None:
    WatchOptions(command=[sys.executable], sample_every=value).validate()


def test_sample_every_below_half_a_second_is_refused() -> None:
    with pytest.raises(UsageError, match=r"at least 0\.5 seconds"):
        WatchOptions(command=[sys.executable], sample_every=0.4).validate()


@pytest.mark.integration
def test_the_help_shows_the_option_with_an_example(tmp_path) -> None:
    shown = subprocess.run(
        [sys.executable, "-m", "ddpcheck", "watch", "--help"],
        capture_output=True,
        text=True,
        env={**os.environ, "COLUMNS": "200"},
        timeout=60,
    )
    assert "--sample-every" in shown.stdout and "--sample-every 10" in shown.stdout


# ---------------------------------------------------------------- the lines said
def _verdict(ranks: tuple[int, ...], group: str = "0") -> StragglerVerdict:
    return StragglerVerdict(ranks, ("h",), group, "default_pg", "all_reduce", 0.01, 0.2, 60.0, 20, "enqueue")


def _judgement(*verdicts: StragglerVerdict, groups: tuple[str, ...] = ("0",)) -> Judgement:
    judged = []
    for group in groups:
        verdict = next((v for v in verdicts if v.group == group), None)
        judged.append(
            GroupJudgement(group, "default_pg", None, [0, 1, 2], "enqueue", collectives=20, verdict=verdict)
        )
    return Judgement(judged)


def test_a_verdict_is_said_once_and_again_only_when_it_changes(tmp_path) -> None:
    said: list[str] = []
    sampler = Sampler(tmp_path, 1.0, speak=said.append)
    for judgement in [
        _judgement(),  # healthy: nothing said
        _judgement(_verdict((1,))),  # rank 1 persists: said
        _judgement(_verdict((1,))),  # the same: not again
        _judgement(_verdict((1,))),
        _judgement(_verdict((2,))),  # another rank: said
        _judgement(),  # nobody any more: said once
        _judgement(),
    ]:
        sampler._say_changes(judgement)
    assert said == [
        words.stderr_line(_verdict((1,))),
        words.stderr_line(_verdict((2,))),
        "ddpcheck watch: rank 2 no longer slows the job",
    ]
    assert said[0].startswith("ddpcheck watch: rank 1 (host h) is slowing the job: its peers waited 20%")


def test_a_verdict_over_less_than_two_seconds_of_the_job_is_not_said_yet(tmp_path) -> None:
    """The run's first collectives (DDP's setup, a first step's lazy start) weigh as much as a
    straggler in a short window: a healthy srun job said a line over 0.7 s (docs/stragglers.md)."""
    said: list[str] = []
    sampler = Sampler(tmp_path, 1.0, speak=said.append)
    early = replace(_verdict((0,)), window_s=0.7, collectives=11)
    sampler._say_changes(_judgement(early))
    assert said == []
    sampler._say_changes(_judgement(replace(early, window_s=SPOKEN_WINDOW_S)))
    assert said == [words.stderr_line(replace(early, window_s=SPOKEN_WINDOW_S))]


def test_each_group_has_its_own_verdict(tmp_path) -> None:
    said: list[str] = []
    sampler = Sampler(tmp_path, 1.0, speak=said.append)
    sampler._say_changes(_judgement(_verdict((1,), "0"), groups=("0", "3")))
    sampler._say_changes(_judgement(_verdict((1,), "0"), _verdict((2,), "3"), groups=("0", "3")))
    sampler._say_changes(_judgement(_verdict((2,), "3"), groups=("0", "3")))
    assert (
        len(said) == 3
        and "in group 3" in said[1]
        and said[2] == "ddpcheck watch: rank 1 no longer slows the job"
    )


def test_history_keeps_each_collective_once_and_the_latest_copy() -> None:
    history = History()
    entry = {
        "process_group": ("0", "default_pg"),
        "collective_seq_id": 1,
        "profiling_name": "nccl:all_reduce",
    }
    history.add(0, [{**entry, "time_created_ns": 10}])
    history.add(0, [{**entry, "time_created_ns": 10, "duration_ms": 1.5}, {**entry, "collective_seq_id": 2}])
    held = history.entries[0]["0"]
    assert list(held) == [1, 2] and held[1]["duration_ms"] == 1.5
    assert slim({"entries": [{**entry, "time_created_ns": 5, "is_p2p": True, "frames": [1]}]}) == []


class _Published:
    """A team's store as one task sees it: what it published, by sequence id per rank."""

    def __init__(self, others: dict[int, list[dict]] | None = None) -> None:
        self.seqs: list[dict[int, list[int]]] = []
        self.waiting = others or {}  # what the other tasks published, taken once

    def publish(self, entries, hosts, looks=None) -> None:
        self.seqs.append({r: [e["collective_seq_id"] for e in found] for r, found in entries.items()})

    def others(self) -> Shared:
        taken, self.waiting = self.waiting, {}
        return Shared(taken, dict.fromkeys(taken, "h"))


def test_a_task_publishes_only_the_collectives_new_since_its_last_sample(tmp_path) -> None:
    """A dump holds the whole ring buffer (2,000 entries): sent whole every sample, a task would send
    the same collectives to task 0 again and again."""
    watch_dir, _ = make_watch_dir(str(tmp_path / "watch"))
    sampler = Sampler(watch_dir, 1.0, speak=lambda line: None)
    published = _Published()
    sampler.exchange, sampler.judging = published, False
    for number, last in ((1, 5), (2, 8), (3, 8)):
        path = Path(agent.sample_file(str(watch_dir), 2, number))
        write_pickle(path, dump([entry(seq) for seq in range(1, last + 1)]))
        sampler._take(_Pending(number, 0.0, {2: "h"}), {2})
    assert published.seqs == [{2: [1, 2, 3, 4, 5]}, {2: [6, 7, 8]}, {2: []}]
    assert list(sampler.history.entries[2]["0"]) == list(range(1, 9))  # kept whole here all the same


def test_task_0_takes_the_other_tasks_last_samples_in_before_the_report(tmp_path) -> None:
    """Another task's last sample may be published after task 0's own last one: the report has it."""
    rank_1 = [slim(dump([entry(seq)]))[0] for seq in range(1, 4)]
    sampler = Sampler(tmp_path, 1.0, speak=lambda line: None)
    sampler.exchange = _Published({1: rank_1})
    sampler.judgement()
    assert list(sampler.history.entries[1]["0"]) == [1, 2, 3] and sampler.history.hosts == {1: "h"}


# ---------------------------------------------------------------- the agent, asked again and again
JOB = """
import time, torch, torch.distributed as dist
dist.init_process_group("gloo", init_method="tcp://127.0.0.1:{port}", rank=0, world_size=1)
t = torch.ones(8)
while True:
    dist.all_reduce(t)
    time.sleep(0.01)
"""


def _sampled_job(tmp_path: Path, code: str) -> tuple[subprocess.Popen, Sampler]:
    """A one-rank gloo job (`code`, its port filled in) in watch's environment, and a Sampler that asks
    it every half second from its first tick."""
    from tests.support.netns import free_port

    watch_dir, _ = make_watch_dir(str(tmp_path / "watch"))
    env = {**job_environment(os.environ, watch_dir, nccl_info=False), "RANK": "0", "OMP_NUM_THREADS": "1"}
    job = subprocess.Popen([sys.executable, "-c", code.format(port=free_port())], env=env)
    sampler = Sampler(watch_dir, every_s=0.5, speak=lambda line: None)
    sampler.next_at = 0.0
    return job, sampler


# torch.distributed as another thread sees it while the main thread imports it: in sys.modules, half made.
HALF_IMPORTED_FIRST = (
    """
import sys, time, types
sys.modules["torch.distributed"] = types.ModuleType("torch.distributed")
time.sleep(2)  # the first requests come now
del sys.modules["torch.distributed"]
"""
    + JOB
)


@pytest.mark.integration
def test_a_request_that_comes_while_the_rank_imports_torch_distributed_ends_nothing(tmp_path) -> None:
    """The agent's first answer met torch.distributed half imported (no is_initialized yet): the
    AttributeError ended its thread, and the rank answered no sample for the whole run (1 of 8
    slowed runs under a plain python launcher, on a quiet machine)."""
    job, sampler = _sampled_job(tmp_path, HALF_IMPORTED_FIRST)
    try:
        deadline = time.monotonic() + 60
        while not sampler.history.entries and time.monotonic() < deadline:
            sampler.tick({0: "here"})
            time.sleep(0.05)
        assert sampler.history.entries, f"no answer to {sampler.number} requests"
        assert sampler.number >= 3  # the first were asked while the module was half made
    finally:
        job.kill()
        job.wait()


@pytest.mark.integration
def test_the_agent_answers_numbered_requests_again_and_again(tmp_path) -> None:
    job, sampler = _sampled_job(tmp_path, JOB)
    answers: list[int] = []  # how many ranks answered each request
    take = sampler._take
    sampler._take = lambda pending, came: (answers.append(len(came)), take(pending, came))  # type: ignore[method-assign]
    try:
        deadline = time.monotonic() + 60
        held: list[int] = []
        while len(held) < 3 and time.monotonic() < deadline:  # until three requests were answered
            sampler.tick({0: "here"})
            if sampler.pending is None and answers and answers[-1] == 1:
                count = len(sampler.history.entries.get(0, {}).get("0", {}))
                if not held or held[-1] != count:
                    held.append(count)
            time.sleep(0.05)
        assert len(held) == 3, (held, answers)
        assert held == sorted(held) and held[0] < held[-1]  # each answer newer than the last
        assert sampler.number >= 3
        assert list((sampler.dir / agent.SAMPLES).iterdir()) == []  # each answer read and removed
    finally:
        job.kill()
        job.wait()
    assert not psutil.pid_exists(job.pid) or psutil.Process(job.pid).status() == psutil.STATUS_ZOMBIE


class _Store:
    """torch's TCPStore as StoreExchange uses it."""

    def __init__(self) -> None:
        self.held: dict[str, bytes] = {}

    def set(self, key: str, value: str) -> None:
        self.held[key] = value.encode()

    def get(self, key: str) -> bytes:
        return self.held[key]

    def check(self, keys: list[str]) -> bool:
        return all(k in self.held for k in keys)

    def delete_key(self, key: str) -> bool:
        return self.held.pop(key, None) is not None


def test_a_tasks_clock_offset_reaches_task_0_with_its_ranks_and_is_used_by_the_judge(tmp_path) -> None:
    """Task 1 publishes its host's clock offset with its ranks' collectives; task 0 keeps its own
    ranks at 0: every rank has an offset, so the judge puts the hosts' ranks on one timeline."""
    store = _Store()
    offsets = iter([1_000, None, 3_000])  # a measure with no usable answer publishes none
    task_1 = StoreExchange(store, 1, 2, clock=lambda: next(offsets))
    for _ in range(3):
        task_1.publish({2: [slim(dump([entry(1)]))[0]]}, {2: "b"})
    task_0 = Sampler(tmp_path, 1.0, speak=lambda line: None)
    task_0.exchange = StoreExchange(store, 0, 2)
    task_0.history.add(0, [slim(dump([entry(1)]))[0]], "a")
    task_0.history.offset(0, 0)
    task_0._take_others()
    sample = task_0.history.sample()
    assert sample.clock_offsets_ns == {0: 0, 2: 2_000} and sample.hosts == {0: "a", 2: "b"}


def test_a_tasks_looks_of_its_ranks_reach_task_0_for_why_a_rank_is_slow(tmp_path) -> None:
    """Task 1 reads its own ranks' /proc and stacks (on its host) and publishes them with their
    collectives; task 0 explains a rank of task 1 from them."""
    from ddpcheck.checks.watch.looks import Seen
    from ddpcheck.failure.stacks import Frame
    from ddpcheck.failure.stragglers.why import Stack, Tick

    store = _Store()
    seen = Seen()
    for i in range(11):
        seen.tick(2, Tick(100 + i / 10, "T" if i % 2 else "S", i / 100, 0.0))
    seen.stack(2, Stack(100.5, (Frame("load_batch", "/home/me/train.py", 42),)))
    StoreExchange(store, 1, 2).publish({2: [slim(dump([entry(1)]))[0]]}, {2: "b"}, seen.unpublished())
    task_0 = Sampler(tmp_path, 1.0, speak=lambda line: None)
    task_0.exchange = StoreExchange(store, 0, 2)
    task_0._take_others()
    looks = task_0.seen.looks()[2]
    assert [t.state for t in looks.ticks] == ["S", "T"] * 5 + ["S"]
    assert looks.stacks == [Stack(100.5, (Frame("load_batch", "/home/me/train.py", 42),))]
