"""How long a CPU rank's thread waited for a core while the host ran other processes.

A CPU rank's speed is timed on a core it may share: on a busy host (a data loader, another
job, this machine's other tests) the scheduler hands the core to other processes for part of
a pass, and a healthy rank would look slow for a reason that is the host's, not its device's.
Linux counts each thread's time on a run queue, runnable but not running, in
/proc/thread-self/schedstat (its second field, nanoseconds: "run_delay"). A rank stopped from
outside (SIGSTOP) or computing slowly is not on a run queue while it loses that time, so
taking the wait out leaves those slowdowns in the figure and the host's load out of it.
"""

from __future__ import annotations

SCHEDSTAT = "/proc/thread-self/schedstat"


def waited_s(path: str = SCHEDSTAT) -> float | None:
    """The calling thread's time on a run queue so far, in seconds; None where the kernel does not say."""
    try:
        with open(path, encoding="ascii") as stats:
            fields = stats.read().split()
        return int(fields[1]) / 1e9
    except (OSError, ValueError, IndexError):
        return None


def waited_since(before: float | None, path: str = SCHEDSTAT) -> float:
    """Seconds the calling thread waited for a core since `before` (a waited_s() reading); 0 when unknown."""
    now = waited_s(path)
    if before is None or now is None:
        return 0.0
    return max(0.0, now - before)
