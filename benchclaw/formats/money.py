"""Usage and money: exact, pure, standard library only.

The offline verifier recomputes every cost in a bundle with this module, bit for bit, so
it must not depend on anything that can change a digit: no floats, no global decimal
context (every computation runs in a local context with enough precision that it is
exact, and ``Inexact`` is trapped, so an inexact result is an error, never a rounding),
no clock, no network. Formats are in ``docs/FORMAT.md`` §6 (usage and cost) and the
"Catalogs" section (prices).

What it holds:

- ``Usage``: the normalised token usage of one call; ``normalise_usage`` maps the usage
  shapes real OpenAI-compatible providers send onto it.
- ``Prices``: USD per 1,000,000 tokens, each a ``Decimal`` or ``None``.
- ``call_cost`` (exact cost of a call with known usage), ``cost_upper_bound`` (what a call
  with unknown usage could have cost at most), ``CostBounds`` and ``cost_bounds`` (the
  ``{"known", "low", "high"}`` object of a ``call`` record).
- ``fmt_usd`` / ``parse_usd``: the canonical decimal strings on disk.
- ``estimate_prompt_tokens``: a deterministic, conservative token count of a message list,
  used for ledger reservations and cost bounds before the provider reports usage.
"""

from __future__ import annotations

import decimal
import re
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Iterable, Mapping

from ..errors import FormatError, ProviderConfigError

__all__ = [
    "Usage",
    "Prices",
    "CostBounds",
    "ZERO_USAGE",
    "PRICE_FIELDS",
    "USAGE_FIELDS",
    "normalise_usage",
    "call_cost",
    "cost_upper_bound",
    "cost_bounds",
    "fmt_usd",
    "parse_usd",
    "add_usd",
    "sum_usd",
    "sum_usage",
    "read_usage",
    "estimate_prompt_tokens",
    "message_tokens",
    "PER_MILLION",
    "usage_unread",
    "usage_doubts",
    "unbilled_reason",
    "CallCost",
    "call_cost_of",
    "UNBILLED_STATUSES",
    "stream_floor",
    "message_bytes",
    "MAX_TOKEN_BYTES",
]

PER_MILLION = Decimal(1_000_000)
USAGE_FIELDS = ("prompt", "cached_read", "cache_write", "completion", "reasoning")
PRICE_FIELDS = ("input", "cached_input", "cache_write", "output")
UNKNOWN = "unknown"

# 200 significant digits: token counts (< 10^12) times prices (a few dozen digits at most)
# never come near it, and Inexact is trapped anyway, so a result is exact or an error.
_EXACT = decimal.Context(prec=200, rounding=decimal.ROUND_HALF_EVEN, traps=[
    decimal.Inexact, decimal.InvalidOperation, decimal.Overflow, decimal.DivisionByZero])

_USD_RE = re.compile(r"^(0|[1-9][0-9]*)(\.[0-9]+)?$")


# ---------------------------------------------------------------------------- money strings

def parse_usd(text: str, where: str = "value") -> Decimal:
    """Parse a canonical-enough USD string (``"0.10"``, ``"3"``) into a ``Decimal``.

    Accepts digits with an optional fraction; rejects signs, exponents, spaces, NaN,
    floats and non-strings. Raises ``FormatError`` naming ``where``.
    """
    if not isinstance(text, str) or not _USD_RE.match(text):
        raise FormatError(f"{where}: expected a non-negative decimal string like \"0.10\", got {text!r}")
    return Decimal(text)


def fmt_usd(amount: Decimal) -> str:
    """The canonical string of an amount: exact, no exponent, no trailing zeros, ``"0"``.

    Raises ``TypeError`` for anything but a finite ``Decimal`` (a float is never money).
    """
    if not isinstance(amount, Decimal) or not amount.is_finite():
        raise TypeError(f"money must be a finite Decimal, got {amount!r}")
    text = format(amount, "f")
    if "." in text:
        text = text.rstrip("0").rstrip(".")
    if text in ("-0", ""):
        text = "0"
    return text


