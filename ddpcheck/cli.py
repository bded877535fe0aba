"""The `ddpcheck` command line: declare options, validate input, launch, render, exit.

No torch at module level: `ddpcheck --help` stays instant.
"""

from __future__ import annotations

import inspect
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any

import typer

from ddpcheck import __version__
from ddpcheck.commands import COMMANDS
from ddpcheck.errors import EXIT_COULD_NOT_COMPLETE, EXIT_INTERRUPTED, EXIT_USAGE, UsageError

if TYPE_CHECKING:
    from ddpcheck.report.model import Report
from ddpcheck.options import (
    BACKENDS,
    COLLECTIVES,
    DTYPES,
    OPTIMIZERS,
    AllreduceOptions,
    CollectivesOptions,
    LaunchOptions,
    LinksOptions,
    ProfileOptions,
    TrainOptions,
    options_to_dict,
    parse_ops,
    parse_size,
    parse_sizes,
)

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

LAUNCH = "Launch"
OUTPUT = "Output"


def _one_of(choices: tuple[str, ...]) -> Callable[[str], list[str]]:
    """TAB-completion of an option's values (options.py validates them)."""

    def complete(incomplete: str) -> list[str]:
        return [c for c in choices if c.startswith(incomplete)]

    return complete


Gpus = Annotated[
    int | None,
    typer.Option(help="GPU ranks on this node, one per GPU, over NCCL.", rich_help_panel=LAUNCH),
]
Nproc = Annotated[
    int | None,
    typer.Option(
        help="Ranks of any kind on this node (CPU ranks over gloo when GPUs are too few).",
        rich_help_panel=LAUNCH,
    ),
]
Backend = Annotated[
    str, typer.Option(help="auto, nccl or gloo.", autocompletion=_one_of(BACKENDS), rich_help_panel=LAUNCH)
]
Nnodes = Annotated[
    int, typer.Option(help="Nodes taking part (the same command runs on each).", rich_help_panel=LAUNCH)
]
NodeRank = Annotated[int, typer.Option(help="This node's rank, 0..nnodes-1.", rich_help_panel=LAUNCH)]
RdzvEndpoint = Annotated[
    str | None,
    typer.Option(help="HOST:PORT of the c10d rendezvous, as torchrun.", rich_help_panel=LAUNCH),
]
Timeout = Annotated[
    float,
    typer.Option(help="Seconds any wait may last; a hang becomes a finding.", rich_help_panel=LAUNCH),
]
Inject = Annotated[
    list[str] | None,
    typer.Option(
        help="Inject a fault to prove the check catches it: KIND@RANK[:STAGE], repeatable.",
        rich_help_panel=LAUNCH,
    ),
]
Hidden = Annotated[int, typer.Option(help="Width H of the nn.Linear(H, H) layer.")]
BucketCapMb = Annotated[float, typer.Option(help="DDP's gradient bucket size in MiB.")]
JsonPath = Annotated[
    str | None,
    typer.Option("--json", help="Write the JSON report here ('-' = stdout).", rich_help_panel=OUTPUT),
]
JunitPath = Annotated[
    str | None, typer.Option("--junit", help="Write a JUnit XML report here.", rich_help_panel=OUTPUT)
]
BASELINE = "Baseline"
BaselinePath = Annotated[
    str | None,
    typer.Option(
        "--baseline",
        help="A JSON report of a known-good run (saved with --json): FAIL when a figure is worse than it.",
        rich_help_panel=BASELINE,
    ),
]
Tolerance = Annotated[
    float | None,
    typer.Option(
        help="How much worse than the baseline a figure may be, a fraction of its speed "
        "(default 0.95 on CPU ranks, 0.2 on GPUs; see the README).",
        rich_help_panel=BASELINE,
    ),
]
HtmlPath = Annotated[
    str | None,
    typer.Option(
        "--html",
        help="Write the report as one self-contained HTML page with charts (needs ddpcheck[html]).",
        rich_help_panel=OUTPUT,
    ),
]
Quiet = Annotated[
    bool, typer.Option("--quiet", "-q", help="Print only the verdict and failures.", rich_help_panel=OUTPUT)
]


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


