"""Provider truth (issue 13): what an odd or hostile OpenAI-compatible server says is recorded
as it happened, never rewritten, and costed honestly.

Each test runs one real agent run through the ``openai`` provider (the official SDK, real
HTTP) against ``tests.hostile_server`` on loopback, then asserts what a reader of the
evidence sees: the recorded usage, whether the cost is exact, a bound or a known zero,
the outcome, and the flags on the call and the run.
"""

from __future__ import annotations

import asyncio
from decimal import Decimal

import pytest

from benchclaw.formats import jsonio
from benchclaw.agent import load_profile, run_agent
from benchclaw.agent.testing import GOOD_ANSWER, act, make_task
from benchclaw.formats.catalog import parse_catalog
from benchclaw.errors import FormatError
from benchclaw.formats.money import Prices, Usage, call_cost, cost_upper_bound, fmt_usd
from benchclaw.providers import make_provider
from benchclaw.providers.base import CUT_MARK, MAX_PROVIDER_STRING
from benchclaw.providers.vault import KEY_MARK
from benchclaw.evidence.store import Store

from .hostile_server import MODEL, Behaviour, completion, hostile, refused_url, status

KEY_ENV = "BENCHCLAW_HOSTILE_KEY"
KEY = "sk-hostile-7Qm2x123456789Zt4K9pL0aR3vW8yN"
PRICES = Prices(input=Decimal("1.00"), cached_input=Decimal("0.10"), cache_write=Decimal("1.25"),
                output=Decimal("2.00"))
MAX_TOKENS = 256
FINISH = act("finish", summary="done")
WRITE = act("write", path="out/answer.json", content=GOOD_ANSWER)
OK_USAGE = {"prompt_tokens": 100, "completion_tokens": 20, "total_tokens": 120}


def catalog_text(url: str, extra: str = "", simulated: str = "false") -> str:
    return (f'v = 1\nname = "hostile"\nsimulated = {simulated}\n[tiers.t]\nprovider = "openai"\n'
            f'model = "{MODEL}"\nbase_url = "{url}"\nkey_env = "{KEY_ENV}"\n'
            'prices = { input = "1.00", cached_input = "0.10", cache_write = "1.25", output = "2.00" }\n' + extra)


def run(tmp_path, monkeypatch, script, *, default=None, url=None, extra="", seconds=20, retries=2,
        simulated="false"):
    """One run against the hostile server; returns (result, sealed run, store, server)."""
    monkeypatch.setenv(KEY_ENV, KEY)
    default = default or completion(FINISH, usage=OK_USAGE)
    with hostile(script, default) as srv:
        cat = parse_catalog(catalog_text(url or srv.base_url, extra, simulated).encode(), "hostile.toml")
        tier = cat.tier("t")
        store = Store(tmp_path / "runs", fsync=False)
        provider = make_provider(tier)

        async def go():
            try:
                return await run_agent(store=store, task=make_task(), tier=tier, catalog=cat,
                                       profile=load_profile("direct"), seed=1, provider=provider,
                                       limits={"seconds": seconds}, max_tokens=MAX_TOKENS, retries=retries)
            finally:
                await provider.aclose()

        res = asyncio.run(go())
    sealed = store.read_run(res.run_id)
    raw = b"".join(p.read_bytes() for p in (tmp_path / "runs").rglob("*") if p.is_file())
    assert KEY.encode() not in raw, "the key reached runs/"
    return res, sealed, store, srv


def calls(sealed) -> list[dict]:
    return [r.body for r in sealed.of_kind("call")]


def exact(usage: Usage) -> dict:
    c = fmt_usd(call_cost(usage, PRICES))
    return {"known": True, "low": c, "high": c}


# ---------------------------------------------------------------- usage shapes (FORMAT.md §6)

