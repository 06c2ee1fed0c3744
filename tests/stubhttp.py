"""A loopback HTTP stub for tests: a quiet request handler with a one-call reply, and a server on a free port
of 127.0.0.1 running in a daemon thread."""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class QuietHandler(BaseHTTPRequestHandler):
    """A handler that logs nothing; ``_reply(code, body)`` answers with a body and its length."""

    def log_message(self, *args):
        pass

    def _reply(self, code: int, body: bytes = b"{}") -> None:
        self.send_response(code)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


def serve(handler: type[BaseHTTPRequestHandler]) -> tuple[ThreadingHTTPServer, str]:
    """``(server, "http://127.0.0.1:PORT")``, serving until ``server.shutdown()`` (or the process ends)."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}"
