"""A small, odd OpenAI-compatible server for the provider-truth tests.

Standard library only: a ``ThreadingHTTPServer`` on 127.0.0.1 (a free port) answering
``POST /v1/chat/completions`` from a script of behaviours, one per request, the way real
endpoints and gateways misbehave: usage in every shape (or none, or made up), odd
headers, huge provider strings, a hang, a connection reset, any HTTP status. It records
every request body and its headers so a test can assert what went on the wire.
"""

from __future__ import annotations

import contextlib
import json
import socket
import struct
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

MODEL = "real/model"


@dataclass
class Behaviour:
    """One answer: ``status`` with ``body`` (a dict is sent as JSON) and ``headers``, after
    ``delay`` seconds; ``reset`` drops the connection instead of answering."""

    status: int = 200
    body: dict | bytes = b""
    headers: dict = field(default_factory=dict)
    delay: float = 0.0
    reset: bool = False


def completion(content: str | None, *, usage: dict | None = None, finish: str = "stop", model: str = MODEL,
               message: dict | None = None, top: dict | None = None, headers: dict | None = None,
               delay: float = 0.0) -> Behaviour:
    """A 200 chat.completion reply carrying ``content`` and ``usage`` (omitted when None)."""
    body = {"id": "chatcmpl-hostile-1", "object": "chat.completion", "created": 0, "model": model,
            "choices": [{"index": 0, "finish_reason": finish,
                         "message": {"role": "assistant", "content": content, **(message or {})}}],
            **(top or {})}
    if usage is not None:
        body["usage"] = usage
    return Behaviour(body=body, headers={"x-request-id": "req-hostile-1", **(headers or {})}, delay=delay)


def status(code: int, message: str = "nope", headers: dict | None = None) -> Behaviour:
    """An HTTP error with an OpenAI-style error body."""
    return Behaviour(status=code, body={"error": {"message": message, "type": "error", "code": None}},
                     headers=headers or {})


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: "HostileServer"

    def log_message(self, format: str, *args) -> None:
        return

    def do_POST(self) -> None:
        raw = self.rfile.read(int(self.headers.get("content-length") or 0))
        srv = self.server
        with srv.lock:
            srv.requests.append({"body": json.loads(raw), "headers": dict(self.headers.items())})
            b = srv.script.pop(0) if srv.script else srv.default
        if b.delay and srv.stopping.wait(b.delay):
            b = Behaviour(reset=True)
        if b.reset:
            self.close_connection = True
            with contextlib.suppress(OSError):
                self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                self.connection.close()
            return
        data = b.body if isinstance(b.body, bytes) else json.dumps(b.body).encode()
        self.send_response(b.status)
        self.send_header("content-type", "application/json")
        for k, v in b.headers.items():
            self.send_header(k, v)
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


class HostileServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, script: list[Behaviour], default: Behaviour) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.script, self.default = list(script), default
        self.requests: list[dict] = []
        self.lock = threading.Lock()
        self.stopping = threading.Event()

    def handle_error(self, request, client_address) -> None:
        return

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/v1"


@contextlib.contextmanager
def hostile(script: list[Behaviour], default: Behaviour):
    """Serve ``script`` (then ``default`` for every further request) for a ``with`` block."""
    srv = HostileServer(script, default)
    thread = threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield srv
    finally:
        srv.stopping.set()
        srv.shutdown()
        srv.server_close()
        thread.join(timeout=5)


def refused_url() -> str:
    """A loopback base URL nothing listens on (the port was free a moment ago)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    time.sleep(0.01)
    return f"http://127.0.0.1:{port}/v1"