SHAPES = {
    "openai": ({"prompt_tokens": 100, "completion_tokens": 20, "prompt_tokens_details": {"cached_tokens": 40},
                "completion_tokens_details": {"reasoning_tokens": 5}},
               Usage(prompt=100, cached_read=40, completion=20, reasoning=5), ()),
    "deepseek": ({"prompt_tokens": 100, "completion_tokens": 20, "prompt_cache_hit_tokens": 30,
                  "prompt_cache_miss_tokens": 70}, Usage(prompt=100, cached_read=30, completion=20), ()),
    "nebius-null-details": ({"prompt_tokens": 100, "completion_tokens": 20, "prompt_tokens_details": None,
                             "completion_tokens_details": None}, Usage(prompt=100, completion=20), ()),
    "litellm-copy-zero-first": ({"prompt_tokens": 100, "completion_tokens": 20,
                                 "prompt_tokens_details": {"cached_tokens": 0}, "prompt_cache_hit_tokens": 30},
                                Usage(prompt=100, cached_read=30, completion=20), ()),
    "anthropic-top-level": ({"prompt_tokens": 100, "completion_tokens": 20, "cache_read_input_tokens": 50,
                             "cache_creation_input_tokens": 10},
                            Usage(prompt=100, cached_read=50, cache_write=10, completion=20), ()),
    "reasoning-beside": ({"prompt_tokens": 100, "completion_tokens": 20,
                          "completion_tokens_details": {"reasoning_tokens": 50}},
                         Usage(prompt=100, completion=70, reasoning=50), ()),
    "cache-disagree": ({"prompt_tokens": 100, "completion_tokens": 20, "prompt_tokens_details": {"cached_tokens": 20},
                        "prompt_cache_hit_tokens": 30}, Usage(prompt=100, cached_read=30, completion=20),
                       ("disagree:cached_read",)),
    "unread-audio": ({"prompt_tokens": 100, "completion_tokens": 20,
                      "prompt_tokens_details": {"cached_tokens": 0, "audio_tokens": 12}},
                     Usage(prompt=100, completion=20), ("unread:prompt_tokens_details.audio_tokens",)),
    "gateway-cost-field": ({"prompt_tokens": 100, "completion_tokens": 20, "cost": 0.0042},
                           Usage(prompt=100, completion=20), ("unread:cost",)),
    "gateway-made-up-zeros": ({"prompt_tokens": 0, "completion_tokens": 0}, Usage(), ("prompt_zero",)),
    "over-report": ({"prompt_tokens": 100, "completion_tokens": 100_000_000},
                    Usage(prompt=100, completion=100_000_000), ("over_bound",)),
}


@pytest.mark.parametrize("name", list(SHAPES))
def test_each_usage_shape_is_recorded_as_sent_and_costed_exact_only_when_believable(tmp_path, monkeypatch, name):
    raw, usage, doubts = SHAPES[name]
    res, sealed, store, _ = run(tmp_path, monkeypatch, [], default=completion(FINISH, usage=raw))
    (call,) = calls(sealed)
    assert call["usage"] == usage.to_dict()
    assert jsonio.loads(store.get_blob(call["usage_raw"])) == raw  # kept exactly as reported
    assert call["outcome"] == "stop" and res.status == "failed"  # finished without an answer
    if not doubts:
        assert call["cost"] == exact(usage) and "usage_doubts" not in call
        assert sealed.end["cost"]["known"] is True and "usage_doubted" not in sealed.end
        return
    assert call["usage_doubts"] == list(doubts)
    bound = cost_upper_bound(call["prompt_estimate"], MAX_TOKENS, PRICES)
    assert call["cost"]["known"] is False and call["cost"]["low"] == "0"
    assert Decimal(call["cost"]["high"]) == max(bound, call_cost(usage, PRICES))
    assert sealed.end["usage_doubted"] == 1 and sealed.end["cost"]["known"] is False
    assert ("usage_over_bound" in sealed.end) is ("over_bound" in doubts)


