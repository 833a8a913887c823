"""Streamed calls: the sim server's SSE wire shape, the assembler, stall detection, the floor
of a cut stream, the catalog switch, and the in-process simulator's streamed path."""

from __future__ import annotations

import asyncio
import json
import urllib.request
from dataclasses import replace
from decimal import Decimal

import pytest

from benchclaw.formats import jsonio
from benchclaw.errors import FormatError
from benchclaw.formats.money import (MAX_TOKEN_BYTES, Prices, Usage, call_cost, cost_bounds,
                                     message_bytes, stream_floor)
from benchclaw.providers import make_provider
from benchclaw.providers.base import ChatRequest, parse_completion_body
from benchclaw.providers.catalog import load_catalog, parse_catalog
from benchclaw.providers.streaming import StreamAssembler, assemble, sse_objects
from benchclaw.sim.backend import SimBackend, SimFaults
from benchclaw.sim.profiles import load_profiles
from benchclaw.sim.provider import SimOptions
from benchclaw.sim.server import serve_in_thread

from .test_sim_engine import FAKE, PROMPT

MESSAGES = ({"role": "system", "content": "s" * 500}, {"role": "user", "content": PROMPT})


def _post(url: str, body: dict) -> tuple[dict, bytes]:
    req = urllib.request.Request(url + "/chat/completions", data=json.dumps(body).encode(),
                                 headers={"content-type": "application/json"})
    with urllib.request.urlopen(req, timeout=10) as r:
        return dict(r.headers), r.read()


def _events(raw: bytes) -> list[bytes]:
    return [e.removeprefix(b"data: ") for e in raw.split(b"\n\n") if e]


def test_sim_serve_streams_openai_shaped_chunks_and_a_usage_chunk():
    backend = SimBackend(load_profiles(), latency_scale=0, mods=FAKE)
    body = {"model": "sim/ultra", "messages": list(MESSAGES), "max_tokens": 4096, "seed": 1}
    with serve_in_thread(backend=backend) as url:
        _, plain = _post(url, body)
        headers, raw = _post(url, {**body, "stream": True, "stream_options": {"include_usage": True}})
        _, no_usage = _post(url, {**body, "stream": True})
    whole = jsonio.loads(plain)
    events = _events(raw)
    assert headers["content-type"] == "text/event-stream" and headers["x-benchclaw-simulated"] == "1"
    assert events[-1] == b"[DONE]"
    chunks = [jsonio.loads(e) for e in events[:-1]]
    assert all(c["object"] == "chat.completion.chunk" and c["id"] == whole["id"] for c in chunks)
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"] == whole["usage"]
    assert all(c["usage"] is None for c in chunks[:-1])
    text = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks[:-1])
    assert text == whole["choices"][0]["message"]["content"]
    assert chunks[-2]["choices"][0]["finish_reason"] == whole["choices"][0]["finish_reason"]
    tokens = sum(1 for c in chunks[:-1] if c["choices"][0]["delta"].get("content")
                 or c["choices"][0]["delta"].get("reasoning_content"))
    assert tokens == whole["usage"]["completion_tokens"]  # one chunk per token
    # without stream_options.include_usage: no usage chunk, no usage field
    assert all("usage" not in jsonio.loads(e) for e in _events(no_usage)[:-1])


def test_a_cut_stream_ends_in_a_reset_after_n_tokens_without_done():
    backend = SimBackend(load_profiles(), latency_scale=0, mods=FAKE,
                         faults=SimFaults(schedule=("stream_cut",), stream_cut_after=3))
    body = {"model": "sim/ultra", "messages": list(MESSAGES), "max_tokens": 4096, "seed": 1, "stream": True}
    with serve_in_thread(backend=backend) as url:
        got = b""
        try:
            _, got = _post(url, body)
        except OSError:  # the reset may surface as an error on read
            pass
        _, plain = _post(url, {k: v for k, v in body.items() if k != "stream"})
    assert b"[DONE]" not in got
    assert jsonio.loads(plain)["choices"]  # a non-streamed request ignores stream faults


# -- the assembler ----------------------------------------------------------------------------

async def _aiter(items, delays=None):
    for i, item in enumerate(items):
        if delays:
            await asyncio.sleep(delays[i])
        yield item


def _chunk(delta=None, finish=None, usage=None, choices=True):
    c = {"id": "chatcmpl-1", "model": "m", "choices": [{"index": 0, "delta": delta or {}, "finish_reason": finish}]}
    if not choices:
        c["choices"] = []
    if usage is not None:
        c["usage"] = usage
    return c


def _assemble(chunks, stall_s=None, delays=None, on_text=None):
    asm = StreamAssembler(0.0, clock=lambda: 0.25)
    end, error = asyncio.run(assemble(_aiter(chunks, delays), asm, stall_s=stall_s, on_text=on_text))
    return asm.response(end, error=error, parse=lambda body, ms: parse_completion_body(
        body, requested_model="m", latency_ms=ms, simulated=False))


