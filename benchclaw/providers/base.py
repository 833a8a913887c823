"""The one provider interface: an async ``complete(request) -> response`` and its values.

Every provider (the official OpenAI SDK against any compatible endpoint, the built-in
simulator) takes a ``ChatRequest`` and returns a ``ChatResponse``; a provider-side failure
is a response with ``outcome="error"`` and a typed ``CallError``, never an exception, so
the agent runtime records every attempt the same way. One call is one HTTP attempt:
retrying is the caller's job (the agent runtime's turn loop, see ``providers.retry``), so that
every attempt is its own recorded, costed ``call``.

Also here: ``parse_completion_body`` turns the bytes of a chat-completions reply (and its
headers) into a ``ChatResponse``; the OpenAI provider and the in-process simulator share
it, so the simulator exercises the same parsing the real endpoint does. It is the one
place that decides what a reply says about itself: its outcome, every request id a
gateway passes on, the upstream model, whether it calls itself simulated, and which
provider strings were cut to ``MAX_PROVIDER_STRING`` characters. Model content is never
redacted or cut here (FORMAT.md §3, "Redaction"); a reply that carries the key in its
content becomes a ``key_echo`` error whose stored content is marked instead.

A streaming path would sit beside ``parse_completion_body`` (assembling the same
``ChatResponse`` from chunks); nothing here assumes one body per call beyond that function.
"""

from __future__ import annotations

import abc
import email.utils
import functools
import math
import time
from dataclasses import dataclass, field, replace
from decimal import Decimal
from typing import Any, Callable, Mapping

from ..formats import jsonio
from ..formats.money import Usage, normalise_usage
from ..errors import FormatError
from .vault import KEY_MARK, contains_secret, mark_secrets

__all__ = [
    "ChatRequest",
    "ChatResponse",
    "StreamStats",
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
    "MAX_PROVIDER_STRING",
    "REQUEST_ID_HEADERS",
    "UPSTREAM_MODEL_HEADERS",
    "is_simulated_reply",
    "cut",
]

OUTCOMES = ("stop", "length", "reasoning_only", "content_filter", "error")
ERROR_KINDS = ("timeout", "rate_limited", "server", "connection", "malformed", "auth", "bad_request",
               "key_echo")
# A provider string (finish_reason, model, an id, a header value) is recorded up to this
# many characters, then cut with CUT_MARK and named in the call's ``truncated`` list.
MAX_PROVIDER_STRING = 256
CUT_MARK = "…[cut]"
# Headers that carry a request id, in the order ``request_id`` prefers them: the upstream's
# own id, then the forms a LiteLLM proxy passes it on in, then the gateway's call id.
REQUEST_ID_HEADERS = ("x-request-id", "request-id", "llm_provider-x-request-id", "llm_provider-request-id",
                      "x-litellm-call-id")
