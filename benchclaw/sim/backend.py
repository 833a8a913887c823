"""The simulated endpoint, transport-free: a request body in, an HTTP-shaped reply out.

Both ways of using the simulator go through ``SimBackend.handle``: the loopback HTTP
server (``sim.server``) writes the reply to a socket, and the in-process provider
(``sim.provider``) parses it with the same code the OpenAI provider uses. So the two paths
produce the same bytes, and faults look the same through both.

Faults are what real endpoints do to a client: hang until it times out, 429 with
``Retry-After``, 500, reset the connection, send a truncated JSON body, leave usage out,
echo another model id, or echo the caller's key in a 401 message; a streamed reply
(``"stream": true``) may also stall or be cut after ``stream_cut_after`` tokens.
``SimFaults`` sets them per backend instance, as rates (drawn deterministically per request
body and its repeat count) or as an explicit per-call schedule that tests use to force
each one.
"""

from __future__ import annotations

import hashlib
import math
import random
import threading
from dataclasses import dataclass, field
from typing import Mapping

from ..formats import jsonio
from ..errors import UsageError
from .engine import SimModules, SimRequestError, completion_body, respond
from .profiles import Profiles, load_profiles
from .stream import stream_payloads

__all__ = ["SimFaults", "SimReply", "SimBackend", "FAULT_KINDS"]

FAULT_KINDS = ("timeout", "rate_limited", "server", "connection", "malformed", "missing_usage",
               "model_mismatch", "auth_echo", "stream_stall", "stream_cut")
# Faults that only a streamed reply can show; a non-streamed request answers normally.
STREAM_FAULTS = ("stream_stall", "stream_cut")


@dataclass(frozen=True)
class SimFaults:
    """Fault knobs. ``rates`` maps a kind to a probability per call; ``schedule`` forces
    the kind (or ``None``: no fault) of the first calls, in order."""

    rates: Mapping[str, float] = field(default_factory=dict)
    schedule: tuple[str | None, ...] = ()
    retry_after_s: float = 1.0
    hang_s: float = 30.0
    stream_cut_after: int = 8  # generated tokens sent before a stream_stall / stream_cut

    def __post_init__(self) -> None:
        object.__setattr__(self, "schedule", tuple(None if s in (None, "none", "") else s for s in self.schedule))
        bad = [k for k in [*self.rates, *filter(None, self.schedule)] if k not in FAULT_KINDS]
        if bad:
            raise UsageError(f"unknown fault kind(s) {', '.join(sorted(set(bad)))} (known: {', '.join(FAULT_KINDS)})")
        if any(not 0 <= r <= 1 for r in self.rates.values()) or sum(self.rates.values()) > 1:
            raise UsageError("fault rates must be in [0, 1] and sum to at most 1")

    @classmethod
    def parse(cls, specs: list[str] | tuple[str, ...], **kw) -> "SimFaults":
        """From CLI strings ``kind=rate`` or ``schedule=kind,none,kind``. Raises ``UsageError``."""
        rates: dict[str, float] = {}
        schedule: tuple[str | None, ...] = ()
        for spec in specs:
            key, sep, value = spec.partition("=")
            if not sep:
                raise UsageError(f"--fault {spec!r}: expected kind=rate or schedule=kind,kind,…")
            if key == "schedule":
                schedule = tuple(value.split(","))
                continue
            try:
                rates[key] = float(value)
            except ValueError:
                raise UsageError(f"--fault {spec!r}: the rate must be a number in [0, 1]") from None
        return cls(rates=rates, schedule=schedule, **kw)


@dataclass(frozen=True)
class SimReply:
    """An HTTP-shaped reply. ``hang`` means never answer (the client times out);
    ``reset`` means drop the connection without a reply. ``delay_s`` is the wall time to
    wait before answering (simulated latency times the latency scale); ``sim_latency_s``
    is the simulated latency itself, which in-process runs record as their time.

    A streamed reply has ``stream``: the ``data:`` payloads to send (``[DONE]`` not
    included), and ``stream_end``: ``done`` (then ``[DONE]``), ``cut`` (the connection is
    reset after the payloads) or ``stall`` (nothing more is sent for ``hang_s``, then the
    connection is reset); ``ttft_s`` is the simulated time to the first token."""

    status: int
    headers: dict[str, str]
    body: bytes
    delay_s: float = 0.0
    hang: bool = False
    reset: bool = False
    sim_latency_s: float = 0.0
    stream: tuple[bytes, ...] | None = None
    stream_end: str = "done"
    ttft_s: float = 0.0
    stream_step_s: float = 0.0  # simulated time between two chunks after the first token


def _error_body(message: str, type_: str, code: str | None = None) -> bytes:
    return jsonio.dumps({"error": {"message": message, "type": type_, "param": None, "code": code}})


