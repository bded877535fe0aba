"""The conversation with NCCL's RAS service, as NCCL's own client (`ncclras`, src/ras/client.cc) has it.

Protocol 2, from NCCL 2.24 to 2.30 (the service: src/ras/client_support.cc):

    client: CLIENT PROTOCOL 2            service: SERVER PROTOCOL 2
    client: TIMEOUT 3   (optional)       service: OK
    client: STATUS                       service: the report as text, then it closes the connection

The handshake has 1 s per try and is tried again on a timeout, as `ncclras` does: with
SO_REUSEPORT every process of the job on this host listens on the port, and a stopped one's
socket still accepts. Every socket operation here is bounded by one total deadline.
"""

from __future__ import annotations

import time
from collections.abc import Mapping

from ddpcheck.failure.ras.address import ras_address
from ddpcheck.failure.ras.answer import RasAnswer
from ddpcheck.failure.ras.link import Closed, Link, connect
from ddpcheck.failure.ras.parse import parse_answer
from ddpcheck.failure.ras.status import NO_SERVICE_VERDICT, Outcome, RasStatus
from ddpcheck.failure.ras.verdict import judge

PROTOCOL = 2  # NCCL_RAS_CLIENT_PROTOCOL, unchanged from 2.24 to 2.30
HANDSHAKE_TRY_S = 1.0  # ncclras's TIMEOUT_INCREMENT: a process that does not answer in 1 s is passed over
# NCCL gathers the job's data in a collective over its RAS network: each leg times out after 5 s
# (RAS_COLLECTIVE_LEG_TIMEOUT_SEC, or what TIMEOUT set), the whole after 5 s more (times
# NCCL_RAS_TIMEOUT_FACTOR, 1 by default).
NCCL_LEG_TIMEOUT_S = 5
NCCL_EXTRA_TIMEOUT_S = 5
DEFAULT_TIMEOUT_S = 15.0  # NCCL's worst case (10 s), the handshake, and a margin
ANSWER_MAX_BYTES = 8 << 20


def leg_timeout(timeout: float) -> int | None:
    """The TIMEOUT to send, if any: NCCL's own (none sent) when the budget holds its worst case.

    NCCL gives up on its gathering after the leg timeout plus 5 s; with a shorter budget the
    leg timeout is cut so that NCCL answers, with what it has, before this client gives up
    (never to 0: that would disable NCCL's timeout).
    """
    if timeout >= HANDSHAKE_TRY_S + NCCL_LEG_TIMEOUT_S + NCCL_EXTRA_TIMEOUT_S:
        return None
    return max(1, int(timeout - HANDSHAKE_TRY_S - NCCL_EXTRA_TIMEOUT_S))


def query(environ: Mapping[str, str], *, timeout: float = DEFAULT_TIMEOUT_S) -> RasStatus:
    """Ask NCCL's RAS service for the status of the job whose environment is `environ` (its
    NCCL_RAS_ADDR, else localhost:28028); never raises for what the network or NCCL does.

    timeout: the whole conversation's bound, in seconds.
    """
    deadline = time.monotonic() + max(0.0, timeout)
    try:
        where = ras_address(environ)
    except ValueError as error:
        return RasStatus("NCCL_RAS_ADDR", Outcome.CONNECT_ERROR, f"no RAS address: {error}")
    status = RasStatus(str(where), Outcome.TIMEOUT, "")
    leg = leg_timeout(timeout)
    silent = 0  # connections whose handshake got no answer in time
    while True:
        try:
            sock = connect(where, deadline)
        except ConnectionRefusedError:
            status.end(Outcome.NO_SERVICE, NO_SERVICE_VERDICT)
            break
        except TimeoutError:
            _timed_out(status, timeout, silent)
            break
        except OSError as error:
            status.end(Outcome.CONNECT_ERROR, f"cannot reach NCCL's RAS service at {where}: {error}")
            break
        with sock:
            try:
                if _converse(Link(sock), status, deadline, leg):
                    break
            except TimeoutError:
                silent += 1
                if time.monotonic() < deadline:
                    continue  # ncclras connects again: another process of the job may answer
                _timed_out(status, timeout, silent)
                break
    return status


