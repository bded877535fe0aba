"""Benchmark: what the flight recorder costs a run. Ranks that a ddpcheck launcher watches keep
one (TORCH_FR_BUFFER_SIZE=200 unless the user set it), so that a hang finding can name the stuck
rank's last collective; TORCH_FR_BUFFER_SIZE=0 turns it off.

`ddpcheck allreduce --nproc 2` over small messages (where a per-collective cost shows most),
with and without the recorder, alternating in one run; the ratio of the sweep's median busbw
(over message sizes, per run), without / with. Target: <= 1.05x.

    python tests/perf/bench_flight_recorder.py [--reps 5]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
ARGS = ["allreduce", "--nproc", "2", "--sizes", "1K:64K", "--iters", "200", "--warmup", "20", "--json", "-"]


def median_busbw(buffer_size: str | None) -> float:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    env.pop("TORCH_FR_BUFFER_SIZE", None)
    if buffer_size is not None:
        env["TORCH_FR_BUFFER_SIZE"] = buffer_size
    out = subprocess.run(
        [sys.executable, "-m", "ddpcheck", *ARGS], capture_output=True, text=True, env=env, check=True
    )
    rows = json.loads(out.stdout)["tables"]["bandwidth"]
    return statistics.median(r["busbw_gbps"] for r in rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=5)
    reps = parser.parse_args().reps
    on: list[float] = []
    off: list[float] = []
    for _ in range(reps):
        on.append(median_busbw(None))  # ddpcheck's default: the recorder on, 200 entries
        off.append(median_busbw("0"))
    print(f"busbw (GB/s, median over sizes) with the flight recorder:    {[round(x, 3) for x in on]}")
    print(f"busbw (GB/s, median over sizes) without it (BUFFER_SIZE=0): {[round(x, 3) for x in off]}")
    print(f"without / with: {statistics.median(off) / statistics.median(on):.3f}x")


if __name__ == "__main__":
    main()