def test_an_over_report_settles_the_ledger_at_the_bound_and_ledger_show_flags_it(tmp_path, monkeypatch):
    from click.testing import CliRunner

    from benchclaw.cli import cli
    from benchclaw.experiments.ledger import Ledger, read_ledger
    from benchclaw.formats.ledger import Limits

    monkeypatch.setenv(KEY_ENV, KEY)
    raw = {"prompt_tokens": 100, "completion_tokens": 100_000_000}
    with hostile([], completion(FINISH, usage=raw)) as srv:
        cat = parse_catalog(catalog_text(srv.base_url).encode(), "hostile.toml")
        store = Store(tmp_path / "runs", fsync=False)
        ledger = Ledger.create(store, "L-over", Limits(usd=Decimal("1")), experiment="E")
        provider = make_provider(cat.tier("t"))

        async def go():
            try:
                return await run_agent(store=store, task=make_task(), tier="t", catalog=cat,
                                       profile=load_profile("direct"), seed=1, provider=provider,
                                       ledger=ledger, max_tokens=MAX_TOKENS)
            finally:
                await provider.aclose()

        res = asyncio.run(go())
    state = read_ledger(store, ledger.id)
    s = state.summary()
    assert s["settled"]["calls"] == 0 and s["unknown"]["calls"] == 1  # $200 reported, never settled as spent
    assert Decimal(s["spent"]["usd"]) < Decimal("1")
    assert s["doubted"] == {"calls": 1, "over_bound": 1}
    out = CliRunner().invoke(cli, ["ledger", "show", ledger.id, "--runs", str(tmp_path / "runs")])
    assert out.exit_code == 0 and "over-reported past their reservation" in out.output
    assert store.read_run(res.run_id).end["usage_over_bound"] == 1


# ---------------------------------------------------------------- failures and their cost

@pytest.mark.parametrize("code,kind", [(429, "rate_limited"), (401, "auth"), (400, "bad_request"),
                                       (404, "bad_request")])
def test_refusals_providers_do_not_bill_are_a_known_zero_with_their_reason(tmp_path, monkeypatch, code, kind):
    res, sealed, _, srv = run(tmp_path, monkeypatch, [status(code, headers={"retry-after-ms": "10"})])
    first = calls(sealed)[0]
    assert first["outcome"] == "error" and first["error"]["kind"] == kind and first["error"]["status"] == code
    assert first["cost"] == {"known": True, "low": "0", "high": "0"}
    assert f"HTTP {code}" in first["cost_note"]
    if kind == "rate_limited":  # retried, and the retry's real cost is exact
        assert len(calls(sealed)) == 2 and calls(sealed)[1]["cost"]["known"] is True
    else:
        assert res.status == "provider_error" and len(calls(sealed)) == 1


def test_a_refused_connection_was_never_sent_so_it_costs_a_known_zero(tmp_path, monkeypatch):
    res, sealed, _, _ = run(tmp_path, monkeypatch, [], url=refused_url(), retries=1)
    assert res.status == "provider_error"
    for c in calls(sealed):
        assert c["error"]["kind"] == "connection" and c["error"]["stage"] == "connect"
        assert c["cost"] == {"known": True, "low": "0", "high": "0"} and c["cost_note"].startswith("not sent")
    assert sealed.end["cost"] == {"known": True, "low": "0", "high": "0"}


def test_a_failed_tls_handshake_was_never_sent_so_it_costs_a_known_zero(tmp_path, monkeypatch):
    with hostile([], completion(FINISH, usage=OK_USAGE)) as plain:  # speaks HTTP, not TLS
        url = plain.base_url.replace("http://", "https://")
        res, sealed, _, _ = run(tmp_path, monkeypatch, [], url=url, retries=0)
        assert plain.requests == []  # no request reached the server
    (call,) = calls(sealed)
    assert call["error"]["kind"] == "connection" and call["error"]["stage"] == "connect"
    assert call["cost"] == {"known": True, "low": "0", "high": "0"}


@pytest.mark.parametrize("behaviour,kind", [(status(500), "server"), (status(503), "server"),
                                            (Behaviour(reset=True), "connection"),
                                            (Behaviour(body=b'{"choices": [', headers={}), "malformed")])
def test_failures_that_may_have_been_billed_keep_their_bounds(tmp_path, monkeypatch, behaviour, kind):
    res, sealed, _, _ = run(tmp_path, monkeypatch, [behaviour], retries=0)
    (call,) = calls(sealed)
    assert call["error"]["kind"] == kind and call["error"].get("stage") == "response"
    assert call["cost"]["known"] is False and call["cost"]["low"] == "0"
    assert Decimal(call["cost"]["high"]) == cost_upper_bound(call["prompt_estimate"], MAX_TOKENS, PRICES)
    assert "cost_note" not in call