def test_assembled_reply_equals_what_a_plain_call_records():
    seen = []
    resp = _assemble([_chunk({"role": "assistant", "content": ""}), _chunk({"reasoning_content": "hm"}),
                      _chunk({"content": "{\"a\""}), _chunk({"content": ": 1}"}), _chunk({}, "stop"),
                      _chunk(choices=False, usage={"prompt_tokens": 7, "completion_tokens": 3})], on_text=seen.append)
    assert resp.ok and resp.outcome == "stop" and resp.content == '{"a": 1}' and seen == ['{"a"', ": 1}"]
    assert resp.usage == Usage(prompt=7, completion=3) and resp.response_id == "chatcmpl-1"
    assert resp.stream.to_dict() == {"chunks": 6, "text_chunks": 3, "ttft_ms": 250, "usage_chunk": True,
                                     "end": "done"}


def test_a_stream_that_ends_before_a_finish_reason_is_a_cut_error_keeping_its_text():
    resp = _assemble([_chunk({"content": "par"}), _chunk({"content": "tial"})])
    assert resp.outcome == "error" and resp.error.kind == "connection" and resp.content == "partial"
    assert resp.stream.end == "cut" and resp.usage is None


def test_a_stall_is_cut_at_stall_s():
    resp = _assemble([_chunk({"content": "a"}), _chunk({"content": "b"}), _chunk({}, "stop")],
                     stall_s=0.05, delays=[0, 0, 5])
    assert resp.error.kind == "timeout" and resp.error.retryable and resp.stream.end == "stalled"
    assert resp.stream.text_chunks == 2 and "stalled" in resp.error.message


@pytest.mark.parametrize("bad", [[1], [{"choices": "x"}], [_chunk({"content": 5})], [_chunk({}, 7)]])
def test_malformed_chunks_are_a_malformed_error(bad):
    resp = _assemble(bad)
    assert resp.error.kind == "malformed" and resp.stream.end == "malformed"


def test_sse_reader_joins_data_lines_skips_comments_and_stops_at_done():
    lines = [": keep-alive", "event: message", 'data: {"a":', "data: 1}", "", "", "data: [DONE]", "",
             'data: {"after": true}', ""]

    async def read():
        return [o async for o in sse_objects(_aiter(lines))]
    assert asyncio.run(read()) == [{"a": 1}]

    async def error():
        return [o async for o in sse_objects(_aiter(['data: {"error": {"message": "overloaded"}}', ""]))]
    with pytest.raises(FormatError, match="overloaded"):
        asyncio.run(error())


# -- the floor of a streamed call without usage --------------------------------------------

PRICES = Prices(input=Decimal("0.30"), output=Decimal("1.20"))


def test_stream_floor_counts_prompt_bytes_and_text_chunks_by_the_documented_rule():
    assert stream_floor(1000, 0, 0, 4096) == Usage()  # nothing generated: nothing provable
    assert stream_floor(1000, 0, 5, 4096) == Usage(prompt=8, completion=5)  # ceil(1000 / 128) = 8
    assert stream_floor(129, 10_000, 5, 4096) == Usage(prompt=2, completion=79)  # the reply's bytes win
    assert stream_floor(0, 10**9, 9000, 4096).completion == 4096  # never above max_tokens
    assert MAX_TOKEN_BYTES == 128
    assert message_bytes([{"role": "user", "content": "é" * 10}, {"role": "assistant", "content": None}]) == 20


def test_cost_bounds_with_a_floor_are_a_tighter_interval_not_an_exact_cost():
    floor = stream_floor(1000, 0, 5, 4096)
    plain = cost_bounds(None, 1200, 4096, PRICES)
    tight = cost_bounds(None, 1200, 4096, PRICES, floor=floor)
    assert not tight.known and tight.high == plain.high and tight.low == call_cost(floor, PRICES) > plain.low == 0
    cached = Prices(input=Decimal("0.30"), cached_input=Decimal("0.03"), output=Decimal("1.20"))
    as_read = Usage(prompt=floor.prompt, cached_read=floor.prompt, completion=floor.completion)
    assert cost_bounds(None, 1200, 4096, cached, floor=floor).low == call_cost(as_read, cached) < call_cost(floor, cached)
    exact = cost_bounds(Usage(prompt=900, completion=40), 1200, 4096, PRICES, floor=floor)
    assert exact.known and exact.low == exact.high


# -- the catalog switch and the in-process simulator ---------------------------------------

