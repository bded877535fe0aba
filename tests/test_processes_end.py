"""failure/processes.end on a launcher and its rank: the rank's SIGTERM record (watch's chained
faulthandler) complete although the launcher sends its own SIGTERM on to the rank, as torchrun does.

A second SIGTERM that lands while faulthandler writes ends the rank mid-record (the handler is
chained and re-entrant): the main thread, listed last, was lost, and postmortem said "(no Python
stack)" for that rank.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import psutil
import pytest

from ddpcheck.failure import processes

pytestmark = pytest.mark.integration

# Many threads with deep stacks: a record long enough to be written over many writes.
RANK = """
import faulthandler, signal, sys, threading, time
faulthandler.register(signal.SIGTERM, file=open(sys.argv[1], "w"), chain=True)
def deep(n):
    return deep(n - 1) if n else time.sleep(600)
for _ in range(20):
    threading.Thread(target=deep, args=(60,), daemon=True).start()
def load_batch():
    print("ready", flush=True)
    time.sleep(600)
load_batch()
"""
LAUNCHER = """
import signal, subprocess, sys
rank = subprocess.Popen([sys.executable, "-c", sys.argv[1], sys.argv[2]], stdout=sys.stdout)
signal.signal(signal.SIGTERM, lambda *_: rank.send_signal(signal.SIGTERM))
rank.wait()
"""


def test_a_rank_sent_sigterm_by_its_launcher_too_keeps_its_whole_record(tmp_path: Path) -> None:
    for attempt in range(3):
        record = tmp_path / f"term-{attempt}"
        argv = [sys.executable, "-c", LAUNCHER, RANK, str(record)]
        launcher = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True)
        try:
            assert launcher.stdout is not None and launcher.stdout.readline() == "ready\n"
            (rank,) = psutil.Process(launcher.pid).children()
            assert processes.end([psutil.Process(launcher.pid), rank]) == []
            launcher.wait(timeout=30)
        finally:
            launcher.kill()
            launcher.wait()
        text = record.read_text()
        assert "in load_batch" in text, text[-400:]