def _timed_out(status: RasStatus, timeout: float, silent: int) -> None:
    """Connections were accepted but none answered the handshake (a stopped or hung NCCL process,
    or not NCCL on this port), or none was made."""
    where = status.address
    what = f"NCCL's RAS service at {where} did not answer" if silent else f"could not connect to {where}"
    status.end(Outcome.TIMEOUT, f"timeout: {what} in {timeout:g} s")


def _handshake(link: Link, status: RasStatus, deadline: float, leg: int | None) -> bool:
    """CLIENT PROTOCOL and TIMEOUT, 1 s a step: True when done, False after a protocol error.

    A timeout raises TimeoutError for the caller to connect again, as ncclras does.
    """
    try_until = min(deadline, time.monotonic() + HANDSHAKE_TRY_S)
    link.send(f"CLIENT PROTOCOL {PROTOCOL}\n", try_until)
    try:
        line = link.readline(try_until)
    except Closed as closed:
        return not status.protocol_error(f"NCCL closed the connection during the handshake {str(closed)!r}")
    except ValueError as error:
        return not status.protocol_error(f"unexpected answer to the handshake: {error}")
    if not line.upper().startswith("SERVER PROTOCOL "):
        return not status.protocol_error(f"unexpected answer to the handshake: {line[:200]!r}")
    # Another protocol version: carried on with, as NCCL's own client does.
    if leg is not None:
        try_until = min(deadline, time.monotonic() + HANDSHAKE_TRY_S)
        link.send(f"TIMEOUT {leg}\n", try_until)
        try:
            line = link.readline(try_until)
        except Closed:
            return not status.protocol_error(f"NCCL closed the connection after TIMEOUT {leg}")
        except ValueError as error:
            return not status.protocol_error(f"unexpected answer to TIMEOUT {leg}: {error}")
        if line.strip().upper() != "OK":
            return not status.protocol_error(f"unexpected answer to TIMEOUT {leg}: {line[:200]!r}")
    return True


def _converse(link: Link, status: RasStatus, deadline: float, leg: int | None) -> bool:
    """One connection's conversation; True when it settled the outcome. TimeoutError: try again."""
    try:
        if not _handshake(link, status, deadline, leg):
            return True
    except TimeoutError:
        raise
    except OSError as error:
        return status.protocol_error(f"the connection failed during the handshake: {error}")
    try:
        link.send("STATUS\n", deadline)
    except TimeoutError:
        return status.end(Outcome.TIMEOUT, f"timeout: could not send STATUS to {status.address}")
    except OSError as error:
        return status.protocol_error(f"the connection failed sending STATUS: {error}")
    data, end = link.read_to_end(deadline, ANSWER_MAX_BYTES)
    text = data.decode("utf-8", errors="replace")
    first = text.lstrip().splitlines()[0] if text.strip() else ""
    if first.upper().startswith("ERROR:"):
        status.answer = RasAnswer(raw=text)
        return status.protocol_error(f"NCCL refused STATUS: {first[:200]}")
    status.answer = parse_answer(text)
    received = f"after {len(data)} bytes"
    if end == "timeout":
        return status.end(
            Outcome.TIMEOUT,
            f"timeout: no complete answer from NCCL's RAS service at {status.address} "
            f"({received}; the partial answer is kept)",
        )
    if end == "reset":
        return status.protocol_error(f"the connection was reset mid-answer ({received})")
    if end == "too long":
        return status.protocol_error(f"the answer exceeds {ANSWER_MAX_BYTES} bytes")
    if not text.strip():
        return status.protocol_error("NCCL closed the connection without answering STATUS")
    if status.answer.recognised and not status.answer.complete:
        return status.protocol_error(
            f"NCCL closed the connection mid-answer ({received}, no Warnings section)"
        )
    return status.end(Outcome.ANSWERED, judge(status.answer))
