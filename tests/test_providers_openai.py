"""The openai provider against ``sim serve`` over real loopback HTTP, with the real SDK."""

from __future__ import annotations

import asyncio
import logging
from decimal import Decimal

import pytest

from benchclaw.formats import jsonio
from benchclaw.formats.money import Prices, Usage, cost_bounds, estimate_prompt_tokens
from benchclaw.providers import make_provider
from benchclaw.providers.base import ChatRequest
from benchclaw.providers.catalog import Tier, load_catalog
from benchclaw.sim.backend import SimBackend, SimFaults
from benchclaw.sim.engine import reported_usage, respond
from benchclaw.sim.profiles import load_profiles
from benchclaw.sim.server import serve_in_thread

from .test_sim_engine import FAKE, PROMPT

KEY = "sk-planted-9fQ2xLmT4vZkR8pWc3Yh"
PRICES = Prices(input=Decimal("0.30"), output=Decimal("1.20"))
MESSAGES = [{"role": "system", "content": "s" * 5000}, {"role": "user", "content": PROMPT},
            {"role": "assistant", "content": '{"action": "read", "path": "data.md"}'},
            {"role": "user", "content": '{"ok": true, "action": "read", "path": "data.md", "content": "hello"}'}]


def _tier(url, model="sim/ultra"):
    return Tier(name="t", provider="openai", model=model, base_url=url, key_env=None, prices=PRICES)


def _run(coro):
    return asyncio.run(coro)


async def _complete(url, req, key=KEY):
    p = make_provider(_tier(url, req.model), key=key)
    try:
        return await p.complete(req)
    finally:
        await p.aclose()


@pytest.fixture()
def server():
    backend = SimBackend(load_profiles(), latency_scale=0, mods=FAKE)
    with serve_in_thread(backend=backend) as url:
        yield url, backend


def _faulty(*schedule, **kw):
    return serve_in_thread(backend=SimBackend(load_profiles(), latency_scale=0, mods=FAKE,
                                              faults=SimFaults(schedule=schedule, **kw)))


def test_official_sdk_gets_json_content_usage_and_request_id(server):
    import openai

    url, _ = server

    async def go():
        client = openai.AsyncOpenAI(base_url=url, api_key="x", max_retries=0)
        params = dict(model="sim/super", messages=[{"role": "user", "content": PROMPT}], max_tokens=4096, seed=3,
                      response_format={"type": "json_object"})
        completion = await client.chat.completions.create(**params)
        raw = await client.chat.completions.with_raw_response.create(**params)
        models = await client.models.list()
        await client.close()
        return completion, raw, models

    completion, raw, models = _run(go())
    assert raw.headers["x-request-id"].startswith("req-sim-")
    assert jsonio.loads(completion.choices[0].message.content)["action"] == "read"
    assert completion.usage.prompt_tokens > 0 and completion.usage.completion_tokens > 0
    assert raw.parse().choices[0].message.content == completion.choices[0].message.content
    assert {m.id for m in models.data} >= {"sim/lightning", "sim/super", "sim/ultra"}


@pytest.mark.parametrize("model", ["sim/lightning", "sim/super", "sim/ultra", "sim/reckless"])
def test_each_usage_shape_normalised_right_over_http(server, model):
    url, _ = server
    req = ChatRequest(model=model, messages=MESSAGES, seed=5, max_tokens=8192, timeout_s=10)
    r = _run(_complete(url, req))
    expected = Usage(**reported_usage(respond(req.body(), load_profiles(), mods=FAKE)))
    assert r.outcome == "stop" and r.usage == expected and r.usage.prompt > 1024
    assert r.request_id.startswith("req-sim-") and r.response_id.startswith("chatcmpl-sim-")
    assert r.model_echoed == model and not r.model_mismatch and r.simulated
    assert r.usage_raw["prompt_tokens"] == expected.prompt  # kept as the provider sent it


def test_shapes_really_differ():
    profiles = load_profiles()
    keys = {p.usage_shape for p in profiles.by_name.values()}
    assert keys == {"openai", "cache_hit", "null_details", "cache_write"}


