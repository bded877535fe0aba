"""A busy machine, on purpose: one process spinning on each core beside a test or a benchmark.

Liveness judgements (a rank that stopped beating while its peers went on) must hold when every
heartbeat is late; tests that check them run with these spinners beside them. Speed judgements
must hold also when the load comes and goes mid-run, as other jobs on a shared node start and
stop: bursty_load().
"""

from __future__ import annotations

import contextlib
import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator

SPIN = "while True: pass"
# Memory traffic, as a data loader's copies make it: 64 MiB copied over and over.
COPY = "import numpy as np\na = np.ones(8 << 20)\nb = np.empty_like(a)\nwhile True: np.copyto(b, a)"


@contextlib.contextmanager
def busy_cores(count: int | None = None, cpu: int | None = None) -> Iterator[list[int]]:
    """`count` processes (one per core by default) that spin until the block ends; always ended.

    With `cpu`, all of them on that core alone. Yields their pids.
    """
    count = (os.cpu_count() or 1) if count is None else count
    pinned = None if cpu is None else (lambda: os.sched_setaffinity(0, {cpu}))
    spinners: list[subprocess.Popen] = []
    try:
        for _ in range(count):
            spinners.append(subprocess.Popen([sys.executable, "-c", SPIN], preexec_fn=pinned))
        yield [s.pid for s in spinners]
    finally:
        for spinner in spinners:
            spinner.kill()
        for spinner in spinners:
            spinner.wait()


@contextlib.contextmanager
def bursty_load(seed: int = 7, low_s: float = 0.2, high_s: float = 2.0) -> Iterator[list[int]]:
    """One process per core, one copying memory and the rest spinning, each running then stopped
    (SIGSTOP) for a random `low_s` to `high_s`: the load steps up and down while a run measures.
    Always ended; yields their pids."""
    cores = os.cpu_count() or 1
    hogs = [subprocess.Popen([sys.executable, "-c", code]) for code in [COPY] + [SPIN] * (cores - 1)]
    stop = threading.Event()

    def come_and_go() -> None:
        rng = random.Random(seed)
        due = [time.monotonic() + rng.uniform(low_s, high_s) for _ in hogs]
        running = [True] * len(hogs)
        while not stop.wait(0.02):
            for i, hog in enumerate(hogs):
                if time.monotonic() >= due[i]:
                    running[i] = not running[i]
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(hog.pid, signal.SIGCONT if running[i] else signal.SIGSTOP)
                    due[i] = time.monotonic() + rng.uniform(low_s, high_s)

    toggler = threading.Thread(target=come_and_go, daemon=True)
    toggler.start()
    try:
        yield [h.pid for h in hogs]
    finally:
        stop.set()
        toggler.join()
        for hog in hogs:
            hog.kill()
        for hog in hogs:
            hog.wait()


def duty_cycle(pid: int, stop: threading.Event, fraction: float = 0.5, period_s: float = 0.02) -> None:
    """Stop `pid` (SIGSTOP) `fraction` of every `period_s` until `stop` is set or it ends; left running.

    A rank slowed from outside, as a sick device or a throttled core would slow it: it loses the
    time stopped, not waiting for a core.
    """
    while not stop.is_set():
        try:
            os.kill(pid, signal.SIGSTOP)
            time.sleep(fraction * period_s)
            os.kill(pid, signal.SIGCONT)
            time.sleep((1 - fraction) * period_s)
        except ProcessLookupError:
            return
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGCONT)