def test_a_stalled_call_is_cut_at_the_stall_limit_and_retried_within_the_run(tmp_path, monkeypatch):
    res, sealed, _, srv = run(tmp_path, monkeypatch, [completion(FINISH, usage=OK_USAGE, delay=30)],
                              extra="stall_seconds = 0.5\n", seconds=20)
    first, second = calls(sealed)
    assert first["error"]["kind"] == "timeout" and first["cost"]["known"] is False  # sent: may be billed
    assert 400 <= first["latency_ms"] < 5000  # cut near the stall limit, not at the run's 20 s
    assert second["outcome"] == "stop" and second["attempt"] == 1 and res.status == "failed"
    assert sealed.end["elapsed_ms"] < 10_000


# ---------------------------------------------------------------- outcomes and reasoning

def test_content_filter_is_its_own_outcome_and_counted_on_the_run(tmp_path, monkeypatch):
    res, sealed, _, _ = run(tmp_path, monkeypatch, [completion("", usage=OK_USAGE, finish="content_filter")])
    first = calls(sealed)[0]
    assert first["outcome"] == "content_filter" and first["cost"]["known"] is True
    assert sealed.end["content_filter"] == 1
    obs = [r.body for r in sealed.of_kind("action")][0]
    assert "content filter" in obs["reason"] and "reasoning" not in obs["reason"]


@pytest.mark.parametrize("field", ["reasoning_content", "reasoning"])
def test_reasoning_text_is_kept_as_a_blob_beside_the_untouched_content(tmp_path, monkeypatch, field):
    thought = "Let me think: the answer is in docs/a.md.\n" * 3
    res, sealed, store, _ = run(tmp_path, monkeypatch, [completion(FINISH, usage=OK_USAGE,
                                                                   message={field: thought})])
    call = calls(sealed)[0]
    assert store.get_blob(call["reasoning"]).decode() == thought
    assert store.get_blob(call["reply"]).decode() == FINISH


# ---------------------------------------------------------------- identity and labels

def test_every_request_id_a_gateway_offers_and_the_upstream_model_are_recorded(tmp_path, monkeypatch):
    headers = {"request-id": "req-up-1", "llm_provider-x-request-id": "req-up-1", "x-litellm-call-id": "call-9",
               "x-litellm-model-name": "openai/other-model", "x-ratelimit-remaining-requests": "41"}
    beh = completion(FINISH, usage=OK_USAGE, headers=headers)
    beh.headers.pop("x-request-id")
    res, sealed, _, _ = run(tmp_path, monkeypatch, [], default=beh,
                            extra='expect_model = "openai/real/model"\nkeep_headers = ["X-RateLimit-Remaining-Requests"]\n')
    call = calls(sealed)[0]
    assert call["request_id"] == "req-up-1" and call["response_id"] == "chatcmpl-hostile-1"
    assert {k: call["headers"][k] for k in ("request-id", "llm_provider-x-request-id", "x-litellm-call-id",
                                            "x-ratelimit-remaining-requests")} == \
        {"request-id": "req-up-1", "llm_provider-x-request-id": "req-up-1", "x-litellm-call-id": "call-9",
         "x-ratelimit-remaining-requests": "41"}
    assert call["model_upstream"] == "openai/other-model"
    assert call["model_mismatch"] is True  # the gateway routed to another model than the tier expects


@pytest.mark.parametrize("label", [{"headers": {"x-benchclaw-simulated": "1"}},
                                   {"headers": {"llm_provider-x-benchclaw-simulated": "1"}},
                                   {"top": {"system_fingerprint": "benchclaw-sim"}}])
def test_a_real_claiming_tier_that_gets_simulated_answers_is_labelled_and_flagged(tmp_path, monkeypatch, label):
    res, sealed, _, _ = run(tmp_path, monkeypatch, [], default=completion(FINISH, usage=OK_USAGE, **label))
    assert sealed.start["simulated"] is False  # what the catalog claimed
    assert all(c["simulated"] is True for c in calls(sealed))
    assert sealed.end["simulated"] is True and sealed.end["simulated_replies"] == 1
    assert res.simulated is True


