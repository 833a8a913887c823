"""The decision-rule language: parsing, bounds, errors, and three-valued interval logic."""

from decimal import Decimal as D
from fractions import Fraction

import pytest

from benchclaw.formats.interval import (INCONCLUSIVE, POS_INF, REFUTED, SUPPORTED, UNKNOWN,
                                        Interval, compare, kleene_and, kleene_not, kleene_or)
from benchclaw.formats.rules import LIMITS, RuleError, parse_rule
from benchclaw.errors import FormatError


class Source:
    """Metric values by call text; an unknown policy raises like the real table does."""

    def __init__(self, **values):
        self.values = values

    def metric(self, name, subject, mode):
        key = f"{name}:{subject}" + (f":{mode}" if mode else "")
        if key not in self.values:
            raise RuleError(f"unknown policy {subject!r}")
        v = self.values[key]
        return v if isinstance(v, Interval) else Interval.point(D(v))


def iv(lo, hi):
    return Interval(D(lo), D(hi))


def decide(rule, **values):
    return parse_rule(rule, "hypothesis H1").evaluate(Source(**values)).decision


# ---------------------------------------------------------------------------- semantics

def test_issue_examples_parse_and_decide():
    vals = {"pass_rate:ladder": "0.9", "pass_rate:always:ultra": "0.85",
            "cost_per_task:ladder": "0.004", "cost_per_task:always:ultra": "0.01",
            "median_time:memory": "12.5", "pass_rate:ladder:replayed": "0.8",
            "pass_rate:always:lightning": "0.6"}
    assert decide('pass_rate("ladder") >= pass_rate("always:ultra")', **vals) == SUPPORTED
    assert decide('cost_per_task("ladder") < cost_per_task("always:ultra")', **vals) == SUPPORTED
    assert decide('cost_per_task("ladder") <= 0.8 * cost_per_task("always:ultra")', **vals) == SUPPORTED
    assert decide('median_time("memory") <= 30', **vals) == SUPPORTED
    assert decide('pass_rate("ladder", "replayed") - pass_rate("always:lightning") >= 0.1', **vals) == SUPPORTED
    assert decide('pass_rate("ladder", "replayed") - pass_rate("always:lightning") >= 0.25', **vals) == REFUTED


def test_unknown_cost_counts_against_the_hypothesis_in_both_directions():
    # ladder's cost is [0.004, 0.03]: it might be cheaper or dearer than ultra's 0.01
    vals = {"cost_per_task:ladder": iv("0.004", "0.03"), "cost_per_task:always:ultra": "0.01"}
    assert decide('cost_per_task("ladder") < cost_per_task("always:ultra")', **vals) == INCONCLUSIVE
    assert decide('cost_per_task("ladder") > cost_per_task("always:ultra")', **vals) == INCONCLUSIVE
    # a claim that A is cheaper uses A's upper bound and B's lower bound
    vals["cost_per_task:ladder"] = iv("0.004", "0.0099")
    vals["cost_per_task:always:ultra"] = iv("0.0099", "0.02")
    assert decide('cost_per_task("ladder") <= cost_per_task("always:ultra")', **vals) == SUPPORTED
    assert decide('cost_per_task("ladder") < cost_per_task("always:ultra")', **vals) == INCONCLUSIVE


def test_comparisons_over_whole_intervals():
    a, b = iv("1", "2"), iv("3", "4")
    assert compare("<", a, b) == SUPPORTED and compare(">=", a, b) == REFUTED
    assert compare("<", b, a) == REFUTED
    assert compare("<=", iv("1", "3"), iv("3", "4")) == SUPPORTED
    assert compare("<", iv("1", "3"), iv("3", "4")) == INCONCLUSIVE
    assert compare("==", Interval.point(2), Interval.point(2)) == SUPPORTED
    assert compare("==", iv("1", "2"), iv("1", "2")) == INCONCLUSIVE
    assert compare("!=", a, b) == SUPPORTED
    assert compare("<", UNKNOWN, a) == INCONCLUSIVE


def test_kleene_logic_truth_tables():
    S, R, I = SUPPORTED, REFUTED, INCONCLUSIVE
    assert [kleene_and(S, x) for x in (S, R, I)] == [S, R, I]
    assert [kleene_and(R, x) for x in (S, R, I)] == [R, R, R]
    assert [kleene_or(S, x) for x in (S, R, I)] == [S, S, S]
    assert [kleene_or(R, x) for x in (S, R, I)] == [S, R, I]
    assert [kleene_not(x) for x in (S, R, I)] == [R, S, I]


def test_and_or_not_and_parentheses_in_rules():
    vals = {"pass_rate:a": "0.9", "pass_rate:b": iv("0.5", "1")}
    assert decide('pass_rate("a") > 0.5 and pass_rate("b") > 0.6', **vals) == INCONCLUSIVE
    assert decide('pass_rate("a") > 0.95 and pass_rate("b") > 0.6', **vals) == REFUTED
    assert decide('pass_rate("a") > 0.5 or pass_rate("b") > 0.6', **vals) == SUPPORTED
    assert decide('not (pass_rate("a") > 0.5)', **vals) == REFUTED
    assert decide('not pass_rate("b") > 0.6', **vals) == INCONCLUSIVE
    assert decide('(pass_rate("a") + 0.1) * 2 >= 2', **vals) == SUPPORTED
    assert decide('-pass_rate("a") < -0.8', **vals) == SUPPORTED


