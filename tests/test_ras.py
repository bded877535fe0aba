"""The RAS client against a small RAS service of our own on loopback, and NCCL's answers parsed.

The service speaks the protocol as NCCL's src/ras/client_support.cc does (commands a line each,
'\\r' dropped, matched without case; SERVER PROTOCOL 2; OK to TIMEOUT; the STATUS report sent in
the pieces NCCL enqueues, then the connection closed). The reports are written here with NCCL's
own format strings (rasOutAppend's, in Python's %): no multi-GPU job was at hand to record one.

Pure: a thread and sockets, no process.
"""

# NCCL's format strings are C's printf strings: kept as they are, with Python's % to fill them.
# ruff: noqa: UP031

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator

import pytest

from ddpcheck.failure.ras import Outcome, leg_timeout, query
from ddpcheck.failure.ras.address import parse_ras_addr, ras_address
from ddpcheck.failure.ras.client import PROTOCOL
from ddpcheck.failure.ras.parse import parse_answer
from ddpcheck.failure.ras.verdict import judge

# --- NCCL's report, piece by piece, with its format strings -------------------------------------


def version_piece(
    version: str = "2.27.3", cuda: str = "12.9", runtime: int = 12090, driver: int = 12080
) -> str:
    # rasClientRunInit: "NCCL version " STR(NCCL_MAJOR) ... " compiled with CUDA " ..., then the runtime.
    return f"NCCL version {version} compiled with CUDA {cuda}\n" + (
        "CUDA runtime version %d, driver version %d\n\n" % (runtime, driver)
    )


def summary_piece(nodes: int, per_node: int, gpus_per_process: int) -> str:
    """The job summary of a job alike on every node, and the start of the communicators' line."""
    return (
        "Job summary\n===========\n\n"
        "  Nodes  Processes         GPUs  Processes     GPUs\n"
        "(total)   per node  per process    (total)  (total)\n"
        "%7d  %9d  %11d  %9d  %7d\n"
        % (nodes, per_node, gpus_per_process, nodes * per_node, nodes * per_node * gpus_per_process)
    ) + "\nCommunicators..."


def comms_piece(seconds: float, rows: list[tuple[int, int, int, str, int, int, str, str]]) -> str:
    # rasClientRunComms: " (%.3fs)\n=============\n\n", then the table, the largest communicators first.
    text = " (%.3fs)\n=============\n\n" % seconds
    text += (
        "Group     Comms     Nodes     Ranks     Ranks     Ranks    Status  Errors\n"
        "    #  in group  per comm  per node  per comm  in group\n"
    )
    for row in rows:
        text += "%5d  %8d  %8d  %8s  %8d  %8d  %8s  %6s\n" % row
    return text


def es(n: int) -> str:
    return "es" if n > 1 else ""


def process_line(pid: int, node: str, gpus: str) -> str:
    return "  Process %d on node %s managing GPU%s %s\n" % (pid, node, "s" if "," in gpus else "", gpus)


def rank_line(rank: int, gpu: str, pid: int, node: str) -> str:
    return "  Rank %d -- GPU %s managed by process %d on node %s\n" % (rank, gpu, pid, node)


HEALTHY = [
    version_piece(),
    summary_piece(nodes=2, per_node=8, gpus_per_process=1),
    comms_piece(0.004, [(0, 1, 2, "8", 16, 16, "RUNNING", "OK"), (1, 2, 1, "8", 8, 16, "RUNNING", "OK")]),
    "\nErrors\n======\n\n",
    "Warnings\n========\n\n",
]

