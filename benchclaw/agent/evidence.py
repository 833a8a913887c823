"""Building the bodies of run records (docs/FORMAT.md §3) and writing them safely.

The runtime decides; this module turns its decisions into record bodies, so that the
shape of every record kind is in one place next to the spec it implements. Two guards
keep the blob rule of FORMAT.md §3 ("every ``sha256:`` string in a run body names a stored
blob") true whatever the model or provider sends:

- ``lit`` marks a string that came from outside (a path or summary the model chose, an id
  the provider echoed, an error message) when it would read as a digest: it is written
  ``literal:sha256:…``, so it can never pose as a reference.
- ``append`` refuses (``IntegrityError``) to write a body that references a blob the store
  does not hold: such a record would be a bug, and is caught before it reaches disk.
"""

from __future__ import annotations

from typing import Any

from ..errors import IntegrityError
from ..formats import jsonio
from ..formats.money import fmt_usd
from ..providers.base import ChatRequest, ChatResponse
from ..providers.vault import redact
from ..formats.records import DIGEST_RE, refs_and_floats

__all__ = ["lit", "append", "call_body", "LITERAL_PREFIX"]

LITERAL_PREFIX = "literal:"


def lit(value: Any) -> Any:
    """``value``, or ``"literal:" + value`` when it is a string shaped like a blob digest."""
    if isinstance(value, str) and value.startswith("sha256:") and DIGEST_RE.match(value):
        return LITERAL_PREFIX + value
    return value


def append(writer, store, kind: str, body: dict):
    """Append a record after checking every digest in ``body`` names a stored blob.

    Raises ``IntegrityError`` naming the missing blob (a runtime bug, never model input).
    """
    refs, floats = refs_and_floats(body)  # one walk: the refs to check, and whether dumps must look for floats
    for ref in refs:
        if not store.has_blob(ref):
            raise IntegrityError(f"{kind} record would reference {ref}, which is not stored")
    writer.floatless = None if floats else body  # ``ChainFile.floatless``: this body needs no second walk
    return writer.append(kind, body)


def _error_body(resp: ChatResponse) -> dict | None:
    if resp.error is None:
        return None
    body = resp.error.to_dict()
    body["message"] = lit(redact(body["message"]))  # the provider redacted it already; belt and braces
    return body


def _raw_bytes(raw: Any) -> bytes:
    try:
        return jsonio.dumps(raw)
    except (TypeError, ValueError):  # NaN or an odd type from a provider: keep its text
        return repr(raw).encode("utf-8", "backslashreplace")


def _text_bytes(text: str | None) -> bytes | None:
    return None if text is None else text.encode("utf-8", "surrogatepass")


def _blobs(store, *datas: bytes | None) -> list[str | None]:
    """The digests of ``datas`` (None stays None), stored with one pack write (``put_blobs``)."""
    stored = iter(store.put_blobs([d for d in datas if d is not None]))
    return [None if d is None else next(stored) for d in datas]


def call_body(*, store, turn: int, attempt: int, req: ChatRequest, prompt_estimate: int,
              resp: ChatResponse, priced, simulated: bool) -> dict:
    """The body of one ``call`` record; stores the request, reply, reasoning and raw usage
    blobs (one pack write). ``priced`` is the call's ``money.CallCost``. Fields added for provider truth
    (``reasoning``, ``headers``, ``model_upstream``, ``usage_doubts``, ``cost_note``,
    ``truncated``) are written only when they say something, so older readers and the
    records of plain calls are unchanged."""
    reply, usage_raw, reasoning, request = _blobs(
        store, _text_bytes(resp.content), None if resp.usage_raw is None else _raw_bytes(resp.usage_raw),
        _text_bytes(resp.reasoning), req.body_bytes)
    timeout_ms = None if req.timeout_s is None else int(req.timeout_s * 1000)
    cost = priced.cost
    optional = {
        "reasoning": reasoning,
        "headers": {k: lit(v) for k, v in resp.headers.items()} or None,
        "model_upstream": lit(resp.model_upstream),
        "usage_doubts": list(priced.doubts) or None,
        "cost_note": priced.unbilled,
        "truncated": list(resp.truncated) or None,
        "stream": None if resp.stream is None else resp.stream.to_dict(),  # only streamed calls carry it
    }
    return {**{k: v for k, v in optional.items() if v is not None},
        "turn": turn, "attempt": attempt,
        "request": request,
        "params": {"model": req.model, "max_tokens": req.max_tokens, "temperature": fmt_usd(req.temperature),
                   "seed": req.seed, "json_mode": req.json_mode, "timeout_ms": timeout_ms,
                   **({} if req.stall_s is None else {"stall_ms": int(req.stall_s * 1000)})},
        "prompt_estimate": prompt_estimate,
        "outcome": resp.outcome, "finish_reason": lit(resp.finish_reason),
        "reply": reply,
        "usage": None if resp.usage is None else resp.usage.to_dict(),
        "usage_raw": usage_raw,
        "request_id": lit(resp.request_id), "response_id": lit(resp.response_id),
        "model_echoed": lit(resp.model_echoed), "model_mismatch": bool(resp.model_mismatch),
        "latency_ms": int(resp.latency_ms),
        "cost": cost.to_dict(),
        "error": _error_body(resp),
        "simulated": simulated,
    }
