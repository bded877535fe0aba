"""Start-up budget of the CLI, measured side by side (not collected by pytest).

    python tests/perf/bench_startup.py [--reps 10] [--env-reps 5] [--against OTHER_CHECKOUT]

Targets: `ddpcheck --help` within 1.5x of `python -c "import typer"` (the floor any
Typer CLI pays), and `ddpcheck env` under 3 s. Every --help command runs interleaved,
so load from other processes hits all alike; medians are quoted. Each is timed twice:
with its bytecode cached (as an installed package has it; the target) and with
ddpcheck's modules compiled on every run (PYTHONDONTWRITEBYTECODE=1 in a source
checkout, where Typer's site-packages bytecode is still read). `--against` times
another checkout's `--help` in the same loop (before and after a change). Also timed:
`rank_fingerprint()`, which every rank runs at the start of every command (budget
~50 ms). Exits 1 when a target is missed.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HELP_RATIO_TARGET = 1.5
ENV_TARGET_S = 3.0
FINGERPRINT_TARGET_S = 0.050

# The floor of any Typer CLI with rich installed: its --help imports typer.rich_utils
# (rich.markdown, markdown_it, pygments), which `import typer` alone never pays.
HELLO_TYPER_HELP = """
import typer
app = typer.Typer()
@app.command()
def first(count: int = 1) -> None: ...
@app.command()
def second() -> None: ...
app(["--help"])
"""

FINGERPRINT_CODE = """
import statistics, time, torch
from ddpcheck.rank import fingerprint as env
env.rank_fingerprint()
times = []
for _ in range(20):
    start = time.perf_counter()
    env.rank_fingerprint()
    times.append(time.perf_counter() - start)
print(statistics.median(times))
"""


def ddpcheck_command() -> list[str]:
    """The installed entry point, as users run it; `python -m ddpcheck` if it is not on PATH."""
    found = shutil.which("ddpcheck")
    return [found] if found else [sys.executable, "-m", "ddpcheck"]


REPO = Path(__file__).resolve().parents[2]


def timed(command: list[str], environ: dict[str, str]) -> tuple[float, float]:
    """Wall and CPU (user+sys, which other load barely inflates) seconds of one run."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run(command, env=environ, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    elapsed = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime
    if done.returncode not in (0, 1):  # env exits 1 when this host has a FAIL: still a valid timing
        raise SystemExit(f"{' '.join(command)} exited {done.returncode}: {done.stderr.strip()[-500:]}")
    return elapsed, cpu


def bytecode_modes(environ: dict[str, str], cache: str) -> dict[str, dict[str, str]]:
    """The two ways a process may meet ddpcheck's modules: compiled once (cached), or on every run."""
    cached = {k: v for k, v in environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    source = {k: v for k, v in environ.items() if k != "PYTHONPYCACHEPREFIX"}
    return {
        "bytecode cached": {**cached, "PYTHONPYCACHEPREFIX": cache},
        "compiled each run": {**source, "PYTHONDONTWRITEBYTECODE": "1"},
    }


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--reps", type=int, default=10, help="repetitions of each --help timing")
    parser.add_argument("--env-reps", type=int, default=5, help="repetitions of `ddpcheck env`")
    parser.add_argument("--against", metavar="CHECKOUT", help="also time this checkout's --help (before)")
    args = parser.parse_args()
    environ = {**os.environ, "NO_COLOR": "1", "COLUMNS": "100"}
    cli = ddpcheck_command()
    name = " ".join(os.path.basename(c) for c in cli)
    trees = {f"{name} --help": str(REPO)}
    if args.against:
        trees[f"{name} --help ({os.path.basename(os.path.abspath(args.against))})"] = args.against
    commands: dict[str, tuple[list[str], dict[str, str]]] = {  # label -> command, environ additions
        "python -c pass": ([sys.executable, "-c", "pass"], {}),
        'python -c "import typer"': ([sys.executable, "-c", "import typer"], {}),
        "hello-world Typer app --help": ([sys.executable, "-c", HELLO_TYPER_HELP], {}),
        **{label: ([*cli, "--help"], {"PYTHONPATH": tree}) for label, tree in trees.items()},
    }
    wall: dict[tuple[str, str], list[float]] = {}
    cpu: dict[tuple[str, str], list[float]] = {}
    with tempfile.TemporaryDirectory(prefix="ddpcheck-pycache-") as cache:
        modes = bytecode_modes(environ, cache)
        for mode_env in modes.values():  # fill the page cache and the bytecode cache before timing
            for command, extra in commands.values():
                timed(command, {**mode_env, **extra})
        for _ in range(args.reps):  # interleaved: all see the same background load
            for mode, mode_env in modes.items():
                for label, (command, extra) in commands.items():
                    w, c = timed(command, {**mode_env, **extra})
                    wall.setdefault((mode, label), []).append(w)
                    cpu.setdefault((mode, label), []).append(c)
        timed([*cli, "env"], modes["bytecode cached"])  # its first run compiles torch into the cache
        env_runs = [timed([*cli, "env"], modes["bytecode cached"]) for _ in range(args.env_reps)]
    fingerprint_s = float(
        subprocess.run(
            [sys.executable, "-c", FINGERPRINT_CODE], capture_output=True, text=True, check=True, env=environ
        ).stdout.strip()
    )

    med = statistics.median
    try:
        load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:
        load = "?"
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} CPUs, load average {load}, {args.reps} reps")
    print(f"{'command':<36} {'median':>8} {'min':>8} {'max':>8} {'cpu med':>8}   vs import typer")
    ratios: dict[tuple[str, str], float] = {}
    for mode in modes:
        print(f"-- {mode}")
        typer_s = med(wall[(mode, 'python -c "import typer"')])
        for label in commands:
            times = wall[(mode, label)]
            ratios[(mode, label)] = med(times) / typer_s
            print(
                f"{label:<36} {med(times):>7.3f}s {min(times):>7.3f}s {max(times):>7.3f}s "
                f"{med(cpu[(mode, label)]):>7.3f}s   {ratios[(mode, label)]:.2f}x"
            )
    env_t = [w for w, _ in env_runs]
    print(
        f"{name + ' env':<36} {med(env_t):>7.3f}s {min(env_t):>7.3f}s {max(env_t):>7.3f}s "
        f"{med([c for _, c in env_runs]):>7.3f}s   target < {ENV_TARGET_S:g} s ({len(env_t)} runs)"
    )
    print(f"{'rank_fingerprint() in process':<36} {fingerprint_s * 1000:>6.2f}ms   target < 50 ms")

    missed = []
    ratio = ratios[("bytecode cached", f"{name} --help")]
    print(f"{name} --help: {ratio:.2f}x import typer, bytecode cached (target <= {HELP_RATIO_TARGET:g}x)")
    if ratio > HELP_RATIO_TARGET:
        missed.append(f"--help is {ratio:.2f}x import typer")
    if med(env_t) >= ENV_TARGET_S:
        missed.append(f"env takes {med(env_t):.2f} s")
    if fingerprint_s >= FINGERPRINT_TARGET_S:
        missed.append(f"rank_fingerprint takes {fingerprint_s * 1000:.1f} ms")
    print("targets: " + ("MISSED - " + "; ".join(missed) if missed else "all met"))
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
