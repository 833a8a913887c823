"""Streamed calls: chunks in, the same ``ChatResponse`` a non-streamed call gives out.

A streamed reply arrives as ``chat.completion.chunk`` objects (server-sent events). The
``StreamAssembler`` joins them into the ``chat.completion`` object a non-streamed call
would have received (the content, reasoning, finish reason, the usage object of the final
chunk, the response id and the echoed model) and hands it to the provider's own
``parse_completion_body``, so a streamed call is recorded by the very rules of a
non-streamed one and the runtime, the analysis and the verifier treat both alike; what only
a stream shows is kept beside it as ``StreamStats`` (time to first token, chunk counts,
how the stream ended), recorded as the ``stream`` object of the ``call`` record
(docs/FORMAT.md §3).

``assemble`` drives an async iterator of chunks with **stall detection**: when nothing
arrives for ``stall_s`` seconds the stream is cut and the call returns an ``error`` of kind
``timeout`` (retryable: the runtime tries again while the run has time left), instead of
letting one hung stream eat the run's whole remaining time. A stream that breaks (the
connection drops, the server stops before a finish reason) is an ``error`` of kind
``connection``; both keep what was received, because what was received is what the lower
bound of the call's cost is counted from (``money.stream_floor``).

Chunks are plain mappings, the JSON objects of the ``data:`` lines as the server sent
them: the OpenAI provider reads the SDK's HTTP response through ``sse_objects`` (the SDK
still makes the request, authenticates and maps HTTP errors; building its typed chunk
models per token cost ~0.7 ms a chunk and would reshape a provider's own usage fields),
and the in-process simulator hands over its payloads, so both paths share this code.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, replace
from typing import Any, AsyncIterator, Callable, Mapping

from ..formats import jsonio
from ..errors import FormatError
from .base import CallError, ChatResponse, StreamStats

__all__ = ["StreamAssembler", "StreamErrorEvent", "assemble", "sse_objects", "per_call", "STREAM_ENDS"]

# done: a finish reason arrived and the stream closed; cut: it broke or closed before one;
# stalled: nothing arrived for stall_s and BenchClaw cut it; malformed: a chunk was unreadable.
STREAM_ENDS = ("done", "cut", "stalled", "malformed")


class StreamErrorEvent(FormatError):
    """The server sent an ``error`` object instead of a chunk: it failed mid-stream."""


class StreamAssembler:
    """Joins chunks; ``feed`` returns the new content text (for a live display)."""

    def __init__(self, start: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.start, self.clock = start, clock
        self.content: list[str] = []
        self.reasoning: list[str] = []
        self.chunks = self.text_chunks = 0
        self.ttft_ms: int | None = None
        self.finish: str | None = None
        self.usage_raw: dict | None = None
        self.response_id: str | None = None
        self.model: str | None = None
        self.fingerprint: str | None = None

    def feed(self, chunk: Any) -> str:
        """Take one chunk. Raises ``FormatError`` for a chunk that is not a chunk object."""
        if not _is_map(chunk):
            raise FormatError("a stream chunk is not a JSON object")
        self.chunks += 1
        self.response_id = self.response_id or _opt_str(chunk.get("id"))
        self.model = self.model or _opt_str(chunk.get("model"))
        self.fingerprint = self.fingerprint or _opt_str(chunk.get("system_fingerprint"))
        if type(chunk.get("usage")) is dict:
            self.usage_raw = dict(chunk["usage"])  # the last one sent wins: it is the final count
        choices = chunk.get("choices")
        if choices is None or choices == []:
            return ""
        if type(choices) is not list or not _is_map(choices[0]):
            raise FormatError("a stream chunk's choices is not a list of objects")
        return self._delta(choices[0])

    def _delta(self, choice: Mapping) -> str:
        delta = choice.get("delta") or {}
        if not _is_map(delta):
            raise FormatError("a stream chunk's delta is not an object")
        text = delta.get("content")
        thought = delta.get("reasoning_content", delta.get("reasoning"))
        for v in (text, thought):
            if v is not None and not isinstance(v, str):
                raise FormatError("a stream chunk's content is not a string")
        if text or thought:
            self.text_chunks += 1
            if self.ttft_ms is None:
                self.ttft_ms = _ms(self.clock() - self.start)
        if thought:
            self.reasoning.append(thought)
        if text:
            self.content.append(text)
        finish = choice.get("finish_reason")
        if finish is not None:
            if not isinstance(finish, str):
                raise FormatError("a stream chunk's finish_reason is not a string")
            self.finish = finish
        return text or ""

    def stats(self, end: str) -> StreamStats:
        return StreamStats(self.chunks, self.text_chunks, self.ttft_ms, self.usage_raw is not None, end)

    def document(self) -> dict:
        """The chunks joined into the ``chat.completion`` object a non-streamed call gets."""
        message: dict[str, Any] = {"role": "assistant",
                                   "content": "".join(self.content) if (self.content or self.finish) else None}
        if self.reasoning:
            message["reasoning_content"] = "".join(self.reasoning)
        doc: dict[str, Any] = {"id": self.response_id, "object": "chat.completion", "model": self.model,
                               "choices": [{"index": 0, "message": message, "finish_reason": self.finish}]}
        if self.fingerprint is not None:
            doc["system_fingerprint"] = self.fingerprint
        if self.usage_raw is not None:
            doc["usage"] = self.usage_raw
        return doc

    def response(self, end: str, *, parse: Callable[[bytes, int], ChatResponse],
                 error: CallError | None = None) -> ChatResponse:
        """The call's ``ChatResponse``: the joined document through ``parse(body, latency_ms)``
        (the provider's ``parse_completion_body`` with its headers bound), so a streamed
        call is recorded by exactly the rules of a non-streamed one, plus its ``stream``.
        A stream that did not end ``done`` (or ended without a finish reason) is an error
        that keeps the content received."""
        if end == "done" and self.finish is None:
            end = "cut"
        if end != "done" and error is None:
            error = CallError("connection", f"the stream ended after {self.chunks} chunks without a finish reason", stage="response")
        resp = parse(jsonio.dumps(self.document()), _ms(self.clock() - self.start))
        resp = replace(resp, stream=self.stats(end))
        if error is not None and resp.ok:
            resp = replace(resp, outcome="error", error=error, finish_reason=None)
        return resp


async def assemble(chunks: AsyncIterator[Any], asm: StreamAssembler, *, stall_s: float | None,
                   on_text: Callable[[str], None] | None = None) -> tuple[str, CallError | None]:
    """Feed every chunk of ``chunks`` to ``asm``; returns how the stream ended and, when it
    did not end ``done``, why. Cuts the stream when nothing arrives for ``stall_s`` (``None``:
    no limit). Transport errors are the caller's to map: they propagate."""
    watch = None if stall_s is None else _StallWatch(stall_s)
    try:
        async for chunk in chunks:
            if watch is not None:
                watch.last = watch.loop.time()
            text = asm.feed(chunk)
            if text and on_text is not None:
                on_text(text)
    except asyncio.CancelledError:
        if watch is None or not watch.fired or watch.task.uncancel() > watch.cancelling:
            raise  # cancelled from outside (the run's time limit, an interrupt): not a stall
        return "stalled", CallError("timeout", f"stalled: nothing received for {stall_s:g} s after "
                                               f"{asm.chunks} chunks; the stream was cut", stage="response")
    except ValueError as e:  # a data: line that is not JSON
        return "malformed", CallError("malformed", f"malformed stream chunk: {e}"[:500], status=200, stage="response")
    except StreamErrorEvent as e:
        return "cut", CallError("server", str(e)[:500], status=200, stage="response")
    except FormatError as e:  # a chunk that is no chunk object
        return "malformed", CallError("malformed", f"malformed stream chunk: {e}"[:500], status=200, stage="response")
    finally:
        if watch is not None:
            watch.close()
    return "done", None


class _StallWatch:
    """Cancels the current task once nothing has arrived for ``stall_s``. Per chunk it
    costs one clock read (``last``); the timer is re-armed only when it fires early, where
    ``asyncio.wait_for`` per chunk cost ~15 us and a rescheduled ``asyncio.timeout`` ~3 us.
    The task is always waiting for the next chunk when the timer fires (feeding is
    synchronous), so the cancellation lands there, and ``uncancel`` tells it from an outer
    one, as ``asyncio.timeout`` does."""

    def __init__(self, stall_s: float) -> None:
        self.loop, self.task = asyncio.get_running_loop(), asyncio.current_task()
        self.stall_s, self.fired = stall_s, False
        self.cancelling = self.task.cancelling()
        self.last = self.loop.time()
        self.handle = self.loop.call_at(self.last + stall_s, self._check)

    def _check(self) -> None:
        due = self.last + self.stall_s
        if self.loop.time() >= due:
            self.fired = True
            self.task.cancel()
        else:
            self.handle = self.loop.call_at(due, self._check)

    def close(self) -> None:
        self.handle.cancel()


async def sse_objects(lines: AsyncIterator[str]) -> AsyncIterator[Any]:
    """The JSON values of a server-sent event stream's ``data:`` fields, until
    ``data: [DONE]`` or the end of the stream. Multi-line data is joined with newlines (the
    SSE rule); comments (``:``) and other fields (``event:``, ``id:``) are skipped. Raises
    ``ValueError`` for data that is not JSON and ``StreamErrorEvent`` for an ``error``
    object (a server that fails mid-stream says so in a data line)."""
    data: list[str] = []
    async for line in lines:
        if line.startswith("data:"):
            data.append(line[5:].removeprefix(" "))
            continue
        if line or not data:
            continue
        text, data = "\n".join(data), []
        if text.startswith("[DONE]"):
            return
        obj = jsonio.loads(text)
        if isinstance(obj, dict) and obj.get("error") and "choices" not in obj:
            raise StreamErrorEvent(f"the server sent an error in the stream: {str(obj['error'])[:300]}")
        yield obj
    if data and not "\n".join(data).startswith("[DONE]"):
        yield jsonio.loads("\n".join(data))


def per_call(on_text: Callable[[str, bool], None] | None) -> Callable[[str], None] | None:
    """A provider's ``on_text(text, first)`` for one call: ``first`` is true for its first text."""
    if on_text is None:
        return None
    first = [True]

    def show(text: str) -> None:
        on_text(text, first[0])
        first[0] = False
    return show


def _is_map(x: Any) -> bool:
    """A JSON object; parsed JSON is a plain dict, and the ``Mapping`` ABC check costs about
    a microsecond, three times per chunk, a thousand chunks per call."""
    return type(x) is dict or isinstance(x, Mapping)


def _opt_str(v: Any) -> str | None:
    return v if isinstance(v, str) else None


def _ms(seconds: float) -> int:
    return max(0, int(round(seconds * 1000)))