def test_timeout_yields_a_call_with_cost_bounds():
    with _faulty("timeout", hang_s=5) as url:
        req = ChatRequest(model="sim/ultra", messages=MESSAGES, seed=1, max_tokens=2000, timeout_s=0.3)
        r = _run(_complete(url, req))
    assert r.outcome == "error" and r.error.kind == "timeout" and r.usage is None
    assert 250 <= r.latency_ms < 3000
    bounds = cost_bounds(r.usage, estimate_prompt_tokens(req.messages), req.max_tokens, PRICES)
    assert not bounds.known and bounds.low == 0
    assert bounds.high == (Decimal(estimate_prompt_tokens(MESSAGES)) * Decimal("0.30") + 2000 * Decimal("1.20")) / 1_000_000


def test_429_carries_retry_after_and_the_next_attempt_is_its_own_call():
    """The provider surfaces what the runtime's retry loop needs: a typed 429 with its
    Retry-After, and a separate, separately identified attempt afterwards (the loop itself,
    recording both attempts, is tested in test_agent_runtime and reliability/test_faults)."""
    with _faulty("rate_limited", None, retry_after_s=0.25) as url:
        p = make_provider(_tier(url), key=KEY)
        req = ChatRequest(model="sim/ultra", messages=MESSAGES, seed=1, timeout_s=30)

        async def go():
            try:
                return await p.complete(req), await p.complete(req)
            finally:
                await p.aclose()

        first, second = _run(go())
    assert first.error.kind == "rate_limited" and first.error.status == 429 and first.error.retry_after == 0.25
    assert first.error.retryable and first.usage is None
    assert first.request_id and second.request_id and first.request_id != second.request_id
    assert second.ok and second.usage is not None


def test_sdk_does_not_retry_on_its_own():
    with _faulty("server", "server") as url:
        r = _run(_complete(url, ChatRequest(model="sim/ultra", messages=MESSAGES, seed=1, timeout_s=10)))
    assert r.error.kind == "server" and r.error.status == 500 and r.request_id.endswith("-0")


@pytest.mark.parametrize("fault, kind", [("malformed", "malformed"), ("connection", "connection"),
                                         ("server", "server")])
def test_failures_are_typed(fault, kind):
    with _faulty(fault) as url:
        r = _run(_complete(url, ChatRequest(model="sim/ultra", messages=MESSAGES, seed=1, timeout_s=10)))
    assert r.outcome == "error" and r.error.kind == kind and r.usage is None


def test_missing_usage_and_model_mismatch_are_flagged():
    with _faulty("missing_usage", "model_mismatch") as url:
        req = ChatRequest(model="sim/ultra", messages=MESSAGES, seed=1, timeout_s=10)
        a, b = _run(_complete(url, req)), _run(_complete(url, req))
    assert a.ok and a.usage is None and a.usage_raw is None
    assert b.ok and b.model_mismatch and b.model_echoed == "sim/ultra-simulated-alias"


def test_unknown_model_is_a_bad_request(server):
    url, _ = server
    r = _run(_complete(url, ChatRequest(model="gpt-nope", messages=MESSAGES, timeout_s=10)))
    assert r.error.kind == "bad_request" and r.error.status == 404


def test_a_key_echoed_by_the_provider_appears_nowhere(caplog):
    with caplog.at_level(logging.DEBUG):
        with _faulty("auth_echo") as url:
            r = _run(_complete(url, ChatRequest(model="sim/ultra", messages=MESSAGES, seed=1, timeout_s=10)))
    assert r.error.kind == "auth" and "Incorrect API key" in r.error.message
    outputs = [repr(r), str(r.error), r.error.message, jsonio.dumps(r.error.to_dict()).decode(), caplog.text,
               *(rec.getMessage() for rec in caplog.records)]
    for text in outputs:
        assert KEY not in text and KEY[:10] not in text and KEY[-10:] not in text
    assert "[REDACTED]" in r.error.message


def test_missing_key_env_is_a_config_error(monkeypatch):
    from benchclaw.errors import ProviderConfigError

    monkeypatch.delenv("NEBIUS_API_KEY", raising=False)
    with pytest.raises(ProviderConfigError, match="NEBIUS_API_KEY is not set"):
        make_provider(load_catalog("nebius-nemotron").tier("super"))


def test_no_time_left_is_a_timeout_without_a_request(server):
    url, backend = server
    r = _run(_complete(url, ChatRequest(model="sim/ultra", messages=MESSAGES, timeout_s=0)))
    assert r.error.kind == "timeout" and backend._calls == 0
