"""preflight() on one rank: validate, wait for every rank (bounded), measure, judge on rank 0, share
the Report with every rank, print it on rank 0, and raise everywhere when the job should not start.

The report side is imported with this module, before the clock matters: printing at the end costs
no first import inside the budget's tail.
"""

from __future__ import annotations

import time
from typing import Any

from ddpcheck.preflight import attendance, judge, measure
from ddpcheck.preflight.failed import PreflightFailed
from ddpcheck.preflight.group import checked
from ddpcheck.preflight.options import PreflightOptions
from ddpcheck.report.formats import json as json_format
from ddpcheck.report.model import Check, Report, Status
from ddpcheck.report.outputs import Files
from ddpcheck.report.terminal import make_console, render_report

# The share of the budget a rank waits for the others before naming who did not come; the rest is
# for the checks (docs/preflight.md: how these were chosen).
ARRIVAL_SHARE = 0.5
# What a run needs after its last measurement: gather to rank 0, judge, share the report, print it.
TAIL_S = {"cpu": 1.0, "cuda": 2.0}


def run(opts: PreflightOptions, group: Any, started: float) -> Report:
    """The Report, the same on every rank; PreflightUsageError before any collective on a bad call."""
    import torch.distributed as dist

    rank, world_size = checked(opts, group)
    backend = str(dist.get_backend())
    device = measure.job_device(backend)
    budget_s = opts.budget_for(device.type)
    wait_s = max(0.0, budget_s * ARRIVAL_SHARE - (time.time() - started))
    store = dist.distributed_c10d._get_default_store()  # torch's own since 1.x; every rank shares it
    came = attendance.arrive(
        store,
        rank,
        world_size,
        measure.where_i_run(rank),
        wait_s,
        attendance.next_call(),
        absent=("absent", rank) in opts.faults,
    )
    if came.missing:
        world = _world(backend, device, world_size, list(came.present.values()))
        report = judge.judge_missing(came, budget_s * ARRIVAL_SHARE, world, opts)
    else:
        report = _measured(opts, rank, world_size, backend, device, came, started + budget_s, budget_s)
    report.elapsed_s = time.time() - started
    return report


def _measured(
    opts: PreflightOptions,
    rank: int,
    world_size: int,
    backend: str,
    device: Any,
    came: attendance.Attendance,
    end: float,
    budget_s: float,
) -> Report:
    import torch.distributed as dist

    ctx = measure.context(rank, world_size, device, opts, end - TAIL_S[device.type])
    data = measure.measure(ctx, opts)
    gathered = ctx.gather_to_rank0(data)
    shared: list[Any] = [None]
    if gathered is not None:
        world = _world(backend, device, world_size, [g["identity"] for g in gathered])
        shared = [judge.judge(gathered, came, budget_s * ARRIVAL_SHARE, world, opts).to_transport()]
    dist.broadcast_object_list(shared, src=0)  # every rank returns, or raises, the same verdict
    return Report.from_transport(shared[0])


def _world(backend: str, device: Any, size: int, identities: list[dict[str, Any]]) -> dict[str, Any]:
    import torch

    hosts = list(dict.fromkeys(str(i.get("host")) for i in identities))
    return {
        "size": size,
        "backend": "nccl" if device.type == "cuda" else "gloo",
        "device": device.type,
        "nodes": len({(i.get("host"), i.get("node")) for i in identities}),
        "hosts": hosts,
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "process_group": backend,
    }


def could_not_complete(opts: PreflightOptions, rank: int, exc: BaseException, started: float) -> Report:
    """This rank's report when preflight itself broke (a peer gone mid-collective, a backend error)."""
    message = " ".join(f"{type(exc).__name__}: {exc}".split())
    check = Check("preflight", Status.ERROR, f"rank {rank} could not complete the checks: {message}", [rank])
    report = Report(command=judge.COMMAND, checks=[check], injected=opts.injected())
    report.elapsed_s = time.time() - started
    return report


def show(report: Report, opts: PreflightOptions, rank: int) -> None:
    """Rank 0 prints the report (the verdict line last) and writes its JSON when asked."""
    if rank != 0:
        return
    files = Files()
    if opts.json_path:
        files.write("JSON report", opts.json_path, lambda: json_format.write(report, opts.json_path))
    render_report(report, make_console(stderr=opts.json_path == "-"), quiet=opts.quiet, wrote=files.wrote)
    if files.lost:
        from ddpcheck.errors import say

        for line in files.lost:
            say(line)


def outcome(report: Report, raise_on_failure: bool) -> Report:
    if raise_on_failure and report.failing():
        raise PreflightFailed(report)
    return report
