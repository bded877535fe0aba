"""What an error's text means: a peer gone, a collective mismatch, a timeout, a program never started.

The one catalogue of the words torch, gloo, NCCL, the store and an interpreter use. The phrases of
a lost peer (the consequence of another rank's failure) are grouped by what they mean; each reader
takes the groups its verdicts rest on (a wider set would blame or excuse other ranks than its tests
expect), named below.
"""

from __future__ import annotations

import re

# The peer's end of the connection closed: it died, or its host went away.
PEER_CLOSED = (r"connection reset by peer", r"connection closed by peer", r"broken pipe")
SOCKET_CLOSED = (r"socket closed",)
# The same, as gloo, the store and NCCL word it.
TRANSPORT_GONE = (
    r"pair closure",
    r"ECONNRESET",
    r"EPIPE",
    r"connection was closed",
    r"DistNetworkError",
    r"NCCL communicator was aborted",
    r"ProcessGroup.*abort",
)
# Waited for a peer that never answered.
TIMED_OUT = (r"timed out", r"timeout")
# Torn down by the launcher or by ddpcheck after another rank failed.
TORN_DOWN = (r"ended the connection", r"sigterm", r"signalexception", r"keyboardinterrupt")


def _any(*groups: tuple[str, ...]) -> re.Pattern[str]:
    return re.compile("|".join(p for group in groups for p in group), re.IGNORECASE)


# ddpcheck's ranks: a dropped connection means the peer is lost; a timeout only that it is slow or stuck.
CONNECTION_DROPPED = _any(PEER_CLOSED, SOCKET_CLOSED)
# ddpcheck's ranks: any error a peer caused, including the teardown that followed it.
COLLATERAL = _any(PEER_CLOSED, SOCKET_CLOSED, TIMED_OUT, TORN_DOWN)
# A watched job's exception: `timeout` alone is left out, the job's own code may say it.
WATCHED_PEER_GONE = _any(PEER_CLOSED, SOCKET_CLOSED, TRANSPORT_GONE, (r"timed out",))
# A dead job's log line: gloo's own timeouts are read apart (`gloo_timeout`), so only a closed peer.
LOGGED_PEER_DIED = _any(PEER_CLOSED)


# How a report says each group, in place of the error's own words (a path into gloo's sources).
_SAID = (
    (_any(PEER_CLOSED, SOCKET_CLOSED, TRANSPORT_GONE), "connection closed by peer"),
    (_any(TIMED_OUT), "timed out waiting for a peer"),
)


def peer_gone_words(exception: str) -> str | None:
    """'RuntimeError: connection closed by peer' for an exception a lost peer caused; None otherwise.

    `exception` is 'Type: message' ('RuntimeError: [/__w/pytorch/.../pair.cc:534] Connection closed
    by peer [127.0.0.1]:29500'): a rank that only lost its peer is said by what happened to it.
    """
    kind, _, message = exception.partition(": ")
    for pattern, said in _SAID:
        if pattern.search(message or kind):
            return f"{kind}: {said}" if message else said
    return None


def connection_dropped(message: str) -> bool:
    """A peer's connection dropped: the peer died, or its host went away."""
    return bool(CONNECTION_DROPPED.search(message))


def is_collateral_error(message: str) -> bool:
    """A rank's error that a peer caused (it timed out or lost its connection), not its own fault."""
    return bool(COLLATERAL.search(message))


# torch's store timeout names the keys it waited for; a rendezvous key ends with the rank that sets it.
_STORE_KEYS = re.compile(r"wait timeout after \d+ms, keys: (\S+)")


def store_waited_for(message: str) -> list[int]:
    """The ranks whose keys torch's store waited for when `message` (a DistStoreError) was raised:
    evidence of who had not arrived, or of a rank itself waiting; not a verdict by itself."""
    found = _STORE_KEYS.search(message)
    if not found:
        return []
    ranks = [key.rsplit("/", 1)[-1] for key in found.group(1).strip("[]',").split(",")]
    return sorted({int(r.strip("'\" ")) for r in ranks if r.strip("'\" ").isdigit()})


# ---------------------------------------------------------------- what else an error or a log line says
# gloo aborts the rank that receives a collective of another size than it expects.
GLOO_SIZE_MISMATCH = re.compile(r"Received data size doesn't match expected size")
# Any backend's words for ranks that called different collectives (torch's own with TORCH_DISTRIBUTED_DEBUG).
COLLECTIVE_MISMATCH = re.compile(
    r"doesn't match expected size|size mismatch|Mismatch between collectives", re.I
)
NCCL_WATCHDOG_TIMEOUT = re.compile(r"Watchdog caught collective operation timeout: (?P<what>.*)")
FATAL_PYTHON_ERROR = re.compile(r"Fatal Python error: (?P<what>.*)")
NCCL_WARN = re.compile(r"NCCL WARN (?P<what>.*)")
GLOO_TIMEOUT = re.compile(r"Timed out waiting \d+ms for (?:recv|send) operation")
# An exception that is a signal: torchrun's handler turns SIGTERM into SignalException.
SIGNAL_EXCEPTION = re.compile(r"^(?:\w+\.)*(?:SignalException|KeyboardInterrupt)\b")
# "[/__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:537] ": where in gloo, not what.
SOURCE_PLACE = re.compile(r"\[[^\]\s]*\.(?:cc|cpp|h|hpp):\d+\] ")
# What an interpreter or a shell says when the job's program never ran (its stderr, as the job wrote it).
NOT_STARTED = re.compile(
    r"^.*(?:can't open file|No module named|command not found|\[Errno 2\] No such file).*$", re.M
)


def could_not_start(output: str) -> str:
    """The job's last line saying its program could not start ('python: can't open file ...'), or ''."""
    found = NOT_STARTED.findall(output)
    return found[-1].strip() if found else ""