# Headers naming the model that really answered behind a gateway.
UPSTREAM_MODEL_HEADERS = ("x-litellm-model-name", "llm_provider-x-model", "openai-model")
SIMULATED_HEADER = "x-benchclaw-simulated"
SIMULATED_FINGERPRINT = "benchclaw-sim"
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
    params: Mapping[str, Any] = field(default_factory=dict)
    stall_s: float | None = None
    stream: bool = False  # ask for server-sent events with the usage in the final chunk

    def __post_init__(self) -> None:
        object.__setattr__(self, "messages", tuple(dict(m) for m in self.messages))
        object.__setattr__(self, "params", dict(self.params))
        object.__setattr__(self, "temperature", _to_decimal(self.temperature))
        if type(self.max_tokens) is not int or self.max_tokens < 1:
            raise ValueError(f"max_tokens must be a positive int, got {self.max_tokens!r}")

    def body(self) -> dict:
        """The canonical request body (model, messages, parameters) as recorded in the
        ``request`` blob: temperature as a decimal string, no timeout. The tier's
        ``params`` are merged in as the wire carries them (``extra_body``'s keys at the top
        level, as the SDK sends them); ``max_tokens`` is the call's own."""
        b: dict[str, Any] = {"model": self.model, "messages": [dict(m) for m in self.messages],
                             "max_tokens": self.max_tokens, "temperature": str(self.temperature)}
        if self.seed is not None:
            b["seed"] = self.seed
        if self.json_mode:
            b["response_format"] = {"type": "json_object"}
        extra = self.params.get("extra_body") or {}
        b.update({k: v for k, v in self.params.items() if k not in ("extra_body", "max_tokens")})
        b.update({k: v for k, v in extra.items() if k not in ("model", "messages", "max_tokens")})
        if self.stream:
            b["stream"] = True
            b["stream_options"] = {"include_usage": True}
        return b

    @functools.cached_property
    def body_bytes(self) -> bytes:
        """``jsonio.dumps(self.body())``, made once per request: the simulator sends these
        bytes and the ``request`` blob stores them (the messages are this request's own
        copies, so the bytes cannot go stale). Raises as ``jsonio.dumps`` does."""
        return jsonio.dumps(self.body())

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
    stage: str | None = None  # "connect": nothing was sent; "response": sent, then it failed

    def __post_init__(self) -> None:
        if self.kind not in ERROR_KINDS:
            raise ValueError(f"unknown error kind {self.kind!r}")

    @property
    def retryable(self) -> bool:
        return self.kind in RETRYABLE_KINDS

    def to_dict(self) -> dict:
        """The ``error`` object of a ``call`` record (integers only, no floats)."""
        ms = None if self.retry_after is None else int(math.ceil(self.retry_after * 1000))
        out = {"kind": self.kind, "message": self.message, "status": self.status, "retry_after_ms": ms}
        if self.stage is not None:
            out["stage"] = self.stage
        return out


@dataclass(frozen=True)
class StreamStats:
    """What a stream adds to a call's evidence (filled by ``providers.streaming``; it sits
    here, beside the response that carries it, so the two modules import one way). ``text_chunks`` counts chunks that carried
    new content or reasoning text (each carries at least one generated token: the count
    the lower bound of a cut stream uses); ``ttft_ms`` is the time from sending the request
    to the first such chunk (``None`` when none came)."""

    chunks: int
    text_chunks: int
    ttft_ms: int | None
    usage_chunk: bool
    end: str

    def to_dict(self) -> dict:
        """The ``stream`` object of a ``call`` record."""
        return {"chunks": self.chunks, "text_chunks": self.text_chunks, "ttft_ms": self.ttft_ms,
                "usage_chunk": self.usage_chunk, "end": self.end}


@dataclass(frozen=True)
class ChatResponse:
    """What one call produced. ``outcome`` is one of ``OUTCOMES``; ``usage`` is ``None``
    when the provider reported none (the call is then costed with bounds); ``usage_raw`` is
    the provider's usage object as sent. ``reasoning`` is the reasoning text the reply
    carried (``reasoning_content`` / ``reasoning``); ``headers`` the identifying headers
    kept (request ids, upstream model, simulated label, the tier's ``keep_headers``);
    ``model_upstream`` the model a gateway says answered; ``truncated`` the provider
    strings cut to ``MAX_PROVIDER_STRING``. On a ``key_echo`` error ``content`` is the
    reply with the key replaced by ``KEY_MARK``."""

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
    reasoning: str | None = None
    headers: Mapping[str, str] = field(default_factory=dict)
    model_upstream: str | None = None
    truncated: tuple[str, ...] = ()
    stream: StreamStats | None = None  # a streamed call's own evidence (providers.streaming)

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
    # How the caller should keep time for this provider's calls. None: real time (the
    # latency a reply reports has really passed). A number: the provider reports
    # simulated latency that has not passed; the caller keeps simulated time, advanced by
    # each reply's ``latency_ms``, and sleeps this fraction of every wait for real
    # (benchclaw.agent.values.VirtualClock).
    simulated_time_scale: float | None = None

    @abc.abstractmethod
    async def complete(self, req: ChatRequest) -> ChatResponse:
        """One attempt. Returns ``outcome="error"`` on failure; raises only on a bug."""

    async def aclose(self) -> None:
        """Release connections (default: nothing to release)."""

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name}>"


