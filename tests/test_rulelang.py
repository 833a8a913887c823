"""The pricing rule language: exact integer semantics, clear errors, bounded everything."""

from __future__ import annotations

import pytest
from hypothesis import given, strategies as st

from benchclaw.checks.rulelang import PRICING_LIMITS, PricingRuleError, parse_pricing_rule


def ev(src: str, **env) -> int:
    return parse_pricing_rule(src, list(env)).evaluate(env)


@pytest.mark.parametrize("src, want", [
    ("1 + 2 * 3", 7), ("(1 + 2) * 3", 9), ("10 - 2 - 3", 5), ("-3 * -2", 6), ("2_500 + 1", 2501),
    ("div_floor(7, 2)", 3), ("div_floor(-7, 2)", -4), ("div_ceil(7, 2)", 4), ("div_ceil(-7, 2)", -3),
    ("div_round(5, 2)", 3), ("div_round(-5, 2)", -3), ("div_round(7, 3)", 2), ("div_round(-7, 3)", -2),
    ("div_even(5, 2)", 2), ("div_even(7, 2)", 4), ("div_even(-5, 2)", -2), ("div_even(-7, 2)", -4),
    ("min(3, 1, 2)", 1), ("max(3, 1, 2)", 3), ("clamp(50, 10, 20)", 20), ("clamp(5, 10, 20)", 10),
    ("abs(-4)", 4), ("if 1 < 2 and not 2 < 1 then 10 else 20", 10),
    ("if 1 > 2 or 3 != 3 then 10 else 20", 20),
    ("let a = 2; let b = a * 3; # comment\nb + a", 8),
    ("1 + (if 2 >= 2 then 5 else 0)", 6),
])
def test_semantics(src, want):
    assert ev(src) == want


def test_variables_and_tiers():
    rule = "let p = if seats >= 10 then 1080 else 1200;\nclamp(seats * p, 5000, 250000)"
    assert [ev(rule, seats=s) for s in (1, 9, 10, 11, 1000)] == [5000, 10800, 10800, 11880, 250000]


@given(st.integers(-10**9, 10**9), st.integers(-10**6, 10**6).filter(lambda b: b != 0))
def test_division_helpers_match_exact_arithmetic(a, b):
    from fractions import Fraction
    from decimal import Decimal, ROUND_HALF_EVEN, ROUND_HALF_UP
    exact = Fraction(a, b)
    assert ev(f"div_floor({a}, {b})") == a // b
    assert ev(f"div_ceil({a}, {b})") == -((-a) // b)
    d = Decimal(exact.numerator) / Decimal(exact.denominator)
    assert ev(f"div_round({a}, {b})") == int(d.quantize(Decimal(1), rounding=ROUND_HALF_UP))
    assert ev(f"div_even({a}, {b})") == int(d.quantize(Decimal(1), rounding=ROUND_HALF_EVEN))


@pytest.mark.parametrize("src, message", [
    ("seats / 2", "line 1, column 7: unexpected character '/'"),
    ("x + 1", "unknown name 'x'"),
    ("1 +", "got end of rule"),
    ("if 1 then 2 else 3", "expected a condition"),
    ("1 < 2", "expected an integer"),
    ("div_round(1)", "takes 2 arguments"),
    ("let seats = 1; seats", "expected a new name"),
    ("let a = 1; let a = 2; a", "expected a new name"),
    ("__import__(os)", "unknown name '__import__'"),
    ("open('x')", "unexpected character"),
    ("1\n  2", "line 2, column 3: expected end of rule"),
    ("99999999999999999999", "number too large"),
])
def test_parse_errors_name_the_place(src, message):
    with pytest.raises(PricingRuleError, match=__import__("re").escape(message)):
        parse_pricing_rule(src, ["seats"])


@pytest.mark.parametrize("src, message", [
    ("div_floor(1, 0)", "division by zero"),
    ("1_000_000_000 * 1_000_000_000 * 10", "out of range"),
    ("clamp(1, 5, 2)", "lower bound 5 is above upper bound 2"),
])
def test_evaluation_errors(src, message):
    with pytest.raises(PricingRuleError, match=message):
        ev(src)


@pytest.mark.parametrize("src, message", [
    ("1" + " + 1" * 1_000_000, "bytes, above the limit"),
    ("1" + "+1" * 3000, "more than 4096 tokens"),
    ("(" * 60 + "1" + ")" * 60, "nested deeper than 40"),
    ("-" * 60 + "1", "nested deeper than 40"),
    ("not " * 60 + "1 < 2", "nested deeper than 40"),
    ("if 1<2 then " * 45 + "1" + " else 2" * 45, "nested deeper than 40"),
])
def test_limits(src, message):
    with pytest.raises(PricingRuleError, match=message):
        parse_pricing_rule(src, [])


def test_long_flat_chains_evaluate_without_deep_recursion():
    src = "1" + " + 1" * 2000
    assert len(src) < PRICING_LIMITS["source_bytes"]
    assert ev(src) == 2001


def test_missing_variable_value():
    with pytest.raises(PricingRuleError, match="no value for variable 'seats'"):
        parse_pricing_rule("seats", ["seats"]).evaluate({})
