"""Canonical JSON bytes, with orjson when present and the standard library otherwise.

Records and digests depend on exact bytes, so every writer in BenchClaw serialises through
``dumps``: keys sorted, no spaces, UTF-8, no NaN/Infinity. The two backends produce the same
bytes for the values BenchClaw writes (str, int, bool, None, list, dict with str keys); a
test checks that. The verifier uses this module too, and works without orjson.
"""

from __future__ import annotations

import json as _json

try:  # pragma: no cover - exercised by whichever backend is installed
    import orjson as _orjson
except ImportError:  # pragma: no cover
    _orjson = None

__all__ = ["dumps", "dumps_floatless", "loads", "dumps_pretty", "JSONDecodeError", "MAX_DEPTH", "check_depth"]

JSONDecodeError = ValueError
MAX_DEPTH = 64


def _std_dumps(obj) -> bytes:
    return _json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False,
                       allow_nan=False).encode("utf-8")


def dumps(obj) -> bytes:
    """Canonical compact JSON bytes (sorted keys). Raises TypeError/ValueError on bad values."""
    if _orjson is not None:
        if _has_float(obj):
            return _std_dumps(obj)  # orjson and json format floats differently; stay canonical
        try:
            return _orjson.dumps(obj, option=_orjson.OPT_SORT_KEYS)
        except TypeError:  # e.g. an int beyond 64 bits: the stdlib handles it the same way
            return _std_dumps(obj)
    return _std_dumps(obj)


_PLAIN = frozenset({str, int, bool, type(None)})  # exact types that are never a float


def dumps_floatless(obj) -> bytes:
    """``dumps`` of a value the caller built without floats (strings, ints, booleans, None):
    the same bytes, without the walk that looks for floats. A float would be written as
    orjson writes it, so only a caller that knows there is none may use this."""
    if _orjson is not None:
        try:
            return _orjson.dumps(obj, option=_orjson.OPT_SORT_KEYS)
        except TypeError:
            pass
    return dumps(obj)


def _has_float(obj, depth: int = 0) -> bool:
    """Whether a float sits anywhere in ``obj`` within ``MAX_DEPTH`` (this runs before every
    record and blob is serialised, so it is kept cheap: one exact-type test per plain value,
    a call per container; the recursion is bounded by ``MAX_DEPTH``). A float subclass, or
    a container subclass, is found as ``isinstance`` finds it."""
    t = type(obj)
    if t is dict:
        values = obj.values()
    elif t is list or t is tuple:
        values = obj
    elif isinstance(obj, dict):
        values = obj.values()
    elif isinstance(obj, (list, tuple)):
        values = obj
    else:
        return isinstance(obj, float)
    if depth >= MAX_DEPTH:
        return False
    depth += 1
    for v in values:
        if type(v) not in _PLAIN and _has_float(v, depth):
            return True
    return False


def loads(data: bytes | str):
    """Parse JSON. Raises ValueError (JSONDecodeError) on malformed input or excess depth."""
    if _orjson is not None:
        try:
            return _orjson.loads(data)
        except _orjson.JSONDecodeError as e:
            raise ValueError(str(e)) from None
    try:
        return _json.loads(data)
    except RecursionError:
        raise ValueError("JSON nested too deeply") from None


def check_depth(obj, limit: int = MAX_DEPTH) -> None:
    """Raise ValueError if ``obj`` nests containers deeper than ``limit``."""
    stack = [(obj, 1)]
    while stack:
        cur, d = stack.pop()
        if isinstance(cur, (dict, list)):
            if d > limit:
                raise ValueError(f"JSON nested deeper than {limit}")
            stack.extend((v, d + 1) for v in (cur.values() if isinstance(cur, dict) else cur))


def dumps_pretty(obj) -> str:
    """Indented, sorted JSON text for people (not for digests)."""
    return _json.dumps(obj, indent=2, sort_keys=True, ensure_ascii=False)
