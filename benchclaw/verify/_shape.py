"""The types of the record fields the verifier reads, checked once at the boundary.

A crafted bundle can put any JSON value anywhere. Rather than guard every ``.get`` in
every step (and risk treating a malformed list as an empty one, which would let a forgery
pass), each record body is checked against this registry when it is first read: a field
the steps rely on must be present and of its type, an optional one of its type or null.
After that, the steps may trust the shape. Unknown kinds and unknown fields are kept and
ignored (FORMAT.md §2).
"""

from __future__ import annotations

from ._errors import VerificationError

__all__ = ["check_body", "RUN", "JOURNAL", "LEDGER"]

STR, INT, BOOL, DICT, LIST = str, int, bool, dict, list
OPT = "optional"


def shape_of(*types, optional: bool = False, items=None) -> tuple:
    """A field's shape: its allowed types, whether it may be missing, its items' shape."""
    return (types, optional, items)


_t = shape_of  # the short name keeps the tables below one field to a line


_POLICY = {"experiment": _t(STR, optional=True), "cell": _t(STR, optional=True),
           "policy": _t(STR, optional=True), "trial": _t(STR, optional=True),
           "step": _t(INT, optional=True), "batch": _t(INT, optional=True),
           "attempt": _t(STR, optional=True), "spec_digest": _t(STR, optional=True),
           "invocation": _t(STR, optional=True), "rerun": _t(BOOL, optional=True),
           "replaces": _t(STR, optional=True)}

RUN: dict[str, dict] = {
    "run.start": {"task": _t(DICT), "tier": _t(STR), "catalog": _t(DICT), "prices": _t(DICT),
                  "policy": _t(DICT, optional=True), "ledger": _t(STR, optional=True)},
    "call": {"turn": _t(INT), "attempt": _t(INT), "params": _t(DICT), "prompt_estimate": _t(INT),
             "cost": _t(DICT), "usage": _t(DICT, optional=True), "request": _t(STR),
             "usage_raw": _t(STR, optional=True), "stream": _t(DICT, optional=True),
             "reply": _t(STR, optional=True)},
    "action": {"name": _t(STR), "permitted": _t(BOOL), "args": _t(DICT)},
    "artifact": {"path": _t(STR), "digest": _t(STR), "size": _t(INT)},
    "check": {"id": _t(STR), "passed": _t(BOOL), "gate": _t(BOOL)},
    "run.end": {"status": _t(STR), "passed": _t(BOOL), "gate_passed": _t(BOOL), "calls": _t(INT),
                "cost": _t(DICT), "usage": _t(DICT), "elapsed_ms": _t(INT, optional=True)},
}

JOURNAL: dict[str, dict] = {
    "prereg": {"experiment": _t(STR), "spec_digest": _t(STR)},
    "deviation": {"experiment": _t(STR), "spec_digest": _t(STR), "previous_digest": _t(STR, optional=True)},
    "grid.start": {"invocation": _t(STR), "spec_digest": _t(STR), "ledger": _t(STR, optional=True),
                   "cells": _t(LIST, items=STR), "tiers": _t(LIST, items=STR),
                   "policies": _t(LIST, items=STR), "all_tiers": _t(BOOL, optional=True)},
    "run": {"run_id": _t(STR), "status": _t(STR), "cell": _t(STR, optional=True),
            "tier": _t(STR, optional=True), "policy": _t(STR, optional=True),
            "trial": _t(STR, optional=True)},
    "trial": {"trial": _t(STR), "policy": _t(STR), "cell": _t(STR), "runs": _t(LIST, items=STR),
              "passed": _t(BOOL), "tier": _t(STR, optional=True), "invocation": _t(STR, optional=True)},
    "stop": {"rule": _t(STR), "cells_left": _t(LIST, items=STR)},
    "grid.end": {"status": _t(STR)},
    "correction": {"experiment": _t(STR), "claim": _t(STR), "wrong": _t(STR), "why": _t(STR),
                   "corrected": _t(STR), "hypothesis": _t(STR, optional=True),
                   "runs": _t(LIST, optional=True, items=STR)},
}

LEDGER: dict[str, dict] = {
    "ledger.open": {"limits": _t(DICT), "carried": _t(DICT, optional=True)},
    "reserve": {"id": _t(STR), "key": _t(STR), "attempt": _t(STR, optional=True)},
    "settle": {"id": _t(STR), "known": _t(BOOL)},
    "refuse": {"attempt": _t(STR, optional=True)},
    "ledger.close": {},
}


def _is(value, types: tuple) -> bool:
    if isinstance(value, bool):
        return BOOL in types
    return isinstance(value, types)


def _plain(body: dict, schema: dict) -> bool:
    """Every field of ``body`` the schema names is of one of its types exactly (or missing
    or null where optional), every item of a list too: what parsed JSON always is, checked
    with one lookup a field (``_exact``); False sends the body to ``_check_fields``."""
    memo = _EXACT.get(id(schema))
    if memo is None or memo[0] is not schema:
        memo = _EXACT[id(schema)] = (schema, _exact(schema))
    get = body.get
    for key, types, items in memo[1]:
        value = get(key)
        if type(value) not in types:
            return False
        if items is not None and value is not None and not all(type(v) is items for v in value):
            return False
    return True


def _exact(schema: dict) -> tuple:
    """(key, the exact types it may hold (null among them where optional), its items' type)
    of each field of ``schema``."""
    return tuple((key, frozenset(types) | ({type(None)} if optional else set()), items)
                 for key, (types, optional, items) in schema.items())


_EXACT: dict[int, tuple] = {}  # id(schema) -> (schema, _exact(schema)): the registries are module constants


def _check_fields(body: dict, schema: dict, path: str, line: int, prefix: str = "") -> None:
    for key, (types, optional, items) in schema.items():
        value = body.get(key)
        if value is None and optional:
            continue
        if not _is(value, types):
            raise VerificationError(path, f"field {prefix}{key} is {value!r:.60}, expected "
                                    f"{' or '.join(t.__name__ for t in types)}", line)
        if items is not None and not all(_is(v, (items,)) for v in value):
            raise VerificationError(path, f"field {prefix}{key}: every item must be a {items.__name__}", line)


def check_body(kind: str, body: dict, registry: dict, path: str, line: int) -> None:
    """Raise VerificationError naming ``path``:``line`` and the field whose type is wrong."""
    schema = registry.get(kind)
    if schema is None:
        return
    if not _plain(body, schema):  # a wrong type, or a subclass of a right one: the full check says which
        _check_fields(body, schema, path, line)
    if kind == "run.start" and isinstance(body.get("policy"), dict) and not _plain(body["policy"], _POLICY):
        _check_fields(body["policy"], _POLICY, path, line, "policy.")
