"""Usage normalisation and exact cost arithmetic (benchclaw.formats.money)."""

import re
from decimal import Decimal

import pytest
from hypothesis import given, strategies as st

from benchclaw.errors import FormatError, ProviderConfigError
from benchclaw.formats.money import (CostBounds, Prices, Usage, call_cost, cost_bounds,
                                     cost_upper_bound, estimate_prompt_tokens, fmt_usd,
                                     normalise_usage, parse_usd, read_usage, sum_usage, usage_unread)

PRICES = Prices(input=Decimal("0.30"), cached_input=Decimal("0.075"), cache_write=Decimal("1.25"),
                output=Decimal("1.20"))


# ---------------------------------------------------------------- the shapes providers send

def test_openai_shape_with_cached_and_reasoning():
    raw = {"prompt_tokens": 1200, "completion_tokens": 300, "total_tokens": 1500,
           "prompt_tokens_details": {"cached_tokens": 1024, "audio_tokens": 0},
           "completion_tokens_details": {"reasoning_tokens": 200}}
    assert normalise_usage(raw) == Usage(prompt=1200, cached_read=1024, cache_write=0, completion=300, reasoning=200)


def test_deepseek_cache_hit_shape():
    raw = {"prompt_tokens": 900, "completion_tokens": 50, "prompt_cache_hit_tokens": 640,
           "prompt_cache_miss_tokens": 260}
    assert normalise_usage(raw) == Usage(prompt=900, cached_read=640, completion=50)


def test_null_details_shape_counts_nothing_cached():
    raw = {"prompt_tokens": 10, "completion_tokens": 5, "prompt_tokens_details": None,
           "completion_tokens_details": None}
    assert normalise_usage(raw) == Usage(prompt=10, completion=5)


def test_cache_write_shape():
    raw = {"prompt_tokens": 3000, "completion_tokens": 10,
           "prompt_tokens_details": {"cached_tokens": 2048, "created_cache_tokens": 900}}
    u = normalise_usage(raw)
    assert (u.cached_read, u.cache_write, u.uncached) == (2048, 900, 52)


def test_reasoning_reported_beside_completion_is_counted_once():
    u = normalise_usage({"prompt_tokens": 5, "completion_tokens": 10,
                         "completion_tokens_details": {"reasoning_tokens": 40}})
    assert (u.completion, u.reasoning) == (50, 40)


@pytest.mark.parametrize("raw, match", [
    ({"completion_tokens": 1}, "prompt_tokens"),
    ({"prompt_tokens": "12", "completion_tokens": 1}, "non-negative integer"),
    ({"prompt_tokens": 1.5, "completion_tokens": 1}, "non-negative integer"),
    ({"prompt_tokens": True, "completion_tokens": 1}, "non-negative integer"),
    ({"prompt_tokens": 10, "completion_tokens": 1, "prompt_cache_hit_tokens": 11}, "exceed prompt"),
    ([1, 2], "expected an object"),
])
def test_bad_usage_is_a_format_error(raw, match):
    with pytest.raises(FormatError, match=match):
        normalise_usage(raw)


# ---------------------------------------------------------------- the cost formula (FORMAT §6)

def test_cost_by_hand():
    u = Usage(prompt=3000, cached_read=2048, cache_write=900, completion=100, reasoning=60)
    # 52*0.30 + 2048*0.075 + 900*1.25 + 100*1.20 = 15.6 + 153.6 + 1125 + 120 = 1414.2 per 1M
    assert call_cost(u, PRICES) == Decimal("0.0014142")
    assert fmt_usd(call_cost(u, PRICES)) == "0.0014142"


def test_missing_cached_and_write_prices_charge_input():
    p = Prices(input=Decimal("2"), output=Decimal("3"))
    u = Usage(prompt=100, cached_read=40, cache_write=10, completion=1)
    assert call_cost(u, p) == Decimal("0.000203")


def test_unknown_price_refuses_when_needed_only():
    p = Prices.from_dict({"input": "1", "cached_input": "unknown", "output": "2"})
    assert call_cost(Usage(prompt=10, completion=1), p) == Decimal("0.000012")
    with pytest.raises(ProviderConfigError, match="cached_input"):
        call_cost(Usage(prompt=10, cached_read=5, completion=1), p)


def test_upper_bound_and_bounds_object():
    assert cost_upper_bound(1000, 500, PRICES) == Decimal("0.0009")
    b = cost_bounds(None, 1000, 500, PRICES)
    assert b.to_dict() == {"known": False, "low": "0", "high": "0.0009"}
    k = cost_bounds(Usage(prompt=1000, completion=500), 999999, 1, PRICES)
    assert k.to_dict() == {"known": True, "low": "0.0009", "high": "0.0009"}
    assert (b + k).to_dict() == {"known": False, "low": "0.0009", "high": "0.0018"}
    assert CostBounds.from_dict(b.to_dict()) == b


def test_fmt_and_parse_usd():
    assert fmt_usd(Decimal("0E-12")) == "0"
    assert fmt_usd(Decimal("1E+2")) == "100"
    assert fmt_usd(Decimal("0.000100")) == "0.0001"
    assert parse_usd("0.10") == Decimal("0.10")
    for bad in ["1e-3", "-1", " 1", "", "NaN", "0x1", "1.", ".5"]:
        with pytest.raises(FormatError):
            parse_usd(bad, "prices.input")
    with pytest.raises(FormatError):
        parse_usd(0.1)  # a float is never money
    with pytest.raises(TypeError):
        fmt_usd(0.1)


