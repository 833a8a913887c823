"""Interval numbers and three-valued truth: how a decision stays honest about unknowns.

Every metric a decision rule reads is an interval ``[lo, hi]`` (``lo == hi`` when it is
exact). A cost whose usage was not reported is carried at its bounds; a pass rate with
cells that never ran, at both extremes. Ends are exact rationals (``Fraction``; money
``Decimal``s convert exactly) or an infinity, so there is no rounding at all: 2/3 equals
2/3, and ``pass_rate(a) >= pass_rate(b)`` is supported when both are 2/3.

A comparison is ``supported`` when it holds for every pair of values in its intervals,
``refuted`` when it fails for every pair, and ``inconclusive`` otherwise; ``and``/``or``/
``not`` are Kleene's three-valued logic. The effect: an unknown cost always counts against
the hypothesis (``A < B`` needs A's upper bound below B's lower bound). An undefined
operation (a divisor interval that contains 0, ``0 * inf``, ``inf - inf``) gives the
unbounded interval, which makes every comparison with it inconclusive.

Standard library only: the offline verifier re-evaluates every decision with it.
"""

from __future__ import annotations

import decimal
import functools
from dataclasses import dataclass
from decimal import Decimal
from fractions import Fraction

__all__ = ["Interval", "SUPPORTED", "REFUTED", "INCONCLUSIVE", "UNKNOWN", "POS_INF",
           "NEG_INF", "compare", "kleene_and", "kleene_or", "kleene_not", "to_decimal",
           "is_inf"]

SUPPORTED = "supported"
REFUTED = "refuted"
INCONCLUSIVE = "inconclusive"


@functools.total_ordering
class _Inf:
    """+infinity or -infinity, ordered against Fractions."""

    __slots__ = ("sign",)

    def __init__(self, sign: int):
        self.sign = sign

    def __eq__(self, other) -> bool:
        return isinstance(other, _Inf) and other.sign == self.sign

    def __lt__(self, other) -> bool:
        if isinstance(other, _Inf):
            return self.sign < other.sign
        return self.sign < 0

    def __hash__(self) -> int:
        return hash(("inf", self.sign))

    def __repr__(self) -> str:
        return "+inf" if self.sign > 0 else "-inf"


POS_INF = _Inf(1)
NEG_INF = _Inf(-1)


class _Undefined(Exception):
    pass


def is_inf(x) -> bool:
    return isinstance(x, _Inf)


def _num(x) -> Fraction | _Inf:
    if isinstance(x, (_Inf, Fraction)):
        return x
    if isinstance(x, Decimal) and x.is_infinite():
        return POS_INF if x > 0 else NEG_INF
    return Fraction(x)


def _sign(x) -> int:
    return x.sign if isinstance(x, _Inf) else (x > 0) - (x < 0)


def _add(a, b):
    if is_inf(a) or is_inf(b):
        if is_inf(a) and is_inf(b) and a.sign != b.sign:
            raise _Undefined
        return a if is_inf(a) else b
    return a + b


def _mul(a, b):
    if is_inf(a) or is_inf(b):
        s = _sign(a) * _sign(b)
        if s == 0:
            raise _Undefined
        return POS_INF if s > 0 else NEG_INF
    return a * b


def _div(a, b):  # b is never 0 here
    if is_inf(b):
        if is_inf(a):
            raise _Undefined
        return Fraction(0)
    if is_inf(a):
        return POS_INF if _sign(a) * _sign(b) > 0 else NEG_INF
    return a / b


def _neg(a):
    return _Inf(-a.sign) if is_inf(a) else -a


@dataclass(frozen=True)
class Interval:
    """A closed interval of exact rationals; ``lo <= hi``; ends may be infinite."""

    lo: Fraction | _Inf
    hi: Fraction | _Inf

    def __post_init__(self):
        object.__setattr__(self, "lo", _num(self.lo))
        object.__setattr__(self, "hi", _num(self.hi))

    @classmethod
    def point(cls, value) -> "Interval":
        return cls(value, value)

    @property
    def exact(self) -> bool:
        return self.lo == self.hi and not is_inf(self.lo)

    @property
    def bounded(self) -> bool:
        return not (is_inf(self.lo) or is_inf(self.hi))

    def __neg__(self) -> "Interval":
        return Interval(_neg(self.hi), _neg(self.lo))

    def __add__(self, other: "Interval") -> "Interval":
        return _guard(lambda: Interval(_add(self.lo, other.lo), _add(self.hi, other.hi)))

    def __sub__(self, other: "Interval") -> "Interval":
        return self + (-other)

    def __mul__(self, other: "Interval") -> "Interval":
        return _guard(lambda: _hull([_mul(a, b) for a in (self.lo, self.hi)
                                     for b in (other.lo, other.hi)]))

    def __truediv__(self, other: "Interval") -> "Interval":
        if other.lo <= 0 <= other.hi:  # the divisor may be zero: nothing is known
            return UNKNOWN
        return _guard(lambda: _hull([_div(a, b) for a in (self.lo, self.hi)
                                     for b in (other.lo, other.hi)]))


def _hull(values: list) -> Interval:
    return Interval(min(values), max(values))


def _guard(make) -> Interval:
    try:
        return make()
    except _Undefined:
        return UNKNOWN


UNKNOWN = Interval(NEG_INF, POS_INF)


def to_decimal(x, digits: int, rounding: str) -> Decimal | _Inf:
    """An exact rational as a Decimal with ``digits`` fractional digits, rounded as asked
    (``ROUND_FLOOR`` for a low end, ``ROUND_CEILING`` for a high end)."""
    if is_inf(x):
        return x
    q = Decimal(1).scaleb(-digits)
    ctx = decimal.Context(prec=200, rounding=rounding)
    whole = ctx.divide(Decimal(x.numerator), Decimal(x.denominator))
    return whole.quantize(q, rounding=rounding, context=ctx)


# op -> (holds for every pair, fails for every pair)
_COMPARE = {
    "<": (lambda a, b: a.hi < b.lo, lambda a, b: a.lo >= b.hi),
    "<=": (lambda a, b: a.hi <= b.lo, lambda a, b: a.lo > b.hi),
    ">": (lambda a, b: a.lo > b.hi, lambda a, b: a.hi <= b.lo),
    ">=": (lambda a, b: a.lo >= b.hi, lambda a, b: a.hi < b.lo),
    "==": (lambda a, b: a.exact and b.exact and a.lo == b.lo,
           lambda a, b: a.hi < b.lo or b.hi < a.lo),
    "!=": (lambda a, b: a.hi < b.lo or b.hi < a.lo,
           lambda a, b: a.exact and b.exact and a.lo == b.lo),
}


def compare(op: str, a: Interval, b: Interval) -> str:
    """``supported`` / ``refuted`` / ``inconclusive`` for ``a op b`` over whole intervals."""
    if a == UNKNOWN or b == UNKNOWN:
        return INCONCLUSIVE
    always, never = _COMPARE[op]
    if always(a, b):
        return SUPPORTED
    if never(a, b):
        return REFUTED
    return INCONCLUSIVE


def kleene_not(x: str) -> str:
    return {SUPPORTED: REFUTED, REFUTED: SUPPORTED}.get(x, INCONCLUSIVE)


def kleene_and(x: str, y: str) -> str:
    if REFUTED in (x, y):
        return REFUTED
    return SUPPORTED if x == y == SUPPORTED else INCONCLUSIVE


def kleene_or(x: str, y: str) -> str:
    if SUPPORTED in (x, y):
        return SUPPORTED
    return REFUTED if x == y == REFUTED else INCONCLUSIVE
