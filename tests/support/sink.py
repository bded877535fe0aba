"""A storage server for slow_job.py's uploads: `python sink.py ADDRESS PORT`, until killed.

Each connection sends records (a 4-byte length, then that many bytes); each is answered with one
byte once read whole, so the sender's step waits for its upload to arrive.
"""

from __future__ import annotations

import socket
import sys
import threading


def _serve(conn: socket.socket) -> None:
    with conn:
        while True:
            head = conn.recv(4, socket.MSG_WAITALL)
            if len(head) < 4:
                return
            need = int.from_bytes(head, "big")
            while need:
                chunk = conn.recv(min(need, 1 << 16))
                if not chunk:
                    return
                need -= len(chunk)
            conn.sendall(b"k")


def main() -> None:
    server = socket.create_server((sys.argv[1], int(sys.argv[2])))
    print("ready", flush=True)
    while True:
        conn, _ = server.accept()
        threading.Thread(target=_serve, args=(conn,), daemon=True).start()


if __name__ == "__main__":
    main()
