"""The `ddpcheck` command line: generated from the command registry; validate, launch, render, exit.

Each command's options, help and examples are declared once, with the command (commands.py
lists them); the launch, baseline and output options once each, beside what they drive. No
torch at module level: `ddpcheck --help` stays instant.
"""

from __future__ import annotations

import contextlib
import dataclasses
import difflib
import errno
import inspect
import os
import sys
import typing
from collections.abc import Callable
from typing import TYPE_CHECKING, Annotated, Any, NoReturn

import typer

from ddpcheck import __version__
from ddpcheck.command import Command, Parameter, build_options, options_to_dict, parameters
from ddpcheck.commands import COMMANDS
from ddpcheck.errors import EXIT_COULD_NOT_COMPLETE, EXIT_INTERRUPTED, EXIT_USAGE, UsageError, say
from ddpcheck.launcher.budget_options import BudgetOptions, StartingWatch
from ddpcheck.launcher.options import LaunchOptions
from ddpcheck.rank import arrival, interrupt
from ddpcheck.report.compare import BaselineOptions
from ddpcheck.report.fleet import FleetOptions
from ddpcheck.report.outputs import Files, OutputOptions

if TYPE_CHECKING:
    from rich.console import Console

    from ddpcheck.launcher.plan import LaunchPlan
    from ddpcheck.rank.faults import Fault
    from ddpcheck.report.model import Report

