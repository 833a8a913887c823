"""A small declarative HTTP API, interpreted in-process: the implementations of the api family.

Contract tests are judged by running them against implementations: the correct one must
pass every case, and each held-out faulty one must fail at least one. Loading Python from
a task folder would make the verifier execute untrusted code, so an implementation is
DATA: a JSON model of resources (fields with their output names, types and validation
rules; seed rows; list, get, create and delete behaviour; error statuses and codes) that
this module interprets. A faulty implementation is the correct model plus a patch (rename
a field's output name, change a status, drop a validation rule, shift a page size), so a
task author writes a mutant in one line and the verifier re-runs it with no code at all.

Every request runs against a fresh copy of the seeded state, so cases are independent and
their order does not matter. Responses carry volatile values (``request_id`` and
``created_at``) derived from a ``seed``; the check runs the correct model under two seeds,
so a case that pins a volatile value fails, as it would against a real server.
Format: docs/writing-tasks.md, "API contract tasks".
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any

__all__ = ["ApiModel", "ModelError", "Response", "apply_patch", "parse_model"]

_TYPES = {"string": str, "integer": int, "boolean": bool}
_FIELD_KEYS = {"name", "out", "in", "type", "required", "min", "max", "min_length", "max_length", "enum",
               "default", "generated", "volatile", "unique"}
_RESOURCE_KEYS = {"name", "path", "fields", "seed", "list", "get", "create", "delete"}
_LIST_KEYS = {"status", "items", "page_param", "size_param", "first_page", "default_size", "max_size",
              "oversize", "filters", "total", "total_counts"}
_ERRORS = ("not_found", "invalid", "conflict", "method_not_allowed")
MAX_SEED_ROWS = 500


class ModelError(ValueError):
    """The model (or a patch) is malformed; ``str`` names the field."""


@dataclass(frozen=True)
class Response:
    status: int
    body: Any   # a JSON value, or None for no body


def _need(d: Any, key: str, typ, where: str, default: Any = ...) -> Any:
    if not isinstance(d, dict) or key not in d:
        if default is ...:
            raise ModelError(f"{where}.{key}: required")
        return default
    v = d[key]
    if typ is int and isinstance(v, bool) or not isinstance(v, typ):
        raise ModelError(f"{where}.{key}: must be {getattr(typ, '__name__', typ)}")
    return v


def _check_keys(d: dict, known: set, where: str) -> None:
    extra = sorted(set(d) - known)
    if extra:
        raise ModelError(f"{where}: unknown key {extra[0]!r}")


def _validate_field(f: Any, where: str) -> None:
    if not isinstance(f, dict):
        raise ModelError(f"{where}: must be an object")
    _check_keys(f, _FIELD_KEYS, where)
    _need(f, "name", str, where)
    _need(f, "out", str, where)
    _need(f, "in", str, where, None)
    if f.get("volatile") not in (None, "timestamp"):
        raise ModelError(f"{where}.volatile: only \"timestamp\" is known")
    if "volatile" not in f and f.get("type") not in _TYPES:
        raise ModelError(f"{where}.type: must be one of {sorted(_TYPES)}")
    for key in ("min", "max", "min_length", "max_length"):
        _need(f, key, int, where, None)
    if "enum" in f and not isinstance(f["enum"], list):
        raise ModelError(f"{where}.enum: must be an array")


def _validate_resource(r: Any, where: str) -> None:
    if not isinstance(r, dict):
        raise ModelError(f"{where}: must be an object")
    _check_keys(r, _RESOURCE_KEYS, where)
    _need(r, "name", str, where)
    if not _need(r, "path", str, where).startswith("/"):
        raise ModelError(f"{where}.path: must start with '/'")
    fields = _need(r, "fields", list, where)
    for i, f in enumerate(fields):
        _validate_field(f, f"{where}.fields[{i}]")
    if not fields or fields[0].get("generated") is not True or fields[0].get("type") != "integer":
        raise ModelError(f"{where}.fields[0]: must be the generated integer id")
    seed = _need(r, "seed", list, where, [])
    if len(seed) > MAX_SEED_ROWS or not all(isinstance(s, dict) for s in seed):
        raise ModelError(f"{where}.seed: at most {MAX_SEED_ROWS} objects")
    lst = _need(r, "list", dict, where, None)
    if lst is not None:
        _check_keys(lst, _LIST_KEYS, f"{where}.list")
        for key in ("status", "first_page", "default_size", "max_size"):
            _need(lst, key, int, f"{where}.list")
        if lst.get("oversize", "clamp") not in ("clamp", "invalid", "ignore"):
            raise ModelError(f"{where}.list.oversize: clamp, invalid or ignore")
        if lst.get("total_counts", "all") not in ("all", "page"):
            raise ModelError(f"{where}.list.total_counts: all or page")
    for op in ("get", "create", "delete"):
        spec = _need(r, op, dict, where, None)
        if spec is not None:
            _need(spec, "status", int, f"{where}.{op}")


def parse_model(obj: Any) -> "ApiModel":
    """Validate a model object; raises ModelError naming the field."""
    if not isinstance(obj, dict) or obj.get("v") != 1:
        raise ModelError("model: must be an object with v = 1")
    _check_keys(obj, {"v", "name", "prefix", "request_id", "resources", "errors"}, "model")
    prefix = _need(obj, "prefix", str, "model", "")
    resources = _need(obj, "resources", list, "model")
    for i, r in enumerate(resources):
        _validate_resource(r, f"model.resources[{i}]")
    errors = _need(obj, "errors", dict, "model")
    for name in _ERRORS:
        e = _need(errors, name, dict, "model.errors")
        _need(e, "status", int, f"model.errors.{name}")
        _need(e, "code", str, f"model.errors.{name}")
    _need(obj, "request_id", bool, "model", True)
    return ApiModel(obj, prefix)


def apply_patch(obj: Any, patch: list) -> Any:
    """A deep copy of ``obj`` with each ``{"path": "a.b.0.c", "value": v}`` set (or, with
    ``"remove": true``, deleted). Raises ModelError for a path that does not exist."""
    out = _copy(obj)
    if not isinstance(patch, list) or not patch:
        raise ModelError("patch: must be a non-empty array")
    for i, op in enumerate(patch):
        if not isinstance(op, dict) or not isinstance(op.get("path"), str) or \
                ("value" in op) == bool(op.get("remove")):
            raise ModelError(f"patch[{i}]: needs 'path' and exactly one of 'value' or 'remove'")
        *parents, last = op["path"].split(".")
        node = out
        for part in parents:
            node = _step(node, part, op["path"])
        key: Any = int(last) if isinstance(node, list) and last.isdigit() else last
        if isinstance(node, list) and not (isinstance(key, int) and key < len(node)) or \
                isinstance(node, dict) and op.get("remove") and key not in node:
            raise ModelError(f"patch[{i}]: {op['path']!r} does not exist")
        if op.get("remove"):
            del node[key]
        else:
            node[key] = _copy(op["value"])
    return out


def _copy(value: Any) -> Any:
    """A deep copy of JSON/TOML data: new dicts and lists, the same (immutable) leaves.
    ``copy.deepcopy`` did the same at several times the cost (its memo and dispatch), and
    every faulty implementation of every ``api_contract`` check is one such copy."""
    if isinstance(value, dict):
        return {k: _copy(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_copy(v) for v in value]
    return value


def _step(node: Any, part: str, path: str) -> Any:
    if isinstance(node, list) and part.isdigit() and int(part) < len(node):
        return node[int(part)]
    if isinstance(node, dict) and part in node:
        return node[part]
    raise ModelError(f"patch: {path!r} does not exist")


# ---------------------------------------------------------------------------- the server

class ApiModel:
    """A validated model; ``handle`` answers one request on a fresh copy of the seed."""

    def __init__(self, obj: dict, prefix: str) -> None:
        self.obj = obj
        self.prefix = prefix.rstrip("/")
        self.errors = obj["errors"]

    def handle(self, method: str, path: str, query: dict[str, str], body: Any, seed: int) -> Response:
        ctx = _Request(self, method.upper(), path, query, body, seed)
        return ctx.answer()


class _Request:
    def __init__(self, model: ApiModel, method: str, path: str, query: dict, body: Any, seed: int):
        self.m, self.method, self.path, self.query, self.body, self.seed = model, method, path, query, body, seed

    # -- helpers -------------------------------------------------------------------

    def _volatile_id(self) -> str:
        h = hashlib.sha256(f"{self.seed}|{self.method}|{self.path}".encode()).hexdigest()
        return f"req_{h[:16]}"

    def _stamp(self, row_id: int) -> str:
        day, minute = 1 + self.seed % 27, row_id % 60
        return f"2026-03-{day:02d}T09:{minute:02d}:00Z"

    def _reply(self, status: int, body: Any) -> Response:
        if isinstance(body, dict) and self.m.obj.get("request_id", True):
            body = {**body, "request_id": self._volatile_id()}
        return Response(status, body)

    def _error(self, name: str, **extra: Any) -> Response:
        e = self.m.errors[name]
        return self._reply(e["status"], {"error": {"code": e["code"], **extra}})

    def _rows(self, res: dict) -> list[dict]:
        rows = []
        for i, seed_row in enumerate(res.get("seed", []), 1):
            rows.append({**seed_row, res["fields"][0]["name"]: i})
        return rows

    def _render(self, res: dict, row: dict) -> dict:
        out = {}
        for f in res["fields"]:
            if f.get("volatile") == "timestamp":
                out[f["out"]] = self._stamp(row[res["fields"][0]["name"]])
            else:
                out[f["out"]] = row.get(f["name"], f.get("default"))
        return out

    # -- routing -------------------------------------------------------------------

    def answer(self) -> Response:
        path = self.path.split("?", 1)[0]
        if not path.startswith(self.m.prefix + "/"):
            return self._error("not_found")
        rest = path[len(self.m.prefix):]
        for res in self.m.obj["resources"]:
            if rest == res["path"]:
                return self._collection(res)
            if rest.startswith(res["path"] + "/") and "/" not in rest[len(res["path"]) + 1:]:
                return self._item(res, rest[len(res["path"]) + 1:])
        return self._error("not_found")

    def _collection(self, res: dict) -> Response:
        if self.method == "GET" and res.get("list") is not None:
            return self._list(res)
        if self.method == "POST" and res.get("create") is not None:
            return self._create(res)
        return self._error("method_not_allowed")

    def _item(self, res: dict, ident: str) -> Response:
        if self.method not in ("GET", "DELETE") or res.get(self.method.lower()) is None:
            return self._error("method_not_allowed")
        rows = self._rows(res)
        key = res["fields"][0]["name"]
        canonical = ident.isdigit() and len(ident) < 12 and str(int(ident)) == ident
        row = next((r for r in rows if r[key] == int(ident)), None) if canonical else None
        if row is None:
            return self._error("not_found")
        if self.method == "DELETE":
            return Response(res["delete"]["status"], None)
        return self._reply(res["get"]["status"], self._render(res, row))

    # -- list ----------------------------------------------------------------------

    def _int_param(self, name: str, default: int, low: int) -> int | Response:
        raw = self.query.get(name)
        if raw is None:
            return default
        if not isinstance(raw, str) or not raw.isdigit() or len(raw) > 9 or int(raw) < low:
            return self._error("invalid", field=name)
        return int(raw)

    def _list(self, res: dict) -> Response:
        spec = res["list"]
        page = self._int_param(spec.get("page_param", "page"), spec["first_page"], spec["first_page"])
        size = self._int_param(spec.get("size_param", "per_page"), spec["default_size"], 1)
        for v in (page, size):
            if isinstance(v, Response):
                return v
        if size > spec["max_size"]:
            mode = spec.get("oversize", "clamp")
            if mode == "invalid":
                return self._error("invalid", field=spec.get("size_param", "per_page"))
            size = spec["max_size"] if mode == "clamp" else size
        rows = self._rows(res)
        by_out = {f["out"]: f for f in res["fields"]}
        for name in spec.get("filters", []):
            if name in self.query and name in by_out:
                rows = [r for r in rows if str(r.get(by_out[name]["name"], by_out[name].get("default")))
                        == self.query[name]]
        start = (page - spec["first_page"]) * size
        items = rows[start:start + size]
        body = {spec.get("items", "items"): [self._render(res, r) for r in items],
                spec.get("page_param", "page"): page, spec.get("size_param", "per_page"): size}
        if spec.get("total"):
            body[spec["total"]] = len(items) if spec.get("total_counts") == "page" else len(rows)
        return self._reply(spec["status"], body)

    # -- create --------------------------------------------------------------------

    def _create(self, res: dict) -> Response:
        if not isinstance(self.body, dict):
            return self._error("invalid", field=None)
        rows = self._rows(res)
        row: dict = {}
        for f in res["fields"]:
            if f.get("generated") or f.get("volatile"):
                continue
            key = f.get("in", f["out"])
            if _invalid(f, key, self.body):
                return self._error("invalid", field=key)
            if key in self.body:
                row[f["name"]] = self.body[key]
            elif "default" in f:
                row[f["name"]] = f["default"]
            if f.get("unique") and any(r.get(f["name"]) == row.get(f["name"]) for r in rows):
                return self._error("conflict", field=f["out"])
        row[res["fields"][0]["name"]] = len(rows) + 1
        return self._reply(res["create"]["status"], self._render(res, row))


def _invalid(f: dict, key: str, body: dict) -> bool:
    if key not in body:
        return bool(f.get("required"))
    v = body[key]
    typ = _TYPES[f["type"]]
    if not isinstance(v, typ) or typ is int and isinstance(v, bool):
        return True
    if "enum" in f and v not in f["enum"]:
        return True
    if isinstance(v, int) and ("min" in f and v < f["min"] or "max" in f and v > f["max"]):
        return True
    if isinstance(v, str) and ("min_length" in f and len(v) < f["min_length"] or
                               "max_length" in f and len(v) > f["max_length"]):
        return True
    return False
