"""An HTTP(S) front to a real Flink REST endpoint, for fault-injection and security tests.

Each request is first offered to ``intercept``: what it answers (status, JSON body) goes back as is and never
reaches Flink; for ``None`` the request is forwarded to the endpoint and Flink's answer returned. With ``tls``
(certificate and key files) the front serves HTTPS.
"""

from __future__ import annotations

import ssl
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import requests

#: Given the request (its ``command``, ``path``, ``headers``), an answer ``(status, JSON body)`` or None to forward.
Intercept = Callable[[BaseHTTPRequestHandler], "tuple[int, bytes] | None"]


class RestFront:
    """Serves on 127.0.0.1 (a free port) in a thread of its own until :meth:`close`; ``url`` is its base URL."""

    def __init__(self, target: str, intercept: Intercept, *, tls: tuple[Path, Path] | None = None) -> None:
        self.target = target

        class Handler(BaseHTTPRequestHandler):
            def _serve(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                answered = intercept(self)
                if answered is not None:
                    (status, payload), kind = answered, "application/json"
                else:
                    headers = {k: v for k, v in self.headers.items() if k.lower() in ("content-type", "accept")}
                    answer = requests.request(self.command, target + self.path, data=body or None, headers=headers,
                                              timeout=300)  # fmt: skip
                    status, payload = answer.status_code, answer.content
                    kind = answer.headers.get("Content-Type", "application/json")
                self.send_response(status)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            do_GET = do_POST = do_PATCH = do_DELETE = _serve

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        if tls is not None:
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            context.load_cert_chain(*tls)
            self.server.socket = context.wrap_socket(self.server.socket, server_side=True)
        self.url = f"{'https' if tls else 'http'}://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        """Stop serving and free the port."""
        self.server.shutdown()
        self.server.server_close()
