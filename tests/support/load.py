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
def busy_cores(count: int | None = None, cpu: int | None = None, apart: bool = False) -> Iterator[list[int]]:
    """`count` processes (one per core by default) that spin until the block ends; always ended.

    With `cpu`, all of them on that core alone. With `apart`, each in a session of its own, as
    another user's job would be: where the kernel groups processes by session (autogroup), the
    spinners of the test's own session weigh as one beside a run's ranks, not one each. Yields
    their pids.
    """
    count = (os.cpu_count() or 1) if count is None else count
    pinned = None if cpu is None else (lambda: os.sched_setaffinity(0, {cpu}))
    spinners: list[subprocess.Popen] = []
    try:
        for _ in range(count):
            spinners.append(
                subprocess.Popen([sys.executable, "-c", SPIN], preexec_fn=pinned, start_new_session=apart)
            )
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


# The cycler as a process of its own, at real-time priority where the kernel allows it: as a thread
# of the test it woke late on a loaded machine (the suite's other workers), the rank ran on through
# whole passes, and its best pass looked healthy (a clean clone's CI named nobody once).
CYCLE = """
import os, signal, sys, time
pid, fraction, period = int(sys.argv[1]), float(sys.argv[2]), float(sys.argv[3])
try:
    os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(10))
except OSError:
    pass
while True:
    try:
        os.kill(pid, signal.SIGSTOP)
        time.sleep(fraction * period)
        os.kill(pid, signal.SIGCONT)
        time.sleep((1 - fraction) * period)
    except ProcessLookupError:
        break
"""


def duty_cycle(pid: int, stop: threading.Event, fraction: float = 0.5, period_s: float = 0.02) -> None:
    """Stop `pid` (SIGSTOP) `fraction` of every `period_s` until `stop` is set or it ends; left running.

    A rank slowed from outside, as a sick device or a throttled core would slow it: it loses the
    time stopped, not waiting for a core. Run it in a thread; the cycling is a process (CYCLE).
    """
    cycler = subprocess.Popen([sys.executable, "-c", CYCLE, str(pid), str(fraction), str(period_s)])
    try:
        while not stop.wait(0.05) and cycler.poll() is None:
            pass
    finally:
        cycler.kill()
        cycler.wait()
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGCONT)