WORLD, NODE2, NODE1 = 0x7A1C33F09E2B4D18, 0x0B3E91C2D4F60A57, 0x5C1F0E8A7B2D9C46
# 16 processes on 2 nodes, a GPU each: on 10.0.0.2, the process of GPU 3 died (RAS lost it) and the
# process of GPU 5 stopped answering; on 10.0.0.1, rank 3 is an AllReduce behind its peers.
PROBLEM = [
    version_piece(),
    summary_piece(nodes=2, per_node=8, gpus_per_process=1),
    comms_piece(
        10.012,
        [
            (0, 1, 2, "6-8", 16, 14, "RUNNING", "INCOMPLETE"),
            (1, 1, 1, "6", 8, 6, "RUNNING", "INCOMPLETE"),
            (2, 1, 1, "8", 8, 8, "RUNNING", "MISMATCH"),
        ],
    ),
    "\nErrors\n======\n\n"
    + "INCOMPLETE\n  Missing communicator data from %d job process%s\n" % (1, es(1))
    + process_line(52015, "10.0.0.2", "5")
    + "\n"
    + "DEAD\n  %d job process%s considered dead (unreachable via the RAS network)\n" % (1, " is")
    + process_line(52013, "10.0.0.2", "3")
    + "\n"
    + "#%d-%d (%016x) INCOMPLETE\n  Missing communicator data from %d rank%s\n" % (0, 0, WORLD, 2, "s")
    + rank_line(11, "3", 52013, "10.0.0.2")
    + rank_line(13, "5", 52015, "10.0.0.2")
    + "\n"
    + "#%d-%d (%016x) INCOMPLETE\n  Missing communicator data from %d rank%s\n" % (1, 0, NODE2, 2, "s")
    + rank_line(3, "3", 52013, "10.0.0.2")
    + rank_line(5, "5", 52015, "10.0.0.2")
    + "\n",
    "Warnings\n========\n\n"
    + "TIMEOUT\n  Encountered %d communication timeout%s while gathering communicator data\n\n" % (1, "")
    + "#%d-%d (%016x) MISMATCH\n" % (2, 0, NODE1)
    + "  Communicator ranks have different %s operation counts\n" % "AllReduce"
    + "  %d ranks have launched up to operation %d\n" % (7, 1201)
    + "  Rank %d has launched up to operation %d -- GPU %s managed by process %d on node %s\n"
    % (3, 1200, "3", 51003, "10.0.0.1")
    + "\n",
]


# --- A RAS service on loopback -------------------------------------------------------------------


class RasService:
    """NCCL's side of the conversation in a thread: rasClientEventLoop's commands, its replies.

    pieces: the STATUS report, sent piece by piece, then the connection closed (a report cut
    short is a service that closed mid-answer). handshake: the reply to CLIENT PROTOCOL.
    silent: the first so many connections accepted and never answered (a stopped process's socket).
    stall: send the pieces, then hold the connection open.
    """

    def __init__(
        self,
        pieces: list[str] | None = None,
        handshake: str = f"SERVER PROTOCOL {PROTOCOL}\n",
        silent: int = 0,
        stall: bool = False,
    ) -> None:
        self.pieces = pieces if pieces is not None else HEALTHY
        self.handshake, self.silent, self.stall = handshake, silent, stall
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.listener.settimeout(0.05)
        self.port = self.listener.getsockname()[1]
        self.address = f"127.0.0.1:{self.port}"
        self.commands: list[str] = []
        self.connections = 0
        self.held: list[socket.socket] = []
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._serve, name="ras-service", daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while not self.stopping.is_set():
            try:
                conn, _ = self.listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            self.connections += 1
            if self.connections <= self.silent:
                self.held.append(conn)
                continue
            try:
                if self._talk(conn):
                    continue
            except OSError:
                pass
            conn.close()

    def _talk(self, conn: socket.socket) -> bool:
        """One client; True when the connection is held open (stall)."""
        conn.settimeout(5)
        buffer = b""
        while True:
            while b"\n" not in buffer:
                chunk = conn.recv(1024)
                if not chunk:
                    return False
                buffer += chunk
            line, _, buffer = buffer.partition(b"\n")
            command = line.decode().rstrip("\r")
            self.commands.append(command)
            lowered = command.lower()
            if lowered.startswith("client protocol "):
                if not self.handshake:
                    return False  # closed without a word
                conn.sendall(self.handshake.encode())
            elif lowered.startswith("timeout "):
                value = command[len("timeout ") :]
                ok = value.isdigit()
                conn.sendall(b"OK\n" if ok else f"ERROR: Invalid timeout value {value}\n".encode())
            elif lowered in ("status", "verbose status"):
                for piece in self.pieces:
                    conn.sendall(piece.encode())
                    time.sleep(0.01)  # NCCL's pieces are separate sends, some after its collective
                if self.stall:
                    self.held.append(conn)
                    return True
                return False  # rasClientTerminate once the queue is sent
            else:
                conn.sendall(f"ERROR: Unknown command {command}\n".encode())

    def close(self) -> None:
        self.stopping.set()
        self.listener.close()
        self.thread.join(timeout=5)
        for conn in self.held:
            conn.close()


