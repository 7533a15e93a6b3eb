"""Fake hosts: a silent listener and two that answer HTTP badly."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Callable


def serve(answer: bytes | None, hits: list[float] | None = None) -> tuple[str, Callable[[], None]]:
    """A TCP listener on 127.0.0.1 that never accepts (answer None), or answers every request
    with ``answer`` (noting when in ``hits``). Returns its base URL and a stop function."""
    listener = socket.socket()
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", 0))
    listener.listen(128)
    stopping = threading.Event()

    def loop() -> None:
        listener.settimeout(0.2)
        while not stopping.is_set():
            try:
                connection, _ = listener.accept()
            except OSError:
                continue
            if hits is not None:
                hits.append(time.monotonic())
            with connection:
                connection.settimeout(2)
                with contextlib.suppress(OSError):
                    connection.recv(65536)
                    connection.sendall(answer or b"")

    if answer is not None:
        threading.Thread(target=loop, daemon=True).start()

    def stop() -> None:
        stopping.set()
        listener.close()

    return f"http://127.0.0.1:{listener.getsockname()[1]}", stop


GARBAGE = (
    b"HTTP/1.1 200 OK\r\nContent-Type: application/x-ndjson\r\n\r\n\x1b]0;pwned\x07{garbage\r\n"
)


ESCAPED_ERROR = (
    b"HTTP/1.1 500 Internal Server Error\r\nContent-Type: application/json\r\n"
    b"Connection: close\r\n\r\n"
    b'{"error": "model \\u001b]0;pwned\\u0007 \\u001b[2Jbroke\\ndiana: forged"}'
)
