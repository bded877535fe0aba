"""`python -m ddpcheck.preflight`: preflight() as a launcher's entry, before the real job.

    torchrun --nproc-per-node 8 -m ddpcheck.preflight --budget 10 && torchrun ... train.py
    srun --kill-on-bad-exit=1 python -m ddpcheck.preflight --min-busbw 100

Each rank joins the group itself from its launcher's environment (torchrun's variables, or srun's
and mpirun's mapped as `ddpcheck allreduce` maps them), waits for every rank through the store
before the group is even made (so a rank that never starts is named, under gloo as under NCCL),
runs preflight(), and exits with the verdict: 0 pass, 1 a check failed, 2 bad usage (one line,
nothing joined), 3 could not complete (a rank never arrived, a rank broke).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from dataclasses import replace
from datetime import timedelta
from typing import NoReturn

from ddpcheck.errors import EXIT_COULD_NOT_COMPLETE, EXIT_USAGE, UsageError, say
from ddpcheck.preflight.options import CHECKS, FAULTS, PreflightOptions, build, check_world

PROG = "python -m ddpcheck.preflight"
BACKENDS = ("auto", "nccl", "gloo")
# The store's own wait for rank 0, at the least: a host that starts Python late is not a missing one.
MIN_STORE_WAIT_S = 30.0


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        say(f"ddpcheck: error: {message}")
        sys.exit(EXIT_USAGE)


def parser() -> argparse.ArgumentParser:
    p = _Parser(
        prog=PROG, description="The checks inside your job's allocation, before the job: exit 0 to go."
    )
    p.add_argument(
        "--budget", type=float, metavar="S", help="End within S seconds (default 10 with GPUs, 5 on CPU)."
    )
    p.add_argument(
        "--min-busbw", type=float, metavar="GBPS", help="FAIL when the all_reduce bus bandwidth is below it."
    )
    p.add_argument(
        "--checks", metavar="NAME[,NAME]", help=f"Run only these: {', '.join(CHECKS)} (default all)."
    )
    p.add_argument("--backend", choices=BACKENDS, default="auto", help="auto: nccl with GPUs, else gloo.")
    p.add_argument("--json", metavar="PATH", dest="json_path", help="Rank 0 writes the JSON report here.")
    p.add_argument("-q", "--quiet", action="store_true", help="Print only the failures and the verdict.")
    kinds = "; ".join(f"{k}: {v}" for k, v in FAULTS.items())
    p.add_argument("--inject", metavar="KIND@RANK", action="append", help=f"A planted fault ({kinds}).")
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        opts = build(args.checks, args.budget, args.min_busbw, args.quiet, args.json_path, args.inject)
        from ddpcheck.report.outputs import check_writable

        check_writable(opts.json_path, "--json")  # None and "-" (stdout) pass
        _launcher_environment()
        check_world(opts, int(os.environ["WORLD_SIZE"]))
        return _run(opts, args.backend)
    except UsageError as exc:
        say(f"ddpcheck: error: {exc}")
        return EXIT_USAGE
    except Exception as exc:
        if os.environ.get("DDPCHECK_DEBUG"):
            raise
        rank = os.environ.get("RANK", "?")
        why = " ".join(str(exc).split()) or type(exc).__name__
        say(f"ddpcheck preflight: rank {rank} could not complete: {why}")
        return EXIT_COULD_NOT_COMPLETE


def _launcher_environment() -> None:
    """torchrun's variables, or srun's and mpirun's mapped onto them; none or malformed: exit 2."""
    from ddpcheck.launcher.plan import check_rank_variables, launcher_environment

    if "RANK" in os.environ and "WORLD_SIZE" in os.environ:
        check_rank_variables(os.environ)
        return
    mapped = launcher_environment(os.environ)
    if mapped is None:
        raise UsageError(
            "not started by a launcher (no RANK, no srun or mpirun task): run it as "
            "`torchrun --nproc-per-node N -m ddpcheck.preflight` or under srun"
        )
    os.environ.update(mapped)


def _run(opts: PreflightOptions, backend: str) -> int:
    import torch
    import torch.distributed as dist

    from ddpcheck.preflight import run
    from ddpcheck.rank import inline

    started = time.time()  # Python's and torch's start are not counted: seconds on a busy host
    rank, world_size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    if backend == "auto":
        backend = "nccl" if torch.cuda.is_available() else "gloo"
    if backend == "nccl":
        if not torch.cuda.is_available():
            raise UsageError("--backend nccl needs a CUDA GPU, and this rank sees none")
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")) % torch.cuda.device_count())
    device = torch.device("cuda" if backend == "nccl" else "cpu")
    budget_s = opts.budget_for(device.type)
    store = inline.rendezvous_store(timedelta(seconds=max(budget_s, MIN_STORE_WAIT_S)))
    # Before the group exists: gloo's join would wait for a missing rank as long as its timeout.
    wait_s = budget_s * run.ARRIVAL_SHARE
    _, report = run.arrive(store, rank, world_size, backend, device, opts, wait_s, call=-1)
    if report is not None:
        report.elapsed_s = time.time() - started
        run.show(report, opts, rank)
        return report.verdict.exit_code
    left_s = max(1.0, budget_s - (time.time() - started))
    dist.init_process_group(
        backend, store=store, rank=rank, world_size=world_size, timeout=timedelta(seconds=max(left_s, 30.0))
    )
    try:
        report = run.run(replace(opts, budget_s=budget_s), rank, world_size, started)
        run.show(report, opts, rank)
        return report.verdict.exit_code
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)  # after a peer failed, library destructors can block on dead sockets
