"""What a command is: one declaration (nccl-tests' `struct testColl`) that every side reads.

A command declares itself once, in its own folder under `checks/` (or, for the commands
that only read saved reports, in `report/`): its name and help, its typed Options (each
field carrying the help text and command-line metadata the Typer declaration is generated
from), the `--inject` kinds it takes and what each does, the module that measures and judges
it, its charts for the terminal and the HTML page, the family of figures a baseline compares
and the options it must share with the run, what the hardware should do, the Prometheus
metrics its reports export, and its pure judges. Nothing outside its folder and commands.py
names it (tests/test_house.py).

Torch-free and Typer-free: `ddpcheck --help` reads every declaration, so they stay light; the
modules that do the work, strike its faults and draw its charts (in its folder, each named by a
"module:name" string) are imported only when they are needed.
"""

from __future__ import annotations

import dataclasses
import importlib
import importlib.util
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

# What every command that runs on ranks can be made to suffer, at a stage of its run (the harness
# strikes: rank/faults.py): --inject kind -> what it does.
HARNESS_FAULTS: Mapping[str, str] = {
    "hang": "rank R sleeps forever at STAGE",
    "crash": "rank R raises an exception at STAGE",
    "kill": "rank R sends itself SIGKILL at STAGE",
}
# A rank slower than its peers, for the commands that step (rank/faults.py strikes).
SLOW_FAULT: Mapping[str, str] = {"slow": "rank R sleeps a little in every step"}

_UNSET: Any = object()


@dataclass(frozen=True)
class Flag:
    """How one Options field appears on the command line."""

    help: str
    # The parameter's name when it is not the field's (`--sizes` fills min_bytes and max_bytes).
    name: str | None = None
    # What the command line takes, when it is not the field's own type ('1K:4M' for two ints).
    cli_type: Any = None
    # The value the command line shows and starts from, when not the field's default.
    cli_default: Any = _UNSET
    # A given value -> the fields it sets; without it the value is the field's own.
    parse: Callable[[Any], dict[str, Any]] | None = None
    choices: tuple[str, ...] = ()  # offered by TAB completion (validate() still checks)
    flags: tuple[str, ...] = ()  # the option's spellings, when not derived from the name
    panel: str | None = None  # the help section it is listed in
    argument: bool = False  # positional, not --name
    metavar: str | None = None
    show_default: bool = True


def option(
    default: Any = dataclasses.MISSING, *, default_factory: Any = dataclasses.MISSING, **flag: Any
) -> Any:
    """A dataclass field that is also a command-line option (keyword arguments as Flag's)."""
    return field(default=default, default_factory=default_factory, metadata={"flag": Flag(**flag)})


@dataclass(frozen=True)
class Parameter:
    """One command-line parameter, as the CLI declares it to Typer."""

    name: str
    annotation: Any  # the type the command line takes
    default: Any
    flag: Flag


def parameters(options: type) -> list[Parameter]:
    """The command-line parameters of an Options dataclass, in the order its fields come.

    An Options class may set CLI_ORDER (parameter names) to list them in another order.
    """
    hints = typing.get_type_hints(options)
    found = []
    for f in _flagged(options):
        flag = f.metadata["flag"]
        if flag.cli_default is not _UNSET:
            default = flag.cli_default
        elif f.default is not dataclasses.MISSING:
            default = f.default
        elif f.default_factory is not dataclasses.MISSING:
            default = None  # a list given on the command line, or the factory's when not
        else:
            default = ...  # required (a positional argument)
        found.append(Parameter(flag.name or f.name, flag.cli_type or hints[f.name], default, flag))
    return found


def build_options(options: type, values: Mapping[str, Any]) -> Any:
    """An Options instance from the command line's values (by parameter name)."""
    fields: dict[str, Any] = {}
    for parameter, f in zip(parameters(options), _flagged(options), strict=True):
        if parameter.name not in values:
            continue
        value = values[parameter.name]
        if parameter.flag.parse is not None:
            if value is not None:
                fields.update(parameter.flag.parse(value))
        elif value is not None or f.default is None:
            fields[f.name] = value
    return options(**fields)


def _flagged(options: type) -> list[dataclasses.Field]:
    """The fields that are command-line parameters, in CLI_ORDER where the class sets one."""
    flagged = [f for f in dataclasses.fields(options) if "flag" in f.metadata]
    order = getattr(options, "CLI_ORDER", None)
    if order:
        flagged.sort(key=lambda f: order.index(f.metadata["flag"].name or f.name))
    return flagged


def options_from_dict(cls: type, data: Mapping[str, Any]) -> Any:
    names = {f.name for f in dataclasses.fields(cls)}
    return cls(**{k: v for k, v in data.items() if k in names})


