"""The `ddpcheck` command line: declare options, validate input, launch, render, exit.

No torch at module level: `ddpcheck --help` stays instant.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING, Annotated, Any

import typer

from ddpcheck import __version__
from ddpcheck.errors import EXIT_COULD_NOT_COMPLETE, EXIT_INTERRUPTED, EXIT_USAGE, UsageError

if TYPE_CHECKING:
    from ddpcheck.report import Report
from ddpcheck.options import (
    BACKENDS,
    DTYPES,
    OPTIMIZERS,
    AllreduceOptions,
    LaunchOptions,
    LinksOptions,
    ProfileOptions,
    TrainOptions,
    options_from_dict,
    options_to_dict,
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
    "env",
    epilog=(
        "Examples: ddpcheck env | ddpcheck env --json env.json (attach it to a bug report: secrets "
        "are redacted) | ddpcheck env --quiet --junit env.xml (a CI gate) "
        "| srun --ntasks-per-node=1 ddpcheck env --quiet (every node of an allocation)"
    ),
)
def env_command(json_path: JsonPath = None, junit_path: JunitPath = None, quiet: Quiet = False) -> None:
    """Is this host set up for distributed training? A preflight in one process, no ranks.

    Collects what torch.utils.collect_env does plus NCCL, GPUs, topology,
    /dev/shm, ulimits, network, InfiniBand and the distributed environment
    (MASTER_*, RANK, SLURM_*, NCCL_*, ...), then judges it: the socket
    interfaces exist and are up, MASTER_ADDR resolves, MASTER_PORT is free
    or reachable, CUDA_VISIBLE_DEVICES and LOCAL_RANK name real GPUs,
    /dev/shm and locked memory are large enough. Secrets are redacted.
    Exits 1 only when something FAILs; warnings exit 0.
    """
    from ddpcheck import env, render

    for path, flag in ((json_path, "--json"), (junit_path, "--junit")):
        check_writable(path, flag)
    console = render.make_console(stderr=json_path == "-" or junit_path == "-")
    report = env.run_env()
    # The process ends right after: exempt torch's objects from the garbage
    # collection at exit, which alone costs ~0.5 s of the 3 s budget (measured).
    import gc

    gc.freeze()
    finish(report, console, json_path, junit_path, quiet)


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
    dtype: Annotated[
        str,
        typer.Option(help="float32, float16, bfloat16, float64 or int32.", autocompletion=_one_of(DTYPES)),
    ] = "float32",
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
    run_command("allreduce", options, locals())


@app.command(
    epilog=(
        "Examples: ddpcheck train --gpus 8 | ddpcheck train --nproc 4 --steps 5 "
        "| ddpcheck train --hidden 4096 --optimizer sgd --lr 0.1 --json train.json "
        "| ddpcheck train --nproc 2 --inject diverge@1"
    )
)
def train(
    gpus: Gpus = None,
    nproc: Nproc = None,
    backend: Backend = "auto",
    nnodes: Nnodes = 1,
    node_rank: NodeRank = 0,
    rdzv_endpoint: RdzvEndpoint = None,
    timeout: Timeout = 60.0,
    inject: Inject = None,
    steps: Annotated[int, typer.Option(help="Training steps.")] = 5,
    hidden: Hidden = 1024,
    batch: Annotated[int, typer.Option(help="Rows per rank per step (different data on every rank).")] = 32,
    lr: Annotated[float, typer.Option(help="Learning rate.")] = 1e-3,
    optimizer: Annotated[str, typer.Option(help="adam or sgd.", autocompletion=_one_of(OPTIMIZERS))] = "adam",
    seed: Annotated[int, typer.Option(help="Seed of every rank's initial weights and data.")] = 0,
    bucket_cap_mb: BucketCapMb = 25.0,
    json_path: JsonPath = None,
    junit_path: JunitPath = None,
    quiet: Quiet = False,
) -> None:
    """Does DDP train correctly here? The classic 5-step training of one layer, as verdicts.

    nn.Linear(H, H) in DistributedDataParallel, Adam, MSE, a different batch on
    every rank. Checks that DDP's construction gives every rank rank 0's weights
    (ranks start from different seeds), that gradients are identical and equal the
    mean of the ranks' local gradients, that the loss stays finite and falls, that
    weights stay equal bit for bit after every step, and that the result matches one
    process trained on the global batch. A failure names the rank, the step and by how much.
    """
    options = options_from_dict(TrainOptions, locals())
    run_command("train", options, locals())


@app.command(
    epilog=(
        "Examples: ddpcheck profile --gpus 8 | ddpcheck profile --hidden 8192 --batch 64 "
        "| ddpcheck profile --nproc 4 --hidden 1024 --steps 20 --warmup 5 --json profile.json "
        "| ddpcheck profile --straggler-threshold 1.1 --peak-tflops 67"
    )
)
def profile(
    gpus: Gpus = None,
    nproc: Nproc = None,
    backend: Backend = "auto",
    nnodes: Nnodes = 1,
    node_rank: NodeRank = 0,
    rdzv_endpoint: RdzvEndpoint = None,
    timeout: Timeout = 60.0,
    inject: Inject = None,
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
    json_path: JsonPath = None,
    junit_path: JunitPath = None,
    quiet: Quiet = False,
) -> None:
    """Where does each DDP step's time go, on every rank, and which rank is slow?

    Times forward, backward and the optimizer update of nn.Linear(H, H) in
    DistributedDataParallel on every rank (CUDA events on GPUs), the communication
    backward could not hide (backward with gradient sync minus backward under
    no_sync()), gradient bytes and bus bandwidth, FLOPs and TFLOP/s, and peak memory;
    warns about stragglers and unsteady ranks by name.
    """
    options = options_from_dict(ProfileOptions, locals())
    run_command("profile", options, locals())


@app.command(
    epilog=(
        "Examples: ddpcheck links --gpus 8 | ddpcheck links --nproc 4 --size 4M "
        "| ddpcheck links --nnodes 16 --rdzv-endpoint node01:29400 --gpus 8 --json links.json "
        "| ddpcheck links --nproc 4 --inject slowlink@2"
    )
)
def links(
    gpus: Gpus = None,
    nproc: Nproc = None,
    backend: Backend = "auto",
    nnodes: Nnodes = 1,
    node_rank: NodeRank = 0,
    rdzv_endpoint: RdzvEndpoint = None,
    timeout: Timeout = 60.0,
    inject: Inject = None,
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
    json_path: JsonPath = None,
    junit_path: JunitPath = None,
    quiet: Quiet = False,
) -> None:
    """Which GPU, host or cable is slower than its peers? Every pair of ranks measured.

    In n-1 rounds (a round robin; all pairs of a round at once) every pair of ranks
    exchanges --size bytes both ways at once, and a small round trip gives the latency:
    within each node every pair, between nodes rail by rail (local rank i with local
    rank i). Each link is judged against the median of comparable links; a rank or host
    most of whose links are slow is named, else the slow link itself.
    """
    from ddpcheck.options import parse_size

    options = LinksOptions(
        size=parse_size(size) if size is not None else None,
        iters=iters,
        warmup=warmup,
        threshold=threshold,
        min_gbps=min_gbps,
    )
    run_command("links", options, locals())


def run_command(command: str, options: Any, params: dict[str, Any]) -> None:
    """Validate, launch (or run as a rank), render, and exit with the verdict's code.

    `params` are the command's parameters: the launch and output options every command shares.
    """
    launch_options = options_from_dict(LaunchOptions, {**params, "inject": params["inject"] or []})
    json_path, junit_path, quiet = params["json_path"], params["junit_path"], params["quiet"]
    from ddpcheck import render, slurm
    from ddpcheck.faults import parse_faults

    launch_options.node_rank = slurm.default_node_rank(launch_options, os.environ)
    launch_options.validate()
    options.validate()
    parse_faults(launch_options.inject, command)
    for path, flag in ((json_path, "--json"), (junit_path, "--junit")):
        check_writable(path, flag)
    from ddpcheck import launch

    launch.quiet_torch_cpp_logs()
    console = render.make_console(stderr=json_path == "-" or junit_path == "-")
    from ddpcheck import plan as planning

    inline = planning.detect_inline(launch_options)
    plan = planning.plan_inline(launch_options) if inline else planning.plan_launch(launch_options)
    parse_faults(plan.inject, command, plan.world_size)
    least = getattr(options, "min_world_size", 1)
    if plan.world_size < least:
        raise UsageError(
            f"ddpcheck {command} needs at least {least} ranks, got {plan.world_size}: "
            f"give --nproc {least} (CPU ranks where GPUs are too few), --gpus or --nnodes"
        )
    options = resolve_defaults(options, plan.device)
    if inline:
        outcome = launch.run_inline(command, options_to_dict(options), plan)
        from ddpcheck.report import Verdict

        if isinstance(outcome, Verdict):
            raise typer.Exit(outcome.exit_code)
        report = outcome
    else:
        if not quiet:
            for note in plan.notes:
                render.say(console, note, "dim")
        try:
            with render.LaunchProgress(console, enabled=not quiet) as progress:
                report = launch.launch(command, options_to_dict(options), plan, progress.update)
        except KeyboardInterrupt:
            print("ddpcheck: interrupted; every rank was stopped", file=sys.stderr)
            raise typer.Exit(EXIT_INTERRUPTED) from None
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
    if isinstance(options, LinksOptions):
        # How these were chosen (20 healthy runs, a slowed link named every time): README, `ddpcheck links`.
        gpu = device == "cuda"
        return replace(
            options,
            size=options.size or (64 * 1024**2 if gpu else 1024**2),
            iters=options.iters or (20 if gpu else 50),
            warmup=options.warmup if options.warmup is not None else (5 if gpu else 3),
            threshold=options.threshold or (0.5 if gpu else 0.2),
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