def add_usd(*amounts: Decimal) -> Decimal:
    """Exact sum of Decimals (raises ``decimal.Inexact`` rather than round)."""
    return sum_usd(amounts)


def sum_usd(amounts: Iterable[Decimal]) -> Decimal:
    """Exact sum of an iterable of Decimals."""
    total = Decimal(0)
    for a in amounts:
        total = _EXACT.add(total, a)
    return total


# ---------------------------------------------------------------------------- usage

@dataclass(frozen=True)
class Usage:
    """Normalised usage of one call (docs/FORMAT.md §6).

    ``prompt`` counts every input token (cached included); ``cached_read`` and
    ``cache_write`` are parts of it. ``completion`` counts every output token (reasoning
    included); ``reasoning`` is part of it. Construction raises ``ValueError`` when the
    parts do not fit in their wholes, so a ``Usage`` is always consistent.
    """

    prompt: int = 0
    cached_read: int = 0
    cache_write: int = 0
    completion: int = 0
    reasoning: int = 0

    def __post_init__(self) -> None:
        # the five fields spelt out (a Usage is made several times per call): ints, not bools
        p, r, w, c, x = self.prompt, self.cached_read, self.cache_write, self.completion, self.reasoning
        if not (type(p) is int and type(r) is int and type(w) is int and type(c) is int and type(x) is int
                and p >= 0 and r >= 0 and w >= 0 and c >= 0 and x >= 0):
            for name in USAGE_FIELDS:
                v = getattr(self, name)
                if type(v) is not int or v < 0:
                    raise ValueError(f"usage.{name} must be a non-negative int, got {v!r}")
        if self.cached_read + self.cache_write > self.prompt:
            raise ValueError(f"usage: cached_read + cache_write ({self.cached_read} + "
                             f"{self.cache_write}) exceed prompt ({self.prompt})")
        if self.reasoning > self.completion:
            raise ValueError(f"usage: reasoning ({self.reasoning}) exceeds completion ({self.completion})")

    @property
    def uncached(self) -> int:
        """Input tokens charged at the full input price."""
        return self.prompt - self.cached_read - self.cache_write

    @property
    def total(self) -> int:
        return self.prompt + self.completion

    def __add__(self, other: "Usage") -> "Usage":
        if not isinstance(other, Usage):
            return NotImplemented
        return Usage(self.prompt + other.prompt, self.cached_read + other.cached_read,
                     self.cache_write + other.cache_write, self.completion + other.completion,
                     self.reasoning + other.reasoning)

    def to_dict(self) -> dict[str, int]:
        """The on-disk object: keys prompt, cached_read, cache_write, completion, reasoning."""
        return {"prompt": self.prompt, "cached_read": self.cached_read, "cache_write": self.cache_write,
                "completion": self.completion, "reasoning": self.reasoning}

    @classmethod
    def from_dict(cls, d: Mapping, where: str = "usage") -> "Usage":
        """Parse the on-disk object. Raises ``FormatError`` naming ``where``."""
        if not isinstance(d, Mapping) or set(d) != set(USAGE_FIELDS):
            raise FormatError(f"{where}: expected an object with keys {', '.join(USAGE_FIELDS)}")
        try:
            return cls(**{n: d[n] for n in USAGE_FIELDS})
        except ValueError as e:
            raise FormatError(f"{where}: {e}") from None


ZERO_USAGE = Usage()


def sum_usage(usages: Iterable[Usage]) -> Usage:
    """Field-wise sum of usages (``Usage()`` for none): the sums taken as ints, one ``Usage``
    made of them (each part is consistent, so their sum is)."""
    prompt = cached_read = cache_write = completion = reasoning = 0
    for u in usages:
        if not isinstance(u, Usage):
            raise TypeError(f"sum_usage: not a Usage: {type(u).__name__}")
        prompt += u.prompt
        cached_read += u.cached_read
        cache_write += u.cache_write
        completion += u.completion
        reasoning += u.reasoning
    return Usage(prompt, cached_read, cache_write, completion, reasoning)