@pytest.fixture
def service(request: pytest.FixtureRequest) -> Iterator[RasService]:
    server = RasService(**getattr(request, "param", {}))
    try:
        yield server
    finally:
        server.close()


# --- The conversation ----------------------------------------------------------------------------


def test_healthy_job(service: RasService) -> None:
    status = query({"NCCL_RAS_ADDR": service.address})  # 15 s: NCCL's own timeouts fit
    assert status.outcome == Outcome.ANSWERED, status
    assert status.healthy is True
    assert service.commands == ["CLIENT PROTOCOL 2", "STATUS"]  # NCCL's default timeout: no TIMEOUT
    answer = status.answer
    assert answer is not None and answer.complete
    assert answer.nccl_version == "2.27.3"
    assert (answer.nodes, answer.processes, answer.gpus) == (2, 16, 16)
    assert [(c.id, c.ranks_expected, c.ranks_missing, c.status, c.errors) for c in answer.communicators] == [
        ("#0-0", 16, 0, "RUNNING", []),
        ("#1-0", 8, 0, "RUNNING", []),
        ("#1-1", 8, 0, "RUNNING", []),
    ]
    assert status.verdict == (
        "healthy: NCCL 2.27.3, 2 nodes, 16 processes, 16 GPUs, 3 communicators (RUNNING); "
        "no errors or warnings"
    )
    assert answer.raw == "".join(HEALTHY)


@pytest.mark.parametrize("service", [{"pieces": PROBLEM}], indirect=True)
def test_problem_job_names_the_dead_and_the_unresponsive(service: RasService) -> None:
    status = query({"NCCL_RAS_ADDR": service.address}, timeout=5)
    assert status.outcome == Outcome.ANSWERED and status.healthy is False
    answer = status.answer
    assert answer is not None
    assert [(p.pid, p.host, p.gpus) for p in answer.dead] == [(52013, "10.0.0.2", "3")]
    assert [(p.pid, p.host, p.gpus) for p in answer.unresponsive] == [(52015, "10.0.0.2", "5")]
    assert (answer.dead_count, answer.unresponsive_count, answer.timeouts) == (1, 1, 1)
    world, node2, node1 = answer.communicators
    assert (world.id, world.hash, world.ranks_expected) == ("#0-0", f"{WORLD:016x}", 16)
    assert world.ranks_missing == 2
    assert [(p.rank, p.pid, p.host) for p in world.missing] == [
        (11, 52013, "10.0.0.2"),
        (13, 52015, "10.0.0.2"),
    ]
    assert (node2.hash, node2.ranks_missing, [p.rank for p in node2.missing]) == (f"{NODE2:016x}", 2, [3, 5])
    assert (node1.hash, node1.errors, node1.ranks_missing) == (f"{NODE1:016x}", ["MISMATCH"], 0)
    assert [f.kind for f in answer.errors] == ["INCOMPLETE", "DEAD", "INCOMPLETE", "INCOMPLETE"]
    assert [(f.kind, f.comm) for f in answer.warnings] == [("TIMEOUT", None), ("MISMATCH", "#2-0")]
    (behind,) = [p for p in answer.warnings[1].processes if p.rank is not None]
    assert (behind.rank, behind.state, behind.pid) == (3, "has launched up to operation 1200", 51003)
    verdict = status.verdict
    assert verdict.startswith("problems: ") and "\n" not in verdict
    assert "1 process dead (pid 52013 on 10.0.0.2, GPU 3)" in verdict
    assert "1 process unresponsive (pid 52015 on 10.0.0.2, GPU 5)" in verdict
    assert f"communicator #0-0 ({WORLD:016x}) missing 2 of 16 ranks (ranks 11, 13)" in verdict
    assert "MISMATCH: rank 3 has launched up to operation 1200" in verdict
    assert "1 RAS communication timeout while gathering" in verdict


