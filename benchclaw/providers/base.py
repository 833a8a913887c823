"""The one provider interface: an async ``complete(request) -> response`` and its values.

Every provider (the official OpenAI SDK against any compatible endpoint, the built-in
simulator) takes a ``ChatRequest`` and returns a ``ChatResponse``; a provider-side failure
is a response with ``outcome="error"`` and a typed ``CallError``, never an exception, so
the agent runtime records every attempt the same way. One call is one HTTP attempt:
retrying is the caller's job (the agent runtime's turn loop, see ``providers.retry``), so that
every attempt is its own recorded, costed ``call``.

Also here: ``parse_completion_body`` turns the bytes of a chat-completions reply into a
``ChatResponse``; the OpenAI provider and the in-process simulator share it, so the
simulator exercises the same parsing the real endpoint does.
"""

from __future__ import annotations

import abc
import email.utils
import math
import time
from dataclasses import dataclass, replace
from decimal import Decimal
from typing import TYPE_CHECKING, Any, Callable, Mapping

from .. import jsonio
from ..money import Usage, normalise_usage
from ..errors import FormatError

if TYPE_CHECKING:  # pragma: no cover
    from .streaming import StreamStats

__all__ = [
    "ChatRequest",
    "ChatResponse",
    "CallError",
    "Provider",
    "OUTCOMES",
    "ERROR_KINDS",
    "RETRYABLE_KINDS",
    "parse_completion_body",
    "error_response",
    "outcome_of",
    "status_kind",
    "parse_retry_after",
]

OUTCOMES = ("stop", "length", "reasoning_only", "error")
ERROR_KINDS = ("timeout", "rate_limited", "server", "connection", "malformed", "auth", "bad_request")
# Kinds worth another attempt. A timeout is not: a call's timeout is all the time the run
# has left, so there is no time for another attempt.
# Worth another attempt: the provider may answer next time. A timeout is retried only
# while the run has time left (the runtime checks); auth, bad_request and malformed are not.
RETRYABLE_KINDS = frozenset({"rate_limited", "server", "connection", "timeout"})


def _to_decimal(v: Any) -> Decimal:
    if isinstance(v, Decimal):
        return v
    if isinstance(v, float):
        if not math.isfinite(v):
            raise ValueError(f"temperature must be finite, got {v!r}")
        return Decimal(repr(v))
    return Decimal(str(v))


@dataclass(frozen=True)
class ChatRequest:
    """One chat-completions request.

    ``messages`` are ``{"role", "content"}`` dicts; ``temperature`` is kept as a ``Decimal``
    (records write it as a decimal string); ``timeout_s`` is the time the run has left
    (``None``: no limit).
    """

    model: str
    messages: tuple[Mapping[str, str], ...]
    max_tokens: int = 8192
    temperature: Decimal = Decimal(0)
    seed: int | None = None
    json_mode: bool = True
    timeout_s: float | None = None
    stream: bool = False  # ask for server-sent events with the usage in the final chunk

    def __post_init__(self) -> None:
        object.__setattr__(self, "messages", tuple(dict(m) for m in self.messages))
        object.__setattr__(self, "temperature", _to_decimal(self.temperature))
        if type(self.max_tokens) is not int or self.max_tokens < 1:
            raise ValueError(f"max_tokens must be a positive int, got {self.max_tokens!r}")

    def body(self) -> dict:
        """The canonical request body (model, messages, parameters) as recorded in the
        ``request`` blob: temperature as a decimal string, no timeout."""
        b: dict[str, Any] = {"model": self.model, "messages": [dict(m) for m in self.messages],
                             "max_tokens": self.max_tokens, "temperature": str(self.temperature)}
        if self.seed is not None:
            b["seed"] = self.seed
        if self.json_mode:
            b["response_format"] = {"type": "json_object"}
        if self.stream:
            b["stream"] = True
            b["stream_options"] = {"include_usage": True}
        return b

    def with_timeout(self, timeout_s: float | None) -> "ChatRequest":
        return replace(self, timeout_s=timeout_s)


@dataclass(frozen=True)
class CallError:
    """Why a call failed. ``message`` has been through the key redaction filter;
    ``retry_after`` is in seconds (from ``Retry-After`` / ``retry-after-ms``)."""

    kind: str
    message: str
    status: int | None = None
    retry_after: float | None = None

    def __post_init__(self) -> None:
        if self.kind not in ERROR_KINDS:
            raise ValueError(f"unknown error kind {self.kind!r}")

    @property
    def retryable(self) -> bool:
        return self.kind in RETRYABLE_KINDS

    def to_dict(self) -> dict:
        """The ``error`` object of a ``call`` record (integers only, no floats)."""
        ms = None if self.retry_after is None else int(math.ceil(self.retry_after * 1000))
        return {"kind": self.kind, "message": self.message, "status": self.status, "retry_after_ms": ms}


@dataclass(frozen=True)
class ChatResponse:
    """What one call produced. ``outcome`` is ``stop``, ``length``, ``reasoning_only`` or
    ``error``; ``usage`` is ``None`` when the provider reported none (the call is then
    costed with bounds); ``usage_raw`` is the provider's usage object as sent."""

    content: str | None
    finish_reason: str | None
    outcome: str
    request_id: str | None = None
    response_id: str | None = None
    model_echoed: str | None = None
    latency_ms: int = 0
    usage_raw: dict | None = None
    usage: Usage | None = None
    error: CallError | None = None
    simulated: bool = False
    model_mismatch: bool = False
    stream: "StreamStats | None" = None  # a streamed call's own evidence (providers.streaming)

    def __post_init__(self) -> None:
        if self.outcome not in OUTCOMES:
            raise ValueError(f"unknown outcome {self.outcome!r}")
        if (self.outcome == "error") != (self.error is not None):
            raise ValueError("outcome 'error' goes with an error, and only it")

    @property
    def ok(self) -> bool:
        return self.outcome != "error"