def test_catalog_stream_and_stall_seconds():
    cat = parse_catalog(b'v = 1\nname = "x"\nextends = "sim"\n[tiers.ultra]\nstream = true\nstall_seconds = 2.5\n',
                        "x.toml", resolve_base=load_catalog)
    assert cat.tier("ultra").stream is True and cat.tier("ultra").stall_seconds == 2.5
    assert cat.tier("lightning").stream is False
    for bad, field in ((b"stream = 1", "stream"), (b"stall_seconds = 0", "stall_seconds")):
        with pytest.raises(FormatError, match=f"tiers.ultra.{field}"):
            parse_catalog(b'v = 1\nname = "x"\nextends = "sim"\n[tiers.ultra]\n' + bad + b"\n", "x.toml",
                          resolve_base=load_catalog)


def test_the_request_blob_says_streamed_and_asks_for_usage():
    body = ChatRequest(model="m", messages=MESSAGES, stream=True).body()
    assert body["stream"] is True and body["stream_options"] == {"include_usage": True}
    assert "stream" not in ChatRequest(model="m", messages=MESSAGES).body()


def _sim(stream: bool, faults=None):
    tier = replace(load_catalog("sim").tier("ultra"), stream=stream, stall_seconds=7)
    backend = SimBackend(load_profiles(), latency_scale=0, mods=FAKE, faults=faults)
    return make_provider(tier, sim_options=SimOptions(backend=backend))


def test_in_process_streamed_sim_answers_like_the_plain_one():
    req = ChatRequest(model="sim/ultra", messages=MESSAGES, seed=3, max_tokens=4096)
    plain = asyncio.run(_sim(False).complete(req))
    streamed = asyncio.run(_sim(True).complete(replace(req, stream=True)))
    assert (streamed.content, streamed.usage, streamed.outcome) == (plain.content, plain.usage, plain.outcome)
    assert streamed.stream.text_chunks == plain.usage.completion and streamed.stream.usage_chunk
    assert 0 < streamed.stream.ttft_ms <= streamed.latency_ms == plain.latency_ms  # simulated time, same total


def test_in_process_stall_costs_stall_s_of_simulated_time():
    req = ChatRequest(model="sim/ultra", messages=MESSAGES, seed=3, max_tokens=4096, stream=True)
    resp = asyncio.run(_sim(True, SimFaults(schedule=("stream_stall",), stream_cut_after=4)).complete(req))
    assert resp.error.kind == "timeout" and resp.stream.end == "stalled" and resp.stream.text_chunks == 4
    assert resp.latency_ms >= 7000


def test_a_streamed_call_whose_headers_never_come_is_cut_at_stall_s():
    import time

    from benchclaw.providers.catalog import Tier

    backend = SimBackend(load_profiles(), latency_scale=0, mods=FAKE, faults=SimFaults(schedule=("timeout",), hang_s=10))
    with serve_in_thread(backend=backend) as url:
        tier = Tier(name="t", provider="openai", model="sim/ultra", base_url=url, key_env=None, prices=PRICES,
                    stream=True, stall_seconds=0.3)
        provider = make_provider(tier, key="sk-test-key-1234567890")

        async def go():
            try:
                t0 = time.monotonic()
                return await provider.complete(ChatRequest(model="sim/ultra", messages=MESSAGES, stream=True,
                                                           timeout_s=30)), time.monotonic() - t0
            finally:
                await provider.aclose()
        resp, took = asyncio.run(go())
    assert resp.error.kind == "timeout" and "no response headers within 0.3 s" in resp.error.message
    assert resp.stream.end == "stalled" and resp.stream.chunks == 0 and took < 5


def test_an_outer_cancellation_is_not_mistaken_for_a_stall():
    async def go():
        asm = StreamAssembler(0.0)
        task = asyncio.ensure_future(assemble(_aiter([_chunk({"content": "a"}), _chunk({}, "stop")], [0, 5]),
                                              asm, stall_s=2))
        await asyncio.sleep(0.05)
        task.cancel()  # the run's time limit, an interrupt
        with pytest.raises(asyncio.CancelledError):
            await task
        # and a stall inside an outer wait_for that has time left is still a stall
        asm2 = StreamAssembler(0.0)
        got = await asyncio.wait_for(assemble(_aiter([_chunk({"content": "a"}), _chunk({}, "stop")], [0, 5]),
                                              asm2, stall_s=0.05), timeout=3)
        assert got[0] == "stalled" and asm2.text_chunks == 1
    asyncio.run(go())


def test_an_error_event_mid_stream_is_a_server_error():
    resp = _assemble([_chunk({"content": "a"})])  # baseline: cut
    assert resp.error.kind == "connection"

    async def lines():
        for line in ['data: {"id": "1", "choices": [{"delta": {"content": "a"}}]}', "",
                     'data: {"error": {"message": "upstream overloaded"}}', ""]:
            yield line
    asm = StreamAssembler(0.0)
    end, err = asyncio.run(assemble(sse_objects(lines()), asm, stall_s=None))
    assert end == "cut" and err.kind == "server" and "overloaded" in err.message and asm.text_chunks == 1