# ---------------------------------------------------------------- bounded strings and replies

def test_huge_provider_strings_are_cut_with_a_mark_and_named(tmp_path, monkeypatch):
    huge = "x" * 2_000_000
    beh = completion(FINISH, usage={**OK_USAGE, "note": huge}, model=huge, finish=huge,
                     headers={"x-request-id": "r" * 5000})
    res, sealed, store, _ = run(tmp_path, monkeypatch, [], default=beh)
    call = calls(sealed)[0]
    for name in ("finish_reason", "model_echoed", "request_id"):
        assert len(call[name]) == MAX_PROVIDER_STRING + len(CUT_MARK) and call[name].endswith(CUT_MARK)
    assert {"finish_reason", "model_echoed", "usage_raw", "headers.x-request-id"} <= set(call["truncated"])
    assert len(store.get_blob(call["usage_raw"])) < 1000
    assert sum(p.stat().st_size for p in (tmp_path / "runs").rglob("*") if p.is_file()) < 1_000_000


def test_the_key_in_a_provider_string_is_redacted_there_only(tmp_path, monkeypatch):
    beh = completion(FINISH, usage=OK_USAGE, finish=f"stop {KEY}", model=f"m-{KEY}")
    res, sealed, _, _ = run(tmp_path, monkeypatch, [], default=beh)  # run() asserts the key is nowhere
    call = calls(sealed)[0]
    assert call["finish_reason"] == "stop [REDACTED]" and call["model_echoed"] == "m-[REDACTED]"


def test_a_key_echoed_inside_content_is_a_provider_fault_with_a_visible_mark(tmp_path, monkeypatch):
    echo = act("write", path="out/answer.json", content=f"{GOOD_ANSWER} {KEY}")
    res, sealed, store, _ = run(tmp_path, monkeypatch, [completion(WRITE, usage=OK_USAGE),
                                                        completion(echo, usage=OK_USAGE)])
    first, second = calls(sealed)
    assert second["outcome"] == "error" and second["error"]["kind"] == "key_echo"
    assert KEY_MARK in store.get_blob(second["reply"]).decode()
    assert second["cost"]["known"] is True  # it was answered, and billed
    assert res.status == "provider_error" and res.passed is False and sealed.end["key_echo"] == 1
    assert sealed.end["passed"] is False and sealed.end["gate_passed"] is False  # the good answer was written


def test_a_huge_reply_is_not_resent_whole_and_requests_stay_bounded(tmp_path, monkeypatch):
    big = "not an action " * 400_000  # 5.6 MB
    res, sealed, store, srv = run(tmp_path, monkeypatch, [completion(big, usage=OK_USAGE)] * 3)
    sizes = [len(jsonio.dumps(r["body"])) for r in srv.requests]
    assert len(sizes) == 4 and max(sizes) < 400_000, sizes
    assert len(store.get_blob(calls(sealed)[0]["reply"])) == len(big)  # the evidence keeps it whole
    resent = srv.requests[1]["body"]["messages"][2]["content"]
    assert resent.startswith(big[:1000]) and "reply cut here for resending" in resent


# ---------------------------------------------------------------- per-tier params

def test_tier_params_are_validated_recorded_and_sent(tmp_path, monkeypatch):
    extra = ('params = { reasoning_effort = "high", max_tokens = 1024, top_p = 0.95, '
             'extra_body = { chat_template_kwargs = { enable_thinking = true } } }\n')
    res, sealed, store, srv = run(tmp_path, monkeypatch, [], extra=extra)
    sent = srv.requests[0]["body"]
    assert sent["reasoning_effort"] == "high" and sent["max_tokens"] == 1024 and sent["top_p"] == 0.95
    assert sent["chat_template_kwargs"] == {"enable_thinking": True}
    call = calls(sealed)[0]
    recorded = jsonio.loads(store.get_blob(call["request"]))
    assert {k: recorded[k] for k in ("reasoning_effort", "max_tokens", "top_p", "chat_template_kwargs")} == \
        {k: sent[k] for k in ("reasoning_effort", "max_tokens", "top_p", "chat_template_kwargs")}
    assert call["params"]["max_tokens"] == 1024  # the bound is costed from the tier's max_tokens


