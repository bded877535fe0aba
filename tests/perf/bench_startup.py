"""Start-up budget of the CLI, measured side by side (not collected by pytest).

    python tests/perf/bench_startup.py [--reps 10] [--env-reps 5]

Targets (issue 5): `ddpcheck --help` within 2x of `python -c "import typer"`
(the floor any Typer CLI pays), and `ddpcheck env` under 3 s. The two --help
commands run interleaved, so load from other processes hits both alike; medians
are quoted. Also timed: `rank_fingerprint()`, which every rank runs at the start
of every command (budget ~50 ms). Exits 1 when a target is missed.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import time

HELP_RATIO_TARGET = 2.0
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
from ddpcheck.checks.env import probe as env
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


CPU_SECONDS: dict[str, list[float]] = {}  # command -> user+sys seconds per run


def timed(command: list[str], environ: dict[str, str]) -> float:
    """Wall seconds of one run; its CPU seconds (which other load barely inflates) go to CPU_SECONDS."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run(command, env=environ, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    elapsed = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime
    CPU_SECONDS.setdefault(" ".join(command), []).append(cpu)
    if done.returncode not in (0, 1):  # env exits 1 when this host has a FAIL: still a valid timing
        raise SystemExit(f"{' '.join(command)} exited {done.returncode}: {done.stderr.strip()[-500:]}")
    return elapsed


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--reps", type=int, default=10, help="repetitions of each --help timing")
    parser.add_argument("--env-reps", type=int, default=5, help="repetitions of `ddpcheck env`")
    args = parser.parse_args()
    environ = {**os.environ, "NO_COLOR": "1", "COLUMNS": "100"}
    cli = ddpcheck_command()
    typer_cmd = [sys.executable, "-c", "import typer"]
    bare_cmd = [sys.executable, "-c", "pass"]

    for warm in (typer_cmd, [*cli, "--help"]):  # fill the page cache before timing
        timed(warm, environ)
    hello_cmd = [sys.executable, "-c", HELLO_TYPER_HELP]
    typer_t, help_t, bare_t, hello_t = [], [], [], []
    for _ in range(args.reps):  # interleaved: all see the same background load
        typer_t.append(timed(typer_cmd, environ))
        help_t.append(timed([*cli, "--help"], environ))
        bare_t.append(timed(bare_cmd, environ))
        hello_t.append(timed(hello_cmd, environ))
    env_t = [timed([*cli, "env"], environ) for _ in range(args.env_reps)]
    fingerprint_s = float(
        subprocess.run(
            [sys.executable, "-c", FINGERPRINT_CODE], capture_output=True, text=True, check=True, env=environ
        ).stdout.strip()
    )

    med = statistics.median
    ratio = med(help_t) / med(typer_t)
    floor_ratio = med(help_t) / med(hello_t)
    name = " ".join(os.path.basename(c) for c in cli)
    rows = [  # label, command, wall times, note
        ("python -c pass", bare_cmd, bare_t, None),
        ('python -c "import typer"', typer_cmd, typer_t, None),
        ("hello-world Typer app --help", hello_cmd, hello_t, "reference: the floor of rich help"),
        (
            f"{name} --help",
            [*cli, "--help"],
            help_t,
            f"{ratio:.2f}x import typer (target <= 2x); {floor_ratio:.2f}x hello-world --help",
        ),
        (f"{name} env", [*cli, "env"], env_t, f"target < {ENV_TARGET_S:g} s"),
    ]
    try:
        load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:
        load = "?"
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} CPUs, load average {load}")
    print(f"{'command':<30} {'n':>3} {'median':>8} {'min':>8} {'max':>8} {'cpu med':>8}")
    for label, command, times, note in rows:
        cpu = med(CPU_SECONDS[" ".join(command)][-len(times) :])
        line = (
            f"{label:<30} {len(times):>3} {med(times):>7.3f}s {min(times):>7.3f}s "
            f"{max(times):>7.3f}s {cpu:>7.3f}s"
        )
        print(line + (f"   {note}" if note else ""))
    print(f"{'rank_fingerprint() in process':<30} {20:>3} {fingerprint_s * 1000:>6.2f}ms   target < 50 ms")

    missed = []
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
