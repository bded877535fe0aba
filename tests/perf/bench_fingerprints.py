"""Benchmark: what the replica fingerprints (`ddpcheck watch --fingerprint-every N`) cost a real job.

A DDP job of a 12.6 M-parameter MLP (three 2048x2048 layers, float32), 2 gloo ranks on CPU, SGD,
batch 32, is run under `ddpcheck watch` with fingerprints on (--fingerprint-every N: the gradients'
NaN check every step, a fingerprint every N steps and at the end) and off (--fingerprint-every 0),
alternately, REPS times each. Printed: each run's training-loop time (rank 0's, from its first step
to its last) and wall time, their medians, and the ratio on/off (goal <= 1.02x); then, alone, what one
fingerprint of the model costs (its time and the process's peak memory growth) and the gradient
check's time per step.

    python tests/perf/bench_fingerprints.py [--steps 100] [--every 100] [--reps 5]
    python tests/perf/bench_fingerprints.py --in-process 200 [--every 100]

--in-process: one model in one process, its steps alternating between watched and bare (a busy
machine's load hits both alike), after the same run with nothing switched (the noise floor).
"""

from __future__ import annotations

import argparse
import os
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

JOB = """
import os, time, torch, torch.distributed as dist
dist.init_process_group("gloo")
torch.manual_seed(0)
model = torch.nn.Sequential(*[torch.nn.Linear(2048, 2048) for _ in range(3)])
model = torch.nn.parallel.DistributedDataParallel(model)
optimizer = torch.optim.SGD(model.parameters(), lr=1e-4)
data = torch.randn(32, 2048)
steps = int(os.environ["BENCH_STEPS"])
for step in range(steps + 1):
    if step == 1:
        began = time.perf_counter()  # the first step (warm-up, DDP's first buckets) is not timed
    optimizer.zero_grad()
    model(data).square().mean().backward()
    optimizer.step()
if dist.get_rank() == 0:
    print(f"BENCH loop_s={time.perf_counter() - began:.4f}")
dist.destroy_process_group()
"""