@dataclass(frozen=True)
class Setup:
    """An option a baseline's run must share for the figures that depend on it to be compared."""

    key: str  # the name FigureKind.needs gives it
    label: str  # how a difference in it is named ("link message size 1M -> 4M")
    fields: tuple[str, ...]  # the Options fields a saved report holds it in, the first present wins


def load(reference: str) -> Any:
    """The object a declaration names as "module:name", imported only now."""
    module, _, name = reference.partition(":")
    return getattr(importlib.import_module(module), name)


@dataclass(frozen=True)
class Command:
    """One command, declared once.

    A command that runs on ranks names a module with `measure(ctx, options)` (every rank)
    and `judge(data, identities, options) -> Report` (rank 0); a command that starts no
    ranks names a module with `run(options) -> Report`. A measuring command also names its
    figure family and the function that reads those figures from a saved report.
    """

    name: str
    help: str
    epilog: str
    options: type
    implementation: str  # the module that does the work, imported only when the command runs
    ranked: bool = True
    # A passing report is its verdict line alone (`watch`: the job's own output is what was wanted).
    terse_pass: bool = False
    # A command that starts no ranks takes a Ctrl-C as one KeyboardInterrupt in its run(), to end
    # what it started first (`watch`: the user's job); any other leaves at once, as a
    # KeyboardInterrupt raised anywhere can land in code that swallows it (torch's import of numpy).
    interrupt_raises: bool = False
    # The --inject kinds it takes, each with what it does (its own, then HARNESS_FAULTS, SLOW_FAULT).
    faults: Mapping[str, str] = field(default_factory=dict)
    # "module:class", the Faults its ranks are given: a subclass striking its own kinds, in its folder.
    fault_actions: str = "ddpcheck.rank.faults:Faults"
    # Tables the terminal draws a chart for after the table itself: table name -> "module:function",
    # the function drawing it from (table, rows, console).
    charts: Mapping[str, str] = field(default_factory=dict)
    # Tables the terminal shows only with --verbose, each with the words of the note that says so.
    details: Mapping[str, str] = field(default_factory=dict)
    # The HTML page's chart makers: modules with `charts(report) -> list[Chart]` (report/html/chart.py).
    html_charts: tuple[str, ...] = ()
    # Commands of one family hold the same kinds of figures: --baseline and --tolerance
    # compare a run with a saved one of its family (allreduce with collectives, say).
    family: str | None = None
    figures: str | None = None  # "module:function", report dict -> list[Figure]
    # The options a baseline's run must share for its figures to be compared (FigureKind.needs).
    setup: tuple[Setup, ...] = ()
    # "module:function", a completed run's report dict -> Check: what the hardware should do,
    # judged when no --baseline is given.
    expected: str | None = None
    # "module:function", its report's rows by table name -> the Prometheus metrics it exports.
    metrics: str | None = None
    # Its pure judges, mutated by `mutmut run` (pyproject.toml's only_mutate lists them all).
    judges: tuple[str, ...] = ()
    # What the directory a report keeps (its log_dir) holds, as its line names it.
    kept: str = "rank logs"
    # Whether its work is sized by the time left: it takes --budget (launcher/budget_options.py).
    budgeted: bool = False
    # Whether its ranks build DistributedDataParallel, whose constructor imports torch._dynamo,
    # which makes the compile cache directory (TORCHINDUCTOR_CACHE_DIR, in the run directory).
    builds_ddp: bool = False

    @property
    def measures(self) -> bool:
        return self.family is not None

    def module(self) -> ModuleType:
        return importlib.import_module(self.implementation)

    def figures_of(self, report: Mapping[str, Any]) -> list[Any]:
        """The figures a saved report of this command holds (none for a command that measures nothing)."""
        return load(self.figures)(report) if self.figures else []


class RankedCommands:
    """`name in RANKED_COMMANDS`: whether the command of that name runs as ranks, as it declares.

    Asked at a rank's first instant, before Typer and torch (rank/arrival.py): it loads that one
    declaration, `checks/<name>/__init__.py`, not every command's (commands.py). A command declared
    anywhere else starts no ranks (tests/test_declarations.py keeps it so).
    """

    def __contains__(self, name: object) -> bool:
        if not isinstance(name, str) or not name.isidentifier():
            return False
        package = f"{__package__}.checks.{name}"
        found = importlib.util.find_spec(package)
        if found is None or found.submodule_search_locations is None:
            return False  # no folder of that name (a module there is no declaration: not loaded)
        declared = getattr(importlib.import_module(package), "COMMAND", None)
        return isinstance(declared, Command) and declared.name == name and declared.ranked


RANKED_COMMANDS = RankedCommands()