def _get_path(raw: Mapping, path: tuple[str, ...]):
    cur = raw
    for key in path:
        # dict first: parsed JSON is always a dict, and the Mapping ABC check is slow
        # enough to show up when the verifier normalises every call of a bundle.
        if type(cur) is not dict and not isinstance(cur, Mapping):
            return None
        cur = cur.get(key)
    return cur


# Where each normalised field may be found (FORMAT.md §6, "Usage shapes"). Real providers
# differ:
#   OpenAI / vLLM / Nebius: prompt_tokens_details.cached_tokens, completion_tokens_details.reasoning_tokens
#                   (Nebius and some gateways send prompt_tokens_details: null)
#   DeepSeek-style:  prompt_cache_hit_tokens (+ prompt_cache_miss_tokens)
#   Anthropic-style: top-level cache_read_input_tokens / cache_creation_input_tokens (as a
#                    LiteLLM proxy passes them on beside prompt_tokens, which includes them)
#   cache writers:   prompt_tokens_details.created_cache_tokens (cache_creation_tokens, cache_write_tokens)
# When several paths of one field are present, the largest count is used: a gateway that
# copies a count into a second field and leaves the first at 0 must not hide a cache hit.
# Two different non-zero counts are a disagreement (a doubt, usage_unread).
_FIELD_PATHS: dict[str, tuple[tuple[str, ...], ...]] = {
    "prompt": (("prompt_tokens",),),
    "completion": (("completion_tokens",),),
    "cached_read": (("prompt_tokens_details", "cached_tokens"), ("prompt_cache_hit_tokens",),
                    ("cache_read_input_tokens",)),
    "cache_write": (("prompt_tokens_details", "created_cache_tokens"),
                    ("prompt_tokens_details", "cache_creation_tokens"),
                    ("prompt_tokens_details", "cache_write_tokens"),
                    ("cache_creation_input_tokens",)),
    "reasoning": (("completion_tokens_details", "reasoning_tokens"),),
}
_REQUIRED = ("prompt", "completion")
# Fields read without changing the cost: totals, the complement of a cache count, and the
# parts of a count that are billed at its price anyway.
_HARMLESS = frozenset({("total_tokens",), ("prompt_cache_miss_tokens",),
                       ("prompt_tokens_details", "text_tokens"), ("completion_tokens_details", "text_tokens"),
                       ("completion_tokens_details", "accepted_prediction_tokens"),
                       ("completion_tokens_details", "rejected_prediction_tokens")})
_READ = frozenset(p for paths in _FIELD_PATHS.values() for p in paths) | _HARMLESS


def _counts(raw: Mapping, name: str) -> list[tuple[tuple[str, ...], int]]:
    found = []
    for path in _FIELD_PATHS[name]:
        v = _get_path(raw, path)
        if v is None:
            continue
        if type(v) is not int or v < 0:
            raise FormatError(f"usage.{'.'.join(path)}: expected a non-negative integer, got {v!r}")
        found.append((path, v))
    return found


def _token_count(raw: Mapping, name: str) -> int | None:
    found = _counts(raw, name)
    return max(v for _, v in found) if found else None


def normalise_usage(raw: Mapping) -> Usage:
    """Map a provider's raw ``usage`` object onto ``Usage``.

    ``prompt_tokens`` and ``completion_tokens`` are required; missing details count as 0;
    a field found in several places takes the largest count. A reasoning count larger than
    the completion count means the provider reported reasoning *beside* the completion
    rather than inside it; then completion becomes their sum, so reasoning is counted once
    and billed once. Raises ``FormatError`` when a count is missing, not a non-negative
    int, or the cached parts exceed the prompt.
    """
    if type(raw) is not dict and not isinstance(raw, Mapping):
        raise FormatError(f"usage: expected an object, got {type(raw).__name__}")
    counts = {name: _token_count(raw, name) for name in _FIELD_PATHS}
    for name in _REQUIRED:
        if counts[name] is None:
            raise FormatError(f"usage: missing {_FIELD_PATHS[name][0][0]}")
    values = {k: (v or 0) for k, v in counts.items()}
    if values["reasoning"] > values["completion"]:
        values["completion"] += values["reasoning"]
    try:
        return Usage(**values)
    except ValueError as e:
        raise FormatError(str(e)) from None


