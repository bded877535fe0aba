"""attach's straggler and crash judgements from synthetic samples (no job): failure/stragglers/sampled.py,
checks/attach/check.py's verdicts on them, and the ranks a node should hold by its ranks' environment."""

from __future__ import annotations

from ddpcheck.checks.attach import check, evidence
from ddpcheck.checks.attach.evidence import Seen
from ddpcheck.checks.attach.find import Job
from ddpcheck.failure.hangs import RankView
from ddpcheck.failure.processes import RankProcess
from ddpcheck.failure.stacks import Frame
from ddpcheck.failure.stragglers import sampled
from ddpcheck.report.model import Status
from tests.test_watch_judge import ALL_REDUCE, BACKWARD, SLEEPING, TORCH, TRAIN

FORWARD = (  # a DDP model's forward: inside DistributedDataParallel.forward, yet computing, not waiting
    Frame("forward", f"{TORCH}/nn/modules/linear.py", 125),
    Frame("forward", f"{TORCH}/nn/parallel/distributed.py", 1650),
    Frame("train_step", TRAIN, 55),
)
INIT = (
    Frame("_create_c10d_store", f"{TORCH}/distributed/rendezvous.py", 199),
    Frame("init_process_group", f"{TORCH}/distributed/distributed_c10d.py", 1892),
    Frame("main", TRAIN, 20),
)


def samples(waiting: int, elsewhere: int, other=SLEEPING) -> list:
    return [ALL_REDUCE] * waiting + [other] * elsewhere


def test_the_rank_its_peers_wait_for_is_named_with_where_it_was() -> None:
    found = sampled.judge({0: samples(18, 2, FORWARD), 1: samples(2, 18), 2: samples(17, 3, BACKWARD)})
    assert [s.rank for s in found] == [1]
    assert found[0].share == 0.1 and found[0].peers_share == 0.95  # rank 2's backward is a wait
    assert sampled.place(found[0]) == "load_batch (train.py:42), in 18 of 20 samples"


def test_a_healthy_job_names_nobody() -> None:
    # Ranks alike, whether mostly waiting (little compute) or mostly computing (a DDP forward is not a wait).
    assert sampled.judge({0: samples(19, 1, FORWARD), 1: samples(13, 7, FORWARD)}) == []
    assert sampled.judge({0: samples(4, 16, FORWARD), 1: samples(0, 20, FORWARD)}) == []
    # Backward counts as waiting (DDP's all_reduce is waited for there): both ranks in it alike.
    assert sampled.judge({0: [BACKWARD] * 20, 1: samples(14, 6, FORWARD)}) == []


def test_too_few_samples_say_nothing() -> None:
    assert sampled.judge({0: samples(11, 0), 1: samples(0, 11)}) == []
    assert sampled.judge({0: samples(20, 0)}) == []


def view(rank: int, history: list, state: str = "S") -> RankView:
    return RankView(rank, "node-a", 100 + rank, state, history[-1] if history else None, None, history[:-1])


def test_a_straggler_in_a_job_that_moves_is_a_warn_and_exit_0() -> None:
    views = [view(0, samples(19, 1, FORWARD)), view(1, samples(1, 19))]
    report = check.judge(Seen(views, [0, 1], [], [0, 1], expected=[0, 1]), 1.0)
    found = {c.name: c for c in report.checks}
    assert found["job"].status is Status.PASS
    assert found["stragglers"].status is Status.WARN and found["stragglers"].ranks == [1]
    assert "rank 1 (host node-a, pid 101) slows the job" in found["stragglers"].detail
    assert "load_batch (train.py:42)" in found["stragglers"].detail
    assert report.verdict.exit_code == 0


def test_a_rank_missing_from_the_world_while_its_peers_wait_is_a_crash() -> None:
    views = [view(0, [INIT] * 20), view(2, [ALL_REDUCE] * 20)]
    report = check.judge(Seen(views, [], [], [], expected=[0, 1, 2]), 1.0)
    (crash,) = [c for c in report.checks if c.status is Status.ERROR]
    assert crash.name == "crash" and crash.ranks == [1], crash
    assert "rank 1 is gone" in crash.detail and "ranks 0, 2 wait for it in" in crash.detail
    assert "init_process_group at main" in crash.detail and "all_reduce at train_step" in crash.detail
    assert report.verdict.exit_code == 3


def test_a_rank_with_no_python_stack_while_its_peers_wait_is_named() -> None:
    """A rank whose interpreter is ending after an error (its traceback printed, py-spy reads nothing)."""
    views = [view(0, [ALL_REDUCE] * 20), view(1, [])]
    report = check.judge(Seen(views, [], [], [], expected=[0, 1]), 1.0)
    (hang,) = [c for c in report.checks if c.status is Status.ERROR]
    assert hang.ranks == [1] and "runs no Python code" in hang.detail, hang


def job(*environs: dict[str, str], first: int = 0) -> Job:
    ranks = {first + r: RankProcess(first + r, 10 + r, "node-a") for r in range(len(environs))}
    return Job([1], ranks, {first + r: e for r, e in enumerate(environs)})


def test_the_ranks_a_node_should_hold_come_from_its_ranks_environment() -> None:
    assert evidence.expected_here(job({"WORLD_SIZE": "2"}), {}) == [0, 1]
    assert evidence.expected_here(job({"SLURM_NTASKS": "3"}), {}) == [0, 1, 2]
    # torchrun on the second of two nodes: ranks 4-7 of 8 are this node's
    torchrun = {"WORLD_SIZE": "8", "LOCAL_WORLD_SIZE": "4"}
    node = job({**torchrun, "LOCAL_RANK": "1"}, {**torchrun, "LOCAL_RANK": "3"}, first=5)
    assert evidence.expected_here(node, {}) == [4, 5, 6, 7]
    # srun or mpirun across nodes: which ranks are this node's, unknown (never a crash)
    assert evidence.expected_here(job({"SLURM_NTASKS": "4", "SLURM_STEP_NUM_NODES": "2"}), {}) == []
    # an srun step on one node of a two-node allocation: one node's, all of its world here
    step = {"SLURM_NTASKS": "2", "SLURM_STEP_NUM_NODES": "1", "SLURM_NNODES": "1", "SLURM_JOB_NUM_NODES": "2"}
    assert evidence.expected_here(job(step), {}) == [0, 1]
    assert (
        evidence.expected_here(job({"OMPI_COMM_WORLD_SIZE": "4", "OMPI_COMM_WORLD_LOCAL_SIZE": "2"}), {})
        == []
    )
    assert evidence.expected_here(
        job({"OMPI_COMM_WORLD_SIZE": "2", "OMPI_COMM_WORLD_LOCAL_SIZE": "2"}), {}
    ) == [0, 1]
    # nothing told, and no rank in init_process_group to read it from: unknown, never a crash
    assert evidence.expected_here(job({}), {0: [ALL_REDUCE]}) == []
