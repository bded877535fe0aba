"""Every command's real judge, terminal, JSON and HTML at fleet scale: seconds and bytes per command.

    python tests/perf/bench_scale.py --nodes 1024 --gpus-per-node 8 [--json PATH] [--only links]

Each command's judge gets synthetic rank data of that size, shaped as its measure() returns it
(tests/support/scale_data.py), then rank 0's assembly (the nodes' agreement, the hosts table),
as a run of that size would give it; then the report is rendered on a 200-column terminal, written
as JSON and as the HTML page. Prints one line per command; --json writes
{"ranks": N, "commands": {NAME: {"judge_s", "render_s", "json_s", "html_s", "report_bytes", "html_bytes",
"judge_cpu_s", "render_cpu_s"}}} (CPU seconds: what a shared machine's wall seconds overstate).
Targets at 1,024 x 8 = 8,192 ranks: judge + render <= 5 s per command, report <= 20 MB, HTML <= 2 MB.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from rich.console import Console

from tests.support import scale_data

FINGERPRINT = {"torch": "2.13.0", "cuda": "12.8", "nccl": "2.27.3", "driver": "570.86", "gpu": "H100"}


def _cases(n: int, g: int) -> dict[str, tuple[Callable[[], list[dict[str, Any]]], Any, Callable[..., Any]]]:
    """NAME -> (data maker, options, judge)."""
    from ddpcheck.checks.allreduce import AllreduceOptions
    from ddpcheck.checks.allreduce.check import judge as allreduce
    from ddpcheck.checks.collectives import COLLECTIVES, CollectivesOptions
    from ddpcheck.checks.collectives.check import judge as collectives
    from ddpcheck.checks.devices import DevicesOptions
    from ddpcheck.checks.devices.judge import judge as devices
    from ddpcheck.checks.links import LinksOptions
    from ddpcheck.checks.links.check import judge as links
    from ddpcheck.checks.profile import ProfileOptions
    from ddpcheck.checks.profile.judge import judge as profile
    from ddpcheck.checks.train import TrainOptions
    from ddpcheck.checks.train.check import judge as train

    size = 64 * 2**20
    ops = tuple(COLLECTIVES)
    return {
        "allreduce": (
            lambda: scale_data.allreduce_data(n),
            AllreduceOptions(min_bytes=1024, max_bytes=size, dtype="float32", iters=20, warmup=5),
            allreduce,
        ),
        "collectives": (
            lambda: scale_data.collectives_data(n, ops),
            CollectivesOptions(
                ops=list(ops), min_bytes=1024, max_bytes=size, dtype="float32", iters=20, warmup=5
            ),
            collectives,
        ),
        "train": (lambda: scale_data.train_data(n), TrainOptions(steps=5, hidden=1024, batch=32), train),
        "profile": (
            lambda: scale_data.profile_data(n),
            ProfileOptions(hidden=4096, batch=32, steps=10, warmup=2),
            profile,
        ),
        "devices": (lambda: scale_data.devices_data(n), DevicesOptions().for_device("cuda"), devices),
        "links": (
            lambda: scale_data.links_data(_identities(n, g), size),
            LinksOptions(size=size, iters=20, warmup=5, threshold=0.5),
            links,
        ),
    }


def _identities(n: int, g: int) -> list[dict[str, Any]]:
    return scale_data.rank_identities(scale_data.hosts_of_fleet(n // g), g)


def measure(name: str, n: int, g: int, directory: Path) -> dict[str, float]:
    from ddpcheck.rank import assemble
    from ddpcheck.report.formats.json import write as write_json
    from ddpcheck.report.html import write as write_html
    from ddpcheck.report.terminal import render_report

    make, options, judge = _cases(n, g)[name]
    identities = _identities(n, g)
    data = make()
    world = {
        "size": n,
        "backend": "nccl",
        "device": "cuda",
        "nodes": n // g,
        "hosts": scale_data.hosts_of_fleet(n // g),
        **{k: FINGERPRINT[k] for k in ("torch", "cuda", "nccl")},
    }
    began, cpu_began = time.perf_counter(), time.process_time()
    report = judge(data, identities, options)
    report = assemble.from_ranks(report, identities, [FINGERPRINT] * n, world, {})
    judged, cpu_judged = time.perf_counter(), time.process_time()
    console = Console(file=io.StringIO(), width=200, color_system=None, highlight=False, soft_wrap=False)
    render_report(report, console)
    rendered, cpu_rendered = time.perf_counter(), time.process_time()
    json_path, html_path = directory / f"{name}.json", directory / f"{name}.html"
    write_json(report, str(json_path))
    written = time.perf_counter()
    write_html(report, str(html_path))
    paged = time.perf_counter()
    return {
        "judge_s": round(judged - began, 3),
        # CPU seconds too: on a machine shared with other work, wall seconds wait for a core.
        "judge_cpu_s": round(cpu_judged - cpu_began, 3),
        "render_cpu_s": round(cpu_rendered - cpu_judged, 3),
        "render_s": round(rendered - judged, 3),
        "json_s": round(written - rendered, 3),
        "html_s": round(paged - written, 3),
        "report_bytes": json_path.stat().st_size,
        "html_bytes": html_path.stat().st_size,
        "terminal_lines": console.file.getvalue().count("\n"),  # type: ignore[attr-defined]
        "verdict": report.verdict.value,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=1024)
    parser.add_argument("--gpus-per-node", type=int, default=8)
    parser.add_argument("--json", dest="json_path")
    parser.add_argument("--only", help="comma-separated commands (default: all)")
    args = parser.parse_args()
    n, g = args.nodes * args.gpus_per_node, args.gpus_per_node
    names = args.only.split(",") if args.only else list(_cases(n, g))
    results: dict[str, dict[str, float]] = {}
    print(f"{n} ranks ({args.nodes} nodes x {g})")
    heads = ("judge s", "render s", "json s", "html s", "report MB", "html MB")
    print(f"{'command':<12} " + " ".join(f"{h:>9}" for h in heads))
    with tempfile.TemporaryDirectory(prefix="ddpcheck-bench-scale-") as tmp:
        for name in names:
            r = measure(name, n, g, Path(tmp))
            results[name] = r
            print(
                f"{name:<12} "
                + " ".join(f"{r[k]:>9.2f}" for k in ("judge_s", "render_s", "json_s", "html_s"))
                + f" {r['report_bytes'] / 1e6:>9.2f} {r['html_bytes'] / 1e6:>9.2f}  "
                + f"({r['verdict']}, {int(r['terminal_lines'])} terminal lines; "
                + f"CPU s: judge {r['judge_cpu_s']:.2f}, render {r['render_cpu_s']:.2f})",
                flush=True,
            )
    if args.json_path:
        Path(args.json_path).write_text(json.dumps({"ranks": n, "commands": results}, indent=2) + "\n")


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    main()