_LEAVES = (list, str, int, float, Decimal, type(None))


def _numbers(obj, path: tuple[str, ...], out: list, depth: int = 0) -> list:
    """Append to ``out`` (and return it) (path, value) of every non-zero number inside
    ``obj`` (bools are not numbers), in order."""
    if depth > 8:
        return out
    # dict first and the Mapping ABC last: the ABC check is slow enough to show when the
    # verifier reads every usage blob of a bundle, and a leaf (a number, a string) is never one
    if type(obj) is dict or (not isinstance(obj, _LEAVES) and isinstance(obj, Mapping)):
        for k, v in obj.items():
            _numbers(v, path + (str(k),), out, depth + 1)
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            _numbers(v, path + (str(i),), out, depth + 1)
    elif isinstance(obj, (int, float, Decimal)) and not isinstance(obj, bool) and obj != 0:
        out.append((path, obj))
    return out


# Fields read from more than one path: only they can disagree (``usage_unread``).
_MULTI_PATH = tuple(name for name, paths in _FIELD_PATHS.items() if len(paths) > 1)


def usage_unread(raw) -> tuple[str, ...]:
    """What in a raw usage object could change the cost but is not read: each non-zero
    number at a path the normaliser does not know (``audio_tokens``, a gateway's ``cost``),
    and ``disagree:<field>`` when two paths of one field give different non-zero counts.
    Sorted; empty for a fully understood object (or one that is not an object). The usual
    shape is read in one walk (``_unread_flat``, every call of a run), any other by the
    general walk (``_unread_walk``); both say the same."""
    if type(raw) is dict:
        flat = _unread_flat(raw)
        if flat is not None:
            return flat
    return _unread_walk(raw)


def _unread_flat(raw: dict) -> tuple[str, ...] | None:
    """``usage_unread`` of an object whose values are non-negative ints, nulls, or objects of
    them under string keys (what providers send), in one walk; None for any other shape."""
    found: dict[str, set] = {}
    unread = []
    for key, value in raw.items():
        if type(key) is not str:
            return None
        if type(value) is dict:
            leaves = [((key, k), v) for k, v in value.items()]
        else:
            leaves = [((key,), value)]
        for path, v in leaves:
            if v is None:
                continue
            if type(v) is not int or v < 0 or type(path[-1]) is not str:
                return None
            if not v:
                continue
            name = _PATH_FIELD.get(path)
            if name is not None:
                found.setdefault(name, set()).add(v)
            elif path not in _HARMLESS:
                unread.append("unread:" + ".".join(path))
    unread.extend(f"disagree:{name}" for name in _MULTI_PATH if len(found.get(name, ())) > 1)
    return tuple(sorted(set(unread)))


def _unread_walk(raw) -> tuple[str, ...]:
    """``usage_unread`` by the general walk: any shape, any depth."""
    if type(raw) is not dict and not isinstance(raw, Mapping):
        return ()
    out = {"unread:" + ".".join(p) for p, _ in _numbers(raw, (), []) if p not in _READ}
    for name in _MULTI_PATH:
        try:
            values = {v for _, v in _counts(raw, name) if v}
        except FormatError:
            continue
        if len(values) > 1:
            out.add(f"disagree:{name}")
    return tuple(sorted(out))


