"""A busy machine, on purpose: one process spinning on each core beside a test or a benchmark.

Liveness judgements (a rank that stopped beating while its peers went on) must hold when every
heartbeat is late; tests that check them run with these spinners beside them.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from collections.abc import Iterator

SPIN = "while True: pass"


@contextlib.contextmanager
def busy_cores(count: int | None = None) -> Iterator[list[int]]:
    """`count` processes (one per core by default) that spin until the block ends; always ended.

    Yields their pids.
    """
    count = (os.cpu_count() or 1) if count is None else count
    spinners: list[subprocess.Popen] = []
    try:
        for _ in range(count):
            spinners.append(subprocess.Popen([sys.executable, "-c", SPIN]))
        yield [s.pid for s in spinners]
    finally:
        for spinner in spinners:
            spinner.kill()
        for spinner in spinners:
            spinner.wait()
