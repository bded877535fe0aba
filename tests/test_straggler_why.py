"""Pure: why a named rank is slow (failure/stragglers/why.py) and the whole job slower than its past.

Made-up looks: /proc ticks (state, CPU time, run-queue wait), the agent's stacks, and GPU readings
made up as NVML would give them (no GPU here: the figures are invented, the reading code is
checks/devices/health.py's). The job simulator is tests/test_stragglers.py's.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from ddpcheck.checks.watch.looks import Seen, device_index, gpu_of_facts, read_tick
from ddpcheck.failure.stacks import Frame
from ddpcheck.failure.stragglers.judge import Judgement, Slowdown, explained, judge
from ddpcheck.failure.stragglers.why import (
    Activity,
    Gpu,
    Looks,
    Phase,
    Stack,
    Tick,
    explain,
    phase_of,
    usage_of,
    where_of,
)
from ddpcheck.failure.stragglers.words import check, rank_rows, slowdown_rows, stderr_line, why_rows
from ddpcheck.report.model import Status
from tests.test_stragglers import samples, simulate, steady, works

TRAIN = "/home/me/train.py"
TORCH = "/venv/lib/python3.11/site-packages/torch"
IN_LOADER = (Frame("load_batch", TRAIN, 42), Frame("main", TRAIN, 80))
IN_ALL_REDUCE = (
    Frame("all_reduce", f"{TORCH}/distributed/distributed_c10d.py", 2500),
    Frame("wrapper", f"{TORCH}/distributed/c10d_logger.py", 80),
    Frame("main", TRAIN, 85),
)


def ticks(
    seconds: float, cpu: float, *, stopped: float = 0.0, queued: float = 0.0, state: str = "S"
) -> list[Tick]:
    """Ticks every 0.1 s: CPU `cpu` and run-queue wait `queued` of each second, in T `stopped` of each
    second's ten (and the last tick's: 21 of 51 for 0.4)."""
    n = round(seconds / 0.1)
    return [
        Tick(i * 0.1, "T" if i % 10 < stopped * 10 else state, i * 0.1 * cpu, i * 0.1 * queued)
        for i in range(n + 1)
    ]


# ---------------------------------------------------------------- where
def test_the_innermost_frame_of_the_users_code_outside_a_collective_is_where_it_is() -> None:
    where = where_of([IN_LOADER] * 4 + [IN_ALL_REDUCE])
    assert where is not None and where.frame == IN_LOADER[0] and (where.there, where.seen) == (4, 4)
    assert where.text == "load_batch (train.py:42)"  # no phase: the user's own code
    assert where_of([IN_ALL_REDUCE]) is None  # only waiting, as its peers: nowhere to say


@pytest.mark.parametrize(("file", "function", "phase"), [
    (f"{TORCH}/utils/data/dataloader.py", "__next__", Phase.DATA),
    (f"{TORCH}/_tensor.py", "backward", Phase.BACKWARD),
    (f"{TORCH}/autograd/__init__.py", "backward", Phase.BACKWARD),
    (f"{TORCH}/optim/adam.py", "step", Phase.OPTIMIZER),
    (f"{TORCH}/nn/modules/module.py", "_call_impl", Phase.FORWARD),
    (f"{TORCH}/distributed/distributed_c10d.py", "all_reduce", Phase.COLLECTIVE),
    ("/usr/lib/python3.11/socket.py", "recv_into", Phase.IO),
    (TRAIN, "compute", None),
])  # fmt: skip
def test_the_phase_is_what_the_frames_under_the_users_say(
    file: str, function: str, phase: Phase | None
) -> None:
    assert phase_of([Frame(function, file, 1), Frame("main", TRAIN, 9)]) is phase


# ---------------------------------------------------------------- what its process did
@pytest.mark.parametrize(("looks", "activity"), [
    (ticks(5, 0.2, stopped=0.4), Activity.STOPPED),
    (ticks(5, 0.95), Activity.BUSY),
    (ticks(5, 0.5, queued=0.4), Activity.BUSY),  # computing on a crowded host
    (ticks(5, 0.2, queued=0.7), Activity.WAITING_FOR_CPU),  # ...held back more than it runs
    (ticks(5, 0.1, queued=0.6), Activity.WAITING_FOR_CPU),  # a CPU quota's throttling
    (ticks(5, 0.05, state="D"), Activity.IO),
    (ticks(5, 0.03), Activity.SLEEPING),
])  # fmt: skip
def test_what_its_process_did_from_its_state_and_times(looks: list[Tick], activity: Activity) -> None:
    usage = usage_of(looks)
    assert usage is not None and usage.activity is activity, usage


def test_too_short_a_span_or_no_times_says_nothing() -> None:
    assert usage_of(ticks(0.3, 1.0)) is None
    assert usage_of([Tick(0, "R", None, None), Tick(5, "R", None, None)]) is None


def test_proc_is_read_for_a_live_process_and_not_for_a_gone_one() -> None:
    import os

    found = read_tick(os.getpid(), 1.0)
    assert found is not None and found.state in ("R", "S") and found.cpu_s is not None and found.cpu_s > 0
    assert read_tick(2**22 + 7, 1.0) is None


# ---------------------------------------------------------------- the reason said
def shifted(looks: Looks, by: float) -> Looks:
    """The looks `by` seconds later: at a simulated job's time, on its ranks' wall clock."""
    return Looks(
        [replace(t, t=t.t + by) for t in looks.ticks],
        [replace(s, t=s.t + by) for s in looks.stacks],
        [replace(g, t=g.t + by) for g in looks.gpus],
    )


def named(**looks: Looks) -> Judgement:
    """Rank 1 of 3 twice as slow over 30 collectives (5.8 s), explained by `looks` (r0=..., r1=...) of
    the 5 s before its last collective judged."""
    judged = judge(samples(simulate(steady(3, 30, 1, 2.0))))
    end = max(judged.groups[0].ends_s.values())
    return explained(judged, {int(r[1:]): shifted(v, end - 5) for r, v in looks.items()})


def named_job(**looks: Looks) -> str:
    return stderr_line(named(**looks).verdicts[0])


def test_a_rank_sleeping_in_its_data_loading_is_said_so() -> None:
    stacks = [Stack(t, IN_LOADER) for t in range(5)]
    line = named_job(r0=Looks(ticks(5, 0.04)), r1=Looks(ticks(5, 0.02), stacks), r2=Looks(ticks(5, 0.04)))
    assert line.endswith(
        "at all_reduce; it was in load_batch (train.py:42) at 5 of 5 samples; its process sleeping "
        "(CPU 2% of its time, its peers' 4%)"
    ), line


def test_a_rank_stopped_from_outside_is_said_stopped() -> None:
    line = named_job(
        r0=Looks(ticks(5, 0.04)), r1=Looks(ticks(5, 0.02, stopped=0.4)), r2=Looks(ticks(5, 0.04))
    )
    assert line.endswith(
        "it was stopped 41% of the time, not runnable (CPU 2% of its time, its peers' 4%)"
    ), line


def test_a_rank_computing_more_is_said_busy() -> None:
    stacks = [Stack(t, (Frame("augment", TRAIN, 12), *IN_LOADER)) for t in range(3)]
    line = named_job(r0=Looks(ticks(5, 0.6)), r1=Looks(ticks(5, 0.97), stacks), r2=Looks(ticks(5, 0.6)))
    said = "it was in augment (train.py:12) at 3 of 3 samples; its process busy computing, runnable 97% of"
    assert said in line, line


def gpu(clock: float, power: float = 690, temp: float = 70, throttle: tuple[str, ...] = ()) -> list[Gpu]:
    return [Gpu(t, clock, 1980, power, temp, throttle) for t in range(5)]


def test_a_rank_whose_gpu_clocks_lower_than_its_peers_says_so_with_made_up_nvml_readings() -> None:
    line = named_job(
        r0=Looks(gpus=gpu(1980)),
        r1=Looks(gpus=gpu(1110, 700, 88, ("thermal (hardware)",))),
        r2=Looks(gpus=gpu(1965)),
    )
    assert line.endswith(
        "; its GPU at 1110 MHz (its peers' 1972), 700 W, 88 °C, slowed by thermal (hardware)"
    ), line
    (row,) = why_rows(named(r1=Looks(gpus=gpu(1110)), r0=Looks(gpus=gpu(1980))))
    assert (row["gpu_sm_clock_mhz"], row["peers_gpu_sm_clock_mhz"], row["gpu_slower"]) == (1110, 1980, True)


def test_looks_after_its_last_collective_judged_are_not_counted() -> None:
    """A rank's shutdown (its last barrier, destroy_process_group) follows its last collective: left out."""
    judged = judge(samples(simulate(steady(3, 30, 1, 2.0))))
    end = max(judged.groups[0].ends_s.values())
    late = shifted(Looks(ticks(5, 0.02, stopped=0.4)), end + 1)
    (verdict,) = explained(judged, {1: late}).verdicts
    assert verdict.why[0].usage is None


