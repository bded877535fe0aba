"""The offsets between the watchers' hosts' clocks, so that ranks of different hosts share one timeline.

A rank's flight recorder stamps each collective with its host's wall clock (`time_created_ns`,
the system clock). Task 0's watcher answers small UDP questions with its own wall clock; every
other task asks it a few times, NTP's way: the answer with the shortest round trip is taken, and
the offset (this host's clock minus task 0's) is off by at most half that round trip. An offset
whose round trip is longer than MAX_ROUND_TRIP_NS is not used: the judge then compares each
host's ranks among themselves (docs/watch.md, "Ranks on several hosts").
"""

from __future__ import annotations

import contextlib
import socket
import struct
import threading
import time
from dataclasses import dataclass

# A question: its number (8 bytes); an answer: the number and task 0's wall clock (8 + 8 bytes).
_QUESTION = struct.Struct("!Q")
_ANSWER = struct.Struct("!Qq")
TRIES = 8
ANSWER_WAIT_S = 0.2  # one question's answer; a lost datagram costs only this
# Half of it is the worst error of an offset: 2 ms of round trip, 1 ms, five times the judge's
# smallest lag (failure/stragglers/judge.MIN_LAG_S); a LAN's round trip is some 0.1 ms.
MAX_ROUND_TRIP_NS = 2_000_000


class ClockServer:
    """Task 0's side: answers every question with its wall clock, from a thread, until closed."""

    def __init__(self) -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind(("0.0.0.0", 0))
        self.port: int = self.sock.getsockname()[1]
        threading.Thread(target=self._answer, name="ddpcheck-clock", daemon=True).start()

    def _answer(self) -> None:
        while True:
            try:
                question, sender = self.sock.recvfrom(64)
            except OSError:
                return  # closed
            if len(question) != _QUESTION.size:
                continue
            (number,) = _QUESTION.unpack(question)
            with contextlib.suppress(OSError):
                self.sock.sendto(_ANSWER.pack(number, time.time_ns()), sender)

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.shutdown(socket.SHUT_RDWR)
        self.sock.close()


@dataclass(frozen=True)
class Offset:
    """This host's clock minus task 0's, and the round trip it was measured with (its error: half)."""

    offset_ns: int
    round_trip_ns: int

    @property
    def usable(self) -> bool:
        return self.round_trip_ns <= MAX_ROUND_TRIP_NS


def measure(host: str, port: int, tries: int = TRIES) -> Offset | None:
    """This host's clock minus task 0's, by the quickest of `tries` questions; None: no answer came."""
    found: list[Offset] = []
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.settimeout(ANSWER_WAIT_S)
        try:
            sock.connect((host, port))
        except OSError:
            return None
        for number in range(tries):
            sent = time.time_ns()
            try:
                sock.send(_QUESTION.pack(number))
                while True:  # a late answer to an earlier question is left aside
                    answer = sock.recv(64)
                    if len(answer) == _ANSWER.size and _ANSWER.unpack(answer)[0] == number:
                        break
            except OSError:  # timed out, or refused: task 0 is not there (yet)
                continue
            came = time.time_ns()
            theirs = _ANSWER.unpack(answer)[1]
            found.append(Offset(offset_ns=(sent + came) // 2 - theirs, round_trip_ns=came - sent))
    return min(found, key=lambda offset: offset.round_trip_ns, default=None)
