"""The `ddpcheck` command line: declare options, validate input, launch, render, exit.

No torch at module level: `ddpcheck --help` stays instant.
"""

from __future__ import annotations

import os
import sys
from dataclasses import replace
from typing import Annotated, Any

import typer

from ddpcheck import __version__
from ddpcheck.errors import UsageError
from ddpcheck.options import AllreduceOptions, LaunchOptions, options_to_dict, parse_sizes
from ddpcheck.report import EXIT_INTERRUPTED, EXIT_USAGE, Report, Verdict

app = typer.Typer(
    name="ddpcheck",
    help=(
        "Can these ranks train with DistributedDataParallel? Each command launches ranks "
        "(or runs as one under torchrun/srun), checks, and exits 0 (pass), 1 (a check failed), "
        "2 (bad usage) or 3 (could not complete: a rank crashed, hung or never joined)."
    ),
    no_args_is_help=True,
    context_settings={"help_option_names": ["-h", "--help"]},
)

LAUNCH = "Launch"
OUTPUT = "Output"

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
Backend = Annotated[str, typer.Option(help="auto, nccl or gloo.", rich_help_panel=LAUNCH)]
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
JsonPath = Annotated[
    str | None,
    typer.Option("--json", help="Write the JSON report here ('-' = stdout).", rich_help_panel=OUTPUT),
]
JunitPath = Annotated[
    str | None, typer.Option("--junit", help="Write a JUnit XML report here.", rich_help_panel=OUTPUT)
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


@app.command(
    epilog=(
        "Examples: ddpcheck allreduce --gpus 8 | ddpcheck allreduce --nproc 4 --sizes 1K:64M "
        "| ddpcheck allreduce --dtype bfloat16 --min-busbw 300 --json report.json"
    )
)
def allreduce(
    gpus: Gpus = None,
    nproc: Nproc = None,
    backend: Backend = "auto",
    nnodes: Nnodes = 1,
    node_rank: NodeRank = 0,
    rdzv_endpoint: RdzvEndpoint = None,
    timeout: Timeout = 60.0,
    inject: Inject = None,
    sizes: Annotated[
        str | None,
        typer.Option(
            help="Message sizes MIN:MAX in bytes (K/M/G suffixes), doubling. "
            "Default 1K:4M on CPU, 1M:1G on GPU."
        ),
    ] = None,
    dtype: Annotated[str, typer.Option(help="float32, float16, bfloat16, float64 or int32.")] = "float32",
    iters: Annotated[
        int | None, typer.Option(help="Timed iterations per size (default 10 on CPU, 20 on GPU).")
    ] = None,
    warmup: Annotated[
        int | None, typer.Option(help="Untimed iterations per size (default 2 on CPU, 5 on GPU).")
    ] = None,
    min_busbw: Annotated[
        float | None, typer.Option(help="FAIL when the peak bus bandwidth (GB/s) is below this.")
    ] = None,
    json_path: JsonPath = None,
    junit_path: JunitPath = None,
    quiet: Quiet = False,
) -> None:
    """Is the process group sound, which rank breaks it, and how fast is all_reduce?

    The classic check (all_reduce of ones * rank must give N(N-1)/2 on every rank),
    the rank map, an exact data check at every size, and an nccl-tests style
    bandwidth sweep; a wrong result is localised to the rank at fault.
    """
    low, high = parse_sizes(sizes) if sizes else (None, None)
    options = AllreduceOptions(
        min_bytes=low, max_bytes=high, dtype=dtype, iters=iters, warmup=warmup, min_busbw=min_busbw
    )
    launch_options = LaunchOptions(
        gpus=gpus,
        nproc=nproc,
        backend=backend,
        nnodes=nnodes,
        node_rank=node_rank,
        rdzv_endpoint=rdzv_endpoint,
        timeout=timeout,
        inject=inject or [],
    )
    run_command("allreduce", launch_options, options, json_path, junit_path, quiet)


def run_command(
    command: str,
    launch_options: LaunchOptions,
    options: Any,
    json_path: str | None,
    junit_path: str | None,
    quiet: bool,
) -> None:
    """Validate, launch (or run as a rank), render, and exit with the verdict's code."""
    from ddpcheck import render
    from ddpcheck.faults import parse_faults

    launch_options.validate()
    options.validate()
    parse_faults(launch_options.inject, command)
    for path, flag in ((json_path, "--json"), (junit_path, "--junit")):
        check_writable(path, flag)
    from ddpcheck import launch

    console = render.make_console(stderr=json_path == "-" or junit_path == "-")
    if launch.already_launched():
        plan = launch.plan_inline(launch_options)
    else:
        plan = launch.plan_launch(launch_options)
    parse_faults(plan.inject, command, plan.world_size)
    options = resolve_defaults(options, plan.device)
    if launch.already_launched():
        outcome = launch.run_inline(command, options_to_dict(options), plan)
        if isinstance(outcome, Verdict):
            raise typer.Exit(outcome.exit_code)
        report = outcome
    else:
        if not quiet:
            for note in plan.notes:
                render.say(console, note, "dim")
        with render.LaunchProgress(console, enabled=not quiet) as progress:
            report = launch.launch(command, options_to_dict(options), plan, progress.update)
        report.notes = [n for n in report.notes if n not in plan.notes]
    finish(report, console, json_path, junit_path, quiet)


def resolve_defaults(options: Any, device: str) -> Any:
    """Fill the options whose defaults depend on the device."""
    if isinstance(options, AllreduceOptions):
        gpu = device == "cuda"
        return replace(
            options,
            min_bytes=options.min_bytes or (1024**2 if gpu else 1024),
            max_bytes=options.max_bytes or (1024**3 if gpu else 4 * 1024**2),
            iters=options.iters or (20 if gpu else 10),
            warmup=options.warmup if options.warmup is not None else (5 if gpu else 2),
        )
    return options


def finish(report: Report, console: Any, json_path: str | None, junit_path: str | None, quiet: bool) -> None:
    from ddpcheck import render
    from ddpcheck.report import write_json, write_junit

    render.render_report(report, console, quiet=quiet)
    if json_path:
        write_json(report, json_path)
    if junit_path:
        write_junit(report, junit_path)
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
        code = app(standalone_mode=False)
    except UsageError as exc:
        _usage_exit(str(exc))
    except KeyboardInterrupt:
        print("ddpcheck: interrupted; every rank was stopped", file=sys.stderr)
        sys.exit(EXIT_INTERRUPTED)
    except Exception as exc:
        # Typer's bundled Click raises its own usage errors; they carry exit_code 2.
        if getattr(exc, "exit_code", None) == EXIT_USAGE and hasattr(exc, "format_message"):
            _usage_exit(exc.format_message())
        raise
    sys.exit(code if isinstance(code, int) else 0)


def _usage_exit(message: str) -> None:
    line = " ".join(message.split())
    print(f"ddpcheck: error: {line}", file=sys.stderr)
    sys.exit(EXIT_USAGE)
