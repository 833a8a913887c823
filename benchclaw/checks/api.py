"""The API contract check: the agent's test cases pass on the right server and catch wrong ones.

The artifact (``contract.json``) is a list of cases: one request each, and the properties
its response must have (status, values at paths, types, lengths, absent keys). The check
runs every case against the task's correct implementation, a declarative model
interpreted by ``apimodel``, under two volatile seeds (so a case that pins a request id or
a timestamp fails, as it would against a real server); every case must pass. A held-out
check also runs the cases against faulty implementations (the model plus a patch: a
renamed field, a wrong status, a missing validation, an off-by-one page size); each must
be caught, i.e. fail at least one case. Nothing is loaded as code and nothing touches the
network, so the verifier re-runs this check as it is.

Contract file format (docs/writing-tasks.md, "API contract tasks")::

    {"cases": [{"id": "list-default-page",
                "request": {"method": "GET", "path": "/v2/orders", "query": {"page": "2"}},
                "expect": {"status": 200,
                           "body": [{"path": "items", "length": 25},
                                    {"path": "items[0].id", "equals": 26}]}}]}
"""

from __future__ import annotations

import re
from typing import Any, Mapping

from ._base import CheckType, Fail, need, read_json, run_validate, short
from .apimodel import ApiModel, ModelError, Response, apply_patch, parse_model

__all__ = ["TYPES", "parse_contract", "Case"]

MAX_CONTRACT_BYTES = 256 << 10
MAX_CASES = 200
MAX_ASSERTIONS = 50
SEEDS = (1, 2)
_METHODS = ("GET", "POST", "PUT", "PATCH", "DELETE")
_OPS = ("equals", "type", "length", "absent", "present")  # see _JUDGES
_JSON_TYPES = {"string": lambda v: isinstance(v, str),
               "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
               "number": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
               "boolean": lambda v: isinstance(v, bool), "array": lambda v: isinstance(v, list),
               "object": lambda v: isinstance(v, dict), "null": lambda v: v is None}
_PATH = re.compile(r"^(?:[A-Za-z_][\w-]*|\[\d{1,6}\])(?:\.[A-Za-z_][\w-]*|\[\d{1,6}\])*$")
_KEYS = frozenset({"artifact", "model", "mutants"})
_MISSING = object()


class Case:
    """One validated case: ``request`` fields and ``assertions`` [(path, op, value)]."""

    def __init__(self, cid: str, method: str, path: str, query: dict, body: Any, status: int,
                 assertions: list[tuple[str, str, Any]]):
        self.id, self.method, self.path, self.query, self.body = cid, method, path, query, body
        self.status, self.assertions = status, assertions

    def failure(self, resp: Response) -> str | None:
        """Why ``resp`` breaks this case, or None when it holds."""
        if resp.status != self.status:
            return f"status {resp.status}, expected {self.status}"
        for path, op, want in self.assertions:
            got = _at(resp.body, path)
            why = _judge(op, want, got)
            if why:
                return f"{path}: {why}"
        return None


def _at(body: Any, path: str) -> Any:
    node = body
    for part in re.findall(r"\[\d+\]|[^.\[\]]+", path):
        if part.startswith("["):
            i = int(part[1:-1])
            node = node[i] if isinstance(node, list) and i < len(node) else _MISSING
        else:
            node = node.get(part, _MISSING) if isinstance(node, dict) else _MISSING
        if node is _MISSING:
            return _MISSING
    return node


def _equals(want: Any, got: Any) -> str | None:
    same = got == want and type(got) is type(want) or \
        isinstance(got, (int, float)) and isinstance(want, (int, float)) and \
        not isinstance(got, bool) and not isinstance(want, bool) and got == want
    return None if same else f"expected {short(want, 40)}, got {short(got, 40)}"


def _type(want: str, got: Any) -> str | None:
    return None if _JSON_TYPES[want](got) else f"expected a {want}, got {short(got, 40)}"


def _length(want: int, got: Any) -> str | None:
    n = len(got) if isinstance(got, (list, str, dict)) else None
    return None if n == want else f"expected length {want}, got {n if n is not None else short(got, 40)}"


# assertion name -> judge(wanted, value at the path) -> why it fails, or None
_JUDGES = {"equals": _equals, "type": _type, "length": _length, "present": lambda want, got: None}


def _judge(op: str, want: Any, got: Any) -> str | None:
    if op == "absent":
        return None if got is _MISSING else f"expected no value, got {short(got, 40)}"
    if got is _MISSING:
        return "missing"
    return _JUDGES[op](want, got)


def _assertion(a: Any, where: str) -> tuple[str, str, Any]:
    if not isinstance(a, dict) or not isinstance(a.get("path"), str) or not _PATH.match(a["path"]):
        raise Fail(f"{where}: needs a 'path' like \"items[0].id\"")
    ops = [k for k in a if k != "path"]
    if len(ops) != 1 or ops[0] not in _OPS:
        raise Fail(f"{where}: needs exactly one of {', '.join(_OPS)}")
    op, value = ops[0], a[ops[0]]
    if op in ("absent", "present") and value is not True:
        raise Fail(f"{where}.{op}: must be true")
    if op == "type" and value not in _JSON_TYPES:
        raise Fail(f"{where}.type: must be one of {', '.join(_JSON_TYPES)}")
    if op == "length" and (not isinstance(value, int) or isinstance(value, bool) or value < 0):
        raise Fail(f"{where}.length: must be a whole number")
    return a["path"], op, value


