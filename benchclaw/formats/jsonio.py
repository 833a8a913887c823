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
        if isinstance(obj, float) or _has_float(obj):
            return _std_dumps(obj)  # orjson and json format floats differently; stay canonical
        try:
            return _orjson.dumps(obj, option=_orjson.OPT_SORT_KEYS)
        except TypeError:  # e.g. an int beyond 64 bits: the stdlib handles it the same way
            return _std_dumps(obj)
    return _std_dumps(obj)


_PLAIN = frozenset({str, int, bool, type(None)})  # exact types that are never a float
_NESTED = frozenset({dict, list, tuple})            # exact container types, walked in turn
_PLAIN_OR_NESTED = _PLAIN | _NESTED


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


def _has_float(obj) -> bool:
    """Whether a float sits anywhere in ``obj`` within ``MAX_DEPTH`` (iterative: this runs
    before every record and blob is serialised, so it is kept cheap). Each container's
    value types are collected at C speed (``set(map(type, ...))``); only a container
    holding a type other than the plain JSON ones is walked value by value (a float
    subclass must be found as ``isinstance`` finds it)."""
    if isinstance(obj, float):
        return True
    stack = [(obj, 0)]
    while stack:
        cur, depth = stack.pop()
        if depth >= MAX_DEPTH:
            continue
        if isinstance(cur, dict):
            cur = cur.values()
        elif not isinstance(cur, (list, tuple)):
            continue
        types = set(map(type, cur))
        if types <= _PLAIN:
            continue
        if float in types:
            return True
        if types <= _PLAIN_OR_NESTED:  # the usual case: only the containers need a look
            for v in cur:
                if type(v) in _NESTED:
                    stack.append((v, depth + 1))
            continue
        for v in cur:
            if type(v) in _PLAIN:
                continue
            if isinstance(v, float):
                return True
            if isinstance(v, (dict, list, tuple)):
                stack.append((v, depth + 1))
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