def test_connection_refused_is_no_service() -> None:
    with socket.create_server(("127.0.0.1", 0)) as probe:
        port = probe.getsockname()[1]  # closed again: nothing listens there
    started = time.monotonic()
    status = query({"NCCL_RAS_ADDR": f"127.0.0.1:{port}"}, timeout=5)
    assert time.monotonic() - started < 1
    assert status.outcome == Outcome.NO_SERVICE and status.healthy is None
    assert status.verdict == (
        "no RAS service: NCCL < 2.24, RAS disabled (NCCL_RAS_ENABLE=0), or no NCCL job on this host"
    )


@pytest.mark.parametrize("service", [{"silent": 1000}], indirect=True)
def test_a_service_that_never_answers_is_bounded_by_the_timeout(service: RasService) -> None:
    started = time.monotonic()
    status = query({"NCCL_RAS_ADDR": service.address}, timeout=2.5)
    assert time.monotonic() - started < 2.5 + 1
    assert status.outcome == Outcome.TIMEOUT and status.healthy is None
    assert service.connections >= 2  # ncclras connects again after 1 s without an answer
    assert "did not answer in 2.5 s" in status.verdict


@pytest.mark.parametrize("service", [{"silent": 1}], indirect=True)
def test_a_silent_process_is_passed_over_for_one_that_answers(service: RasService) -> None:
    """Every process of a job on a host listens on the port (SO_REUSEPORT); a stopped one's socket
    still accepts. ncclras gives each handshake 1 s and connects again: so does this client."""
    started = time.monotonic()
    status = query({"NCCL_RAS_ADDR": service.address}, timeout=10)
    assert status.outcome == Outcome.ANSWERED and status.healthy is True
    assert service.connections == 2 and 1 <= time.monotonic() - started < 3


@pytest.mark.parametrize("service", [{"pieces": HEALTHY[:2], "stall": True}], indirect=True)
def test_a_service_stuck_mid_answer_is_bounded_and_keeps_what_came(service: RasService) -> None:
    started = time.monotonic()
    status = query({"NCCL_RAS_ADDR": service.address}, timeout=2)
    assert time.monotonic() - started < 2 + 1
    assert status.outcome == Outcome.TIMEOUT
    assert status.answer is not None and status.answer.nccl_version == "2.27.3"
    assert service.commands == ["CLIENT PROTOCOL 2", "TIMEOUT 1", "STATUS"]  # a short budget: a short leg


@pytest.mark.parametrize("service", [{"pieces": HEALTHY[:3]}], indirect=True)
def test_a_service_that_closes_mid_answer_is_a_protocol_error(service: RasService) -> None:
    status = query({"NCCL_RAS_ADDR": service.address}, timeout=5)
    assert status.outcome == Outcome.PROTOCOL_ERROR and status.healthy is None
    assert "mid-answer" in status.verdict
    assert status.answer is not None and status.answer.processes == 16  # what arrived, parsed


@pytest.mark.parametrize("service", [{"handshake": "SERVER PROTOCOL 3\n"}], indirect=True)
def test_another_protocol_version_is_carried_on_with_and_the_answer_read(service: RasService) -> None:
    status = query({"NCCL_RAS_ADDR": service.address}, timeout=5)
    assert status.outcome == Outcome.ANSWERED and status.healthy is True