# The flat shapes providers send, read in one walk by ``read_usage``: each known path's
# field, and the keys whose value may be an object of counts (every other object, and any
# value but an int or null, takes the general route).
_PATH_FIELD = {path: name for name, paths in _FIELD_PATHS.items() for path in paths}
_DETAILS = frozenset(p[0] for p in _READ if len(p) == 2)


def read_usage(raw) -> tuple[Usage, tuple[str, ...]]:
    """``(normalise_usage(raw), usage_unread(raw))``, for a reader that wants both: a usage
    object of ints and nulls (counts, or objects of them under the ``*_details`` keys) is
    walked once; any other goes through the two. Raises what ``normalise_usage`` raises."""
    if type(raw) is not dict:
        return normalise_usage(raw), usage_unread(raw)
    found: dict[str, list[int]] = {}
    unread = []
    for key, value in raw.items():
        if type(value) is dict and key in _DETAILS:
            leaves = [((key, k), v) for k, v in value.items()]
        else:
            leaves = [((key,), value)]
        for path, v in leaves:
            if v is None:
                continue
            if type(v) is not int or v < 0:
                return normalise_usage(raw), usage_unread(raw)  # the general route says what is wrong, if anything
            name = _PATH_FIELD.get(path)
            if name is not None:
                found.setdefault(name, []).append(v)
            elif v and path not in _HARMLESS:
                unread.append("unread:" + ".".join(path))
    if "prompt" not in found or "completion" not in found:
        return normalise_usage(raw), usage_unread(raw)
    values = {name: max(found.get(name) or (0,)) for name in _FIELD_PATHS}
    if values["reasoning"] > values["completion"]:
        values["completion"] += values["reasoning"]
    try:
        usage = Usage(**values)
    except ValueError:
        return normalise_usage(raw), usage_unread(raw)
    unread.extend(f"disagree:{name}" for name in _MULTI_PATH if len({v for v in found.get(name, ()) if v}) > 1)
    return usage, tuple(sorted(set(unread)))


def usage_doubts(usage: Usage | None, prompt_estimate: int, max_tokens: int,
                 unread: Iterable[str] = ()) -> tuple[str, ...]:
    """Why reported usage cannot be taken as the exact bill (FORMAT.md §6, "Plausibility"):
    ``prompt_zero`` (no input tokens for a request that had messages), ``over_bound``
    (more prompt tokens than the conservative ``prompt_estimate``, or more completion
    tokens than ``max_tokens``), and the ``usage_unread`` entries. Empty when it can."""
    if usage is None:
        return ()
    out = set(unread)
    if usage.prompt == 0 and prompt_estimate > REQUEST_OVERHEAD_TOKENS:
        out.add("prompt_zero")
    if usage.prompt > prompt_estimate or usage.completion > max_tokens:
        out.add("over_bound")
    return tuple(sorted(out))


# HTTP statuses providers document as not billed: the request was refused before any
# model ran (bad request, auth, payment, not found, too large, rate limit).
UNBILLED_STATUSES = frozenset({400, 401, 402, 403, 404, 405, 409, 413, 415, 422, 429})


def unbilled_reason(error: Mapping | None) -> str | None:
    """Why a failed call provably cost nothing (FORMAT.md §6, "Cost of failures"), or
    ``None`` when it may have been billed. ``error`` is the ``error`` object of a ``call``
    record: ``stage: "connect"`` means the request was never sent; an HTTP status in
    ``UNBILLED_STATUSES`` means it was refused before a model ran."""
    if not isinstance(error, Mapping):
        return None
    status = error.get("status")
    if error.get("stage") == "connect":
        return "not sent: the connection failed"
    if type(status) is int and status in UNBILLED_STATUSES and error.get("kind") != "key_echo":
        return f"refused with HTTP {status} before a model ran (not billed)"
    return None


# ---------------------------------------------------------------------------- prices

