"""The pricing-rule check: the agent's rule gives the expected price on every case.

The artifact is a rule in ``rulelang`` (a bounded, eval-free integer language). The gate
check runs it on the visible examples; the held-out check runs it on boundary cases the
model never saw (just below, at and just above every threshold, the minimum and the cap),
so a rule that only fits the examples, or that is off by one at a tier edge, fails there.
Every failing case is reported as ``inputs: expected X, got Y``.
"""

from __future__ import annotations

from typing import Mapping

from ._base import CheckType, Fail, need, need_str_list, read_text, run_validate
from .rulelang import PRICING_LIMITS, PricingRuleError, parse_pricing_rule

__all__ = ["TYPES"]

MAX_CASES = 2_000
MAX_SHOWN = 3


def _validate(params: dict) -> None:
    need(params, "artifact", str)
    variables = need_str_list(params, "variables")
    cases = need(params, "cases", list)
    if not cases or len(cases) > MAX_CASES:
        raise ValueError(f"field 'cases': must hold 1 to {MAX_CASES} cases")
    for i, case in enumerate(cases):
        if not isinstance(case, dict):
            raise ValueError(f"field 'cases[{i}]': must be a table")
        for key in [*variables, "expected"]:
            v = case.get(key)
            if not isinstance(v, int) or isinstance(v, bool):
                raise ValueError(f"field 'cases[{i}].{key}': must be an integer")
        if "label" in case and not isinstance(case["label"], str):
            raise ValueError(f"field 'cases[{i}].label': must be a string")


def _describe(case: dict, variables: list[str]) -> str:
    inputs = ", ".join(f"{v}={case[v]}" for v in variables)
    return f"{inputs} ({case['label']})" if case.get("label") else inputs


def _run(params: dict, files: Mapping[str, bytes]) -> str:
    run_validate(params, _validate)
    path, variables, cases = params["artifact"], params["variables"], params["cases"]
    source = read_text(files, path, max_bytes=PRICING_LIMITS["source_bytes"])
    try:
        rule = parse_pricing_rule(source, variables)
    except PricingRuleError as e:
        raise Fail(f"{path}: {e}") from None
    wrong = []
    for case in cases:
        try:
            got = str(rule.evaluate({v: case[v] for v in variables}))
        except PricingRuleError as e:
            got = f"error ({e})"
        if got != str(case["expected"]):
            wrong.append(f"{_describe(case, variables)}: expected {case['expected']}, got {got}")
    if wrong:
        more = len(wrong) - MAX_SHOWN
        tail = f" (+{more} more)" if more > 0 else ""
        raise Fail(f"{len(wrong)} of {len(cases)} cases wrong: " + "; ".join(wrong[:MAX_SHOWN]) + tail)
    return f"all {len(cases)} cases give the expected price"


TYPES = {
    "pricing_rule": CheckType("pricing_rule", "the rule gives the expected integer price on every case",
                              _run, _validate, frozenset({"artifact", "variables", "cases"})),
}
