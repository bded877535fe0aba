"""The `ddpcheck` command line: generated from the command registry; validate, launch, render, exit.

Each command's options, help and examples are declared once, with the command (commands.py
lists them); the launch, baseline and output options once each, beside what they drive. No
torch at module level: `ddpcheck --help` stays instant.
"""

from __future__ import annotations

import inspect
import os
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Annotated, Any

import typer

from ddpcheck import __version__
from ddpcheck.command import Command, Parameter, build_options, options_to_dict, parameters
from ddpcheck.commands import COMMANDS
from ddpcheck.errors import EXIT_COULD_NOT_COMPLETE, EXIT_INTERRUPTED, EXIT_USAGE, UsageError
from ddpcheck.launcher.options import LaunchOptions
from ddpcheck.report.compare import BaselineOptions
from ddpcheck.report.outputs import OutputOptions

if TYPE_CHECKING:
    from rich.console import Console

    from ddpcheck.report.model import Report

app = typer.Typer(
    name="ddpcheck",
    help=(
        "Can these ranks train with DistributedDataParallel? Each command launches ranks "
        "(or runs as one under torchrun/srun), checks, and exits 0 (pass), 1 (a check failed), "
        "2 (bad usage) or 3 (could not complete: a rank crashed, hung or never joined)."
    ),
    no_args_is_help=True,
    # Plain help: Typer's rich help formatter imports markdown and syntax highlighting
    # (~170 ms), which would more than double the start-up of `ddpcheck --help`.
    rich_markup_mode=None,
    context_settings={"help_option_names": ["-h", "--help"]},
)


def _version(value: bool) -> None:
    if value:
        print(f"ddpcheck {__version__}")
        raise typer.Exit(0)


@app.callback()
def _root(
    version: Annotated[
        bool, typer.Option("--version", callback=_version, is_eager=True, help="Print the version and exit.")
    ] = False,
) -> None:
    """Root options."""


# ---------------------------------------------------------------- the Typer declarations, generated
def _one_of(choices: tuple[str, ...]) -> Callable[[str], list[str]]:
    """TAB-completion of an option's values (the options' validate() checks them)."""

    def complete(incomplete: str) -> list[str]:
        return [c for c in choices if c.startswith(incomplete)]

    return complete


def _typer_parameter(parameter: Parameter) -> inspect.Parameter:
    """One option or argument as Typer reads it from a signature."""
    flag = parameter.flag
    settings: dict[str, Any] = {"help": flag.help}
    if flag.choices:
        settings["autocompletion"] = _one_of(flag.choices)
    if flag.panel:
        settings["rich_help_panel"] = flag.panel
    if flag.metavar:
        settings["metavar"] = flag.metavar
    if not flag.show_default:
        settings["show_default"] = False
    declared = typer.Argument(**settings) if flag.argument else typer.Option(*flag.flags, **settings)
    default = inspect.Parameter.empty if parameter.default is ... else parameter.default
    return inspect.Parameter(
        parameter.name,
        inspect.Parameter.KEYWORD_ONLY,
        default=default,
        annotation=Annotated[parameter.annotation, declared],
    )


def _register(command: Command) -> None:
    """Declare one command to Typer: its own options, then the shared ones its kind takes."""
    shared: list[type] = [OutputOptions]
    if command.ranked:
        shared = [LaunchOptions, *([BaselineOptions] if command.measures else []), OutputOptions]
    declared = [p for cls in (command.options, *shared) for p in parameters(cls)]

    def run(**values: Any) -> None:
        options = build_options(command.options, values)
        output = build_options(OutputOptions, values)
        if command.ranked:
            launch = build_options(LaunchOptions, values)
            baseline = build_options(BaselineOptions, values)
            run_ranked(command, options, launch, output, baseline)
        else:
            run_plain(command, options, output)

    run.__name__ = command.name.replace("-", "_")
    run.__doc__ = command.help
    typed = [_typer_parameter(p) for p in declared]
    run.__signature__ = inspect.Signature(typed)  # type: ignore[attr-defined]
    run.__annotations__ = {p.name: p.annotation for p in typed}
    app.command(command.name, epilog=command.epilog)(run)


for _command in COMMANDS.values():
    _register(_command)


# ---------------------------------------------------------------- running a command
def run_plain(command: Command, options: Any, output: OutputOptions) -> None:
    """A command that starts no ranks: validate, run, render, exit with the verdict's code."""
    options.validate()
    output.check()
    console = _console(output)
    finish(command.module().run(options), console, output)