def test_a_gpu_at_its_peers_clock_is_not_blamed_nor_a_power_cap_they_all_meet() -> None:
    def blamed(mine: list[Gpu], theirs: list[Gpu]) -> bool:
        looks = {0: Looks(gpus=theirs), 1: Looks(gpus=mine), 2: Looks(gpus=theirs)}
        return explain(1, [0, 2], looks, 60).gpu_slower

    assert not blamed(gpu(1900), gpu(1980))
    capped = gpu(1980, throttle=("power cap",))
    assert not blamed(capped, capped)
    assert blamed(gpu(1950, throttle=("power brake",)), capped)  # a reason its peers' GPUs had not


def test_nothing_seen_leaves_the_line_as_it_was() -> None:
    assert named_job().endswith("for it, at all_reduce")


def test_nvml_facts_become_a_reading_and_a_ranks_gpu_is_its_local_rank_among_the_visible() -> None:
    facts = {"sm_clock_mhz": 1410, "sm_clock_max_mhz": 1980, "power_w": 300.5, "temperature_c": 81}
    reading = gpu_of_facts({**facts, "throttle": ["power cap"]}, 3.0)
    assert (reading.sm_clock_mhz, reading.power_w, reading.throttle) == (1410, 300.5, ("power cap",))
    assert device_index({"LOCAL_RANK": "3"}) == 3
    assert device_index({"LOCAL_RANK": "1", "CUDA_VISIBLE_DEVICES": "4,5"}) == 5
    assert device_index({"LOCAL_RANK": "0", "CUDA_VISIBLE_DEVICES": "GPU-1234"}) is None