# ---------------------------------------------------------------- shared options, declared once
def _parameter(name: str, annotation: Any, default: Any) -> inspect.Parameter:
    return inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=default, annotation=annotation)


# Every command that runs on ranks takes these; LaunchOptions holds them, by the same names.
LAUNCH_PARAMETERS = [
    _parameter("gpus", Gpus, None),
    _parameter("nproc", Nproc, None),
    _parameter("backend", Backend, "auto"),
    _parameter("nnodes", Nnodes, 1),
    _parameter("node_rank", NodeRank, 0),
    _parameter("rdzv_endpoint", RdzvEndpoint, None),
    _parameter("timeout", Timeout, 60.0),
    _parameter("inject", Inject, None),
]
# Every command that measures speed takes these (commands.py: Command.measures).
BASELINE_PARAMETERS = [
    _parameter("baseline", BaselinePath, None),
    _parameter("tolerance", Tolerance, None),
]
# Every command takes these.
OUTPUT_PARAMETERS = [
    _parameter("json_path", JsonPath, None),
    _parameter("junit_path", JunitPath, None),
    _parameter("html_path", HtmlPath, None),
    _parameter("quiet", Quiet, False),
]


@dataclass(frozen=True)
class Output:
    """Where the report goes besides the terminal."""

    json_path: str | None = None
    junit_path: str | None = None
    html_path: str | None = None
    quiet: bool = False

    def check(self) -> None:
        """Every output file can be written, and --html can draw, before anything is launched."""
        for path, flag in (
            (self.json_path, "--json"),
            (self.junit_path, "--junit"),
            (self.html_path, "--html"),
        ):
            check_writable(path, flag)
        if self.html_path:
            if self.html_path == "-":
                raise UsageError(
                    "--html -: the page needs a file path (standard output is the terminal report)"
                )
            from ddpcheck.report.html import require_charts

            require_charts()

    @property
    def to_stdout(self) -> bool:
        """A report on stdout moves the terminal report to stderr."""
        return self.json_path == "-" or self.junit_path == "-"


@dataclass(frozen=True)
class Baseline:
    """--baseline and --tolerance: a saved report of a known-good run to compare this one with."""

    path: str | None = None
    tolerance: float | None = None

    def load(self) -> dict[str, Any] | None:
        """The baseline report, validated before anything is launched (a bad file is exit 2)."""
        from ddpcheck.report.baseline import load_report, validate_tolerance

        validate_tolerance(self.tolerance)
        if self.path is None:
            if self.tolerance is not None:
                raise UsageError("--tolerance needs --baseline PATH (a saved report to compare with)")
            return None
        return load_report(self.path, "--baseline")


def _take(values: dict[str, Any], parameters: list[inspect.Parameter]) -> dict[str, Any]:
    return {p.name: values.pop(p.name) for p in parameters if p.name in values}


