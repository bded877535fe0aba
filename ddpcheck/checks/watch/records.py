"""How a rank's process ended, from what the in-process agent left in the watch directory.

The reader is the failure side's (failure/exits.py), shared with `postmortem`, which reads the
same records after the job.
"""

from __future__ import annotations

from ddpcheck.failure.exits import exit_of

__all__ = ["exit_of"]
