"""A client of NCCL's RAS service: what a running NCCL job (2.24 and later) says of its own health.

NCCL starts a RAS (reliability, availability, serviceability) thread in every process at its
first communicator's initialisation, unless NCCL_RAS_ENABLE=0. The threads of a job form a
network of their own; each listens for clients on localhost:28028 (NCCL_RAS_ADDR overrides it)
and answers for the whole job. docs/ras.md describes the protocol and the answer.

- address.py: where a job's service listens (NCCL_RAS_ADDR, read as NCCL reads it);
- link.py: a socket whose every operation is bounded by one deadline;
- client.py: the conversation (`query`), whose outcome is a `RasStatus` (status.py);
- answer.py: the parsed answer, parse.py: NCCL's text into it, verdict.py: its one line.
"""

from ddpcheck.failure.ras.client import leg_timeout, query
from ddpcheck.failure.ras.status import Outcome, RasStatus

__all__ = ["Outcome", "RasStatus", "leg_timeout", "query"]