@pytest.mark.integration
def test_a_ranks_gpu_is_found_from_its_environment_in_proc(monkeypatch: pytest.MonkeyPatch) -> None:
    """GpuReader over a made-up NVML: the GPU of a process's LOCAL_RANK among its CUDA_VISIBLE_DEVICES,
    read from /proc (failure/proc.environ); a process gone has no environment."""
    import os
    import subprocess
    import sys

    from ddpcheck.checks.watch import looks
    from ddpcheck.failure.proc import environ

    class Nvml:
        def nvmlDeviceGetHandleByIndex(self, index: int) -> int:
            return index

    monkeypatch.setattr(looks, "from_nvml", lambda nvml, handle: {"sm_clock_mhz": handle})
    reader = looks.GpuReader()
    reader.tried, reader.nvml = True, Nvml()
    env = {**os.environ, "LOCAL_RANK": "1", "CUDA_VISIBLE_DEVICES": "4,5"}
    code = "import time; print('ready', flush=True); time.sleep(60)"
    rank = subprocess.Popen([sys.executable, "-c", code], env=env, stdout=subprocess.PIPE)
    try:
        rank.stdout.readline()  # type: ignore[union-attr]  # exec'd: /proc shows its own environment
        assert reader.read(rank.pid, 1.0).sm_clock_mhz == 5  # type: ignore[union-attr]
        assert environ(rank.pid)["CUDA_VISIBLE_DEVICES"] == "4,5"  # type: ignore[index]
    finally:
        rank.kill()
        rank.communicate()
    assert environ(rank.pid) is None


