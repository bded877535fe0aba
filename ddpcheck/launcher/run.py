"""Running a command to its exit code.

A plain command runs in this process. A ranked one is validated, planned, budgeted and checked
against its baseline, then launched, or run as this rank under torchrun, srun or mpirun; its
speed judged after. Both end in finish.py. Nothing here imports torch before the ranks need it.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Protocol

from ddpcheck.command import Command
from ddpcheck.errors import UsageError
from ddpcheck.launcher.finish import console_for, finish, written_lines
from ddpcheck.rank import arrival, interrupt

if TYPE_CHECKING:
    from rich.console import Console

    from ddpcheck.launcher.budget_options import BudgetOptions
    from ddpcheck.launcher.options import LaunchOptions
    from ddpcheck.launcher.plan import LaunchPlan
    from ddpcheck.rank.faults import Fault
    from ddpcheck.report.compare import BaselineOptions
    from ddpcheck.report.fleet import FleetOptions
    from ddpcheck.report.model import Check, Report
    from ddpcheck.report.outputs import OutputOptions


class Refusals(Protocol):
    """env's refusals before any rank starts (checks/env/refusals.py), handed in by the CLI: the
    launcher side imports no check."""

    def backend_without_torch(self, chosen: str) -> str | None: ...

    def fatal_setting(self, environ: Mapping[str, str], backend: str, inline: bool) -> Check | None: ...

    def store_unreachable(self, environ: Mapping[str, str], waited_s: float) -> str: ...


def run_plain(command: Command, options: Any, output: OutputOptions) -> int:
    """A command that starts no ranks: validate, run, render; the verdict's exit code."""
    options.validate()
    output.check()
    console = console_for(output)
    if not command.interrupt_raises:  # a Ctrl-C leaves at once (the mode interrupt.install set)
        report = command.module().run(options)
    else:
        try:
            # `watch`: a Ctrl-C, or a scheduler's SIGTERM (a time limit), is one KeyboardInterrupt
            # in its loop, which ends the job it ran first.
            with interrupt.deferred(raise_once=True):
                report = command.module().run(options)
        except KeyboardInterrupt:
            interrupt.leave()
        if interrupt.interrupted():  # one that code on the way swallowed is not lost
            interrupt.leave()
    # A warning (watch's straggler) is shown whole: the verdict line alone would hide it.
    if command.terse_pass and report.verdict.exit_code == 0 and not report.warnings():
        output = dataclasses.replace(output, quiet=True)
    if report.written_elsewhere:  # another process (task 0) writes the report's files
        output = dataclasses.replace(output, json_path=None, junit_path=None, html_path=None)
    return finish(report, console, output)


def run_ranked(
    command: Command,
    options: Any,
    launch_options: LaunchOptions,
    output: OutputOptions,
    baseline: BaselineOptions,
    fleet: FleetOptions,
    budget_options: BudgetOptions,
    refusals: Refusals,
) -> int:
    """Validate, launch (or run as a rank), render; the verdict's exit code."""
    from ddpcheck.launcher import slurm
    from ddpcheck.launcher.budget_options import bounded_timeout
    from ddpcheck.rank.faults import parse_faults

    # Every option group checked before anything starts (bad input: one line, exit 2).
    launch_options.node_rank = slurm.default_node_rank(launch_options, os.environ)
    launch_options.validate()
    options.validate()
    faults = parse_faults(launch_options.inject, command.name)
    output.check()
    fleet.check(injected=bool(faults))
    baseline.validate()
    budget_options.validate()
    starting = budget_options.watch_starting()
    arrival.stage(arrival.IMPORTING_TORCH)  # an inline rank's peers may name it here (rank/arrival.py)
    from ddpcheck.rank import assemble
    from ddpcheck.report.baseline import check_setup, load_baseline, planned_setup

    known_good = load_baseline(baseline)
    from ddpcheck.rank.torch_logs import quiet_torch_cpp_logs

    quiet_torch_cpp_logs()
    console = console_for(output)
    from ddpcheck.launcher.plan import detect_inline

    inline = detect_inline(launch_options)
    # One line per interrupted run: under torchrun, srun or mpirun, rank 0's.
    interrupt.speak(not inline or os.environ.get("RANK") == "0")
    plan, options = plan_ranks(command, options, launch_options, faults, inline, refusals)
    # The last thing before the ranks start: what starting ddpcheck and torch took is spent.
    plan.budget = budget_options.start(starting)
    plan.timeout = bounded_timeout(plan.timeout, plan.budget)
    if known_good is not None:  # exit 2 when the baseline was measured on another setup than this run's
        planned = planned_setup(
            command.name, plan.world_size, plan.backend, plan.device, dataclasses.asdict(options)
        )
        check_setup(known_good, command.name, planned, str(baseline.path))
    if inline:
        report = run_as_rank(command, options, faults, plan, output, fleet)
        if isinstance(report, int):
            return report
    else:
        report = launch_ranks(command, options, faults, plan, output, console)
    assemble.judge_speed(report, known_good, baseline)
    return finish(report, console, output, fleet)


