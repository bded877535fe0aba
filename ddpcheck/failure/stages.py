"""Stage names, defined once: every rank enters them in order, and every reader of a status judges by them.

A stage may carry a detail after a colon ("measure: 4 KiB"); readers that ask "which stage"
compare the whole name, so a rank stuck at "join" stays one step behind the peers that went
on to "join: waiting for every rank".
"""

from __future__ import annotations

LAUNCHED = "launched"
DEVICE = "device"
JOIN = "join"
RENDEZVOUS = "join: rendezvous"  # inline runs: reaching the store rank 0 or the launcher hosts
JOIN_WAIT = "join: waiting for every rank"
JOINED = "joined"  # inline runs only: from here on, the process group's store carries the status
MEASURE = "measure"
GATHER = "gather"
GATHER_WAIT = "gather: sending results to rank 0"
DONE = "done"

# An inline rank's own stages around the harness's, in its host's job directory (rank/arrival.py):
# as its peers name it, and as its remover's shell reads them (rank/remover.sh).
STARTING = "starting"  # the interpreter is up, ddpcheck's own modules are loading
IMPORTING_TORCH = "importing torch"
WRITING_REPORT = "writing the report"
TERMINATED = "stopped by its launcher (SIGTERM)"
LEFT = "left"  # ended by itself: its verdict, its own error, a Ctrl-C
# Stages a rank never ends in by itself: ended there, it was killed after its part of the run.
KILLED_AFTER_ITS_PART = (DONE, WRITING_REPORT)

# The harness stages every rank passes through, in order; `--inject KIND@RANK:STAGE` names one.
HARNESS = (LAUNCHED, DEVICE, JOIN, MEASURE, GATHER, DONE)
# Ranks still importing torch or initialising CUDA (slow on a network filesystem) are not hung.
STARTUP = (LAUNCHED, DEVICE)
# A rank last seen at one of these never joined the process group.
PRE_JOIN = (LAUNCHED, DEVICE, JOIN, RENDEZVOUS)