def test_another_tasks_looks_travel_as_json_and_come_back_the_same() -> None:
    import json

    here, there = Seen(), Seen()
    here.tick(2, Tick(1.0, "T", 0.5, 0.1))
    here.stack(2, Stack(1.5, IN_LOADER))
    here.gpu(2, Gpu(1.5, 1110, 1980, 700, 88, ("power cap",)))
    there.take({int(r): v for r, v in json.loads(json.dumps(here.unpublished())).items()})
    assert there.looks()[2] == here.looks()[2]
    assert here.unpublished() == {}


# ---------------------------------------------------------------- slower than its own past
def test_the_whole_job_slowing_is_reported_with_when_and_by_how_much() -> None:
    """Every rank 1.5x from collective 40 of 100 (+-10% jitter): nobody is named, the job slowed."""
    judged = judge(samples(simulate(works(100, 4, seed=3, slow={r: 1.5 for r in range(4)}, slow_from=40))))
    assert judged.verdicts == []
    ((_, slowdown),) = judged.slowdowns
    assert isinstance(slowdown, Slowdown) and 1.4 <= slowdown.factor <= 1.6
    assert 39 <= slowdown.since_seq <= 43 and slowdown.before_s == pytest.approx(0.1, rel=0.1)
    result = check(judged)
    assert result.status is Status.WARN and result.ranks == []
    assert result.detail.startswith(f"the whole job slowed {slowdown.factor:.1f}x from "), result.detail
    assert "every rank alike, no rank slows the others" in result.detail
    assert all(r["own_past"] == pytest.approx(1.5, rel=0.1) for r in rank_rows(judged))
    (row,) = slowdown_rows(judged)
    assert row["since_seq"] == slowdown.since_seq and not row["named"]


@pytest.mark.parametrize("seed", range(40))
def test_a_healthy_job_has_not_slowed(seed: int) -> None:
    judged = judge(samples(simulate(works(100, 4, seed=seed, jitter=0.3))))
    assert judged.slowdowns == [] and check(judged).status is Status.PASS


def test_a_jobs_setup_collectives_back_to_back_are_no_change_of_pace() -> None:
    """DDP's broadcasts and barriers before the first step come a millisecond apart: measured from them,
    a healthy job's steps would look 1.5x slower (a real two-collective DDP job's did)."""
    setup = [[0.001] * 4 for _ in range(10)]
    judged = judge(samples(simulate(setup + works(100, 4, seed=5))))
    assert judged.slowdowns == [] and check(judged).status is Status.PASS


def test_a_job_that_sped_up_or_slowed_a_little_is_not_reported() -> None:
    faster = works(100, 4, seed=1, slow={r: 0.6 for r in range(4)}, slow_from=40)
    little = works(100, 4, seed=1, slow={r: 1.2 for r in range(4)}, slow_from=40)
    assert judge(samples(simulate(faster))).slowdowns == []
    assert judge(samples(simulate(little))).slowdowns == []


def test_a_rank_slowed_partway_is_named_and_slower_than_its_own_past() -> None:
    judged = judge(samples(simulate(works(100, 4, seed=2, slow={2: 2.0}, slow_from=50))))
    (verdict,) = judged.verdicts
    assert verdict.ranks == (2,)
    rows = {r["rank"]: r for r in rank_rows(judged)}
    assert rows[2]["own_past"] == pytest.approx(2.0, rel=0.1)
    assert all(rows[r]["own_past"] == pytest.approx(1.0, abs=0.1) for r in (0, 1, 3))
    assert judged.slowdowns == []  # named: the rank, not the job
