"""``jsonio``: canonical bytes whichever backend serialises, floats always the stdlib's way."""

from __future__ import annotations

import json
import random

from benchclaw.formats import jsonio


def _reference_has_float(obj, depth: int = 0) -> bool:
    """The plain walk ``_has_float`` must agree with (containers at MAX_DEPTH unread)."""
    if isinstance(obj, float):
        return True
    if depth >= jsonio.MAX_DEPTH:
        return False
    values = obj.values() if isinstance(obj, dict) else obj if isinstance(obj, (list, tuple)) else ()
    return any(isinstance(v, float) or (isinstance(v, (dict, list, tuple)) and _reference_has_float(v, depth + 1))
               for v in values)


class _F(float):
    pass


def _random_value(rng: random.Random, depth: int = 0):
    leaves = ["x", "1.5", 0, -7, 2**70, True, False, None, 0.5, 1e16, _F(2.0)]
    if depth > 4 or rng.random() < 0.4:
        return rng.choice(leaves)
    if rng.random() < 0.5:
        return {f"k{i}": _random_value(rng, depth + 1) for i in range(rng.randrange(4))}
    seq = [_random_value(rng, depth + 1) for _ in range(rng.randrange(4))]
    return tuple(seq) if rng.random() < 0.2 else seq


def test_has_float_agrees_with_the_plain_walk():
    rng = random.Random(15)
    for _ in range(3000):
        v = _random_value(rng)
        assert jsonio._has_float(v) == _reference_has_float(v), v


def test_has_float_finds_a_float_subclass_and_stops_at_max_depth():
    assert jsonio._has_float({"a": ["s", {"b": _F(1.0)}]})
    deep = 0.5
    for _ in range(jsonio.MAX_DEPTH + 1):
        deep = [deep]
    assert not jsonio._has_float(deep)  # as before: a float below MAX_DEPTH is not looked for
    assert jsonio._has_float(deep[0][0])


def test_dumps_is_the_stdlib_canonical_form():
    rng = random.Random(7)
    for _ in range(2000):
        v = _random_value(rng)
        want = json.dumps(v, sort_keys=True, separators=(",", ":"), ensure_ascii=False,
                          allow_nan=False).encode("utf-8")
        assert jsonio.dumps(v) == want, v


def test_refs_and_floats_is_blob_refs_and_the_float_walk_in_one():
    """``agent.evidence.append`` walks a body once for both; the record's bytes are those
    ``dumps`` writes (a float found means the canonical float path)."""
    from benchclaw.formats.records import blob_refs, encode_fields, refs_and_floats

    class F(float):
        pass

    class I(int):
        pass
    d = "sha256:" + "ab" * 32
    bodies = [{"a": 1}, {"a": 1.5}, {"a": [d, {"b": 2.0}]}, {"a": (1, 2.0)}, {"a": (1, 2)},
              {"x": d, "y": [None, True, "s", "literal:" + d]}, {"a": {"b": [{"c": d}]}},
              {"a": F(1)}, {"a": I(3)}, {"big": 1 << 70}]
    for body in bodies:
        refs, floats = refs_and_floats(body)
        assert refs == list(blob_refs(body)) and floats == jsonio._has_float(body), body
        assert encode_fields(1, "p", "t", "k", body, floatless=not floats) == encode_fields(1, "p", "t", "k", body)