def ranked_command(name: str, epilog: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Declare a command that runs on ranks: its own options, then the shared launch and output ones.

    The decorated function takes the command's own options and returns its typed
    options dataclass; its docstring is the command's help. The command registered with
    Typer takes every option, builds LaunchOptions and Output from the shared ones and
    runs the command (commands.py says which check module measures and judges).
    """

    if name not in COMMANDS:
        raise RuntimeError(f"ddpcheck {name} is declared in cli.py but not registered in commands.py")

    def register(build_options: Callable[..., Any]) -> Callable[..., Any]:
        own = list(inspect.signature(build_options, eval_str=True).parameters.values())
        own = [p.replace(kind=inspect.Parameter.KEYWORD_ONLY) for p in own]

        shared = [
            *LAUNCH_PARAMETERS,
            *(BASELINE_PARAMETERS if COMMANDS[name].measures else []),
            *OUTPUT_PARAMETERS,
        ]

        def command(**values: Any) -> None:
            options = build_options(**_take(values, own))
            output = Output(**_take(values, OUTPUT_PARAMETERS))
            baseline = Baseline(values.pop("baseline", None), values.pop("tolerance", None))
            launch = LaunchOptions(**{**values, "inject": values["inject"] or []})
            run_command(name, options, launch, output, baseline)

        _declare(command, name, build_options.__doc__, [*own, *shared])
        app.command(name, epilog=epilog)(command)
        return build_options

    return register


def plain_command(name: str, epilog: str) -> Callable[[Callable[..., None]], Callable[..., None]]:
    """Declare a command that starts no ranks: its own options, then the shared output ones.

    The decorated function takes its own options and `output` (an Output).
    """

    def register(run: Callable[..., None]) -> Callable[..., None]:
        own = [p for p in inspect.signature(run, eval_str=True).parameters.values() if p.name != "output"]
        own = [p.replace(kind=inspect.Parameter.KEYWORD_ONLY) for p in own]

        def command(**values: Any) -> None:
            run(output=Output(**_take(values, OUTPUT_PARAMETERS)), **values)

        _declare(command, name, run.__doc__, [*own, *OUTPUT_PARAMETERS])
        app.command(name, epilog=epilog)(command)
        return run

    return register


def _declare(
    command: Callable[..., Any], name: str, doc: str | None, parameters: list[inspect.Parameter]
) -> None:
    """Give `command` the signature Typer reads its options from."""
    command.__name__ = name.replace("-", "_")
    command.__doc__ = doc
    command.__signature__ = inspect.Signature(parameters)  # type: ignore[attr-defined]
    command.__annotations__ = {p.name: p.annotation for p in parameters}


@plain_command(
    "env",
    epilog=(
        "Examples: ddpcheck env | ddpcheck env --json env.json (attach it to a bug report: secrets "
        "are redacted) | ddpcheck env --quiet --junit env.xml (a CI gate) "
        "| srun --ntasks-per-node=1 ddpcheck env --quiet (every node of an allocation)"
    ),
)
def env_command(output: Output) -> None:
    """Is this host set up for distributed training? A preflight in one process, no ranks.

    Collects what torch.utils.collect_env does plus NCCL, GPUs, topology,
    /dev/shm, ulimits, network, InfiniBand and the distributed environment
    (MASTER_*, RANK, SLURM_*, NCCL_*, ...), then judges it: the socket
    interfaces exist and are up, MASTER_ADDR resolves, MASTER_PORT is free
    or reachable, CUDA_VISIBLE_DEVICES and LOCAL_RANK name real GPUs,
    /dev/shm and locked memory are large enough. Secrets are redacted.
    Exits 1 only when something FAILs; warnings exit 0.
    """
    from ddpcheck.checks import env
    from ddpcheck.report import terminal as render

    output.check()
    console = render.make_console(stderr=output.to_stdout)
    report = env.run_env()
    # The process ends right after: exempt torch's objects from the garbage
    # collection at exit, which alone costs ~0.5 s of the 3 s budget (measured).
    import gc

    gc.freeze()
    finish(report, console, output)


@plain_command(
    "show",
    epilog=(
        "Examples: ddpcheck show report.json | ddpcheck show report.json --html report.html "
        "| ddpcheck show report.json --quiet"
    ),
)
def show(
    report_path: Annotated[str, typer.Argument(metavar="REPORT.json", help="A report saved with --json.")],
    output: Output,
) -> None:
    """Show a saved report again: the same tables, checks and verdict line, or as HTML.

    Nothing is launched. The exit code is the saved report's verdict (0, 1 or 3);
    a file that is not a ddpcheck report is exit 2.
    """
    from ddpcheck.report import show as showing
    from ddpcheck.report import terminal as render

    output.check()
    report = showing.load(report_path)
    finish(report, render.make_console(stderr=output.to_stdout), output)


@plain_command(
    "compare",
    epilog=(
        "Examples: ddpcheck compare monday.json today.json | ddpcheck compare a.json b.json --tolerance 0.2 "
        "--junit compare.xml | ddpcheck compare node-type.json new-node.json --quiet"
    ),
)
def compare(
    old: Annotated[
        str,
        typer.Argument(
            metavar="OLD.json", help="The baseline: a JSON report saved with --json.", show_default=False
        ),
    ],
    new: Annotated[
        str, typer.Argument(metavar="NEW.json", help="The run to judge against it.", show_default=False)
    ],
    tolerance: Tolerance = None,
    *,
    output: Output,
) -> None:
    """Is NEW slower than OLD? Two saved reports compared like for like; nothing is launched.

    busbw per op and size, each link's bandwidth and latency, each profile phase's time
    and TFLOP/s: exit 1 when a figure is worse than OLD by more than --tolerance. Also shows
    the checks whose verdict changed and what changed in torch, CUDA, NCCL and the driver.
    Setups that differ (world size, backend, device, dtype) are compared only where the
    figures do not depend on what differs; nothing comparable is exit 2.
    """
    import time

    from ddpcheck.report import baseline as baselines
    from ddpcheck.report import terminal as render
    from ddpcheck.report.model import Report

    began = time.monotonic()
    baselines.validate_tolerance(tolerance)
    output.check()
    then, now = baselines.load_report(old, "OLD"), baselines.load_report(new, "NEW")
    chosen = baselines.default_tolerance(now) if tolerance is None else tolerance
    comparison = baselines.compare(then, now, chosen, old)
    verdicts, verdicts_table = baselines.verdict_changes(then, now)
    environment, environment_table = baselines.environment_changes(then, now)
    report = Report(
        "compare",
        checks=[comparison.check, verdicts, environment],
        tables=[comparison.table, verdicts_table, environment_table],
        world=now.get("world", {}),
        options={"old": old, "new": new, "tolerance": chosen},
    )
    report.elapsed_s = time.monotonic() - began
    finish(report, render.make_console(stderr=output.to_stdout), output)


# ---------------------------------------------------------------- the commands that run on ranks
Sizes = Annotated[
    str | None,
    typer.Option(
        help="Message sizes MIN:MAX in bytes (K/M/G suffixes), doubling. Default 1K:4M on CPU, 1M:1G on GPU."
    ),
]
Dtype = Annotated[
    str, typer.Option(help="float32, float16, bfloat16, float64 or int32.", autocompletion=_one_of(DTYPES))
]
Iters = Annotated[int | None, typer.Option(help="Timed iterations per size (default 10 on CPU, 20 on GPU).")]
SweepWarmup = Annotated[
    int | None, typer.Option(help="Untimed iterations per size (default 2 on CPU, 5 on GPU).")
]
MinBusbw = Annotated[
    float | None,
    typer.Option(help="FAIL when a collective's peak bus bandwidth (GB/s) is below this."),
]


@ranked_command(
    "allreduce",
    epilog=(
        "Examples: ddpcheck allreduce --gpus 8 | ddpcheck allreduce --nproc 4 --sizes 1K:64M "
        "| ddpcheck allreduce --dtype bfloat16 --min-busbw 300 --json report.json"
    ),
)
def allreduce(
    sizes: Sizes = None,
    dtype: Dtype = "float32",
    iters: Iters = None,
    warmup: SweepWarmup = None,
    min_busbw: MinBusbw = None,
) -> AllreduceOptions:
    """Is the process group sound, which rank breaks it, and how fast is all_reduce?

    The classic check (all_reduce of ones * rank must give N(N-1)/2 on every rank),
    the rank map, an exact data check at every size, and an nccl-tests style
    bandwidth sweep; a wrong result is localised to the rank at fault.
    """
    low, high = parse_sizes(sizes) if sizes else (None, None)
    return AllreduceOptions(
        min_bytes=low, max_bytes=high, dtype=dtype, iters=iters, warmup=warmup, min_busbw=min_busbw
    )


@ranked_command(
    "collectives",
    epilog=(
        "Examples: ddpcheck collectives --gpus 8 | ddpcheck collectives --nproc 4 --sizes 1K:1M "
        "| ddpcheck collectives --ops all_gather,reduce_scatter --dtype bfloat16 --min-busbw 100 "
        "| ddpcheck collectives --nproc 3 --inject corrupt@1"
    ),
)
def collectives(
    ops: Annotated[
        str | None,
        typer.Option(help=f"Comma-separated collectives to run (default all): {', '.join(COLLECTIVES)}."),
    ] = None,
    sizes: Sizes = None,
    dtype: Dtype = "float32",
    iters: Iters = None,
    warmup: SweepWarmup = None,
    min_busbw: MinBusbw = None,
) -> CollectivesOptions:
    """Does every collective a training job uses work, who breaks it, and how fast is each?

    all_reduce, all_gather, reduce_scatter, broadcast, reduce, all_to_all and sendrecv
    (a ring: rank r sends to r+1 and receives from r-1) in one launch, each checked
    exactly at every size (an integer pattern every rank predicts) and timed like
    nccl-tests (message size, algbw, busbw with nccl-tests' bus factors). A wrong block
    names the rank that sent it, the rank that received it badly, or the link between
    them; a wrong reduction is localised by re-running it on subgroups.
    """
    low, high = parse_sizes(sizes) if sizes else (None, None)
    chosen = parse_ops(ops) if ops is not None else list(COLLECTIVES)
    return CollectivesOptions(
        ops=chosen,
        min_bytes=low,
        max_bytes=high,
        dtype=dtype,
        iters=iters,
        warmup=warmup,
        min_busbw=min_busbw,
    )


@ranked_command(
    "train",
    epilog=(
        "Examples: ddpcheck train --gpus 8 | ddpcheck train --nproc 4 --steps 5 "
        "| ddpcheck train --hidden 4096 --optimizer sgd --lr 0.1 --json train.json "
        "| ddpcheck train --nproc 2 --inject diverge@1"
    ),
)
def train(
    steps: Annotated[int, typer.Option(help="Training steps.")] = 5,
    hidden: Hidden = 1024,
    batch: Annotated[int, typer.Option(help="Rows per rank per step (different data on every rank).")] = 32,
    lr: Annotated[float, typer.Option(help="Learning rate.")] = 1e-3,
    optimizer: Annotated[str, typer.Option(help="adam or sgd.", autocompletion=_one_of(OPTIMIZERS))] = "adam",
    seed: Annotated[int, typer.Option(help="Seed of every rank's initial weights and data.")] = 0,
    bucket_cap_mb: BucketCapMb = 25.0,
) -> TrainOptions:
    """Does DDP train correctly here? The classic 5-step training of one layer, as verdicts.

    nn.Linear(H, H) in DistributedDataParallel, Adam, MSE, a different batch on
    every rank. Checks that DDP's construction gives every rank rank 0's weights
    (ranks start from different seeds), that gradients are identical and equal the
    mean of the ranks' local gradients, that the loss stays finite and falls, that
    weights stay equal bit for bit after every step, and that the result matches one
    process trained on the global batch. A failure names the rank, the step and by how much.
    """
    return TrainOptions(
        steps=steps,
        hidden=hidden,
        batch=batch,
        lr=lr,
        optimizer=optimizer,
        seed=seed,
        bucket_cap_mb=bucket_cap_mb,
    )


@ranked_command(
    "profile",
    epilog=(
        "Examples: ddpcheck profile --gpus 8 | ddpcheck profile --hidden 8192 --batch 64 "
        "| ddpcheck profile --nproc 4 --hidden 1024 --steps 20 --warmup 5 --json profile.json "
        "| ddpcheck profile --straggler-threshold 1.1 --peak-tflops 67"
    ),
)
def profile(
    hidden: Hidden = 4096,
    batch: Annotated[int, typer.Option(help="Rows per rank per step.")] = 32,
    steps: Annotated[int, typer.Option(help="Steps, warm-up included.")] = 10,
    warmup: Annotated[
        int, typer.Option(help="First steps shown but kept out of the summary (start-up costs).")
    ] = 2,
    straggler_threshold: Annotated[
        float,
        typer.Option(help="WARN when a rank's compute time per step is this many times the others' median."),
    ] = 1.2,
    peak_tflops: Annotated[
        float | None,
        typer.Option(help="The device's peak TFLOP/s, for the fraction of peak (default: known GPUs)."),
    ] = None,
    bucket_cap_mb: BucketCapMb = 25.0,
) -> ProfileOptions:
    """Where does each DDP step's time go, on every rank, and which rank is slow?

    Times forward, backward and the optimizer update of nn.Linear(H, H) in
    DistributedDataParallel on every rank (CUDA events on GPUs), the communication
    backward could not hide (backward with gradient sync minus backward under
    no_sync()), gradient bytes and bus bandwidth, FLOPs and TFLOP/s, and peak memory;
    warns about stragglers and unsteady ranks by name.
    """
    return ProfileOptions(
        hidden=hidden,
        batch=batch,
        steps=steps,
        warmup=warmup,
        straggler_threshold=straggler_threshold,
        peak_tflops=peak_tflops,
        bucket_cap_mb=bucket_cap_mb,
    )


@ranked_command(
    "links",
    epilog=(
        "Examples: ddpcheck links --gpus 8 | ddpcheck links --nproc 4 --size 4M "
        "| ddpcheck links --nnodes 16 --rdzv-endpoint node01:29400 --gpus 8 --json links.json "
        "| ddpcheck links --nproc 4 --inject slowlink@2"
    ),
)
def links(
    size: Annotated[
        str | None,
        typer.Option(
            help="Bytes each rank sends its partner per exchange (K/M/G). Default 1M on CPU, 64M on GPU."
        ),
    ] = None,
    iters: Annotated[
        int | None,
        typer.Option(help="Timed exchanges per pair, all passes together (default 50 on CPU, 20 on GPU)."),
    ] = None,
    warmup: Annotated[
        int | None,
        typer.Option(help="Untimed exchanges per pair before each pass (default 3 on CPU, 5 on GPU)."),
    ] = None,
    threshold: Annotated[
        float | None,
        typer.Option(
            help="FAIL a link below this fraction of the median of comparable links "
            "(default 0.2 on CPU, 0.5 on GPU); latency above 1/F x the median."
        ),
    ] = None,
    min_gbps: Annotated[
        float | None, typer.Option(help="FAIL any link whose bandwidth (GB/s, each way) is below this.")
    ] = None,
) -> LinksOptions:
    """Which GPU, host or cable is slower than its peers? Every pair of ranks measured.

    In n-1 rounds (a round robin; all pairs of a round at once) every pair of ranks
    exchanges --size bytes both ways at once, and a small round trip gives the latency:
    within each node every pair, between nodes rail by rail (local rank i with local
    rank i). Each link is judged against the median of comparable links; a rank or host
    most of whose links are slow is named, else the slow link itself.
    """
    return LinksOptions(
        size=parse_size(size) if size is not None else None,
        iters=iters,
        warmup=warmup,
        threshold=threshold,
        min_gbps=min_gbps,
    )


def run_command(
    command: str, options: Any, launch_options: LaunchOptions, output: Output, baseline: Baseline
) -> None:
    """Validate, launch (or run as a rank), render, and exit with the verdict's code."""
    from ddpcheck.launcher import slurm
    from ddpcheck.rank.faults import parse_faults
    from ddpcheck.report import terminal as render

    launch_options.node_rank = slurm.default_node_rank(launch_options, os.environ)
    launch_options.validate()
    options.validate()
    parse_faults(launch_options.inject, command)
    output.check()
    known_good = baseline.load()
    from ddpcheck.launcher import launch

    launch.quiet_torch_cpp_logs()
    console = render.make_console(stderr=output.to_stdout)
    from ddpcheck.launcher import plan as planning

    inline = planning.detect_inline(launch_options)
    plan = planning.plan_inline(launch_options) if inline else planning.plan_launch(launch_options)
    parse_faults(plan.inject, command, plan.world_size)
    least = getattr(options, "min_world_size", 1)
    if plan.world_size < least:
        raise UsageError(
            f"ddpcheck {command} needs at least {least} ranks, got {plan.world_size}: "
            f"give --nproc {least} (CPU ranks where GPUs are too few), --gpus or --nnodes"
        )
    options = options.for_device(plan.device) if hasattr(options, "for_device") else options
    if known_good is not None:
        from ddpcheck.report.baseline import check_setup, planned_setup

        planned = planned_setup(command, plan.world_size, plan.backend, plan.device, options_to_dict(options))
        check_setup(known_good, command, planned, baseline.path)
    if inline:
        outcome = launch.run_inline(command, options_to_dict(options), plan)
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
                report = launch.launch(command, options_to_dict(options), plan, progress.update)
        except KeyboardInterrupt:
            print("ddpcheck: interrupted; every rank was stopped", file=sys.stderr)
            raise typer.Exit(EXIT_INTERRUPTED) from None
        report.notes = [n for n in report.notes if n not in plan.notes]
    judge_speed(report, known_good, baseline)
    finish(report, console, output)


def judge_speed(report: Report, known_good: dict[str, Any] | None, baseline: Baseline) -> None:
    """After the run, on the launcher side: against the baseline, or else what the hardware should do."""
    from ddpcheck.report import baseline as baselines
    from ddpcheck.report.model import Check, Status, Verdict

    if report.world.get("report_on"):
        return  # not rank 0's node: the report, and its comparison, are printed there
    if known_good is None:
        if baselines.FAMILIES.get(report.command) == "bandwidth" and report.verdict != Verdict.ERROR:
            from ddpcheck.report.expectations import judge_expected

            report.checks.append(judge_expected(report.to_dict()))
        return
    if report.verdict == Verdict.ERROR:
        report.checks.append(Check("baseline", Status.SKIP, "the run did not complete: nothing to compare"))
        return
    now = report.to_dict()
    tolerance = baselines.default_tolerance(now) if baseline.tolerance is None else baseline.tolerance
    try:
        comparison = baselines.compare(known_good, now, tolerance, f"baseline {baseline.path}")
    except UsageError as exc:
        # After the run, not before it: the run's own verdicts still stand, and this one fails.
        report.checks.append(Check("baseline", Status.FAIL, str(exc)))
        return
    report.checks.append(comparison.check)
    report.tables.append(comparison.table)


def finish(report: Report, console: Any, output: Output) -> None:
    from ddpcheck.report import terminal as render
    from ddpcheck.report.model import write_json, write_junit

    render.render_report(report, console, quiet=output.quiet)
    if output.json_path:
        write_json(report, output.json_path)
    if output.junit_path:
        write_junit(report, output.junit_path)
    if output.html_path:
        from ddpcheck.report.html import write_html

        write_html(report, output.html_path)
    raise typer.Exit(report.verdict.exit_code)


def check_writable(path: str | None, flag: str) -> None:
    """Refuse an output path that cannot be written before anything is launched."""
    if not path or path == "-":
        return
    if os.path.isdir(path):
        raise UsageError(f"{flag} {path}: is a directory")
    parent = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(parent):
        raise UsageError(f"{flag} {path}: directory {parent} does not exist")
    if not os.access(parent, os.W_OK) or (os.path.exists(path) and not os.access(path, os.W_OK)):
        raise UsageError(f"{flag} {path}: not writable")


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
