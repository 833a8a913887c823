"""The ``openai`` provider: the official SDK against any OpenAI-compatible endpoint.

Nebius Token Factory, OpenAI, vLLM, Ollama, llama.cpp's server and a LiteLLM proxy all
speak chat completions; the SDK (``AsyncOpenAI``) does the HTTP. Choices made here:

- ``max_retries=0``: a retry the SDK made would be an HTTP attempt nobody recorded or
  costed. ``providers.retry`` retries instead, one recorded call per attempt.
- ``with_raw_response`` and our own parsing of the body bytes: the headers give every
  request id a gateway passes on, the upstream model and the simulated label, and the raw
  ``usage`` object is kept exactly as the provider sent it (the SDK's models would drop or
  reshape fields such as ``prompt_cache_hit_tokens``). A body that does not parse is a
  ``malformed`` error, not an exception.
- The request is ``model`` and ``messages`` plus everything else of ``ChatRequest.body()``
  as ``extra_body``, so the JSON on the wire is exactly the recorded request blob (the
  tier's ``params`` included) whatever parameters the SDK knows.
- Timeouts: the call's whole budget is the run's remaining time (``timeout_s``); the
  read timeout of a non-streamed call is the tier's ``stall_seconds`` (carried on the
  request as ``stall_s``): no byte for that long cuts the call, and the runtime retries
  it while the run has time. A connect failure (refused,
  DNS, TLS, connect timeout) is recorded with ``stage: "connect"``: nothing was sent.
- The key is handed to the SDK as an async callable that opens the vault per request, so
  the client object holds no plain key; every string that leaves this module (error
  messages, bodies, ids) goes through the redaction filter.
- ``openai`` is imported here only, when the first ``openai`` tier is made.
- A streamed call (``req.stream``, from the tier's ``stream = true``) goes through
  ``_complete_stream``: the same SDK call with ``stream=True`` and the usage requested in
  the final chunk; ``providers.streaming`` assembles the chunks into the same evidence and
  cuts a stream that stalls for the tier's ``stall_seconds`` (no httpx read timeout on a
  stream: the assembler's own stall timer governs, and records what arrived).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from dataclasses import replace
from typing import Any

from ..errors import ProviderConfigError
from .base import (CallError, ChatRequest, ChatResponse, Provider, error_response, is_simulated_reply,
                   parse_completion_body, parse_retry_after, reply_identity, status_kind)
from .vault import Secret, install_log_redaction, redact, tier_key

__all__ = ["OpenAIProvider", "make_openai_provider"]

NO_KEY = "no-key-needed"  # local servers (vLLM, Ollama, llama.cpp) accept any bearer token


def make_openai_provider(tier, *, sim_options=None, key: Secret | str | None = None) -> "OpenAIProvider":
    """Registry factory. Raises ``ProviderConfigError`` when the tier's key is missing."""
    if isinstance(key, str):
        key = Secret(key, label=f"key of tier {tier.name}")
    if key is None:
        key = tier_key(tier)  # the catalog's key source, under the rules for untrusted catalogs
    return OpenAIProvider(tier, key)