def plan_ranks(
    command: Command,
    options: Any,
    launch_options: LaunchOptions,
    faults: list[Fault],
    inline: bool,
    refusals: Refusals,
) -> tuple[LaunchPlan, Any]:
    """The ranks, backend and device (or this process as one rank), refused when they cannot run the
    command; and the command's options for that device."""
    from ddpcheck.launcher import plan as planning
    from ddpcheck.rank import inline as inline_rank
    from ddpcheck.rank.faults import check_ranks

    # A host-wide setting that every rank would fail on is env's finding, not a crash of each
    # rank: refused before torch is imported where the backend is known without it, else after planning.
    early = refusals.backend_without_torch(launch_options.backend)
    if early is not None:
        refuse_fatal_setting(early, inline, refusals)
    plan = planning.plan_inline(launch_options) if inline else planning.plan_launch(launch_options)
    if inline:
        inline_rank.why_unreachable = refusals.store_unreachable  # should rank 0's store not answer
    check_ranks(faults, plan.world_size)
    if early is None:
        refuse_fatal_setting(plan.backend, inline, refusals)
    least = getattr(options, "min_world_size", 1)
    if plan.world_size < least:
        raise UsageError(
            f"ddpcheck {command.name} needs at least {least} ranks, got {plan.world_size}: "
            f"give --nproc {least} (CPU ranks where GPUs are too few), --gpus or --nnodes"
        )
    return plan, options.for_device(plan.device) if hasattr(options, "for_device") else options


def run_as_rank(
    command: Command,
    options: Any,
    faults: list[Fault],
    plan: LaunchPlan,
    output: OutputOptions,
    fleet: FleetOptions,
) -> Report | int:
    """Under torchrun, srun or mpirun: run as this rank, spawn nothing (rank/inline_run.py); rank 0 gets
    the report, the others an exit code."""
    from ddpcheck.launcher.launch import as_given, make_spec
    from ddpcheck.rank import inline_run
    from ddpcheck.report.model import Verdict

    spec = make_spec(command.name, dataclasses.asdict(options), faults, plan)
    outcome = inline_run.run(spec, as_given(faults), lambda r: written_lines(r, output, fleet))
    return outcome.exit_code if isinstance(outcome, Verdict) else outcome


def launch_ranks(
    command: Command,
    options: Any,
    faults: list[Fault],
    plan: LaunchPlan,
    output: OutputOptions,
    console: Console,
) -> Report:
    """Start the ranks and show their progress until the report is back."""
    from ddpcheck.launcher import launch
    from ddpcheck.launcher.progress import LaunchProgress
    from ddpcheck.report import terminal as render

    if not output.quiet:
        for note in plan.notes:
            render.print_line(console, note, "dim")
    try:
        # A Ctrl-C while the progress display is up: one KeyboardInterrupt, so that the display
        # gives the terminal back (its cursor) before the line; launch() ends the ranks first.
        with interrupt.deferred(raise_once=True, sigterm=False):
            # On stderr: `ddpcheck allreduce | tee log` still shows it; the report goes down the pipe.
            progress_console = render.make_console(stderr=True)
            with LaunchProgress(progress_console, enabled=not output.quiet, ranks=plan.nproc) as progress:
                return launch.launch(command.name, dataclasses.asdict(options), faults, plan, progress.update)
    except KeyboardInterrupt:
        interrupt.leave()


def refuse_fatal_setting(backend: str, inline: bool, refusals: Refusals) -> None:
    """Exit 2 with env's finding and its Fix line when this host's settings fail every rank."""
    fatal = refusals.fatal_setting(os.environ, backend, inline)
    if fatal is not None:
        raise UsageError(fatal.detail)