@pytest.mark.parametrize("params,says", [
    ('{ model = "x" }', "params.model: set by BenchClaw"),
    ('{ stream = true }', "params.stream: set by BenchClaw"),
    ('{ max_tokens = 0 }', "max_tokens: expected a positive integer"),
    ('{ extra_body = { messages = [] } }', "extra_body.messages"),
    ('{ reasoning_effort = 1979-05-27 }', "reasoning_effort: expected a string"),
    ('"high"', "params: expected a table"),
])
def test_bad_tier_params_are_one_clear_error(params, says):
    with pytest.raises(FormatError, match=says.replace("(", r"\(")):
        parse_catalog(catalog_text("http://127.0.0.1:1/v1", f"params = {params}\n").encode(), "hostile.toml")


# ---------------------------------------------------------------- no key changes a verdict

KEYS = {"realistic, holding the cents-invoices amount": "sk-bc7Qm2x123456789Zt4K9pL0aR3vW8yN6cJ5hE1fD",
        "vLLM placeholder": "EMPTY", "llama.cpp placeholder": "sk-no-key-required",
        "the correct answer itself": "123456789"}


def _verdicts(tmp_path, key: str | None, tasks, over_http: bool):
    """(task, profile, seed) -> ((check id, passed, detail), ...) on the ultra sim tier,
    in process or over HTTP through the ``openai`` provider, with ``key`` live."""
    from benchclaw.providers.catalog import load_catalog
    from benchclaw.providers.vault import Secret
    from benchclaw.sim.server import serve_in_thread

    sim = load_catalog("sim")
    live = Secret(key) if key else None
    store = Store(tmp_path / "runs", fsync=False)
    out, artifacts = {}, []
    with serve_in_thread(latency_scale=0) as url:
        cat = parse_catalog((f'v = 1\nname = "http"\nsimulated = true\n[tiers.ultra]\nprovider = "openai"\n'
                             f'model = "sim/ultra"\nbase_url = "{url}"\n'
                             'prices = { input = "1.00", cached_input = "0.25", cache_write = "1.25", output = "4.00" }\n'
                             ).encode(), "http.toml") if over_http else sim
        for task in tasks:
            for profile in ("direct", "checker"):
                for seed in (1, 2):
                    prov = make_provider(cat.tier("ultra"), sim_options={"latency_scale": 0}, key=live)
                    res = asyncio.run(run_agent(store=store, task=task, tier="ultra", catalog=cat,
                                                profile=load_profile(profile), seed=seed, provider=prov))
                    sealed = store.read_run(res.run_id)
                    out[(task.id, profile, seed)] = tuple((c.body["id"], c.body["passed"], c.body["detail"])
                                                          for c in sealed.of_kind("check"))
                    artifacts += [store.get_blob(a.body["digest"]) for a in sealed.of_kind("artifact")]
    del live
    return out, artifacts


@pytest.mark.parametrize("over_http", [False, True], ids=["in-process", "http"])
def test_no_key_value_changes_any_check_result(tmp_path, over_http):
    from benchclaw.checks.tasks import find_tasks

    tasks = [t for t in find_tasks() if t.id in ("cents-invoices", "quotes-incident")]
    base, artifacts = _verdicts(tmp_path / "none", None, tasks, over_http)
    assert any(b"123456789" in a for a in artifacts)  # the answer really holds the key's digits
    assert any(all(p for _, p, _ in checks) for (t, _, _), checks in base.items() if t == "cents-invoices")
    for name, key in KEYS.items():
        got, _ = _verdicts(tmp_path / name.replace(" ", "-").replace(",", ""), key, tasks, over_http)
        assert got == base, name


# ---------------------------------------------------------------- the verifier recomputes the rules

