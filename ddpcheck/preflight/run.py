"""preflight() on one rank: wait for every rank (bounded), measure, judge on rank 0, share the Report
with every rank, and print it on rank 0.

The report side is imported with this module, before the clock matters: printing at the end costs
no first import inside the budget's tail.
"""

from __future__ import annotations

import time
from typing import Any

from ddpcheck.errors import say
from ddpcheck.preflight import attendance, judge, measure
from ddpcheck.preflight.options import PreflightOptions
from ddpcheck.rank import assemble
from ddpcheck.report.formats import json as json_format
from ddpcheck.report.model import Check, Report, Status, report_from_dict
from ddpcheck.report.outputs import Files
from ddpcheck.report.terminal import make_console, render_report

# The share of the budget a rank waits for the others before naming who did not come; the rest is
# for the checks (docs/preflight.md: how these were chosen).
ARRIVAL_SHARE = 0.5
# What a run needs after its last measurement: gather to rank 0, judge, share the report, print it.
TAIL_S = {"cpu": 1.0, "cuda": 2.0}


def run(opts: PreflightOptions, rank: int, world_size: int, started: float) -> Report:
    """The Report of a group preflight() checked, the same on every rank."""
    import torch.distributed as dist

    backend = str(dist.get_backend())
    device = measure.job_device(backend)
    budget_s = opts.budget_for(device.type)
    wait_s = max(0.0, budget_s * ARRIVAL_SHARE - (time.time() - started))
    store = dist.distributed_c10d._get_default_store()  # torch's own since 1.x; every rank shares it
    came, report = arrive(store, rank, world_size, backend, device, opts, wait_s, next(attendance.calls))
    if report is None:
        ctx = measure.context(rank, world_size, device, opts, started + budget_s - TAIL_S[device.type])
        gathered = ctx.gather_to_rank0(measure.measure(ctx, opts))
        shared: list[Any] = [None]
        if gathered is not None:
            world = _world(backend, device, world_size, [g["identity"] for g in gathered])
            shared = [judge.judge(gathered, came, world, opts).to_dict()]
        dist.broadcast_object_list(shared, src=0)  # every rank returns, or raises, the same verdict
        report = report_from_dict(shared[0])
    report.elapsed_s = time.time() - started
    return report


def arrive(
    store: Any,
    rank: int,
    world_size: int,
    backend: str,
    device: Any,
    opts: PreflightOptions,
    wait_s: float,
    call: int,
) -> tuple[attendance.Attendance, Report | None]:
    """Who came within `wait_s`, and the report when a rank did not (nothing else could run)."""
    absent = ("absent", rank) in opts.faults
    came = attendance.arrive(store, rank, world_size, measure.where_i_run(rank), wait_s, call, absent)
    if not came.missing:
        return came, None
    world = _world(backend, device, world_size, list(came.present.values()))
    return came, judge.judge_missing(came, opts.budget_for(device.type) * ARRIVAL_SHARE, world, opts)


def _world(backend: str, device: Any, size: int, identities: list[dict[str, Any]]) -> dict[str, Any]:
    """The checks' own backend by their device; the job's process group's beside it."""
    checked = "nccl" if device.type == "cuda" else "gloo"
    return {**assemble.world(size, checked, device.type, identities), "process_group": backend}


def could_not_complete(opts: PreflightOptions, rank: int, exc: BaseException, started: float) -> Report:
    """This rank's report when preflight itself broke (a peer gone mid-collective, a backend error)."""
    message = " ".join(f"{type(exc).__name__}: {exc}".split())
    check = Check("preflight", Status.ERROR, f"rank {rank} could not complete the checks: {message}", [rank])
    return Report(judge.COMMAND, [check], elapsed_s=time.time() - started, injected=opts.injected())


def show(report: Report, opts: PreflightOptions, rank: int) -> None:
    """Rank 0 prints the report (the verdict line last) and writes its JSON when asked."""
    if rank != 0:
        return
    files = Files()
    if opts.json_path:
        files.write("JSON report", opts.json_path, lambda: json_format.write(report, opts.json_path))
    render_report(report, make_console(stderr=opts.json_path == "-"), quiet=opts.quiet, wrote=files.wrote)
    for line in files.lost:
        say(line)
