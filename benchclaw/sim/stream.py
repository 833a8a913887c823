"""The simulator's streamed replies: a chat.completion object cut into chunk objects.

OpenAI-compatible servers (OpenAI, vLLM, SGLang, llama.cpp, LiteLLM) stream a reply as
server-sent events, one ``chat.completion.chunk`` per ``data:`` line and ``data: [DONE]``
at the end. The shape reproduced here: a first chunk carrying ``role``, one chunk per
generated token (``reasoning_content`` deltas for reasoning tokens, ``content`` deltas for
the answer), a chunk with an empty delta and the ``finish_reason``, and, when the client
asked ``stream_options.include_usage``, a last chunk with ``choices: []`` and the usage
(every earlier chunk then carries ``"usage": null``, as OpenAI's does).

One chunk per simulated token (the simulator counts a token per four characters) keeps
the chunk count equal to the completion tokens, as on a real server that streams token by
token, so the lower bound of a cut stream (docs/FORMAT.md §6) can be checked exactly.
Pure: the backend builds the payloads, the HTTP server writes them with timing, the
in-process provider parses them with the same assembler the OpenAI provider uses.
"""

from __future__ import annotations

from typing import Any

from ..formats import jsonio

__all__ = ["stream_payloads", "REASONING_PIECE", "DONE"]

REASONING_PIECE = "."  # stands for one simulated reasoning token (the simulator has no reasoning text)
DONE = b"[DONE]"
_PIECE_CHARS = 4


def _chunk(doc: dict, delta: dict, finish: str | None, with_usage: bool) -> dict[str, Any]:
    out: dict[str, Any] = {"id": doc.get("id"), "object": "chat.completion.chunk", "created": doc.get("created", 0),
                           "model": doc.get("model"), "system_fingerprint": doc.get("system_fingerprint"),
                           "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}]}
    if with_usage:
        out["usage"] = None
    return out


def stream_payloads(doc: dict, *, reasoning: int, include_usage: bool) -> tuple[bytes, ...]:
    """The ``data:`` payloads of a streamed reply to the chat.completion ``doc``
    (``[DONE]`` not included). ``reasoning`` tokens are streamed before the content;
    the usage chunk is sent when ``include_usage`` and ``doc`` has a usage object."""
    choice = doc["choices"][0]
    content = choice["message"].get("content") or ""
    usage = doc.get("usage")
    with_usage = include_usage and usage is not None
    out = [jsonio.dumps(_chunk(doc, {"role": "assistant", "content": ""}, None, with_usage))]
    out += [jsonio.dumps(_chunk(doc, {"reasoning_content": REASONING_PIECE}, None, with_usage))] * reasoning
    out += [jsonio.dumps(_chunk(doc, {"content": content[i:i + _PIECE_CHARS]}, None, with_usage))
            for i in range(0, len(content), _PIECE_CHARS)]
    out.append(jsonio.dumps(_chunk(doc, {}, choice.get("finish_reason"), with_usage)))
    if with_usage:
        last = _chunk(doc, {}, None, False)
        last["choices"] = []
        last["usage"] = usage
        out.append(jsonio.dumps(last))
    return tuple(out)