@pytest.fixture(scope="module")
def doubted_bundle(tmp_path_factory):
    """A grid through two odd servers (an over-report; a 429 then an answer), exported."""
    from benchclaw.bundle import export_bundle

    from tests.reliability.helpers import register_and_run, write_spec
    from tests.test_bundle_support import EXP

    tmp = tmp_path_factory.mktemp("doubted")
    over = completion(FINISH, usage={"prompt_tokens": 100, "completion_tokens": 100_000_000})
    os_env = __import__("os").environ
    os_env[KEY_ENV] = KEY
    try:
        with hostile([], over) as s1, hostile([status(429, headers={"retry-after-ms": "10"})],
                                              completion(FINISH, usage=OK_USAGE)) as s2:
            (tmp / "odd.toml").write_text(catalog_text(s1.base_url).replace("[tiers.t]", "[tiers.over]")
                                          + catalog_text(s2.base_url).split("\n", 3)[3].replace("[tiers.t]",
                                                                                               "[tiers.limited]"))
            spec = write_spec(tmp, EXP, tasks=["cents-fees"], tiers=["over", "limited"], catalog="odd.toml",
                              profiles=["direct"], settings={"seconds": 30, "retries": 1, "max_tokens": 256})
            store = Store(tmp / "runs")
            register_and_run(store, spec, EXP)
    finally:
        os_env.pop(KEY_ENV, None)
    export_bundle(store.root, EXP, tmp / "b.zip")
    from benchclaw.analysis import render_terminal
    from benchclaw.analysis.report import build_summary

    from types import SimpleNamespace

    from benchclaw.site import build_site

    build_site(store.root, tmp / "site")
    return SimpleNamespace(data=(tmp / "b.zip").read_bytes(), terminal=render_terminal(build_summary(store, EXP)),
                           site=tmp / "site")


def test_a_bundle_with_doubted_usage_and_known_zero_failures_verifies(doubted_bundle):
    from benchclaw.verify import verify_bundle

    rep = verify_bundle(doubted_bundle.data)
    assert rep.exit_code == 0, [str(f) for _, f in rep.failures()]
    assert KEY.encode() not in doubted_bundle.data


def test_the_report_and_the_site_flag_the_over_report(doubted_bundle):
    line = next(ln for ln in doubted_bundle.terminal.splitlines() if ln.startswith("tier over ") and " stop " in ln)
    assert "usage-doubted 1" in line and "over-reported 1" in line, line
    exp_page = next(p for p in doubted_bundle.site.rglob("*.html") if "<h2>Tiers</h2>" in p.read_text())
    assert "over-reported 1" in exp_page.read_text()
    run_pages = [p.read_text() for p in doubted_bundle.site.rglob("*.html") if "Run replay" in p.read_text()]
    assert any("over_bound" in t and "was not taken as the bill" in t for t in run_pages)


@pytest.mark.parametrize("forgery", ["doubted-made-exact", "refusal-made-billed", "doubts-dropped"])
def test_the_verifier_recomputes_doubts_and_known_zeros(doubted_bundle, tmp_path, forgery):
    from benchclaw.verify import verify_bundle

    from tests.test_bundle_support import Forger

    f = Forger.of(doubted_bundle.data)

    def edit(objs):
        for o in objs:
            b = o["body"]
            if o["kind"] != "call":
                continue
            if forgery == "doubted-made-exact" and b.get("usage_doubts"):
                c = fmt_usd(call_cost(Usage.from_dict(b["usage"]), PRICES))
                b["cost"] = {"known": True, "low": c, "high": c}
                del b["usage_doubts"]
            elif forgery == "doubts-dropped" and b.get("usage_doubts"):
                del b["usage_doubts"]
            elif forgery == "refusal-made-billed" and b.get("cost_note"):
                b["cost"] = {"known": False, "low": "0", "high": "1"}
        return objs

    target = next(r for r in f.run_ids() if any(
        o["kind"] == "call" and (o["body"].get("usage_doubts") if forgery != "refusal-made-billed"
                                 else o["body"].get("cost_note")) for o in f.records(r)))
    f.edit_run(target, edit)
    rep = verify_bundle(f.pack(tmp_path))
    texts = [str(x) for x in rep.section("costs").failures]
    assert rep.exit_code == 1 and any("recomputed" in t for t in texts), texts
