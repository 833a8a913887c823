"""Pass-rate intervals and the fixed-digit number strings of summary.json.

The Wilson score interval is used because it stays inside [0, 1] and behaves at 0 and n
passes, where the normal approximation collapses to a point. It is computed in ``Decimal``
at 50 digits (``sqrt`` is correctly rounded), then written with a fixed number of digits
(ROUND_HALF_EVEN), so the verifier's recomputation is identical to the last digit on any
platform: no float is involved anywhere.
"""

from __future__ import annotations

import decimal
from decimal import Decimal

__all__ = ["Z95", "RATE_DIGITS", "wilson", "fixed", "rate_obj", "fraction_text"]

Z95 = Decimal("1.959963984540054")  # the 0.975 quantile of the standard normal
RATE_DIGITS = 4
_CTX = decimal.Context(prec=50, rounding=decimal.ROUND_HALF_EVEN, traps=[
    decimal.InvalidOperation, decimal.DivisionByZero, decimal.Overflow])


def wilson(passed: int, n: int, z: Decimal = Z95) -> tuple[Decimal, Decimal] | None:
    """The Wilson score interval of ``passed`` out of ``n`` (None when ``n`` is 0).

    Raises ValueError when ``passed`` is outside [0, n]."""
    if not 0 <= passed <= n:
        raise ValueError(f"wilson: passed={passed} outside [0, n={n}]")
    if n == 0:
        return None
    c = _CTX
    x, nn = Decimal(passed), Decimal(n)
    z2 = c.multiply(z, z)
    denom = c.add(nn, z2)
    center = c.divide(c.add(x, c.divide(z2, 2)), denom)
    spread = c.add(c.divide(c.multiply(x, c.subtract(nn, x)), nn), c.divide(z2, 4))
    half = c.divide(c.multiply(z, c.sqrt(spread)), denom)
    lo = max(Decimal(0), c.subtract(center, half))
    hi = min(Decimal(1), c.add(center, half))
    return lo, hi


def fixed(value: Decimal, digits: int = RATE_DIGITS,
          rounding: str = decimal.ROUND_HALF_EVEN) -> str:
    """``value`` with exactly ``digits`` fractional digits (``"0.7778"``)."""
    q = Decimal(1).scaleb(-digits)
    out = value.quantize(q, rounding=rounding, context=_CTX)
    return format(out, "f") if out != 0 else format(Decimal(0).quantize(q), "f")


def fraction_text(num: int, den: int) -> str:
    return f"{num}/{den}"


def rate_obj(passed: int, n: int, *, interval: bool = True) -> dict:
    """The summary.json object of a rate: counts, exact fraction, fixed-digit value and the
    95% Wilson interval (values and bounds null when ``n`` is 0)."""
    out: dict = {"passed": passed, "n": n, "fraction": fraction_text(passed, n) if n else None,
                 "value": fixed(_CTX.divide(Decimal(passed), Decimal(n))) if n else None}
    if interval:
        w = wilson(passed, n)
        # rounded outward, as every bound in summary.json (FORMAT.md "Summary")
        out["wilson95"] = [fixed(w[0], rounding=decimal.ROUND_FLOOR),
                           fixed(w[1], rounding=decimal.ROUND_CEILING)] if w else None
    return out
