"""The ``sim`` provider: the simulator in-process, without HTTP.

The grid runner makes thousands of calls; going through a socket for each would only add
time. ``SimProvider`` asks the same ``SimBackend`` the loopback server uses for an
HTTP-shaped reply and parses its bytes with the same ``parse_completion_body`` the OpenAI
provider uses, so both paths agree to the byte. Latency is real wall time: it sleeps the
simulated latency times ``latency_scale`` (0 for tests, small for the demo), so the
runtime's clock and time limits see what they would see with a real endpoint.
"""

from __future__ import annotations

import asyncio
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from ..formats import jsonio
from ..errors import UsageError
from ..providers.base import (CallError, ChatRequest, ChatResponse, Provider, error_response, parse_completion_body,
                              parse_retry_after, status_kind)
from ..providers.streaming import StreamAssembler, assemble, per_call
from ..providers.vault import redact
from .backend import SimBackend, SimFaults, SimReply
from .engine import SimModules
from .profiles import load_profiles

__all__ = ["SimOptions", "SimProvider", "make_sim_provider", "LATENCY_ENV"]

LATENCY_ENV = "BENCHCLAW_SIM_LATENCY_SCALE"


def _default_scale() -> float:
    value = os.environ.get(LATENCY_ENV)
    if value is None:
        return 1.0
    try:
        return float(value)
    except ValueError:
        raise UsageError(f"{LATENCY_ENV}={value!r}: expected a number") from None


@dataclass(frozen=True)
class SimOptions:
    """How to run the simulator. ``latency_scale`` multiplies simulated latency (default:
    ``$BENCHCLAW_SIM_LATENCY_SCALE`` or 1); ``backend`` shares one simulated endpoint
    (and its fault schedule) between providers; ``mods`` injects solver/lure modules."""

    latency_scale: float | None = None
    faults: SimFaults | None = None
    profiles_path: str | Path | None = None
    always_follow_injections: bool | None = None
    backend: SimBackend | None = None
    mods: SimModules | None = None

    @classmethod
    def coerce(cls, value: "SimOptions | Mapping[str, Any] | None") -> "SimOptions":
        if value is None:
            return cls()
        if isinstance(value, SimOptions):
            return value
        try:
            return cls(**dict(value))
        except TypeError as e:
            raise UsageError(f"sim options: {e}") from None

    def make_backend(self) -> SimBackend:
        if self.backend is not None:
            return self.backend
        scale = _default_scale() if self.latency_scale is None else self.latency_scale
        profiles = load_profiles(self.profiles_path)
        return SimBackend(profiles, faults=self.faults, latency_scale=scale, mods=self.mods)


def make_sim_provider(tier, *, sim_options=None, key=None) -> "SimProvider":
    """Registry factory; the simulator needs no key (``key`` is ignored)."""
    opts = SimOptions.coerce(sim_options)
    follow = opts.always_follow_injections
    if follow is None and tier.always_follow_injections:
        follow = True
    return SimProvider(opts.make_backend(), profile_name=tier.sim_profile, always_follow=follow,
                       stall_s=tier.stall_seconds)