@pytest.mark.parametrize("service", [{"handshake": "HTTP/1.0 400 Bad Request\n"}], indirect=True)
def test_a_service_that_is_not_ras_is_a_protocol_error(service: RasService) -> None:
    status = query({"NCCL_RAS_ADDR": service.address}, timeout=5)
    assert status.outcome == Outcome.PROTOCOL_ERROR
    assert status.verdict == "protocol error: unexpected answer to the handshake: 'HTTP/1.0 400 Bad Request'"
    assert service.commands == ["CLIENT PROTOCOL 2"]


@pytest.mark.parametrize("service", [{"handshake": ""}], indirect=True)
def test_a_service_that_closes_during_the_handshake(service: RasService) -> None:
    status = query({"NCCL_RAS_ADDR": service.address}, timeout=5)
    assert status.outcome == Outcome.PROTOCOL_ERROR and "during the handshake" in status.verdict


@pytest.mark.parametrize("service", [{"pieces": ["ERROR: Unknown command STATUS\n"]}], indirect=True)
def test_an_error_reply_to_status_is_a_protocol_error(service: RasService) -> None:
    status = query({"NCCL_RAS_ADDR": service.address}, timeout=5)
    assert status.outcome == Outcome.PROTOCOL_ERROR
    assert status.verdict == "protocol error: NCCL refused STATUS: ERROR: Unknown command STATUS"


def test_a_short_budget_sends_timeout_and_the_address_is_the_environment_s(service: RasService) -> None:
    status = query({"NCCL_RAS_ADDR": service.address}, timeout=8)
    assert status.outcome == Outcome.ANSWERED and status.address == service.address
    assert service.commands == ["CLIENT PROTOCOL 2", "TIMEOUT 2", "STATUS"]


@pytest.mark.parametrize("service", [{"pieces": ['{\n  "nccl_version": "2.29.2"\n}\n']}], indirect=True)
def test_an_unknown_layout_is_unparsed_with_its_raw_text(service: RasService) -> None:
    status = query({"NCCL_RAS_ADDR": service.address}, timeout=5)
    assert status.outcome == Outcome.ANSWERED and status.healthy is None
    assert status.verdict.startswith("unparsed: ")
    assert status.answer is not None and '"nccl_version": "2.29.2"' in status.answer.raw


# --- Parsing alone -------------------------------------------------------------------------------


def test_nccl_2_24_layout_with_uneven_nodes_and_errors() -> None:
    """2.24-2.25 list missing ranks on one line and call a non-member UNKNOWN; nodes run 8 and 6 processes."""
    text = (
        version_piece("2.24.3", "12.6", 12060, 12040)
        + "Job summary\n===========\n\n"
        + "  Nodes  Processes         GPUs\n          per node  per process\n"
        + "%7d  %9d  %11d\n" % (1, 8, 1)
        + "%7d  %9d  %11d\n" % (1, 6, 1)
        + "\n  Nodes  Processes         GPUs\n(total)    (total)      (total)\n%7d  %9d  %11d\n" % (2, 14, 14)
        + "\nThe outlier node%s:\n" % ""
        + "  Node %s running process%s %s\n" % ("10.0.0.2", "es", "52010,52011,52012,52014,52016,52017")
        + "\nCommunicators..."
        + " (%.2fs)\n=============\n\n" % 0.51
        + comms_piece(0, [(0, 1, 2, "6-8", 16, 14, "RUNNING", "INCOMPLETE,ERROR,MISMATCH")]).split("\n", 3)[3]
        + "\nErrors\n======\n\n"
        + "#%d-%d (%016x) INCOMPLETE\n  Missing communicator data from %d rank%s\n" % (0, 0, WORLD, 2, "s")
        + "  The missing rank%s: %s\n\n" % ("s", "11,13")
        + "#%d-%d (%016x) ERROR\n" % (0, 0, WORLD)
        + "  Asynchronous error%s on %d rank%s\n" % ("", 1, "")
        + "  Rank %d reported %s -- GPU %s managed by process %d on node %s\n"
        % (9, "Remote process error", "1", 52011, "10.0.0.2")
        + "\n"
        + "Warnings\n========\n\n"
        + "#%d-%d (%016x) MISMATCH\n" % (0, 0, WORLD)
        + "  Communicator ranks have different status\n"
        + "  %d ranks have status %s\n" % (13, "RUNNING")
        + "  Rank %s has status %s\n" % ("4", "UNKNOWN")
        + "\n"
    )
    answer = parse_answer(text)
    assert answer.recognised and answer.complete and not answer.healthy
    assert (answer.nccl_version, answer.nodes, answer.processes, answer.gpus) == ("2.24.3", 2, 14, 14)
    (world,) = answer.communicators
    assert world.errors == ["INCOMPLETE", "ERROR", "MISMATCH"]
    assert [p.rank for p in world.missing] == [11, 13]
    assert world.ranks_missing == 2
    verdict = judge(answer)
    assert "missing 2 of 16 ranks (ranks 11, 13)" in verdict
    assert "ERROR: rank 9 reported Remote process error" in verdict
    assert "MISMATCH: rank 4 has status UNKNOWN" in verdict