class Provider(abc.ABC):
    """A source of chat completions. ``complete`` is async (the runner runs many calls at
    once) and never raises for a provider-side failure. ``name`` is the registry name,
    ``simulated`` labels everything it produces."""

    name: str = "provider"
    simulated: bool = False
    # Sees a streamed reply's text as it arrives, ``(text, first chunk of this call?)``
    # (``benchclaw try`` shows it on a terminal); set by whoever owns the provider.
    on_text: "Callable[[str, bool], None] | None" = None

    @abc.abstractmethod
    async def complete(self, req: ChatRequest) -> ChatResponse:
        """One attempt. Returns ``outcome="error"`` on failure; raises only on a bug."""

    async def aclose(self) -> None:
        """Release connections (default: nothing to release)."""

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name}>"


def outcome_of(content: str | None, finish_reason: str | None) -> str:
    """``length`` when the model ran out of tokens, ``reasoning_only`` when it stopped
    with nothing but reasoning (empty content), else ``stop``."""
    if finish_reason == "length":
        return "length"
    if content is None or content.strip() == "":
        return "reasoning_only"
    return "stop"


def error_response(kind: str, message: str, *, status: int | None = None, retry_after: float | None = None,
                   latency_ms: int = 0, request_id: str | None = None, simulated: bool = False) -> ChatResponse:
    """A failed call."""
    return ChatResponse(content=None, finish_reason=None, outcome="error", request_id=request_id,
                        latency_ms=latency_ms, error=CallError(kind, message, status, retry_after),
                        simulated=simulated)


def _first_choice(data: Mapping) -> tuple[str | None, str | None]:
    choices = data.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], Mapping):
        raise FormatError("reply has no choices")
    choice = choices[0]
    message = choice.get("message")
    if not isinstance(message, Mapping):
        raise FormatError("reply choice has no message")
    content = message.get("content")
    finish = choice.get("finish_reason")
    if content is not None and not isinstance(content, str):
        raise FormatError("reply content is not a string")
    if finish is not None and not isinstance(finish, str):
        raise FormatError("reply finish_reason is not a string")
    return content, finish


def _opt_str(v: Any) -> str | None:
    return v if isinstance(v, str) else None


def parse_completion_body(body: bytes, *, requested_model: str, request_id: str | None, latency_ms: int,
                          simulated: bool, redact: Callable[[str], str] = lambda s: s) -> ChatResponse:
    """Turn the bytes of a 200 chat-completions reply into a ``ChatResponse``.

    A body that is not JSON or has no usable choice is an ``error`` of kind ``malformed``.
    A usage object that cannot be normalised is kept raw with ``usage=None`` (the call is
    then costed with bounds, never guessed). Every string passes through ``redact``.
    """
    try:
        data = jsonio.loads(body)
        if not isinstance(data, dict):
            raise FormatError("reply is not a JSON object")
        content, finish = _first_choice(data)
    except (ValueError, FormatError) as e:
        return error_response("malformed", redact(f"malformed reply body: {e}"[:500]), status=200,
                              latency_ms=latency_ms, request_id=request_id, simulated=simulated)
    usage_raw = data.get("usage") if isinstance(data.get("usage"), dict) else None
    usage = None
    if usage_raw is not None:
        usage_raw = _redact_tree(usage_raw, redact)
        try:
            usage = normalise_usage(usage_raw)
        except FormatError:
            usage = None
    echoed = _opt_str(data.get("model"))
    content = None if content is None else redact(content)
    return ChatResponse(
        content=content, finish_reason=finish, outcome=outcome_of(content, finish),
        request_id=request_id, response_id=_opt_str(data.get("id")) and redact(data["id"]),
        model_echoed=None if echoed is None else redact(echoed), latency_ms=latency_ms,
        usage_raw=usage_raw, usage=usage, simulated=simulated,
        model_mismatch=echoed is not None and echoed != requested_model,
    )


def _redact_tree(obj: Any, redact: Callable[[str], str], depth: int = 0) -> Any:
    if depth > jsonio.MAX_DEPTH:
        return None
    if isinstance(obj, str):
        return redact(obj)
    if isinstance(obj, dict):
        return {redact(str(k)): _redact_tree(v, redact, depth + 1) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_redact_tree(v, redact, depth + 1) for v in obj]
    return obj


def parse_retry_after(headers: Any) -> float | None:
    """Seconds to wait from ``retry-after-ms`` or ``Retry-After`` (seconds or an HTTP
    date); ``None`` when absent or unreadable."""
    if headers is None:
        return None
    ms = headers.get("retry-after-ms")
    if ms is not None:
        try:
            seconds = float(ms) / 1000.0
            if math.isfinite(seconds):
                return max(0.0, seconds)
        except ValueError:
            pass
    value = headers.get("retry-after")
    if value is None:
        return None
    try:
        seconds = float(value)
        return max(0.0, seconds) if math.isfinite(seconds) else None
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


def status_kind(status: int) -> str:
    """The error kind of an HTTP status."""
    if status == 429:
        return "rate_limited"
    if status in (401, 403):
        return "auth"
    if status == 408:
        return "timeout"
    if status >= 500:
        return "server"
    return "bad_request"