def test_prices_round_trip_and_errors():
    d = {"input": "0.30", "cached_input": None, "cache_write": "unknown", "output": "1.2"}
    p = Prices.from_dict(d)
    assert p.unknown == ("cache_write",) and not p.complete
    assert p.to_dict() == {"input": "0.3", "cached_input": None, "cache_write": "unknown", "output": "1.2"}
    with pytest.raises(FormatError, match="prices.output: missing"):
        Prices.from_dict({"input": "1"})
    with pytest.raises(FormatError, match="inptu"):
        Prices.from_dict({"inptu": "1", "input": "1", "output": "1"})


def test_estimate_is_deterministic_and_conservative():
    msgs = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "héllo " * 100}]
    a = estimate_prompt_tokens(msgs)
    assert a == estimate_prompt_tokens(list(msgs))
    assert a >= len(("héllo " * 100).encode()) + len("be brief")
    assert estimate_prompt_tokens(msgs + [{"role": "user", "content": "x"}]) > a


# ---------------------------------------------------------------- properties

counts = st.integers(min_value=0, max_value=10**9)
price = st.decimals(min_value=0, max_value=1000, places=6, allow_nan=False, allow_infinity=False)


@st.composite
def usages(draw):
    prompt = draw(counts)
    cached = draw(st.integers(0, prompt))
    write = draw(st.integers(0, prompt - cached))
    completion = draw(counts)
    return Usage(prompt, cached, write, completion, draw(st.integers(0, completion)))


@st.composite
def prices(draw):
    return Prices(input=draw(price), cached_input=draw(st.none() | price),
                  cache_write=draw(st.none() | price), output=draw(price))


@given(usages(), usages(), prices())
def test_cost_is_additive_and_exact(a, b, p):
    total = call_cost(a + b, p)
    assert total == call_cost(a, p) + call_cost(b, p)
    # exact: multiplying back by a million gives an integer combination of prices
    assert (total * 1_000_000) == (a + b).uncached * p.input + (a + b).cached_read * (p.cached_input if p.cached_input is not None else p.input) \
        + (a + b).cache_write * (p.cache_write if p.cache_write is not None else p.input) + (a + b).completion * p.output


@given(usages(), prices())
def test_fmt_parse_round_trip_and_bound(u, p):
    c = call_cost(u, p)
    assert parse_usd(fmt_usd(c)) == c
    assert "e" not in fmt_usd(c).lower()
    if p.cached_input is None or p.cached_input <= p.input:
        if p.cache_write is None or p.cache_write <= p.input:
            assert c <= cost_upper_bound(u.prompt, u.completion, p)


@given(usages())
def test_usage_dict_round_trip_and_normalise(u):
    assert Usage.from_dict(u.to_dict()) == u
    raw = {"prompt_tokens": u.prompt, "completion_tokens": u.completion,
           "prompt_tokens_details": {"cached_tokens": u.cached_read, "created_cache_tokens": u.cache_write},
           "completion_tokens_details": {"reasoning_tokens": u.reasoning}}
    assert normalise_usage(raw) == u
    assert sum_usage([u, u]) == u + u


_RAW_USAGES = [
    {"prompt_tokens": 90, "completion_tokens": 30, "total_tokens": 120,
     "prompt_tokens_details": {"cached_tokens": 64, "audio_tokens": 0},
     "completion_tokens_details": {"reasoning_tokens": 12, "audio_tokens": 3}},
    {"prompt_tokens": 90, "completion_tokens": 30, "prompt_cache_hit_tokens": 64, "prompt_cache_miss_tokens": 26,
     "cache_read_input_tokens": 32},
    {"prompt_tokens": 90, "completion_tokens": 5, "completion_tokens_details": {"reasoning_tokens": 12}},
    {"prompt_tokens": 90, "completion_tokens": 30, "prompt_tokens_details": None, "cost": 7},
    {"prompt_tokens": 90, "completion_tokens": 30, "prompt_tokens_details": {"cached_tokens": 1.5}},
    {"prompt_tokens": 90, "completion_tokens": 30, "extra": {"deep": {"tokens": 4}}},
    {"prompt_tokens": 90, "completion_tokens": True},
    {"prompt_tokens": 10, "completion_tokens": 3, "prompt_tokens_details": {"cached_tokens": 64}},
    {"completion_tokens": 3},
    ["not", "an", "object"],
]


@pytest.mark.parametrize("raw", _RAW_USAGES + [
    {"prompt_tokens": 9, "completion_tokens": 3, "prompt_tokens_details": {"cached_tokens": -1}},
    {"prompt_tokens": 9, "completion_tokens": 3, 7: 4},
    {"prompt_tokens": 9, "completion_tokens": 3, "prompt_tokens_details": 5, "x": {"y": 0, "z": 2}},
    {"prompt_tokens": 9, "completion_tokens": 3, "prompt_tokens_details": {"created_cache_tokens": 2,
                                                                         "cache_write_tokens": 5}},
    {}])
def test_usage_unread_one_walk_is_the_general_walk(raw):
    """The usual shape's one walk says what the general walk says (any other shape takes it)."""
    from benchclaw.formats.money import _unread_walk

    assert usage_unread(raw) == _unread_walk(raw)


@pytest.mark.parametrize("raw", _RAW_USAGES)
def test_read_usage_is_normalise_and_unread(raw):
    """``read_usage``'s one walk gives what the two readers give, errors included."""
    try:
        want = (normalise_usage(raw), usage_unread(raw))
    except FormatError as e:
        with pytest.raises(FormatError, match=re.escape(str(e))):
            read_usage(raw)
        return
    assert read_usage(raw) == want