def outcome_of(content: str | None, finish_reason: str | None) -> str:
    """``length`` when the model ran out of tokens, ``content_filter`` when the provider's
    filter stopped it, ``reasoning_only`` when it stopped with nothing but reasoning (empty
    content), else ``stop``."""
    if finish_reason == "length":
        return "length"
    if finish_reason == "content_filter":
        return "content_filter"
    if content is None or content.strip() == "":
        return "reasoning_only"
    return "stop"


def error_response(kind: str, message: str, *, status: int | None = None, retry_after: float | None = None,
                   latency_ms: int = 0, request_id: str | None = None, simulated: bool = False,
                   stage: str | None = None, headers: Mapping[str, str] | None = None,
                   truncated: tuple[str, ...] = ()) -> ChatResponse:
    """A failed call."""
    return ChatResponse(content=None, finish_reason=None, outcome="error", request_id=request_id,
                        latency_ms=latency_ms, error=CallError(kind, message, status, retry_after, stage),
                        simulated=simulated, headers=dict(headers or {}), truncated=truncated)


def cut(value: str | None, name: str, cuts: list[str], limit: int = MAX_PROVIDER_STRING) -> str | None:
    """``value`` cut to ``limit`` characters plus ``CUT_MARK`` (``name`` appended to
    ``cuts``), or unchanged when short enough."""
    if value is None or len(value) <= limit:
        return value
    cuts.append(name)
    return value[:limit] + CUT_MARK


def _header_value(headers: Any, name: str) -> str | None:
    v = headers.get(name) if headers is not None else None
    return v if isinstance(v, str) and v else None


def is_simulated_reply(headers: Any, data: Mapping | None = None) -> bool:
    """A reply that calls itself simulated: the ``x-benchclaw-simulated: 1`` header under any
    gateway prefix (LiteLLM passes it on as ``llm_provider-x-benchclaw-simulated``), or the
    simulator's ``system_fingerprint``, which survives a proxy in the body."""
    if headers is not None:
        for name in headers.keys():
            if str(name).lower().endswith(SIMULATED_HEADER) and headers.get(name) == "1":
                return True
    return isinstance(data, Mapping) and data.get("system_fingerprint") == SIMULATED_FINGERPRINT


def reply_identity(headers: Any, redact: Callable[[str], str], keep: tuple[str, ...] = (),
                   cuts: list[str] | None = None) -> tuple[dict[str, str], str | None, str | None]:
    """The identifying headers of a reply (redacted, cut), its preferred request id and the
    upstream model a gateway names: ``(headers, request_id, model_upstream)``."""
    cuts = [] if cuts is None else cuts
    kept: dict[str, str] = {}
    names = REQUEST_ID_HEADERS + UPSTREAM_MODEL_HEADERS + tuple(n.lower() for n in keep)
    for name in names:
        v = _header_value(headers, name)
        if v is not None and name not in kept:
            kept[name] = cut(redact(v), f"headers.{name}", cuts)
    if headers is not None:
        for name in headers.keys():
            low = str(name).lower()
            if low.endswith(SIMULATED_HEADER) and low not in kept:
                kept[low] = cut(redact(str(headers.get(name))), f"headers.{low}", cuts)
    request_id = next((kept[n] for n in REQUEST_ID_HEADERS if n in kept), None)
    upstream = next((kept[n] for n in UPSTREAM_MODEL_HEADERS if n in kept), None)
    return kept, request_id, upstream


def _first_choice(data: Mapping) -> tuple[str | None, str | None, str | None]:
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
    reasoning = message.get("reasoning_content")
    if not isinstance(reasoning, str):
        reasoning = message.get("reasoning")
    return content, finish, reasoning if isinstance(reasoning, str) and reasoning else None


def _opt_str(v: Any) -> str | None:
    return v if isinstance(v, str) else None