def run_ranked(
    command: Command,
    options: Any,
    launch_options: LaunchOptions,
    output: OutputOptions,
    baseline: BaselineOptions,
) -> None:
    """Validate, launch (or run as a rank), render, and exit with the verdict's code."""
    from ddpcheck.launcher import slurm
    from ddpcheck.rank.faults import check_ranks, parse_faults
    from ddpcheck.report import terminal as render

    launch_options.node_rank = slurm.default_node_rank(launch_options, os.environ)
    launch_options.validate()
    options.validate()
    faults = parse_faults(launch_options.inject, command.name)
    output.check()
    baseline.validate()
    from ddpcheck.report import assemble
    from ddpcheck.report.baseline import load_baseline

    known_good = load_baseline(baseline)
    from ddpcheck.launcher import launch

    launch.quiet_torch_cpp_logs()
    console = _console(output)
    from ddpcheck.launcher import plan as planning

    inline = planning.detect_inline(launch_options)
    plan = planning.plan_inline(launch_options) if inline else planning.plan_launch(launch_options)
    check_ranks(faults, plan.world_size)
    least = getattr(options, "min_world_size", 1)
    if plan.world_size < least:
        raise UsageError(
            f"ddpcheck {command.name} needs at least {least} ranks, got {plan.world_size}: "
            f"give --nproc {least} (CPU ranks where GPUs are too few), --gpus or --nnodes"
        )
    options = options.for_device(plan.device) if hasattr(options, "for_device") else options
    if known_good is not None:
        from ddpcheck.report.baseline import check_setup, planned_setup

        planned = planned_setup(
            command.name, plan.world_size, plan.backend, plan.device, options_to_dict(options)
        )
        check_setup(known_good, command.name, planned, str(baseline.path))
    if inline:
        outcome = launch.run_inline(command.name, options_to_dict(options), faults, plan)
        from ddpcheck.report.model import Verdict

        if isinstance(outcome, Verdict):
            raise typer.Exit(outcome.exit_code)
        report = outcome
    else:
        if not output.quiet:
            for note in plan.notes:
                render.say(console, note, "dim")
        try:
            with render.LaunchProgress(console, enabled=not output.quiet) as progress:
                report = launch.launch(command.name, options_to_dict(options), faults, plan, progress.update)
        except KeyboardInterrupt:
            print("ddpcheck: interrupted; every rank was stopped", file=sys.stderr)
            raise typer.Exit(EXIT_INTERRUPTED) from None
    assemble.judge_speed(report, known_good, baseline)
    finish(report, console, output)


def _console(output: OutputOptions) -> Console:
    from ddpcheck.report import terminal as render

    return render.make_console(stderr=output.to_stdout)


def finish(report: Report, console: Console, output: OutputOptions) -> None:
    from ddpcheck.report import terminal as render

    render.render_report(report, console, quiet=output.quiet, verbose=output.verbose)
    output.write(report)
    raise typer.Exit(report.verdict.exit_code)


def main() -> None:
    """Entry point: every usage problem ends as one line and exit 2, never a traceback."""
    try:
        # "ddpcheck" even as `python -m ddpcheck`: the name in usage lines, and the one
        # that shell completion (_DDPCHECK_COMPLETE) and --install-completion key on.
        code = app(prog_name="ddpcheck", standalone_mode=False)
    except UsageError as exc:
        _usage_exit(str(exc))
    except KeyboardInterrupt:
        print("ddpcheck: interrupted; every rank was stopped", file=sys.stderr)
        sys.exit(EXIT_INTERRUPTED)
    except Exception as exc:
        # Typer's bundled Click raises its own usage errors; they carry exit_code 2.
        if getattr(exc, "exit_code", None) == EXIT_USAGE and hasattr(exc, "format_message"):
            _usage_exit(exc.format_message())
        if os.environ.get("DDPCHECK_DEBUG"):
            raise
        # A bug in ddpcheck itself: the check could not complete. One line, and how to see more.
        print(
            f"ddpcheck: internal error: {type(exc).__name__}: {exc} "
            "(rerun with DDPCHECK_DEBUG=1 for the traceback, and please report it)",
            file=sys.stderr,
        )
        sys.exit(EXIT_COULD_NOT_COMPLETE)
    code = code if isinstance(code, int) else 0
    from ddpcheck.torch_compat import process_group_left_open  # here: --help imports no more than it needs

    if process_group_left_open():
        # Interpreter teardown would destroy it, and could deadlock as destroy_process_group can.
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    sys.exit(code)


def _usage_exit(message: str) -> None:
    line = " ".join(message.split())
    print(f"ddpcheck: error: {line}", file=sys.stderr)
    sys.exit(EXIT_USAGE)
