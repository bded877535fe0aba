"""Benchmark: how late a rank's own heartbeat comes on a busy machine, the floor of "was stopped".

A rank that was itself stopped names itself when its heartbeat thread saw a gap of at least
giving_up.PAUSED_ITSELF_S (and a quarter of --timeout) between two beats. This runs the real
StatusWriter in a process whose main thread works as a rank's does (torch matmuls, which release
the GIL, and pure Python, which holds it), beside one spinning process per core, and prints the
longest gap beyond the beat interval. docs/failures.md quotes it.

    python tests/perf/bench_beat_gaps.py [--seconds 30]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import torch

from ddpcheck.rank.status_channel import StatusWriter
from tests.support.load import busy_cores


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=30.0)
    args = parser.parse_args()
    identity = {"rank": 0, "local_rank": 0, "node": 0, "host": "h", "address": None, "pid": os.getpid()}
    with tempfile.TemporaryDirectory() as run_dir, busy_cores():
        writer = StatusWriter(run_dir, identity)
        matrix = torch.ones(512, 512)
        end = time.monotonic() + args.seconds
        while time.monotonic() < end:
            (matrix @ matrix).sum()
            sum(range(20000))
        writer.close()
    print(f"longest gap beyond the beat interval over {args.seconds:g} s: {writer.longest_pause_s:.3f} s")


if __name__ == "__main__":
    main()