@dataclass(frozen=True)
class Prices:
    """USD per 1,000,000 tokens. ``None`` for ``cached_input``/``cache_write`` means the
    provider does not price it separately (charged at ``input``, FORMAT §6); a field named
    in ``unknown`` is not known yet and nothing that needs it can be costed."""

    input: Decimal | None = None
    cached_input: Decimal | None = None
    cache_write: Decimal | None = None
    output: Decimal | None = None
    unknown: tuple[str, ...] = field(default=())

    def __post_init__(self) -> None:
        for name in PRICE_FIELDS:
            v = getattr(self, name)
            if v is not None and (not isinstance(v, Decimal) or not v.is_finite() or v < 0):
                raise ValueError(f"price {name} must be a non-negative Decimal, got {v!r}")
        for name in ("input", "output"):
            if getattr(self, name) is None and name not in self.unknown:
                object.__setattr__(self, "unknown", self.unknown + (name,))
        bad = [u for u in self.unknown if u not in PRICE_FIELDS]
        if bad:
            raise ValueError(f"unknown price field(s): {', '.join(bad)}")

    @property
    def complete(self) -> bool:
        """True when every price a cost could need is known."""
        return not self.unknown

    def to_dict(self) -> dict[str, str | None]:
        """On-disk object: decimal strings, ``null`` for not-priced, ``"unknown"``."""
        out: dict[str, str | None] = {}
        for name in PRICE_FIELDS:
            v = getattr(self, name)
            out[name] = UNKNOWN if name in self.unknown else (None if v is None else fmt_usd(v))
        return out

    @classmethod
    def from_dict(cls, d: Mapping, where: str = "prices") -> "Prices":
        """Parse ``{"input": "0.10", "cached_input": "unknown", ...}``.

        ``input`` and ``output`` are required (``"unknown"`` allowed); ``cached_input`` and
        ``cache_write`` may be absent or null. Raises ``FormatError`` naming the field.
        """
        if not isinstance(d, Mapping):
            raise FormatError(f"{where}: expected a table of prices")
        extra = sorted(set(d) - set(PRICE_FIELDS))
        if extra:
            raise FormatError(f"{where}: unknown field(s) {', '.join(extra)} "
                              f"(expected {', '.join(PRICE_FIELDS)})")
        values: dict[str, Decimal | None] = {}
        unknown: list[str] = []
        for name in PRICE_FIELDS:
            v = d.get(name)
            if name in ("input", "output") and name not in d:
                raise FormatError(f"{where}.{name}: missing (write \"unknown\" if you do not know it)")
            if v == UNKNOWN:
                unknown.append(name)
                values[name] = None
            else:
                values[name] = None if v is None else parse_usd(v, f"{where}.{name}")
        return cls(unknown=tuple(unknown), **values)


# ---------------------------------------------------------------------------- cost

def _price(prices: Prices, name: str, fallback: str | None = None) -> Decimal:
    if name in prices.unknown:
        raise ProviderConfigError(f"price {name} is unknown; set it in the catalog before a costed run")
    v = getattr(prices, name)
    if v is None and fallback is not None:
        return _price(prices, fallback)
    return v


def call_cost(usage: Usage, prices: Prices) -> Decimal:
    """Exact USD cost of a call (FORMAT §6)::

        uncached = prompt - cached_read - cache_write
        cost = (uncached*input + cached_read*cached_input + cache_write*cache_write_price
                + completion*output) / 1_000_000

    A price needed only for zero tokens is not needed. Raises ``ProviderConfigError`` if a
    needed price is unknown.
    """
    terms = [(usage.uncached, "input", None), (usage.cached_read, "cached_input", "input"),
             (usage.cache_write, "cache_write", "input"), (usage.completion, "output", None)]
    total = Decimal(0)
    for tokens, name, fallback in terms:
        if tokens:
            total = _EXACT.add(total, _EXACT.multiply(Decimal(tokens), _price(prices, name, fallback)))
    return _EXACT.divide(total, PER_MILLION)