def test_no_communicators_yet() -> None:
    text = (
        version_piece()
        + summary_piece(1, 2, 1)
        + " (%.3fs)\n=============\n\n" % 0.001
        + "No communicator data collected!\n"
        + "\nErrors\n======\n\nWarnings\n========\n\n"
    )
    answer = parse_answer(text)
    assert answer.healthy and answer.communicators == []
    assert (
        judge(answer)
        == "healthy: NCCL 2.27.3, 1 node, 2 processes, 2 GPUs, no communicators; no errors or warnings"
    )


def test_an_error_heading_this_client_does_not_know_is_still_a_problem() -> None:
    text = (
        "".join(HEALTHY[:3])
        + "\nErrors\n======\n\nSOMETHING NEW\n  Seen on 2 ranks\n\nWarnings\n========\n\n"
    )
    answer = parse_answer(text)
    assert not answer.healthy
    assert judge(answer) == "problems: SOMETHING NEW: Seen on 2 ranks"


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("127.0.0.1:28029", ("127.0.0.1", 28029)),
        ("localhost:5000", ("localhost", 5000)),
        ("node1:7000,node2:7001", ("node1", 7000)),
        ("[::1]:28028", ("::1", 28028)),
        ("[fe80::1%lo]:7", ("fe80::1%lo", 7)),  # the interface kept for getaddrinfo's scope id
        ("myhost", ("myhost", 65535)),  # NCCL's port -1, as uint16_t
    ],
)
def test_nccl_ras_addr_as_nccl_reads_it(value: str, expected: tuple[str, int]) -> None:
    where = parse_ras_addr(value)
    assert (where.host, where.port) == expected


@pytest.mark.parametrize("value", ["", "x", "[::1:28028", ":28028"])
def test_nccl_ras_addr_nccl_refuses(value: str) -> None:
    with pytest.raises(ValueError):
        parse_ras_addr(value)
    status = query({"NCCL_RAS_ADDR": value}, timeout=1)
    assert status.outcome == Outcome.CONNECT_ERROR


def test_default_address_and_leg_timeout() -> None:
    assert str(ras_address({})) == "localhost:28028"
    assert str(parse_ras_addr("[::1]:1")) == "[::1]:1"
    assert str(parse_ras_addr("[fe80::1%lo]:1")) == "[fe80::1]:1"
    assert leg_timeout(15) is None  # NCCL's own 5 s + 5 s fit
    assert leg_timeout(8) == 2
    assert leg_timeout(2) == 1  # never 0: that disables NCCL's timeout