def parse_completion_body(body: bytes, *, requested_model: str, latency_ms: int, simulated: bool,
                          headers: Any = None, redact: Callable[[str], str] = lambda s: s,
                          keep_headers: tuple[str, ...] = (), expect_model: str | None = None) -> ChatResponse:
    """Turn the bytes and headers of a 200 chat-completions reply into a ``ChatResponse``.

    A body that is not JSON or has no usable choice is an ``error`` of kind ``malformed``.
    A usage object that cannot be normalised is kept raw with ``usage=None`` (the call is
    then costed with bounds, never guessed). Provider strings (ids, ``model``,
    ``finish_reason``, headers, the raw usage) pass through ``redact`` and are cut to
    ``MAX_PROVIDER_STRING``; content and reasoning are kept as sent. ``model_mismatch``
    compares ``expect_model`` (the tier's declared upstream model) with the upstream model
    a gateway names when both are known, else the echoed ``model`` with ``requested_model``.
    """
    cuts: list[str] = []
    kept, request_id, upstream = reply_identity(headers, redact, keep_headers, cuts)
    simulated = simulated or is_simulated_reply(headers)
    try:
        data = jsonio.loads(body)
        if not isinstance(data, dict):
            raise FormatError("reply is not a JSON object")
        content, finish, reasoning = _first_choice(data)
    except (ValueError, FormatError) as e:
        return error_response("malformed", redact(f"malformed reply body: {e}"[:500]), status=200,
                              latency_ms=latency_ms, request_id=request_id, simulated=simulated, stage="response",
                              headers=kept, truncated=tuple(dict.fromkeys(cuts)))
    simulated = simulated or is_simulated_reply(None, data)
    usage_raw = data.get("usage") if isinstance(data.get("usage"), dict) else None
    usage = None
    if usage_raw is not None:
        usage_raw = _bounded_usage(_redact_tree(usage_raw, redact), cuts)
        try:
            usage = normalise_usage(usage_raw)
        except FormatError:
            usage = None
    echoed = _opt_str(data.get("model"))
    # The declared upstream model is checked against what a gateway names (or, with no
    # gateway header, the echoed model); without a declaration, the echo against the request.
    observed = upstream if expect_model is not None and upstream is not None else echoed
    mismatch = observed is not None and observed != (expect_model or requested_model)
    finish_rec = cut(None if finish is None else redact(finish), "finish_reason", cuts)
    response_id = _opt_str(data.get("id"))
    fields = dict(
        finish_reason=finish_rec, request_id=request_id,
        response_id=cut(None if response_id is None else redact(response_id), "response_id", cuts),
        model_echoed=cut(None if echoed is None else redact(echoed), "model_echoed", cuts), latency_ms=latency_ms,
        usage_raw=usage_raw, usage=usage, simulated=simulated, model_mismatch=mismatch, reasoning=reasoning,
        headers=kept, model_upstream=upstream)
    echo = [n for n, text in (("content", content), ("reasoning", reasoning)) if contains_secret(text)]
    if echo:
        return ChatResponse(
            content=None if content is None else mark_secrets(content), outcome="error",
            error=CallError("key_echo", f"the provider sent the API key back inside the reply's {' and '.join(echo)}; "
                            f"stored with {KEY_MARK} in its place and never acted on", 200, None, "response"),
            **{**fields, "reasoning": None if reasoning is None else mark_secrets(reasoning)},
            truncated=tuple(dict.fromkeys(cuts)))
    return ChatResponse(content=content, outcome=outcome_of(content, finish), truncated=tuple(dict.fromkeys(cuts)), **fields)


MAX_USAGE_RAW_BYTES = 64 * 1024


def _bounded_usage(raw: dict, cuts: list[str]) -> dict:
    """The raw usage as recorded: strings in it cut like every provider string, and an
    object larger than ``MAX_USAGE_RAW_BYTES`` replaced by a marker naming its size
    (it then does not normalise, and the call is costed with bounds)."""
    raw = _cut_tree(raw, cuts)
    try:
        size = len(jsonio.dumps(raw))
    except (TypeError, ValueError):
        return raw
    if size > MAX_USAGE_RAW_BYTES:
        cuts.append("usage_raw")
        return {"benchclaw_cut_bytes": size}
    return raw


def _cut_tree(obj: Any, cuts: list[str], depth: int = 0) -> Any:
    if isinstance(obj, str):
        return cut(obj, "usage_raw", cuts)
    if isinstance(obj, dict):
        return {cut(str(k), "usage_raw", cuts): _cut_tree(v, cuts, depth + 1) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_cut_tree(v, cuts, depth + 1) for v in obj]
    return obj


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