def run_once(script: Path, every: int, steps: int) -> tuple[float, float]:
    """(the loop's seconds, the whole watched run's seconds)."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "BENCH_STEPS": str(steps)}
    argv = [
        sys.executable,
        "-m",
        "ddpcheck",
        "watch",
        "--sample-every",
        "0",
        "--fingerprint-every",
        str(every),
    ]
    argv += [
        "--",
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc-per-node",
        "2",
        str(script),
    ]
    began = time.perf_counter()
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=1800)
    wall = time.perf_counter() - began
    found = re.search(r"BENCH loop_s=([\d.]+)", done.stdout)
    if done.returncode != 0 or found is None:
        raise SystemExit(
            f"the watched job failed ({done.returncode}):\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}"
        )
    return float(found.group(1)), wall


def fingerprint_cost() -> tuple[float, float]:
    """One fingerprint of the same model, alone (its time, the peak memory it adds); the gradient check."""
    import torch

    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    from ddpcheck.checks.watch import fingerprints

    torch.set_num_threads(1)
    tensors = [
        t.detach() for t in torch.nn.Sequential(*[torch.nn.Linear(2048, 2048) for _ in range(3)]).parameters()
    ]
    grads = [torch.randn_like(t) for t in tensors]
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    times = []
    for _ in range(5):
        began = time.perf_counter()
        fingerprints._fingerprints(tensors)
        times.append(time.perf_counter() - began)
    grown = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
    watcher = fingerprints.Fingerprinter(tempfile.gettempdir(), 100, ())
    watcher.flags = torch.zeros(len(grads))
    watcher.params = [(str(index), grad) for index, grad in enumerate(grads)]
    hooks = [watcher._gradient_hook(index) for index in range(len(grads))]  # what each gradient meets
    checks = []
    for _ in range(20):
        began = time.perf_counter()
        for hook, grad in zip(hooks, grads, strict=True):
            hook(grad)
        watcher._fold()  # and what the step boundary adds
        checks.append(time.perf_counter() - began)
    params = sum(t.numel() for t in tensors)
    print(
        f"one fingerprint of {params / 1e6:.1f} M parameters: {statistics.median(times) * 1e3:.1f} ms "
        f"(median of 5), peak memory +{grown / 1024:.1f} MiB; the gradients' NaN check: "
        f"{statistics.median(checks) * 1e3:.2f} ms a step (median of 20)"
    )
    return statistics.median(times), statistics.median(checks)


def in_process(steps: int, every: int) -> float:
    """One model (a world of one, gloo), its steps in the order off on on off ...: the gradients'
    hooks registered and the step hook called on the "on" steps only, removed for the others (outside
    the timed step). Two copies of a model do not do: in one process two identical copies differed by
    up to 17% a step (where each one's memory fell), more than anything measured here. The same
    order with nothing switched (A/A) is printed first: the noise floor of the ratio."""
    import tempfile
    import weakref

    import torch
    import torch.distributed as dist

    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    from ddpcheck.checks.watch.fingerprints import FOLDER, Fingerprinter

    torch.set_num_threads(1)
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(_free_port()))
    dist.init_process_group("gloo", rank=0, world_size=1)
    torch.manual_seed(0)
    model = torch.nn.parallel.DistributedDataParallel(
        torch.nn.Sequential(*[torch.nn.Linear(2048, 2048) for _ in range(3)])
    )
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-4)
    data = torch.randn(32, 2048)
    with tempfile.TemporaryDirectory() as tmp:
        os.makedirs(os.path.join(tmp, FOLDER))
        watcher = Fingerprinter(tmp, every, ())
        watcher.looked, watcher.rank = True, 0
        watcher.modules = [(weakref.ref(model), [0])]
        medians = {}
        for control in (True, False):
            times: dict[str, list[float]] = {"off": [], "on": []}
            for step in range(2 * steps + 2):
                side = "on" if (step // 2 + step) % 2 else "off"  # off on on off off on on off ...
                watching = side == "on" and not control
                if watching and not watcher.gradient_hooks:
                    watcher._watch_gradients()
                elif not watching:
                    for hook in watcher.gradient_hooks:
                        hook.remove()
                    watcher.gradient_hooks = []
                began = time.perf_counter()
                optimizer.zero_grad()
                model(data).square().mean().backward()
                optimizer.step()
                if watching:
                    watcher.after_step(optimizer, (), {})
                if step > 1:  # the first of each (DDP's first buckets) is not counted
                    times[side].append(time.perf_counter() - began)
            off, on = sum(times["off"]), sum(times["on"])
            medians = {side: statistics.median(found) * 1e3 for side, found in times.items()}
            what = "nothing switched (A/A)" if control else f"watched, --fingerprint-every {every}"
            print(
                f"in one process, {steps} steps each side, {what}: off {off:.2f} s, on {on:.2f} s: "
                f"{on / off:.3f}x (medians a step: {medians['off']:.1f} ms and {medians['on']:.1f} ms)"
            )
    dist.destroy_process_group()
    return medians["off"] / 1e3


def _free_port() -> int:
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--every", type=int, default=100)
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--in-process", type=int, default=0, metavar="STEPS",
                        help="only the one-process comparison, this many steps each side")  # fmt: skip
    args = parser.parse_args()
    if args.in_process:
        step_s = in_process(args.in_process, args.every)
        fingerprint_s, check_s = fingerprint_cost()
        share = (check_s + fingerprint_s / args.every) / step_s
        print(
            f"by its parts: (the check a step + a fingerprint / {args.every}) / a bare step "
            f"= {share * 100:.2f}% (goal <= 2%)"
        )
        return
    with tempfile.TemporaryDirectory() as tmp:
        script = Path(tmp) / "bench_job.py"
        script.write_text(JOB)
        runs: dict[str, list[tuple[float, float]]] = {"off": [], "on": []}
        for rep in range(args.reps):
            for side in ("off", "on") if rep % 2 == 0 else ("on", "off"):  # alternate: noise hits both
                loop, wall = run_once(script, args.every if side == "on" else 0, args.steps)
                runs[side].append((loop, wall))
                print(
                    f"rep {rep} {side:>3}: loop {loop:.2f} s "
                    f"({loop / args.steps * 1e3:.1f} ms a step), wall {wall:.2f} s"
                )
    loop = {side: statistics.median(r[0] for r in found) for side, found in runs.items()}
    wall = {side: statistics.median(r[1] for r in found) for side, found in runs.items()}
    print(
        f"median loop: off {loop['off']:.2f} s, on {loop['on']:.2f} s: {loop['on'] / loop['off']:.3f}x "
        f"(goal <= 1.02x); median wall: off {wall['off']:.2f} s, on {wall['on']:.2f} s: "
        f"{wall['on'] / wall['off']:.3f}x "
        f"({args.steps} steps, --fingerprint-every {args.every}, {args.reps} runs each)"
    )
    fingerprint_cost()


if __name__ == "__main__":
    main()
