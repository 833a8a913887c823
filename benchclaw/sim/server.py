"""The simulator as a loopback OpenAI-compatible HTTP API.

``benchclaw sim serve`` (and ``serve_in_thread`` in tests) puts ``SimBackend`` behind the
standard library's ``ThreadingHTTPServer`` on 127.0.0.1, so the ``openai`` provider path
(the official SDK, real HTTP, real headers, real timeouts and connection resets) is
exercised end to end with no network and no key. Routes: ``POST /v1/chat/completions``,
``GET /v1/models``; every reply carries an ``x-request-id`` header and
``x-benchclaw-simulated: 1``. A request with ``"stream": true`` is answered with
server-sent events (``sim.stream``), paced like the simulated latency: the first token
after the time to first token, the others spread over the decoding time. It binds to
loopback only: it is a test double, not a service.
"""

from __future__ import annotations

import contextlib
import socket
import struct
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Iterator

from ..formats import jsonio
from .backend import SimBackend, SimFaults
from .engine import SimModules
from .profiles import Profiles, load_profiles

__all__ = ["SimServer", "serve_in_thread", "MAX_BODY"]

MAX_BODY = 16 * 1024 * 1024


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # headers and body go out at once, no 40 ms delayed-ACK stall
    server: "_HTTPServer"

    def log_message(self, format: str, *args) -> None:  # quiet: the client records every call
        return

    def _send(self, status: int, headers: dict, body: bytes) -> None:
        self.send_response(status)
        for k, v in headers.items():
            self.send_header(k, v)
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _json(self, status: int, obj) -> None:
        self._send(status, {"content-type": "application/json", "x-request-id": "req-sim-meta",
                            "x-benchclaw-simulated": "1"}, jsonio.dumps(obj))

    def do_GET(self) -> None:
        if self.path.rstrip("/") in ("/v1/models", "/models"):
            self._json(200, self.server.backend.models())
        else:
            self._json(404, {"error": {"message": f"no route {self.path}", "type": "not_found"}})

    def do_POST(self) -> None:
        if self.path.rstrip("/") not in ("/v1/chat/completions", "/chat/completions"):
            self._json(404, {"error": {"message": f"no route {self.path}", "type": "not_found"}})
            return
        length = int(self.headers.get("content-length") or 0)
        if length > MAX_BODY:
            self.close_connection = True
            self._json(413, {"error": {"message": "request body too large", "type": "invalid_request_error"}})
            return
        raw = self.rfile.read(length)
        try:
            reply = self.server.backend.handle(raw, authorization=self.headers.get("authorization"))
        except Exception as e:  # a simulator bug answers 500, like a real upstream would
            self._json(500, {"error": {"message": f"simulator error: {type(e).__name__}: {e}"[:500],
                                       "type": "server_error"}})
            return
        if reply.hang:
            self.server.stopping.wait(reply.delay_s)
            self._drop()
            return
        if reply.reset:
            self._drop()
            return
        if reply.stream is not None:
            self._stream(reply)
            return
        if reply.delay_s > 0 and self.server.stopping.wait(reply.delay_s):
            self._drop()
            return
        self._send(reply.status, reply.headers, reply.body)

    def _stream(self, reply) -> None:
        """Server-sent events without a content-length: the connection closes after
        ``[DONE]`` (HTTP/1.1 lets a response end at close). A cut or stalled stream ends
        with a reset, as a crashed upstream's would."""
        self.close_connection = True
        scale = self.server.backend.latency_scale
        ttft = reply.ttft_s * scale
        step = reply.stream_step_s * scale
        self.send_response(200)
        for k, v in reply.headers.items():
            self.send_header(k, v)
        self.send_header("connection", "close")
        self.end_headers()
        try:
            paced = ttft > 0.001 or step > 0.001
            if not paced:  # latency scale 0: one write, not one per token
                self.wfile.write(b"".join(b"data: " + p + b"\n\n" for p in reply.stream))
            for i, payload in enumerate(reply.stream if paced else ()):
                wait = ttft if i == 1 else (step if i > 1 else 0.0)
                if wait > 0.001 and self.server.stopping.wait(wait):
                    return self._drop()
                self.wfile.write(b"data: " + payload + b"\n\n")
            if reply.stream_end == "stall":
                self.server.stopping.wait(self.server.backend.faults.hang_s)
            if reply.stream_end != "done":
                return self._drop()
            self.wfile.write(b"data: [DONE]\n\n")
            self.wfile.flush()
        except OSError:  # the client went away (it may have cut a stall itself)
            return

    def _drop(self) -> None:
        """Close the socket with a reset (SO_LINGER 0), as a crashed upstream would."""
        self.close_connection = True
        with contextlib.suppress(OSError):
            self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            self.connection.close()


class _HTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, addr, backend: SimBackend) -> None:
        self.backend = backend
        self.stopping = threading.Event()
        super().__init__(addr, _Handler)

    def handle_error(self, request, client_address) -> None:  # a client that went away is normal
        return


class SimServer:
    """A simulator HTTP server on 127.0.0.1. ``start()`` runs it in a daemon thread."""

    def __init__(self, port: int = 0, *, latency_scale: float = 1.0, faults: SimFaults | None = None,
                 profiles: Profiles | str | None = None, mods: SimModules | None = None,
                 backend: SimBackend | None = None) -> None:
        if backend is None:
            if not isinstance(profiles, Profiles):
                profiles = load_profiles(profiles)
            backend = SimBackend(profiles, faults=faults, latency_scale=latency_scale, mods=mods)
        self.backend = backend
        self._httpd = _HTTPServer(("127.0.0.1", port), backend)
        self._thread: threading.Thread | None = None
        self._serving = False

    @property
    def port(self) -> int:
        return self._httpd.server_address[1]

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def serve_forever(self) -> None:
        self._serving = True
        self._httpd.serve_forever(poll_interval=0.2)

    def start(self) -> "SimServer":
        self._serving = True
        self._thread = threading.Thread(target=self.serve_forever, name="benchclaw-sim-server", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._httpd.stopping.set()
        if self._serving:
            self._httpd.shutdown()
        self._httpd.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)


@contextlib.contextmanager
def serve_in_thread(port: int = 0, **opts) -> Iterator[str]:
    """Serve the simulator on 127.0.0.1 for the duration of a ``with`` block; yields the
    base URL (``http://127.0.0.1:<port>/v1``). ``opts`` are ``SimServer``'s keywords."""
    server = SimServer(port, **opts).start()
    try:
        yield server.base_url
    finally:
        server.stop()