def cost_upper_bound(prompt_tokens: int, max_tokens: int, prices: Prices) -> Decimal:
    """What a call with unknown usage could have cost at most: ``prompt_tokens`` input
    tokens at the input price plus ``max_tokens`` output tokens at the output price.

    Raises ``ProviderConfigError`` if a needed price is unknown, ``ValueError`` on a
    negative count.
    """
    if prompt_tokens < 0 or max_tokens < 0:
        raise ValueError("token counts must be non-negative")
    return call_cost(Usage(prompt=prompt_tokens, completion=max_tokens), prices)


@dataclass(frozen=True)
class CostBounds:
    """The cost of a call or a run: exact when ``known`` (``low == high``), else bounds."""

    known: bool
    low: Decimal
    high: Decimal

    def __post_init__(self) -> None:
        if self.low > self.high:
            raise ValueError(f"cost bounds inverted: {self.low} > {self.high}")

    def __add__(self, other: "CostBounds") -> "CostBounds":
        if not isinstance(other, CostBounds):
            return NotImplemented
        return CostBounds(self.known and other.known, add_usd(self.low, other.low),
                          add_usd(self.high, other.high))

    def to_dict(self) -> dict:
        """``{"known": bool, "low": "…", "high": "…"}`` as in a ``call`` record."""
        low = fmt_usd(self.low)  # a known cost's bounds are one Decimal: formatted once
        return {"known": self.known, "low": low, "high": low if self.high is self.low else fmt_usd(self.high)}

    @classmethod
    def from_dict(cls, d: Mapping, where: str = "cost") -> "CostBounds":
        """Parse the on-disk object. Raises ``FormatError`` naming ``where``."""
        if not isinstance(d, Mapping) or set(d) != {"known", "low", "high"} or type(d["known"]) is not bool:
            raise FormatError(f"{where}: expected {{known: bool, low, high}}")
        try:
            return cls(d["known"], parse_usd(d["low"], f"{where}.low"), parse_usd(d["high"], f"{where}.high"))
        except ValueError as e:
            raise FormatError(f"{where}: {e}") from None

    @classmethod
    def zero(cls) -> "CostBounds":
        return cls(True, Decimal(0), Decimal(0))


def cost_bounds(usage: Usage | None, prompt_estimate: int, max_tokens: int, prices: Prices,
                floor: Usage | None = None) -> CostBounds:
    """The ``cost`` of a ``call`` record: exact from usage, or ``[low, upper bound]`` without
    it, where ``low`` is the cost of ``floor`` (what a streamed call provably used,
    ``stream_floor``) or 0.

    Raises ``ProviderConfigError`` if a needed price is unknown.
    """
    if usage is not None:
        c = call_cost(usage, prices)
        return CostBounds(True, c, c)
    high = cost_upper_bound(prompt_estimate, max_tokens, prices)
    if floor is None:
        return CostBounds(False, Decimal(0), high)
    # the prompt floor at the cheaper of a cache read and an uncached token: it may all have been cached
    as_read = Usage(prompt=floor.prompt, cached_read=floor.prompt, completion=floor.completion)
    return CostBounds(False, min(call_cost(as_read, prices), call_cost(floor, prices), high), high)


# No token of the tokenizers BenchClaw's catalogs name spans more UTF-8 bytes than this (their
# longest tokens are runs of spaces or punctuation of a few dozen bytes), so text of B bytes
# is at least ceil(B / MAX_TOKEN_BYTES) tokens. Deliberately loose: a floor must never be
# above what was billed.
MAX_TOKEN_BYTES = 128


