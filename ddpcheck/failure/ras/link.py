"""A connection to NCCL's RAS service whose every step (lookup, connect, send, receive) has one deadline."""

from __future__ import annotations

import socket
import threading
import time

from ddpcheck.failure.ras.address import RasAddress

HANDSHAKE_LINE_MAX = 1024  # ncclras's buffer for the handshake's answers


class Closed(Exception):
    """The service closed the connection before a whole line came; the text received so far."""


def left(until: float) -> float:
    """Seconds left until the deadline; TimeoutError once it passed."""
    remaining = until - time.monotonic()
    if remaining <= 0:
        raise TimeoutError
    return remaining


class Link:
    """A connected socket read line by line or to its end, each operation bounded by a deadline."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.buffer = bytearray()

    def send(self, text: str, until: float) -> None:
        self.sock.settimeout(left(until))
        self.sock.sendall(text.encode())

    def _recv(self, until: float, size: int = 65536) -> bytes:
        self.sock.settimeout(left(until))
        return self.sock.recv(size)

    def readline(self, until: float) -> str:
        while b"\n" not in self.buffer:
            if len(self.buffer) >= HANDSHAKE_LINE_MAX:
                raise ValueError(f"no end of line in {len(self.buffer)} bytes")
            chunk = self._recv(until, HANDSHAKE_LINE_MAX)
            if not chunk:
                raise Closed(bytes(self.buffer).decode(errors="replace"))
            self.buffer += chunk
        line, _, rest = bytes(self.buffer).partition(b"\n")
        self.buffer = bytearray(rest)
        return line.decode(errors="replace").rstrip("\r")

    def read_to_end(self, until: float, cap: int) -> tuple[bytes, str]:
        """Everything until the service closes: (data, "eof" | "timeout" | "reset" | "too long")."""
        data = bytearray(self.buffer)
        self.buffer.clear()
        try:
            while len(data) <= cap:
                chunk = self._recv(until)
                if not chunk:
                    return bytes(data), "eof"
                data += chunk
        except TimeoutError:
            return bytes(data), "timeout"
        except OSError:
            return bytes(data), "reset"
        return bytes(data), "too long"


def lookup_within(host: str, port: int | None, timeout_s: float) -> list[tuple] | Exception | None:
    """socket.getaddrinfo(host, port) for a stream socket, bounded: a name lookup cannot take a timeout,
    so it runs in a daemon thread. Its addresses, the exception it raised, or None past `timeout_s`."""
    found: list = []

    def lookup() -> None:
        try:
            found.append(socket.getaddrinfo(host, port, type=socket.SOCK_STREAM))
        except Exception as error:  # the caller's to judge: each takes what it can
            found.append(error)

    worker = threading.Thread(target=lookup, name="ddpcheck-resolve", daemon=True)
    worker.start()
    worker.join(timeout_s)
    return found[0] if found else None


def _resolve(where: RasAddress, until: float) -> list[tuple]:
    found = lookup_within(where.host, where.port, max(0.0, until - time.monotonic()))
    if isinstance(found, OSError):
        raise found
    if not isinstance(found, list):  # no answer in time, or an error no OSError
        raise TimeoutError(f"resolving {where.host}")
    return found


def connect(where: RasAddress, until: float) -> socket.socket:
    """A connection to the first address that takes one, as ncclras tries each of getaddrinfo's."""
    failures: list[OSError] = []
    for family, kind, proto, _, sockaddr in _resolve(where, until):
        sock = socket.socket(family, kind, proto)
        try:
            sock.settimeout(left(until))
            sock.connect(sockaddr)
        except OSError as error:
            sock.close()
            failures.append(error)
            if isinstance(error, TimeoutError):
                break
            continue
        return sock
    if failures and all(isinstance(f, ConnectionRefusedError) for f in failures):
        raise failures[0]
    raise failures[-1] if failures else OSError(f"no address for {where.host}")  # a timeout is the last