class OpenAIProvider(Provider):
    """Chat completions over HTTP with the official SDK. One ``complete`` = one attempt."""

    name = "openai"

    def __init__(self, tier, key: Secret | None) -> None:
        if not tier.base_url:
            raise ProviderConfigError(f"tier {tier.name!r}: an openai tier needs a base_url")
        self.tier = tier
        self.simulated = bool(tier.simulated)
        self._key = key
        self._client = None

    def _client_for_use(self):
        if self._client is None:
            import openai

            install_log_redaction()
            key = self._key

            async def api_key() -> str:
                return key.reveal() if key is not None else NO_KEY

            self._client = openai.AsyncOpenAI(base_url=self.tier.base_url, api_key=api_key, max_retries=0)
        return self._client

    def _redact(self, text: str) -> str:
        return redact(text) if text else text

    async def complete(self, req: ChatRequest) -> ChatResponse:
        """One HTTP attempt; failures come back as ``outcome="error"`` responses."""
        if req.timeout_s is not None and req.timeout_s <= 0:
            return error_response("timeout", "no time left for the call", simulated=self.simulated)
        if req.stream:
            return await self._complete_stream(req)
        import openai

        client = self._client_for_use()
        start = time.monotonic()
        try:
            raw = await client.chat.completions.with_raw_response.create(**self._params(req))
            body = raw.content
        except (openai.OpenAIError, OSError) as exc:  # every SDK/transport failure: a typed error
            return self._error(exc, _elapsed_ms(start))
        latency = _elapsed_ms(start)
        return parse_completion_body(
            body, requested_model=req.model, headers=raw.headers, latency_ms=latency, simulated=self.simulated,
            redact=self._redact, keep_headers=self.tier.keep_headers, expect_model=self.tier.expect_model)

    async def _complete_stream(self, req: ChatRequest) -> ChatResponse:
        """One streamed attempt: headers first (request id, simulated label), then the
        chunks through the assembler with stall detection. ``on_text`` (when set on the
        provider) sees the content as it arrives."""
        import openai

        from .streaming import StreamAssembler, assemble, per_call, sse_objects

        stall = req.stall_s or self.tier.stall_seconds
        stall = stall if req.timeout_s is None else min(stall, req.timeout_s)
        start = time.monotonic()
        asm, headers, stream = StreamAssembler(start), None, None
        try:
            raw = await asyncio.wait_for(
                self._client_for_use().chat.completions.with_raw_response.create(**self._params(req)), stall)
            headers, stream = raw.headers, raw.http_response
            end, error = await assemble(sse_objects(stream.aiter_lines()), asm, stall_s=stall,
                                        on_text=per_call(self.on_text))
        except asyncio.TimeoutError:  # not even the headers within stall_seconds
            end, error = "stalled", CallError("timeout", f"stalled: no response headers within {stall:g} s", stage="response")
        except (openai.OpenAIError, OSError, *_transport_errors()) as exc:
            if headers is None:
                return self._error(exc, _elapsed_ms(start))
            err = self._error(exc, 0).error
            end, error = "cut", replace(err, message=f"the stream broke after {asm.chunks} chunks: {err.message}")
        finally:
            if stream is not None:
                with contextlib.suppress(Exception):
                    await stream.aclose()

        def parse(body: bytes, latency_ms: int) -> ChatResponse:  # the non-streamed call's own parser
            return parse_completion_body(
                body, requested_model=req.model, headers=headers, latency_ms=latency_ms, simulated=self.simulated,
                redact=self._redact, keep_headers=self.tier.keep_headers, expect_model=self.tier.expect_model)
        return asm.response(end, parse=parse, error=error)

    def _params(self, req: ChatRequest) -> dict:
        """What the SDK sends: the recorded request body (``req.body()``, one definition for
        both) with temperature as the number the SDK wants, and the call's timeouts."""
        body: dict[str, Any] = req.body()
        body["temperature"] = float(req.temperature)  # a sampling knob, not money
        params: dict[str, Any] = {"model": body.pop("model"), "messages": body.pop("messages"), "extra_body": body}
        for key in ("stream", "stream_options"):  # the SDK must see these to read a stream
            if key in body:
                params[key] = body.pop(key)
        # a stream's stall is cut by providers.streaming (recorded as a stall with what arrived)
        timeout = _timeout(req.timeout_s, None if req.stream else req.stall_s)
        if timeout is not None:
            params["timeout"] = timeout
        return params

    def _error(self, exc: Exception, latency_ms: int) -> ChatResponse:
        import openai

        kind, status, headers, stage = "connection", None, None, "response"
        if _never_sent(exc):
            stage = "connect"
        if isinstance(exc, openai.APITimeoutError):
            kind = "timeout"
        elif isinstance(exc, openai.APIStatusError):
            status, headers = exc.status_code, exc.response.headers
            kind = status_kind(status)
        elif isinstance(exc, openai.APIConnectionError):
            kind = "connection"
        elif isinstance(exc, (ValueError, openai.APIResponseValidationError)):
            kind = "malformed"
        message = self._redact(f"{type(exc).__name__}: {_error_text(exc)}")[:2000]
        cuts: list[str] = []
        kept, request_id, _ = reply_identity(headers, self._redact, self.tier.keep_headers, cuts)
        return error_response(kind, message, status=status, retry_after=parse_retry_after(headers),
                              latency_ms=latency_ms, request_id=request_id, stage=stage, headers=kept,
                              truncated=tuple(dict.fromkeys(cuts)),
                              simulated=self.simulated or is_simulated_reply(headers))

    async def aclose(self) -> None:
        if self._client is not None:
            await self._client.close()
            self._client = None

    def __repr__(self) -> str:
        return f"<OpenAIProvider tier={self.tier.name} model={self.tier.model} base_url={self.tier.base_url}>"


def _timeout(total: float | None, stall: float | None):
    """The SDK timeout: ``total`` for the whole call, ``stall`` as the longest wait for a
    byte (httpx's read timeout) when it is shorter."""
    if stall is None or (total is not None and stall >= total):
        return total
    import openai

    return openai.Timeout(total, read=stall)


def _never_sent(exc: BaseException) -> bool:
    """True when the failure happened while connecting (refused, DNS, TLS handshake,
    connect timeout): the request never reached the provider, so it cannot be billed."""
    seen = 0
    while exc is not None and seen < 8:
        # By name: the SDK's HTTP client (httpx, or its successor httpx2) and its transport
        # (httpcore) raise these while connecting; nothing was written to the socket yet.
        if type(exc).__name__ in ("ConnectError", "ConnectTimeout") and \
                type(exc).__module__.split(".")[0].startswith(("httpx", "httpcore")):
            return True
        exc, seen = exc.__cause__ or exc.__context__, seen + 1
    return False


def _transport_errors() -> tuple[type[Exception], ...]:
    """The HTTP library's errors, raised while the body of a stream is read (the SDK wraps
    them only around the request itself). Recent SDKs use ``httpx2``, older ones ``httpx``."""
    try:
        import httpx2 as httpx
    except ImportError:  # pragma: no cover - depends on the installed SDK
        import httpx
    return httpx.HTTPError, httpx.StreamError


def _error_text(exc: Exception) -> str:
    """The message, plus the body when the SDK kept one (providers put the reason there)."""
    text = str(exc)
    body = getattr(exc, "body", None)
    if body is not None and str(body) not in text:
        text = f"{text} body={body!s}"
    cause = exc.__cause__
    if cause is not None and str(cause) and str(cause) not in text:
        text = f"{text} ({type(cause).__name__}: {cause})"
    return text


def _elapsed_ms(start: float) -> int:
    return int(round((time.monotonic() - start) * 1000))
