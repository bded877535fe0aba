"""What asking NCCL's RAS service gave: its answer, or why there is none."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from ddpcheck.failure.ras.answer import RasAnswer


class Outcome(str, Enum):
    ANSWERED = "answered"
    NO_SERVICE = "no_service"  # nothing listens at the address
    TIMEOUT = "timeout"  # a partial answer is kept
    PROTOCOL_ERROR = "protocol_error"  # an unexpected reply, ERROR:, a connection closed or reset mid-answer
    CONNECT_ERROR = "connect_error"  # no address NCCL would listen at, or the network refused otherwise


NO_SERVICE_VERDICT = (
    "no RAS service: NCCL < 2.24, RAS disabled (NCCL_RAS_ENABLE=0), or no NCCL job on this host"
)


@dataclass
class RasStatus:
    """What asking the RAS service gave: an answer, or why there is none."""

    address: str
    outcome: Outcome
    verdict: str  # one line
    answer: RasAnswer | None = None  # parsed, also from a partial answer

    @property
    def healthy(self) -> bool | None:
        """True or False when NCCL answered in a known layout; None when it could not say."""
        if self.outcome != Outcome.ANSWERED or self.answer is None or not self.answer.recognised:
            return None
        return self.answer.healthy

    def end(self, outcome: Outcome, verdict: str) -> bool:
        """Settle the outcome; True, for a conversation's `return status.end(...)`."""
        self.outcome, self.verdict = outcome, verdict
        return True

    def protocol_error(self, what: str) -> bool:
        return self.end(Outcome.PROTOCOL_ERROR, f"protocol error: {what}")
