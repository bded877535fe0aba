"""The `ddpcheck` command line: generated from the command registry; every usage problem one line.

Each command's options, help and examples are declared once, with the command (commands.py
lists them); the launch, baseline and output options once each, beside what they drive. Running
a command is launcher/run.py's. No torch at module level: `ddpcheck --help` stays instant.
"""

from __future__ import annotations

import contextlib
import difflib
import inspect
import os
import sys
import typing
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Annotated, Any, NoReturn

import typer
from typer.core import TyperCommand, TyperGroup

from ddpcheck import __version__
from ddpcheck.command import Command, Parameter, build_options, parameters
from ddpcheck.commands import COMMANDS
from ddpcheck.errors import EXIT_COULD_NOT_COMPLETE, EXIT_INTERRUPTED, EXIT_USAGE, UsageError, say
from ddpcheck.rank import arrival, interrupt
from ddpcheck.report.compare import BaselineOptions

if TYPE_CHECKING:
    from typer._click import Command as ClickCommand
    from typer._click import Context, HelpFormatter


class _Built(Mapping[str, "ClickCommand"]):
    """The commands by name, in the registry's order; each built by Typer at its first look-up."""

    def __init__(self) -> None:
        self._built: dict[str, ClickCommand] = {}

    def __getitem__(self, name: str) -> ClickCommand:
        if name not in self._built:
            self._built[name] = _typer_command(COMMANDS[name])
        return self._built[name]

    def __iter__(self) -> Iterator[str]:
        return iter(COMMANDS)

    def __len__(self) -> int:
        return len(COMMANDS)


class _Commands(TyperGroup):
    """ddpcheck's group: a command is built when it is run, completed or asked for its help; the list
    that `ddpcheck --help` prints needs only each declaration's help."""

    def __init__(self, **settings: Any) -> None:
        super().__init__(**settings)
        self.commands = _Built()  # type: ignore[assignment]  # read only: nothing adds a command later

    def list_commands(self, ctx: Context) -> list[str]:
        return list(COMMANDS)

    def format_commands(self, ctx: Context, formatter: HelpFormatter) -> None:
        """Typer's list of commands, each named by the first words of its help."""
        limit = formatter.width - 6 - max(len(name) for name in COMMANDS)
        rows = [
            (name, TyperCommand(name, help=inspect.cleandoc(command.help)).get_short_help_str(limit))
            for name, command in COMMANDS.items()
        ]
        with formatter.section("Commands"):
            formatter.write_dl(rows)


app = typer.Typer(
    name="ddpcheck",
    help=(
        "Can these ranks train with DistributedDataParallel? Each command launches ranks "
        "(or runs as one under torchrun/srun), checks, and exits 0 (pass), 1 (a check failed), "
        "2 (bad usage) or 3 (could not complete: a rank crashed, hung or never joined)."
    ),
    cls=_Commands,
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
    return lambda incomplete: [c for c in choices if c.startswith(incomplete)]  # Typer passes it by name


def _typer_parameter(parameter: Parameter, faults: Mapping[str, str]) -> inspect.Parameter:
    """One option or argument as Typer reads it from a signature; --inject's help names the `faults`."""
    flag = parameter.flag
    kinds = f" Kinds: {', '.join(faults)}." if parameter.name == "inject" and faults else ""
    settings: dict[str, Any] = {"help": flag.help + kinds}
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


_METAVARS = ((int, "N"), (float, "F"), (bool, None))  # a value of any other type is TEXT


def _metavar(annotation: Any) -> str | None:
    """What an option's value is called in the help when its declaration names nothing better."""
    kinds = set(typing.get_args(annotation)) - {type(None)} or {annotation}
    return next((name for kind, name in _METAVARS if kinds <= {kind}), "TEXT")


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
    # The shared options load with the first command built: `ddpcheck --help` lists names alone.
    from ddpcheck.launcher.budget_options import BudgetOptions
    from ddpcheck.launcher.options import LaunchOptions
    from ddpcheck.report.fleet import FleetOptions
    from ddpcheck.report.outputs import OutputOptions

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


def _typer_command(command: Command) -> ClickCommand:
    """One command as Typer builds it from a signature: its own options, then the shared ones of its kind."""
    from ddpcheck.launcher.budget_options import BudgetOptions
    from ddpcheck.launcher.options import LaunchOptions
    from ddpcheck.report.fleet import FleetOptions
    from ddpcheck.report.outputs import OutputOptions

    def run(**values: Any) -> None:
        from ddpcheck.launcher.run import run_plain, run_ranked

        options = build_options(command.options, values)
        output = build_options(OutputOptions, values)
        if command.ranked:
            from ddpcheck.checks.env import refusals

            launch = build_options(LaunchOptions, values)
            baseline = build_options(BaselineOptions, values)
            fleet = build_options(FleetOptions, values)
            budget = build_options(BudgetOptions, values)
            code = run_ranked(command, options, launch, output, baseline, fleet, budget, refusals)
        else:
            code = run_plain(command, options, output)
        raise typer.Exit(code)

    run.__name__ = command.name.replace("-", "_")
    run.__doc__ = command.help
    typed = [_typer_parameter(p, command.faults) for p in _declared(command)]
    run.__signature__ = inspect.Signature(typed)  # type: ignore[attr-defined]
    run.__annotations__ = {p.name: p.annotation for p in typed}
    epilog = f"{command.epilog}\n\n{_faults_help(command)}" if command.faults else command.epilog
    alone = typer.Typer(add_completion=False, rich_markup_mode=None)
    alone.command(command.name, epilog=epilog)(run)
    return typer.main.get_command(alone)


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
            fixed = " ".join(["ddpcheck", *args[:job], "--", *args[job:]])
            return f"no such option {name}: put -- before the job, so that its options reach it: {fixed}"
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