def stream_floor(message_bytes: int, reply_bytes: int, text_chunks: int, max_tokens: int) -> Usage:
    """The usage a streamed call provably had when its usage is unknown (FORMAT §6,
    "Lower bound of a streamed call"): once a chunk with generated text arrived, the prompt
    was processed, at least ``ceil(message_bytes / MAX_TOKEN_BYTES)`` tokens; the completion
    is at least one token per chunk that carried text, and at least
    ``ceil(reply_bytes / MAX_TOKEN_BYTES)``, never above ``max_tokens``. Nothing before the
    first text chunk. ``message_bytes`` is the UTF-8 size of the request's message contents."""
    if min(message_bytes, reply_bytes, text_chunks, max_tokens) < 0:
        raise ValueError("byte and token counts must be non-negative")
    if text_chunks == 0:
        return ZERO_USAGE
    prompt = -(-message_bytes // MAX_TOKEN_BYTES)
    completion = min(max_tokens, max(text_chunks, -(-reply_bytes // MAX_TOKEN_BYTES)))
    return Usage(prompt=prompt, completion=completion)


def message_bytes(messages: Iterable[Mapping]) -> int:
    """UTF-8 bytes of the contents of a message list (what ``stream_floor`` counts)."""
    total = 0
    for m in messages:
        content = m.get("content")
        text = content if isinstance(content, str) else ("" if content is None else str(content))
        total += len(text.encode("utf-8"))
    return total


@dataclass(frozen=True)
class CallCost:
    """How a call is costed: its ``cost``, the ``doubts`` that made it a bound, and the
    reason it is a known zero (``unbilled``), if any."""

    cost: CostBounds
    doubts: tuple[str, ...] = ()
    unbilled: str | None = None


def call_cost_of(usage: Usage | None, prompt_estimate: int, max_tokens: int, prices: Prices, *,
                 unread: Iterable[str] = (), error: Mapping | None = None, floor: Usage | None = None) -> CallCost:
    """The cost of one ``call`` record, as the runtime records it and the verifier
    recomputes it (FORMAT.md §6):

    - usage reported and no doubt (``usage_doubts``): exact;
    - usage reported but doubted: a bound, ``[0, max(upper bound, cost of the usage as
      reported)]`` (the provider may bill what it reported; the reservation is what we
      asked for);
    - no usage, and the failure provably unbilled (``unbilled_reason``): a known zero;
    - no usage otherwise: ``[0, upper bound]``, or ``[floor cost, upper bound]`` for a
      streamed call (``floor``: ``stream_floor``).

    Raises ``ProviderConfigError`` if a needed price is unknown.
    """
    if usage is not None:
        doubts = usage_doubts(usage, prompt_estimate, max_tokens, unread)
        if not doubts:
            return CallCost(cost_bounds(usage, prompt_estimate, max_tokens, prices))
        high = max(cost_upper_bound(prompt_estimate, max_tokens, prices), call_cost(usage, prices))
        return CallCost(CostBounds(False, Decimal(0), high), doubts)
    reason = unbilled_reason(error)
    if reason is not None:
        return CallCost(CostBounds.zero(), unbilled=reason)
    return CallCost(cost_bounds(None, prompt_estimate, max_tokens, prices, floor=floor))


# ---------------------------------------------------------------------------- estimates

MESSAGE_OVERHEAD_TOKENS = 8
REQUEST_OVERHEAD_TOKENS = 16


def estimate_prompt_tokens(messages: Iterable[Mapping]) -> int:
    """A deterministic, conservative count of the input tokens of a chat request.

    Counts one token per UTF-8 byte of every message's role and content, plus a fixed
    overhead per message and per request for the chat template. Byte-level BPE and
    byte-fallback tokenizers never use more than one token per byte, so for them this is
    an upper bound (several times the real count for English text): right for ledger
    reservations and for the ``high`` bound of a call whose usage is unknown, wrong as a
    guess of the count. Non-string content is counted by its ``str``.
    """
    return REQUEST_OVERHEAD_TOKENS + sum(map(message_tokens, messages))


def message_tokens(m: Mapping) -> int:
    """One message's share of ``estimate_prompt_tokens`` (the request's overhead aside): a
    caller whose message list only grows adds the new messages' shares to a running total."""
    content = m.get("content")
    text = content if isinstance(content, str) else ("" if content is None else str(content))
    return MESSAGE_OVERHEAD_TOKENS + len(str(m.get("role", "")).encode()) + len(text.encode("utf-8"))
