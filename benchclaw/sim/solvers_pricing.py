"""Reading a pricing policy into a model, and writing that model as a rule (sim solvers).

Kept apart from ``solvers`` because the policy model is what the pricing mistakes edit:
a boundary read as "more than N" instead of "N or more", a forgotten minimum or cap, a
rule that only memorises the worked examples. Each is a small change to ``PricingPolicy``,
rebuilt into rule text by the same writer, so a mistaken rule looks like one a model
would write. The vocabulary read here is the one the shipped policies use (a price
table, "Tier mode:", "Subtotal:", "Discount: N% off the subtotal when `v` is N or more.",
"Minimum charge:", "Maximum charge:", a worked-examples table); docs/writing-tasks.md
lists it for task authors.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass, replace

__all__ = ["PricingPolicyError", "PricingPolicy", "parse_pricing_policy", "build_rule", "shift_boundary",
           "without_limits", "lookup_rule"]

_ROUNDERS = {"half away from zero": "div_round", "half to even": "div_even",
             "rounded down": "div_floor", "rounded up": "div_ceil"}
_RESERVED = {"tier_qty", "unit_price", "subtotal", "discount_percent", "net"}


class PricingPolicyError(ValueError):
    """The text is not a pricing policy this reader understands (says what is missing)."""


@dataclass(frozen=True)
class PricingPolicy:
    variables: tuple[str, ...]
    qty: str                                  # rule expression of the tiered quantity
    tiers: tuple[tuple[int, int | None, int], ...]   # (first, last or None, cents per unit)
    mode: str                                 # all-units | graduated
    multipliers: tuple[str, ...]
    discounts: tuple[tuple[int, str, int], ...]  # (percent, variable, threshold)
    rounder: str
    minimum: int | None
    maximum: int | None
    examples: tuple[tuple[dict, int], ...]


def _int(s: str) -> int:
    return int(s.replace(",", "").replace("_", ""))


def _money(text: str, label: str) -> int | None:
    m = re.search(rf"^{label}: \$([\d,]+)\.(\d\d)\b", text, re.M)
    return _int(m.group(1)) * 100 + int(m.group(2)) if m else None


def _tiers(text: str) -> tuple[tuple[int, int | None, int], ...]:
    rows = re.findall(r"^\|\s*([\d,]+)\s+(?:to\s+([\d,]+)|or more)\s*\|\s*\$([\d,]+)\.(\d\d)\s*\|", text, re.M)
    if not rows:
        raise PricingPolicyError("no price table")
    return tuple(sorted((_int(a), _int(b) if b else None, _int(d) * 100 + int(c)) for a, b, d, c in rows))


def _quantity(text: str, variables: list[str]) -> str:
    block = re.search(r"billed in blocks of ([\d,]+) (\w+)", text)
    if block and block.group(2) in variables:
        if "started block counts as a full block" not in text:
            raise PricingPolicyError("the policy does not say how a partial block is billed")
        return f"div_ceil({block.group(2)}, {_int(block.group(1))})"
    head = re.search(r"^\|\s*(\w+)\s*\|\s*Price per", text, re.M)
    word = head.group(1).lower() if head else ""
    for v in variables:
        if word in (v, v + "s", v.rstrip("s")):
            return v
    raise PricingPolicyError("cannot tell which variable the price table is about")


def _examples(text: str, variables: list[str]) -> tuple[tuple[dict, int], ...]:
    part = text.split("## Worked examples", 1)
    if len(part) < 2:
        return ()
    rows = [[c.strip() for c in line.strip().strip("|").split("|")] for line in part[1].split("\n")
            if line.strip().startswith("|")]
    if not rows or rows[0][: len(variables)] != variables:
        return ()
    return tuple(({v: _int(r[i]) for i, v in enumerate(variables)}, _int(r[len(variables)]))
                 for r in rows[1:] if all(re.fullmatch(r"-?[\d,]+", c) for c in r))


def parse_pricing_policy(text: str, variables: list[str]) -> PricingPolicy:
    """The pricing model of a policy document. Raises PricingPolicyError when it is not one."""
    if not isinstance(text, str) or "Tier mode:" not in text:
        raise PricingPolicyError("no 'Tier mode:' line: not a pricing policy")
    variables = list(variables)
    if _RESERVED & set(variables):
        raise PricingPolicyError("a variable name clashes with the rule's own names")
    mode = re.search(r"Tier mode: (all-units|graduated)", text)
    if not mode:
        raise PricingPolicyError("unknown tier mode")
    qty = _quantity(text, variables)
    sub = re.search(r"^Subtotal: (.+)$", text, re.M)
    mults = tuple(v for v in re.findall(r"`(\w+)`", sub.group(1)) if v in variables and v != qty) if sub else ()
    discounts = tuple(sorted(((int(p), v, _int(t)) for p, v, t in re.findall(
        r"^Discount: (\d+)% off the subtotal when `(\w+)` is ([\d,]+) or more\.", text, re.M)), reverse=True))
    if any(v not in variables for _, v, _ in discounts):
        raise PricingPolicyError("a discount depends on an unknown variable")
    rnd = re.search(r"Discount rounding:[^\n]*?(half away from zero|half to even|rounded down|rounded up)", text)
    return PricingPolicy(tuple(variables), qty, _tiers(text), mode.group(1), mults, discounts,
                  _ROUNDERS[rnd.group(1)] if rnd else "div_round",
                  _money(text, "Minimum charge"), _money(text, "Maximum charge"), _examples(text, variables))


def _unit_price(tiers) -> str:
    expr = str(tiers[0][2])
    for first, _, price in tiers[1:]:
        expr = f"if tier_qty >= {first} then {price}\n               else {expr}"
    return expr


def _graduated(tiers) -> str:
    terms = []
    for first, last, price in tiers:
        if price == 0:
            continue
        top = f"min(tier_qty, {last})" if last is not None else "tier_qty"
        terms.append(f"max(0, {top} - {first - 1}) * {price}" if first > 1 else f"{top} * {price}")
    return "\n             + ".join(terms) or "0"


def _header(p: PricingPolicy) -> list[str]:
    return [f"# variables: {', '.join(p.variables)}"]


def build_rule(p: PricingPolicy) -> str:
    """Rule text implementing ``p``: tiers, multipliers, the largest applicable discount,
    then minimum and maximum."""
    lines = _header(p) + [f"let tier_qty = {p.qty};"]
    extra = "".join(f" * {m}" for m in p.multipliers)
    if p.mode == "all-units":
        lines.append(f"let unit_price = {_unit_price(p.tiers)};")
        lines.append(f"let subtotal = tier_qty * unit_price{extra};")
    else:
        body = _graduated(p.tiers)
        lines.append(f"let subtotal = ({body}){extra};" if extra else f"let subtotal = {body};")
    final = "subtotal"
    if p.discounts:
        expr = "0"
        for pct, var, th in reversed(p.discounts):
            expr = f"if {var} >= {th} then {pct} else {expr}"
        lines.append(f"let discount_percent = {expr};")
        lines.append(f"let net = subtotal - {p.rounder}(subtotal * discount_percent, 100);")
        final = "net"
    if p.minimum is not None and p.maximum is not None:
        final = f"clamp({final}, {p.minimum}, {p.maximum})"
    elif p.minimum is not None:
        final = f"max({final}, {p.minimum})"
    elif p.maximum is not None:
        final = f"min({final}, {p.maximum})"
    return "\n".join(lines + [final]) + "\n"


def shift_boundary(p: PricingPolicy, rng: random.Random) -> PricingPolicy:
    """``p`` with one threshold read as "more than N" instead of "N or more"."""
    choices = [("tier", i) for i in range(1, len(p.tiers))] + [("discount", i) for i in range(len(p.discounts))]
    if not choices:
        raise PricingPolicyError("no boundary to shift")
    kind, i = rng.choice(choices)
    if kind == "tier":
        tiers = list(p.tiers)
        a, b, price = tiers[i]
        tiers[i] = (a + 1, b, price)
        pa, pb, pp = tiers[i - 1]
        tiers[i - 1] = (pa, pb + 1 if pb is not None else None, pp)
        return replace(p, tiers=tuple(tiers))
    discounts = list(p.discounts)
    pct, var, th = discounts[i]
    discounts[i] = (pct, var, th + 1)
    return replace(p, discounts=tuple(discounts))


def without_limits(p: PricingPolicy, rng: random.Random) -> PricingPolicy:
    """``p`` with its minimum, its maximum, or both forgotten."""
    options = [o for o in ("minimum", "maximum") if getattr(p, o) is not None]
    if not options:
        raise PricingPolicyError("no minimum or maximum to forget")
    forget = options if len(options) == 1 or rng.random() < 0.5 else [rng.choice(options)]
    return replace(p, **{o: None for o in forget})


def lookup_rule(p: PricingPolicy) -> str:
    """A rule that memorises the worked examples and guesses the base price elsewhere."""
    if not p.examples:
        raise PricingPolicyError("no worked examples to memorise")
    extra = "".join(f" * {m}" for m in p.multipliers)
    expr = f"tier_qty * {p.tiers[0][2]}{extra}"
    for env, want in reversed(p.examples):
        cond = " and ".join(f"{v} == {env[v]}" for v in p.variables)
        expr = f"if {cond} then {want}\nelse {expr}"
    return "\n".join(_header(p) + [f"let tier_qty = {p.qty};", expr]) + "\n"
