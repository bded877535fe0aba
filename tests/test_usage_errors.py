"""Bad input: exit 2 with one line on stderr, no traceback, and no rank spawned."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from ddpcheck.errors import UsageError
from ddpcheck.launcher.options import parse_endpoint
from ddpcheck.rank.faults import Fault, check_ranks, parse_fault, parse_faults
from ddpcheck.report.units import parse_size, parse_sizes
from tests.conftest import Run, assert_usage_error

BAD_INVOCATIONS = {
    "zero ranks": ["--nproc", "0"],
    "negative ranks": ["--nproc", "-1"],
    "absurd ranks": ["--nproc", "100000"],
    "not a number": ["--nproc", "abc"],
    "more GPUs than exist": ["--gpus", "8"],
    "gpus and nproc": ["--gpus", "1", "--nproc", "2"],
    "unknown backend": ["--backend", "mpi"],
    "nccl without CUDA": ["--backend", "nccl"],
    "unknown dtype": ["--dtype", "float8"],
    "malformed size": ["--sizes", "1X:2M"],
    "min above max": ["--sizes", "4M:1K"],
    "three sizes": ["--sizes", "1K:2K:4K"],
    "zero size": ["--sizes", "0:1K"],
    "step factor of 1": ["--step-factor", "1"],
    "zero iterations": ["--iters", "0"],
    "negative warmup": ["--warmup", "-1"],
    "negative min busbw": ["--min-busbw", "-1"],
    "zero timeout": ["--timeout", "0"],
    "endpoint without port": ["--nnodes", "2", "--rdzv-endpoint", "nodeport"],
    "endpoint port out of range": ["--nnodes", "2", "--rdzv-endpoint", "127.0.0.1:99999"],
    "endpoint that does not resolve": ["--rdzv-endpoint", "no-such-host.invalid:29500"],
    "nnodes without endpoint": ["--nnodes", "2"],
    "node rank not below nnodes": ["--nnodes", "2", "--node-rank", "2", "--rdzv-endpoint", "127.0.0.1:29500"],
    "unknown fault": ["--inject", "explode@1"],
    "fault for another command": ["--inject", "nan@1"],
    "fault rank outside the world": ["--nproc", "2", "--inject", "corrupt@5"],
    "fault stage unknown": ["--inject", "hang@1:nowhere"],
    "fault without rank": ["--inject", "crash"],
    "unknown option": ["--frobnicate"],
}


@pytest.mark.parametrize("args", BAD_INVOCATIONS.values(), ids=BAD_INVOCATIONS.keys())
def test_bad_invocation_is_one_line_and_exit_2(ddpcheck, scratch, args: list[str]) -> None:
    run = ddpcheck("allreduce", *args)
    assert_usage_error(run, scratch)


@pytest.mark.parametrize("flag", ["--json", "--junit"])
def test_unwritable_output_paths(ddpcheck, scratch, tmp_path: Path, flag: str) -> None:
    for path in (str(tmp_path / "missing" / "r.out"), str(tmp_path)):
        run = ddpcheck("allreduce", flag, path)
        assert run.code == 2 and run.stderr.startswith(f"ddpcheck: error: {flag} "), run.stderr
        assert len(run.stderr.strip().splitlines()) == 1
        assert list(scratch.iterdir()) == []


def test_port_in_use_is_named(ddpcheck, scratch) -> None:
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        run = ddpcheck("allreduce", "--rdzv-endpoint", f"127.0.0.1:{port}")
    assert run.code == 2
    assert f"127.0.0.1:{port} is already in use" in run.stderr
    assert list(scratch.iterdir()) == []


@pytest.mark.parametrize("value", ["eth9", "^lo,eth", "lo,eth9"])
def test_a_socket_interface_that_fails_every_rank_is_refused_before_any_starts(
    ddpcheck, scratch, value: str
) -> None:
    run = ddpcheck("allreduce", "--nproc", "2", env={"GLOO_SOCKET_IFNAME": value})
    assert_usage_error(run, scratch)
    assert f"GLOO_SOCKET_IFNAME={value}" in run.stderr and "Fix: name" in run.stderr
    assert "rank crashed" not in run.stderr
    assert run.seconds < 20  # refused before torch is imported (torch alone takes seconds here)


def test_fatal_settings_are_env_s_failures_and_only_those_of_this_run(tmp_path: Path) -> None:
    from ddpcheck.checks.env.refusals import backend_without_torch, fatal_setting

    bad = fatal_setting({"GLOO_SOCKET_IFNAME": "eth9"}, "gloo", inline=False)
    assert bad is not None and bad.name == "GLOO_SOCKET_IFNAME" and "Fix:" in bad.detail
    assert fatal_setting({"GLOO_SOCKET_IFNAME": "lo"}, "gloo", inline=False) is None
    # Another backend's variable does not stop this run; nor does a MASTER_ADDR ddpcheck's launcher replaces.
    assert fatal_setting({"NCCL_SOCKET_IFNAME": "eth9"}, "gloo", inline=False) is None
    assert fatal_setting({"NCCL_SOCKET_IFNAME": "=eth9"}, "nccl", inline=False).name == "NCCL_SOCKET_IFNAME"
    unresolvable = {"MASTER_ADDR": "no-such-host.invalid", "MASTER_PORT": "29500"}
    assert fatal_setting(unresolvable, "gloo", inline=False) is None
    found = fatal_setting(unresolvable, "gloo", inline=True)
    assert found is not None and found.name == "MASTER_ADDR" and "does not resolve" in found.detail
    assert (
        fatal_setting({"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "http"}, "gloo", True).name == "MASTER_PORT"
    )
    assert fatal_setting({"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29500"}, "gloo", inline=True) is None
    # The backend is known before torch where --backend says it, or no NVIDIA driver is here.
    assert backend_without_torch("nccl", tmp_path / "none") == "nccl"
    assert backend_without_torch("auto", tmp_path / "none") == "gloo"
    (tmp_path / "gpus" / "0000:01:00.0").mkdir(parents=True)
    assert backend_without_torch("auto", tmp_path / "gpus") is None


def test_help_lists_examples(ddpcheck) -> None:
    run = ddpcheck("allreduce", "--help")
    assert run.code == 0 and "--min-busbw" in run.stdout and "Examples" in run.stdout


def test_watch_runs_only_a_program_it_can_execute(tmp_path: Path) -> None:
    """A name on PATH or a path taken as it is; a directory, a file that cannot run, or nothing: refused."""
    from ddpcheck.checks.watch import WatchOptions

    script = tmp_path / "train.sh"
    script.write_text("#!/bin/sh\n")
    for program in ("sh", sys.executable, "../" * 8 + sys.executable.lstrip("/")):
        WatchOptions(command=[program]).validate()
    script.chmod(0o755)
    WatchOptions(command=[str(script)]).validate()
    script.chmod(0o644)
    for program in (str(tmp_path), str(script), "no-such-command-here", str(tmp_path / "none")):
        with pytest.raises(UsageError, match="no such command"):
            WatchOptions(command=[program]).validate()


# ------------------------------------------------------------------ the parsers
@pytest.mark.parametrize(
    ("text", "size"),
    [("64", 64), ("4K", 4096), ("16M", 16 * 2**20), ("1G", 2**30), ("2kb", 2048), ("8MiB", 8 * 2**20)],
)
def test_parse_size(text: str, size: int) -> None:
    assert parse_size(text) == size


def test_parse_sizes() -> None:
    assert parse_sizes("1K:64M") == (1024, 64 * 2**20)
    assert parse_sizes("16M") == (16 * 2**20, 16 * 2**20)
    for bad in ("", "K", "1K:", "-1:2", "2:1", "1:2:3", "32G"):
        with pytest.raises(UsageError):
            parse_sizes(bad)


def test_parse_endpoint() -> None:
    assert parse_endpoint("node01:29500") == ("node01", 29500)
    assert parse_endpoint("[::1]:29500") == ("::1", 29500)
    for bad in ("node01", ":29500", "node01:", "node01:port", "node01:0", "node 01:1"):
        with pytest.raises(UsageError):
            parse_endpoint(bad)


def test_parse_fault() -> None:
    assert parse_fault("corrupt@2", "allreduce") == Fault("corrupt", 2, "measure")
    assert parse_fault("hang@1:join", "train") == Fault("hang", 1, "join")
    assert str(parse_fault("kill@3", "profile")) == "kill@3:measure"
    for bad in ("corrupt@x", "corrupt@1:join", "corrupt", "@1", "nan@1"):
        with pytest.raises(UsageError):
            parse_fault(bad, "allreduce")
    with pytest.raises(UsageError):
        check_ranks([parse_fault("crash@4", "allreduce")], 4)


def test_parse_faults_takes_comma_lists_and_repeats() -> None:
    assert parse_faults(["hang@1,slow@2", "crash@0:join"], "train") == [
        Fault("hang", 1),
        Fault("slow", 2),
        Fault("crash", 0, "join"),
    ]
    with pytest.raises(UsageError, match="unknown --inject fault ''"):
        parse_faults(["hang@1,"], "train")
    with pytest.raises(UsageError, match="applies to"):
        parse_faults(["hang@1,corrupt@0"], "train")


# ------------------------------------------------------------------ first contact
def test_bare_ddpcheck_prints_readable_help(ddpcheck) -> None:
    """No arguments: the whole help, one option a line as with --help (Typer: stderr, exit 2)."""
    run = ddpcheck()
    assert run.code == 2 and run.stdout == ""
    helped = ddpcheck("--help")
    assert run.stderr.strip() == helped.stdout.strip()
    assert "ddpcheck: error" not in run.stderr and len(run.stderr.splitlines()) > 10


def test_option_before_the_command_says_where_it_goes(ddpcheck, scratch) -> None:
    run = ddpcheck("--nproc", "2", "allreduce")
    assert_usage_error(run, scratch)
    assert run.stderr.strip().endswith(
        "--nproc is an option of the commands, not of ddpcheck itself: ddpcheck allreduce --nproc 2"
    ), run.stderr
    run = ddpcheck("--frobnicate", "allreduce")  # an option of no command: Click's own answer
    assert_usage_error(run, scratch)
    assert "no such option --frobnicate; ddpcheck --help lists them" in run.stderr


def test_unknown_collective_suggests_the_close_one(ddpcheck, scratch) -> None:
    run = ddpcheck("collectives", "--ops", "allreduce")
    assert_usage_error(run, scratch)
    assert "did you mean all_reduce?" in run.stderr


def test_help_names_values_and_inject_kinds(ddpcheck) -> None:
    """Readable metavars, no Python types; each command lists the --inject kinds it takes."""
    from ddpcheck.command import parameters
    from ddpcheck.commands import COMMANDS
    from ddpcheck.rank.faults import KINDS

    for name, command in COMMANDS.items():
        # Typer shows the type of a variadic argument whatever its metavar (watch's -- COMMAND...).
        text = ddpcheck(name, "--help").stdout.replace("COMMAND <list[str]>", "COMMAND")
        # Typer shows a positional argument's type beside its name (REPORT.json <str>, DIR <str>).
        for argument in (p for p in parameters(command.options) if p.flag.argument):
            text = text.replace(f"{argument.flag.metavar} <str>", "")
        assert "<str>" not in text, name
        assert "<int>" not in text and "<float>" not in text and "list[" not in text, name
        for kind in command.faults:
            assert f"    {kind}" in text and KINDS[kind][1] in " ".join(text.split()), (name, kind)
    text = ddpcheck("allreduce", "--help").stdout
    for shown in ("--sizes MIN:MAX", "--inject KIND@RANK[:STAGE]", "--json PATH", "--timeout SECONDS"):
        assert shown in text


MALFORMED_LAUNCHER_ENVIRONMENTS = {
    "rank not a number": {"RANK": "abc", "WORLD_SIZE": "2"},
    "world size not a number": {"RANK": "0", "WORLD_SIZE": "two"},
    "rank outside the world": {"RANK": "3", "WORLD_SIZE": "2"},
    "local rank not a number": {"RANK": "0", "WORLD_SIZE": "2", "LOCAL_RANK": "-1"},
}


@pytest.mark.parametrize(
    "environ", MALFORMED_LAUNCHER_ENVIRONMENTS.values(), ids=MALFORMED_LAUNCHER_ENVIRONMENTS
)
@pytest.mark.parametrize("entry", ["ddpcheck", "ddpcheck.preflight"])
def test_a_malformed_launcher_environment_is_one_line_and_exit_2(
    ddpcheck, scratch, entry: str, environ: dict[str, str]
) -> None:
    """A rank's variables that are not a rank's (a wrapper script's typo): refused before any join."""
    env = {"LOCAL_RANK": "0", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29577", **environ}
    if entry == "ddpcheck":
        run = ddpcheck("allreduce", env=env)
    else:
        full = {**os.environ, "TMPDIR": str(scratch), **env}
        proc = subprocess.run(
            [sys.executable, "-m", entry], capture_output=True, text=True, env=full, timeout=120
        )
        run = Run(proc.returncode, proc.stdout, proc.stderr, None, 0.0)
    assert_usage_error(run, scratch)
    assert "the launcher's environment is not a rank's" in run.stderr


def test_mpirun_inside_a_slurm_allocation_is_read_as_mpirun() -> None:
    """An mpirun inside an allocation starts its ranks through an srun step of its daemons: the
    daemon's SLURM_PROCID (one per host) is not the rank; OMPI's is (preflight read srun's first)."""
    from ddpcheck.launcher.plan import launcher_environment

    environ = {
        "OMPI_COMM_WORLD_RANK": "3", "OMPI_COMM_WORLD_SIZE": "4",
        "OMPI_COMM_WORLD_LOCAL_RANK": "1", "OMPI_COMM_WORLD_LOCAL_SIZE": "2",
        "MASTER_ADDR": "node1", "MASTER_PORT": "29500",
        "SLURM_JOB_ID": "7", "SLURM_STEP_ID": "0", "SLURM_PROCID": "1", "SLURM_NTASKS": "2",
        "SLURM_JOB_NODELIST": "node[1-2]",
    }  # fmt: skip
    mapped = launcher_environment(environ)
    assert mapped is not None and (mapped["RANK"], mapped["WORLD_SIZE"], mapped["LOCAL_RANK"]) == (
        "3",
        "4",
        "1",
    )
    assert launcher_environment({}) is None
