"""Fault stand-ins shared by the test layers: an S3 (or any TCP service) that hangs."""

from __future__ import annotations

import socket
import threading


class Hang:
    """A TCP server that accepts every connection and never sends a byte (an S3 that hangs), on ``host``
    (loopback, or the sandbox bridge so that its hosts reach it). ``conns``: what it accepted."""

    def __init__(self, host: str = "127.0.0.1") -> None:
        self.sock = socket.create_server((host, 0), backlog=64)
        self.sock.settimeout(0.2)
        self.conns: list[socket.socket] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()
        self.url = f"http://{host}:{self.sock.getsockname()[1]}"

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                self.conns.append(self.sock.accept()[0])
            except OSError:
                continue

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)
        for c in self.conns:
            c.close()
        self.sock.close()