def _case(c: Any, i: int, seen: set) -> Case:
    where = f"cases[{i}]"
    if not isinstance(c, dict) or set(c) - {"id", "request", "expect", "note"}:
        raise Fail(f"{where}: must be an object with id, request, expect (and an optional note)")
    cid = c.get("id")
    if not isinstance(cid, str) or not cid or len(cid) > 80 or cid in seen:
        raise Fail(f"{where}.id: must be a unique non-empty string")
    seen.add(cid)
    req, exp = c.get("request"), c.get("expect")
    if not isinstance(req, dict) or set(req) - {"method", "path", "query", "body"}:
        raise Fail(f"{where}.request: an object with method, path, optional query and body")
    if req.get("method") not in _METHODS or not isinstance(req.get("path"), str) \
            or not req["path"].startswith("/"):
        raise Fail(f"{where}.request: method must be one of {', '.join(_METHODS)}, path must start with '/'")
    query = req.get("query", {})
    if not isinstance(query, dict) or not all(isinstance(v, str) for v in query.values()):
        raise Fail(f"{where}.request.query: an object of strings")
    if not isinstance(exp, dict) or set(exp) - {"status", "body"} or \
            not isinstance(exp.get("status"), int) or isinstance(exp.get("status"), bool):
        raise Fail(f"{where}.expect: an object with an integer status and an optional body array")
    body = exp.get("body", [])
    if not isinstance(body, list) or len(body) > MAX_ASSERTIONS:
        raise Fail(f"{where}.expect.body: an array of at most {MAX_ASSERTIONS} assertions")
    asserts = [_assertion(a, f"{where}.expect.body[{j}]") for j, a in enumerate(body)]
    return Case(cid, req["method"], req["path"], dict(query), req.get("body"), exp["status"], asserts)


def parse_contract(obj: Any, path: str) -> list[Case]:
    """The cases of a contract object; raises Fail naming the case and field."""
    if not isinstance(obj, dict) or not isinstance(obj.get("cases"), list):
        raise Fail(f"{path}: must be an object with a \"cases\" array")
    cases = obj["cases"]
    if not cases or len(cases) > MAX_CASES:
        raise Fail(f"{path}: must hold 1 to {MAX_CASES} cases")
    seen: set = set()
    try:
        return [_case(c, i, seen) for i, c in enumerate(cases)]
    except Fail as e:
        raise Fail(f"{path}: {e}") from None


# ---------------------------------------------------------------------------- the check

def _validate(params: dict) -> None:
    need(params, "artifact", str)
    need(params, "model", str)
    mutants = need(params, "mutants", list, [])
    ids = set()
    for i, m in enumerate(mutants):
        if not isinstance(m, dict) or not isinstance(m.get("id"), str) or m["id"] in ids:
            raise ValueError(f"field 'mutants[{i}]': needs a unique string 'id'")
        ids.add(m["id"])
        if not isinstance(m.get("label", ""), str) or not isinstance(m.get("patch"), list):
            raise ValueError(f"field 'mutants[{i}]': needs a 'patch' array (and an optional label)")


def _model(params: dict, files: Mapping[str, bytes]) -> dict:
    path = params["model"]
    try:
        obj = read_json(files, path)
        parse_model(obj)
    except (Fail, ModelError) as e:
        raise Fail(f"bad task model: {path}: {e}") from None
    return obj


def _run_case(model: ApiModel, case: Case, seed: int) -> str | None:
    resp = model.handle(case.method, case.path, case.query, case.body, seed)
    return case.failure(resp)


def _mutant(obj: dict, m: dict) -> ApiModel:
    try:
        return parse_model(apply_patch(obj, m["patch"]))
    except ModelError as e:
        raise Fail(f"bad task mutant {m['id']!r}: {e}") from None


def _run(params: dict, files: Mapping[str, bytes]) -> str:
    run_validate(params, _validate)
    obj = _model(params, files)
    path = params["artifact"]
    cases = parse_contract(read_json(files, path, max_bytes=MAX_CONTRACT_BYTES), path)
    correct = parse_model(obj)
    for seed in SEEDS:
        for case in cases:
            why = _run_case(correct, case, seed)
            if why:
                again = "" if seed == SEEDS[0] else " on a second request (a volatile value?)"
                raise Fail(f"case {case.id!r} fails on the correct implementation{again}: {why}")
    missed = []
    for m in params.get("mutants", []):
        bad = _mutant(obj, m)
        if not any(_run_case(bad, c, SEEDS[0]) for c in cases):
            missed.append(f"{m['id']} ({m['label']})" if m.get("label") else m["id"])
    if missed:
        raise Fail(f"{len(missed)} of {len(params['mutants'])} faulty implementations pass every case: "
                   + "; ".join(missed[:3]) + (f" (+{len(missed) - 3} more)" if len(missed) > 3 else ""))
    caught = f"; all {len(params['mutants'])} faulty implementations caught" if params.get("mutants") else ""
    return f"{len(cases)} cases pass on the correct implementation{caught}"


TYPES = {
    "api_contract": CheckType("api_contract", "the contract cases pass on the correct implementation "
                              "and catch every faulty one", _run, _validate, _KEYS),
}
