"""`ddpcheck train` against the bare classic script under torchrun: time from command to verdict.

Not collected by pytest (bench_*.py). Run:

    OMP_NUM_THREADS=1 python tests/perf/bench_train_vs_classic.py --nproc 4 --repeats 3

The classic script is the lab note's mini_train.py (nn.Linear(1024, 1024), DDP,
Adam lr 1e-3, one batch of 32 per rank, MSE, 5 steps, rank 0 prints the loss),
on gloo/CPU unless --device cuda. Both commands run alternately, each repeated,
and the medians of their wall-clock times are compared (target <= 1.5x).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

CLASSIC = """
import os
import torch
import torch.nn as nn
import torch.optim as optim
import torch.distributed as dist

cuda = os.environ.get("CLASSIC_DEVICE") == "cuda"
dist.init_process_group("nccl" if cuda else "gloo")
rank = dist.get_rank()
local_rank = int(os.environ["LOCAL_RANK"])
device = torch.device("cuda", local_rank) if cuda else torch.device("cpu")
if cuda:
    torch.cuda.set_device(local_rank)
model = nn.Linear(1024, 1024).to(device)
model = nn.parallel.DistributedDataParallel(model, device_ids=[local_rank] if cuda else None)
optimizer = optim.Adam(model.parameters(), lr=1e-3)
x = torch.randn(32, 1024).to(device)
y = torch.randn(32, 1024).to(device)
for step in range(5):
    optimizer.zero_grad()
    out = model(x)
    loss = ((out - y) ** 2).mean()
    loss.backward()
    optimizer.step()
    if rank == 0:
        print(f"Step {step}, Loss {loss.item()}")
dist.destroy_process_group()
"""


def timed(argv: list[str], env: dict[str, str]) -> float:
    began = time.perf_counter()
    proc = subprocess.run(argv, env=env, capture_output=True, text=True, check=False)
    seconds = time.perf_counter() - began
    if proc.returncode != 0:
        sys.exit(f"{' '.join(argv)} exited {proc.returncode}:\n{proc.stdout}\n{proc.stderr}")
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nproc", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    args = parser.parse_args()
    env = {
        **os.environ,
        "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1"),
        "CLASSIC_DEVICE": args.device,
    }
    with tempfile.TemporaryDirectory() as scratch:
        script = Path(scratch) / "mini_train.py"
        script.write_text(CLASSIC)
        classic = [
            sys.executable, "-m", "torch.distributed.run", "--standalone",
            f"--nproc_per_node={args.nproc}", str(script),
        ]  # fmt: skip
        launch = ["--gpus", str(args.nproc)] if args.device == "cuda" else ["--nproc", str(args.nproc)]
        ddpcheck = [sys.executable, "-m", "ddpcheck", "train", "--steps", "5", *launch, "--quiet"]
        times: dict[str, list[float]] = {"classic": [], "ddpcheck": []}
        for _ in range(args.repeats):
            times["classic"].append(timed(classic, env))
            times["ddpcheck"].append(timed(ddpcheck, env))
    classic_s = statistics.median(times["classic"])
    ddpcheck_s = statistics.median(times["ddpcheck"])
    print(f"ranks={args.nproc} device={args.device} repeats={args.repeats}")
    print(f"classic script under torchrun  {classic_s:7.2f} s  {times['classic']}")
    print(f"ddpcheck train --steps 5        {ddpcheck_s:7.2f} s  {times['ddpcheck']}")
    print(f"ratio                           {ddpcheck_s / classic_s:7.2f}x  (target <= 1.5x)")


if __name__ == "__main__":
    main()