def test_interval_arithmetic_is_exact_and_undefined_means_unknown():
    a, b = iv("1", "2"), iv("3", "5")
    assert a + b == iv("4", "7") and b - a == iv("1", "4")
    assert a * iv("-1", "2") == iv("-2", "4")
    third = Interval.point(1) / Interval.point(3)
    assert third.lo == third.hi == Fraction(1, 3)  # no rounding: 2/3 equals 2/3
    assert compare(">=", third + third, Interval.point(2) / Interval.point(3)) == SUPPORTED
    assert a / iv("-1", "1") == UNKNOWN  # the divisor may be zero
    assert Interval.point(0) * UNKNOWN == UNKNOWN  # 0 * inf is undefined
    assert compare(">", Interval(POS_INF, POS_INF), Interval.point(10 ** 9)) == SUPPORTED


def test_literals_are_decimal_never_float():
    rule = parse_rule('cost_per_task("x") <= 0.1 * 3', "H")
    assert rule.tree[3][2] == ("num", D("0.1"))
    vals = {"cost_per_task:x": "0.3"}
    assert decide('cost_per_task("x") <= 0.1 * 3', **vals) == SUPPORTED  # 0.1*3 == 0.3 exactly


def test_terms_report_each_metric_read():
    ev = parse_rule('pass_rate("a") >= pass_rate("b") and pass_rate("a") > 0', "H").evaluate(
        Source(**{"pass_rate:a": "0.5", "pass_rate:b": "0.25"}))
    assert [t.text for t in ev.terms] == ['pass_rate("a")', 'pass_rate("b")']
    assert ev.terms[1].value == Interval.point(D("0.25"))


# ---------------------------------------------------------------------------- errors

@pytest.mark.parametrize("rule, message", [
    ('pas_rate("ladder") > 0', "unknown function 'pas_rate'"),
    ('pass_rate("ladder") > ', "unexpected 'end of rule'"),
    ('pass_rate("ladder")', "expected a comparison here, found a number"),
    ('pass_rate("a") > 0 + (1 < 2)', "expected a number here, found a comparison"),
    ('pass_rate("a", "sometimes") > 0', 'mode must be "live" or "replayed"'),
    ('pass_rate() > 0', "takes"),
    ('attempt_rate("ultra", "live") > 0', "takes"),
    ('pass_rate(ladder) > 0', "takes quoted names"),
    ('1 < 2 < 3', "unexpected '<' after a complete rule"),
    ('__import__("os") > 0', "unknown function '__import__'"),
    ('pass_rate("a") > 1e3', "unexpected 'e3'"),
    ('pass_rate("a") > 0.5 ; 1', "unexpected character ';'"),
    ('pass_rate("a\\"b") > 0', "unexpected character"),
    ('(pass_rate("a") > 0', "expected ')'"),
    ("", "non-empty"),
])
def test_bad_rules_name_the_hypothesis_and_what_is_wrong(rule, message):
    with pytest.raises(RuleError, match="hypothesis H7") as err:
        parse_rule(rule, "hypothesis H7")
    assert message in str(err.value)
    assert isinstance(err.value, FormatError)


def test_unknown_policy_at_evaluation_names_the_hypothesis():
    rule = parse_rule('pass_rate("ladderr") > 0', "hypothesis H3")
    with pytest.raises(RuleError, match=r"hypothesis H3: unknown policy 'ladderr'"):
        rule.evaluate(Source())


def test_rules_are_bounded_in_length_tokens_and_depth():
    with pytest.raises(RuleError, match="longer than"):
        parse_rule("1 < " + "1" * LIMITS["chars"], "H")
    with pytest.raises(RuleError, match="tokens"):
        parse_rule(" + ".join(["1"] * LIMITS["tokens"]) + " > 0", "H")
    deep = "(" * (LIMITS["depth"] + 1) + "1" + ")" * (LIMITS["depth"] + 1) + " > 0"
    with pytest.raises(RuleError, match="deeper"):
        parse_rule(deep, "H")
    with pytest.raises(RuleError, match="deeper"):
        parse_rule("not " * (LIMITS["depth"] + 1) + "1 > 0", "H")
    ok = "(" * 5 + "1" + ")" * 5 + " > 0"
    assert parse_rule(ok, "H").evaluate(Source()).decision == SUPPORTED


def test_calls_lists_what_a_rule_reads():
    rule = parse_rule('pass_rate("ladder", "live") > 0 or attempt_rate("ultra") < 0.1', "H")
    assert rule.calls() == [("pass_rate", "ladder", "live"), ("attempt_rate", "ultra", None)]