app = typer.Typer(
    name="ddpcheck",
    help=(
        "Can these ranks train with DistributedDataParallel? Each command launches ranks "
        "(or runs as one under torchrun/srun), checks, and exits 0 (pass), 1 (a check failed), "
        "2 (bad usage) or 3 (could not complete: a rank crashed, hung or never joined)."
    ),
    no_args_is_help=True,
    # Plain help: Typer's rich formatter imports markdown and syntax highlighting (docs/performance.md).
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
    metavar = flag.metavar or (None if flag.argument else _metavar(parameter.annotation))
    if metavar:
        settings["metavar"] = metavar
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


def _metavar(annotation: Any) -> str | None:
    """What an option's value is called in the help when its declaration names nothing better."""
    kinds = set(typing.get_args(annotation)) - {type(None)} or {annotation}
    if kinds <= {int}:
        return "N"
    if kinds <= {float}:
        return "F"
    if kinds <= {bool}:
        return None
    return "TEXT"


def _faults_help(command: Command) -> str:
    """The epilog's paragraph on the --inject kinds this command takes (what each does: rank/faults.py)."""
    from ddpcheck.failure.stages import HARNESS
    from ddpcheck.rank.faults import DEFAULT_STAGE, KINDS

    staged = [kind for kind in command.faults if KINDS[kind][0]]
    lines = [
        f"--inject kinds (KIND@RANK; {' / '.join(staged)} also KIND@RANK:STAGE,",
        f"STAGE one of {', '.join(HARNESS)}; default {DEFAULT_STAGE}):",
    ]
    width = max(len(kind) for kind in command.faults)
    lines += [f"  {kind:<{width}}  {KINDS[kind][1]}" for kind in command.faults]
    return "\b\n" + "\n".join(lines)


def _declared(command: Command) -> list[Parameter]:
    """A command's parameters: its own options, then the shared ones its kind takes."""
    shared: list[type] = [OutputOptions]
    if command.ranked:
        shared = [
            LaunchOptions,
            *([BaselineOptions] if command.measures else []),
            OutputOptions,
            FleetOptions,
            *([BudgetOptions] if command.budgeted else []),
        ]
    return [p for cls in (command.options, *shared) for p in parameters(cls)]


def _register(command: Command) -> None:
    """Declare one command to Typer: its own options, then the shared ones its kind takes."""
    declared = _declared(command)

    def run(**values: Any) -> None:
        options = build_options(command.options, values)
        output = build_options(OutputOptions, values)
        if command.ranked:
            launch = build_options(LaunchOptions, values)
            baseline = build_options(BaselineOptions, values)
            fleet = build_options(FleetOptions, values)
            budget = build_options(BudgetOptions, values)
            run_ranked(command, options, launch, output, baseline, fleet, budget)
        else:
            run_plain(command, options, output)

    run.__name__ = command.name.replace("-", "_")
    run.__doc__ = command.help
    if command.faults:
        declared = [
            dataclasses.replace(
                p, flag=dataclasses.replace(p.flag, help=f"{p.flag.help} Kinds: {', '.join(command.faults)}.")
            )
            if p.name == "inject"
            else p
            for p in declared
        ]
    typed = [_typer_parameter(p) for p in declared]
    run.__signature__ = inspect.Signature(typed)  # type: ignore[attr-defined]
    run.__annotations__ = {p.name: p.annotation for p in typed}
    epilog = f"{command.epilog}\n\n{_faults_help(command)}" if command.faults else command.epilog
    app.command(command.name, epilog=epilog)(run)


for _command in COMMANDS.values():
    _register(_command)


# ---------------------------------------------------------------- running a command
def run_plain(command: Command, options: Any, output: OutputOptions) -> None:
    """A command that starts no ranks: validate, run, render, exit with the verdict's code."""
    options.validate()
    output.check()
    console = _console(output)
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
    finish(report, console, output)


def run_ranked(
    command: Command,
    options: Any,
    launch_options: LaunchOptions,
    output: OutputOptions,
    baseline: BaselineOptions,
    fleet: FleetOptions | None = None,
    budget_options: BudgetOptions | None = None,
) -> None:
    """Validate, launch (or run as a rank), render, and exit with the verdict's code."""
    fleet = fleet or FleetOptions()
    budget_options = budget_options or BudgetOptions()
    faults = validate_ranked(command, options, launch_options, output, baseline, fleet, budget_options)
    starting = budget_options.watch_starting()
    arrival.stage(arrival.IMPORTING_TORCH)  # an inline rank's peers may name it here (rank/arrival.py)
    from ddpcheck.rank import assemble
    from ddpcheck.report.baseline import load_baseline

    known_good = load_baseline(baseline)
    from ddpcheck.rank.torch_logs import quiet_torch_cpp_logs

    quiet_torch_cpp_logs()
    console = _console(output)
    from ddpcheck.launcher.plan import detect_inline

    inline = detect_inline(launch_options)
    # One line per interrupted run: under torchrun, srun or mpirun, rank 0's.
    interrupt.speak(not inline or os.environ.get("RANK") == "0")
    plan, options = plan_ranks(command, options, launch_options, faults, inline)
    # The last thing before the ranks start: what starting ddpcheck and torch took is spent.
    start_budget(plan, budget_options, starting)
    if known_good is not None:
        check_baseline_setup(command, plan, options, known_good, baseline)
    if inline:
        report = run_as_rank(command, options, faults, plan, output, fleet)
    else:
        report = launch_ranks(command, options, faults, plan, output, console)
    assemble.judge_speed(report, known_good, baseline)
    finish(report, console, output, fleet)


def validate_ranked(
    command: Command,
    options: Any,
    launch_options: LaunchOptions,
    output: OutputOptions,
    baseline: BaselineOptions,
    fleet: FleetOptions,
    budget_options: BudgetOptions,
) -> list[Fault]:
    """Every option group checked before anything starts (bad input: one line, exit 2); the parsed faults."""
    from ddpcheck.launcher import slurm
    from ddpcheck.rank.faults import parse_faults

    launch_options.node_rank = slurm.default_node_rank(launch_options, os.environ)
    launch_options.validate()
    options.validate()
    faults = parse_faults(launch_options.inject, command.name)
    output.check()
    fleet.check(injected=bool(faults))
    baseline.validate()
    budget_options.validate()
    return faults


def plan_ranks(
    command: Command, options: Any, launch_options: LaunchOptions, faults: list[Fault], inline: bool
) -> tuple[LaunchPlan, Any]:
    """The ranks, backend and device (or this process as one rank), refused when they cannot run the
    command; and the command's options for that device."""
    from ddpcheck.checks.env.preflight import backend_without_torch, store_unreachable
    from ddpcheck.launcher import plan as planning
    from ddpcheck.rank import inline as inline_rank
    from ddpcheck.rank.faults import check_ranks

    # A host-wide setting that every rank would fail on is env's finding, not a crash of each
    # rank: refused before torch is imported where the backend is known without it, else after planning.
    early = backend_without_torch(launch_options.backend)
    if early is not None:
        refuse_fatal_setting(early, inline)
    plan = planning.plan_inline(launch_options) if inline else planning.plan_launch(launch_options)
    if inline:
        inline_rank.why_unreachable = store_unreachable  # this rank, should rank 0's store not answer
    check_ranks(faults, plan.world_size)
    if early is None:
        refuse_fatal_setting(plan.backend, inline)
    least = getattr(options, "min_world_size", 1)
    if plan.world_size < least:
        raise UsageError(
            f"ddpcheck {command.name} needs at least {least} ranks, got {plan.world_size}: "
            f"give --nproc {least} (CPU ranks where GPUs are too few), --gpus or --nnodes"
        )
    return plan, options.for_device(plan.device) if hasattr(options, "for_device") else options


def start_budget(plan: LaunchPlan, budget_options: BudgetOptions, starting: StartingWatch | None) -> None:
    """The budget's clock hands over to the plan: its end, and --timeout bounded by what is left."""
    from ddpcheck.launcher.budget_options import bounded_timeout

    if starting is not None:
        starting.stop()
    plan.budget = budget_options.start()
    plan.timeout = bounded_timeout(plan.timeout, plan.budget)


def check_baseline_setup(
    command: Command, plan: LaunchPlan, options: Any, known_good: dict[str, Any], baseline: BaselineOptions
) -> None:
    """Exit 2 before the ranks start when the baseline was measured on another setup than this run's."""
    from ddpcheck.report.baseline import check_setup, planned_setup

    planned = planned_setup(
        command.name, plan.world_size, plan.backend, plan.device, options_to_dict(options)
    )
    check_setup(known_good, command.name, planned, str(baseline.path))


def run_as_rank(
    command: Command,
    options: Any,
    faults: list[Fault],
    plan: LaunchPlan,
    output: OutputOptions,
    fleet: FleetOptions,
) -> Report:
    """Under torchrun, srun or mpirun: run as this rank; rank 0 returns the report, the others exit."""
    from ddpcheck.launcher import launch
    from ddpcheck.report.model import Verdict

    outcome = launch.run_inline(
        command.name, options_to_dict(options), faults, plan, lambda r: _written_lines(r, output, fleet)
    )
    if isinstance(outcome, Verdict):
        raise typer.Exit(outcome.exit_code)
    return outcome


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
    from ddpcheck.report import terminal as render

    if not output.quiet:
        for note in plan.notes:
            render.say(console, note, "dim")
    try:
        # A Ctrl-C while the progress display is up: one KeyboardInterrupt, so that the display
        # gives the terminal back (its cursor) before the line; launch() ends the ranks first.
        with interrupt.deferred(raise_once=True, sigterm=False):
            # On stderr: `ddpcheck allreduce | tee log` still shows it; the report goes down the pipe.
            progress_console = render.make_console(stderr=True)
            with render.LaunchProgress(
                progress_console, enabled=not output.quiet, ranks=plan.nproc
            ) as progress:
                return launch.launch(command.name, options_to_dict(options), faults, plan, progress.update)
    except KeyboardInterrupt:
        interrupt.leave()


def refuse_fatal_setting(backend: str, inline: bool) -> None:
    """Exit 2 with env's finding and its Fix line when this host's settings fail every rank."""
    from ddpcheck.checks.env.preflight import fatal_setting

    fatal = fatal_setting(os.environ, backend, inline)
    if fatal is not None:
        raise UsageError(fatal.detail)


def _console(output: OutputOptions) -> Console:
    from ddpcheck.report import terminal as render

    return render.make_console(stderr=output.to_stdout)


def _write_files(report: Report, output: OutputOptions, fleet: FleetOptions | None) -> Files:
    """The report's files, and the fleet's (hostlist, metrics): each written, or said to be lost."""
    files = Files()
    output.write(report, files)
    # A node that is not rank 0's holds a one-line stand-in: the hostlist, metrics and drains are rank 0's.
    if fleet is not None and not report.written_elsewhere:
        fleet.write(report, files)
    return files


def _written_lines(report: Report, output: OutputOptions, fleet: FleetOptions | None) -> list[str]:
    """A rank stopped by SIGTERM writes its files itself: the lines saying where each went, or was lost."""
    files = _write_files(report, output, fleet)
    return files.wrote + files.lost


def finish(
    report: Report, console: Console, output: OutputOptions, fleet: FleetOptions | None = None
) -> None:
    from ddpcheck.report import terminal as render

    # The files first, so that the verdict line, last of all, comes after the lines saying where they went.
    files = _write_files(report, output, fleet)
    actions: list[str] = []
    if fleet is not None and fleet.drain and not report.written_elsewhere:
        from ddpcheck.launcher.drain import act_on

        actions = act_on(report)
    try:
        render.render_report(
            report, console, quiet=output.quiet, verbose=output.verbose, wrote=files.wrote, actions=actions
        )
    except OSError as exc:
        if exc.errno not in (errno.EPIPE, errno.EIO):
            raise
        # The terminal report's reader left (`ddpcheck allreduce | head`) or its terminal closed:
        # the verdict stands, and is the exit code (Typer's own answer, exit 1, would read as FAIL).
        _say_lost(files.lost)
        _exit(report.verdict.exit_code)
    # A lost file does not change the verdict, nor its exit code (README's exit codes): one line each,
    # on stderr, after the report, where they are the last thing seen.
    _say_lost(files.lost)
    raise typer.Exit(report.verdict.exit_code)


def _say_lost(lines: list[str]) -> None:
    if lines:
        with contextlib.suppress(Exception):  # the report first, also where stdout and stderr share a pipe
            sys.stdout.flush()
    for line in lines:
        say(line)


def main() -> None:
    """Entry point: every usage problem ends as one line and exit 2, never a traceback."""
    interrupt.install()  # ddpcheck/__main__.py did already, before the imports; not every caller does
    try:
        # "ddpcheck" even as `python -m ddpcheck`: the name in usage lines, and the one
        # that shell completion (_DDPCHECK_COMPLETE) and --install-completion key on.
        code = app(prog_name="ddpcheck", standalone_mode=False)
    except UsageError as exc:
        _usage_exit(str(exc))
    except KeyboardInterrupt:  # from a `deferred(raise_once=True)` that nobody caught
        interrupt.leave()
    except Exception as exc:
        if type(exc).__name__ == "NoArgsIsHelpError":
            # Bare `ddpcheck`: the whole help, as readable as `--help` (Typer's convention for
            # no_args_is_help: on stderr, exit 2; help that was asked for is stdout and exit 0).
            print(exc.format_message(), file=sys.stderr)  # type: ignore[attr-defined]
            _exit(EXIT_USAGE)
        # Typer's bundled Click raises its own usage errors; they carry exit_code 2.
        if getattr(exc, "exit_code", None) == EXIT_USAGE and hasattr(exc, "format_message"):
            args = sys.argv[1:]
            _usage_exit(_misplaced_option(exc, args) or _unknown_option(exc, args) or exc.format_message())
        if os.environ.get("DDPCHECK_DEBUG"):
            raise
        # A bug in ddpcheck itself: the check could not complete. One line, and how to see more.
        print(
            f"ddpcheck: internal error: {type(exc).__name__}: {exc} "
            "(rerun with DDPCHECK_DEBUG=1 for the traceback, and please report it)",
            file=sys.stderr,
        )
        _exit(EXIT_COULD_NOT_COMPLETE)
    code = code if isinstance(code, int) else 0
    if code == EXIT_INTERRUPTED:  # Typer's word for a KeyboardInterrupt: say it, and leave
        interrupt.leave()
    _exit(code)


def _exit(code: int) -> NoReturn:
    """Exit with `code` without the interpreter's teardown, what this process owes flushed first.

    With torch imported that teardown takes seconds and destroys torch's native threads (the
    agent's store, a process group left open inline) un-joined: std::terminate (SIGABRT), or a
    deadlock as destroy_process_group can; and in any teardown a Ctrl-C finds no Python left to
    handle it, so the process dies of SIGINT (docs/failures.md).
    """
    for stream in (sys.stdout, sys.stderr):
        # `ddpcheck ... | head`, or a terminal gone: what no reader wants is dropped.
        with contextlib.suppress(OSError):
            stream.flush()
    arrival.leave()
    os._exit(code)


def _misplaced_option(exc: Exception, args: list[str]) -> str | None:
    """`ddpcheck --nproc 2 allreduce`: a command's option given before the command, and where it goes."""
    name = getattr(exc, "option_name", None)
    ctx = getattr(exc, "ctx", None)
    if not name or ctx is None or ctx.parent is not None:  # not the root's "no such option"
        return None
    takers = [
        c.name
        for c in COMMANDS.values()
        if any(name == f"--{p.name.replace('_', '-')}" or name in p.flag.flags for p in _declared(c))
    ]
    if not takers:
        return None
    at = next((i for i, arg in enumerate(args) if arg in COMMANDS), None)
    command = args[at] if at is not None else (takers[0] if len(takers) == 1 else "COMMAND")
    rest = args[:at] + args[at + 1 :] if at is not None else args
    return f"{name} is an option of the commands, not of ddpcheck itself: ddpcheck {command} {' '.join(rest)}"


def _runs_a_job(command: str) -> bool:
    """Whether the command runs a job given after `--` (a positional list of words: watch's COMMAND)."""
    found = COMMANDS.get(command)
    return found is not None and any(
        p.flag.argument and typing.get_origin(p.annotation) is list for p in parameters(found.options)
    )


def _unknown_option(exc: Exception, args: list[str]) -> str | None:
    """An option the command does not take: the near names only (not click's loose guesses), and for
    `watch torchrun --nproc-per-node 2 ...` the `--` that hands the rest to the job."""
    name = getattr(exc, "option_name", None)
    ctx = getattr(exc, "ctx", None)
    if not name or ctx is None or type(exc).__name__ != "NoSuchOption":
        return None
    command = ctx.info_name or "ddpcheck"
    if _runs_a_job(command) and "--" not in args and command in args and name in args:
        valued = {
            o for p in ctx.command.params if p.param_type_name == "option" and not p.is_flag for o in p.opts
        }
        at = args.index(command)
        job = next(
            (
                i
                for i in range(at + 1, len(args))
                if not args[i].startswith("-") and args[i - 1] not in valued
            ),
            None,
        )
        if job is not None and args.index(name) > job:
            fixed = " ".join([*args[:job], "--", *args[job:]])
            return f"no such option {name}: put -- before the job, so that its options reach it: " + (
                f"ddpcheck {fixed}"
            )
    near = [
        p
        for p in getattr(exc, "possibilities", None) or []
        if difflib.SequenceMatcher(None, name, p).ratio() >= 0.8
    ]
    said = f" (did you mean {' or '.join(near)}?)" if near else ""
    where = f"ddpcheck {command} --help" if ctx.parent is not None else "ddpcheck --help"
    return f"no such option {name}{said}; {where} lists them"


def _usage_exit(message: str) -> None:
    line = " ".join(message.split())
    say(f"ddpcheck: error: {line}")
    _exit(EXIT_USAGE)