class SimBackend:
    """A simulated OpenAI-compatible endpoint (thread-safe)."""

    def __init__(self, profiles: Profiles | None = None, *, faults: SimFaults | None = None,
                 latency_scale: float = 1.0, mods: SimModules | None = None) -> None:
        if latency_scale < 0 or not math.isfinite(latency_scale):
            raise UsageError("latency scale must be a non-negative number")
        self.profiles = profiles or load_profiles()
        self.faults = faults or SimFaults()
        self.latency_scale = latency_scale
        self._mods = mods
        self._lock = threading.Lock()
        self._calls = 0
        self._seen: dict[str, int] = {}

    @property
    def mods(self) -> SimModules:
        if self._mods is None:
            self._mods = SimModules.default()
        return self._mods

    def _next(self, digest: str) -> tuple[int, int]:
        with self._lock:
            n, k = self._calls, self._seen.get(digest, 0)
            self._calls += 1
            self._seen[digest] = k + 1
        return n, k

    def _pick_fault(self, n: int, digest: str, k: int) -> str | None:
        if n < len(self.faults.schedule):
            return self.faults.schedule[n]
        rng = random.Random(int.from_bytes(hashlib.sha256(f"{digest}/{k}".encode()).digest()[:8], "big"))
        u = rng.random()
        for kind in FAULT_KINDS:
            u -= self.faults.rates.get(kind, 0.0)
            if u < 0:
                return kind
        return None

    def models(self) -> dict:
        """The ``GET /v1/models`` list."""
        return {"object": "list", "data": [{"id": m, "object": "model", "created": 0, "owned_by": "benchclaw-sim"}
                                           for m in self.profiles.models]}

    def handle(self, raw_body: bytes, *, authorization: str | None = None, profile_name: str | None = None,
               always_follow: bool | None = None) -> SimReply:
        """Answer one ``POST /v1/chat/completions`` body."""
        digest = hashlib.sha256(raw_body).hexdigest()
        n, k = self._next(digest)
        headers = {"x-request-id": f"req-sim-{digest[:16]}-{k}", "x-benchclaw-simulated": "1",
                   "content-type": "application/json"}
        fault = self._pick_fault(n, digest, k)
        early = self._early_fault(fault, headers, authorization)
        if early is not None:
            return early
        try:
            body = jsonio.loads(raw_body)
            if not isinstance(body, dict):
                raise SimRequestError(400, "the request body must be a JSON object")
            turn = respond(body, self.profiles, profile_name=profile_name, always_follow=always_follow, mods=self.mods)
        except ValueError:
            return SimReply(400, headers, _error_body("the request body is not valid JSON", "invalid_request_error"))
        except SimRequestError as e:
            return SimReply(e.status, headers, _error_body(e.message, "invalid_request_error",
                                                           "model_not_found" if e.status == 404 else None))
        if body.get("stream") is True:
            options = body.get("stream_options")
            usage = isinstance(options, dict) and options.get("include_usage") is True
            return self._stream(turn, fault, headers, include_usage=usage)
        return self._answer(turn, None if fault in STREAM_FAULTS else fault, headers)

    def _early_fault(self, fault: str | None, headers: dict, authorization: str | None) -> SimReply | None:
        if fault == "timeout":
            return SimReply(200, headers, b"", delay_s=self.faults.hang_s, hang=True)
        if fault == "connection":
            return SimReply(0, headers, b"", reset=True)
        if fault == "rate_limited":
            ra = self.faults.retry_after_s
            h = {**headers, "retry-after": str(max(0, math.ceil(ra))), "retry-after-ms": str(int(ra * 1000))}
            return SimReply(429, h, _error_body("Rate limit reached for requests (simulated)", "rate_limit_error",
                                                "rate_limit_exceeded"))
        if fault == "server":
            return SimReply(500, headers, _error_body("The server had an error while processing your request "
                                                      "(simulated)", "server_error"))
        if fault == "auth_echo":
            token = (authorization or "").removeprefix("Bearer ").strip() or "<none>"
            return SimReply(401, headers, _error_body(f"Incorrect API key provided: {token}. You can find your "
                                                      "API key in your account settings (simulated).",
                                                      "invalid_request_error", "invalid_api_key"))
        return None

    def _answer(self, turn, fault: str | None, headers: dict) -> SimReply:
        echo = f"{turn.model}-simulated-alias" if fault == "model_mismatch" else None
        body = jsonio.dumps(completion_body(turn, model_echo=echo, include_usage=fault != "missing_usage"))
        if fault == "malformed":
            body = body[: max(1, len(body) // 2)]
        return SimReply(200, headers, body, delay_s=turn.latency_s * self.latency_scale,
                        sim_latency_s=turn.latency_s)

    def _stream(self, turn, fault: str | None, headers: dict, *, include_usage: bool) -> SimReply:
        """A streamed reply: the same completion, cut into chunks (``sim.stream``)."""
        doc = completion_body(turn, model_echo=f"{turn.model}-simulated-alias" if fault == "model_mismatch" else None,
                              include_usage=fault != "missing_usage")
        payloads = stream_payloads(doc, reasoning=turn.reasoning, include_usage=include_usage)
        # the first chunk at once, the first token at ttft_s, the last chunk at latency_s
        end, step = "done", max(0.0, turn.latency_s - turn.ttft_s) / max(1, len(payloads) - 2)
        if fault in STREAM_FAULTS:
            payloads = payloads[: 1 + self.faults.stream_cut_after]  # the role chunk, then N tokens
            end = "cut" if fault == "stream_cut" else "stall"
        elif fault == "malformed":
            payloads = payloads[:1] + (payloads[1][: max(1, len(payloads[1]) // 2)],)
            end = "cut"
        h = {**headers, "content-type": "text/event-stream", "cache-control": "no-cache"}
        return SimReply(200, h, b"", delay_s=turn.latency_s * self.latency_scale, sim_latency_s=turn.latency_s,
                        stream=payloads, stream_end=end, ttft_s=turn.ttft_s, stream_step_s=step)