class SimProvider(Provider):
    """The simulator as a provider. Every response is labelled ``simulated``."""

    name = "sim"
    simulated = True

    def __init__(self, backend: SimBackend, *, profile_name: str | None = None,
                 always_follow: bool | None = None, stall_s: float = 60.0) -> None:
        self.backend = backend
        self.profile_name = profile_name
        self.always_follow = always_follow
        self.stall_s = stall_s

    def usage_rules(self, model: str) -> tuple[str, bytes] | None:
        """(profile name, profiles file bytes) the replies for ``model`` follow, which the
        runtime records in ``run.start.sim`` so the verifier can recompute each reply's
        usage (FORMAT.md §6, "Simulated usage"); None when the profiles were built in
        memory (a test's patched profiles: no file to point at) or name no such profile."""
        profiles = self.backend.profiles
        profile = profiles.by_name.get(self.profile_name) if self.profile_name else profiles.resolve(model)
        if not profiles.source or profile is None:
            return None
        return profile.name, profiles.source

    # In-process runs keep simulated time: the latency recorded is the simulated one
    # (deterministic), not the wall time of the scaled-down sleep, and the runtime runs its
    # bounds on a virtual clock advanced by it (see benchclaw.agent.values.VirtualClock).
    @property
    def simulated_time_scale(self) -> float:
        return float(self.backend.latency_scale or 0.0)

    async def complete(self, req: ChatRequest) -> ChatResponse:
        """One simulated attempt; faults come back as error responses, like HTTP ones."""
        if req.timeout_s is not None and req.timeout_s <= 0:
            return error_response("timeout", "no time left for the call", simulated=True)
        reply = self.backend.handle(req.body_bytes, profile_name=self.profile_name,
                                    always_follow=self.always_follow)
        request_id = reply.headers.get("x-request-id")
        sim_s = self.backend.faults.hang_s if reply.hang else reply.sim_latency_s
        # A non-streamed reply sends no byte until it is done: the stall limit cuts it too.
        # A stream sends its chunks as they come: its stall is cut chunk by chunk (_stream_reply).
        limit = min((t for t in (req.timeout_s, None if req.stream else req.stall_s) if t is not None), default=None)
        timed_out = reply.hang or (limit is not None and sim_s > limit)
        if timed_out and limit is not None:
            sim_s = min(sim_s, limit)
        wait = sim_s * self.backend.latency_scale
        if wait > 0 and (reply.stream is None or timed_out):  # a stream is paced chunk by chunk
            await asyncio.sleep(wait)
        latency = int(round(sim_s * 1000))
        if timed_out:
            return error_response("timeout", "Request timed out (simulated).", latency_ms=latency,
                                  request_id=request_id, simulated=True, stage="response")
        if reply.reset:
            return error_response("connection", "Connection reset by peer (simulated).", latency_ms=latency,
                                  request_id=request_id, simulated=True, stage="response")
        if reply.status != 200:
            return _http_error(reply, latency, request_id)
        if reply.stream is not None:
            stall = req.stall_s if req.stall_s is not None else self.stall_s
            return await _stream_reply(reply, req, stall, self.on_text, self.backend.latency_scale)
        return parse_completion_body(reply.body, requested_model=req.model, headers=reply.headers,
                                     latency_ms=latency, simulated=True, redact=redact)


class _SimStreamClock:
    """Simulated time of a streamed reply: the first token at ``ttft_s``, the others evenly
    over the decoding time, as the HTTP server paces them; a stall adds ``stall_s``. Wall
    time follows at the latency scale (sleeping in steps of at least 5 ms), so a live
    display sees the reply arrive as a real one would."""

    def __init__(self, reply: SimReply, scale: float) -> None:
        self.now, self.debt = 0.0, 0.0
        self.reply, self.scale = reply, scale

    def __call__(self) -> float:
        return self.now

    async def chunks(self, payloads):
        r, last = self.reply, len(payloads) - 1
        for i, payload in enumerate(payloads):
            before = self.now
            if i == last and r.stream_end == "done":
                self.now = r.sim_latency_s  # exactly the plain reply's latency, no rounding drift
            elif i >= 1:
                self.now = r.ttft_s + (i - 1) * r.stream_step_s
            await self.sleep(self.now - before)
            yield jsonio.loads(payload)

    async def sleep(self, simulated_s: float) -> None:
        self.debt += simulated_s * self.scale
        if self.debt >= 0.005:
            await asyncio.sleep(self.debt)
            self.debt = 0.0


async def _stream_reply(reply: SimReply, req: ChatRequest, stall_s: float,
                        on_text=None, scale: float = 0.0) -> ChatResponse:
    clock = _SimStreamClock(reply, scale)
    asm = StreamAssembler(0.0, clock)
    end, error = await assemble(clock.chunks(reply.stream), asm, stall_s=None, on_text=per_call(on_text))
    if end == "done" and reply.stream_end == "stall":
        clock.now += stall_s
        await clock.sleep(stall_s)
        end, error = "stalled", CallError("timeout", f"stalled: nothing received for {stall_s:g} s after "
                                                     f"{asm.chunks} chunks; the stream was cut (simulated)", stage="response")
    elif end == "done" and reply.stream_end == "cut":
        end, error = "cut", CallError("connection", f"the stream broke after {asm.chunks} chunks: "
                                                    "connection reset by peer (simulated)", stage="response")
    return asm.response(end, error=error, parse=lambda body, ms: parse_completion_body(
        body, requested_model=req.model, headers=reply.headers, latency_ms=ms, simulated=True, redact=redact))


def _http_error(reply: SimReply, latency: int, request_id: str | None) -> ChatResponse:
    try:
        message = jsonio.loads(reply.body)["error"]["message"]
    except (ValueError, KeyError, TypeError):
        message = reply.body.decode("utf-8", "replace")
    return error_response(status_kind(reply.status), redact(f"HTTP {reply.status}: {message}")[:2000],
                          status=reply.status, retry_after=parse_retry_after(reply.headers),
                          latency_ms=latency, request_id=request_id, simulated=True, stage="response",
                          headers={"x-request-id": request_id} if request_id else None)
