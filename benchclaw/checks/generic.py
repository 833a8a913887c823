"""Generic checks: a file exists, its size is bounded, a JSON file has the right shape.

The JSON shape language is deliberately tiny (a type name, required keys of an object,
the item shape of an array) because a task author writes it by hand in ``checks.toml`` and
a reviewer must read it at a glance; anything richer belongs in a family check.
"""

from __future__ import annotations

from typing import Any, Mapping

from ._base import CheckType, DEFAULT_MAX_BYTES, Fail, need, read_bytes, read_json, run_validate

__all__ = ["TYPES"]

_JSON_TYPES = {
    "string": lambda v: isinstance(v, str),
    "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "boolean": lambda v: isinstance(v, bool),
    "array": lambda v: isinstance(v, list),
    "object": lambda v: isinstance(v, dict),
    "null": lambda v: v is None,
    "any": lambda v: True,
}
_MAX_SCHEMA_DEPTH = 16


def _validate_exists(params: dict) -> None:
    need(params, "path", str)


def _run_exists(params: dict, files: Mapping[str, bytes]) -> str:
    path = run_validate(params, lambda p: need(p, "path", str))
    if path not in files:
        raise Fail(f"{path}: missing (the agent did not write it)")
    return f"{path}: present, {len(files[path]):,} bytes"


def _validate_size(params: dict) -> None:
    need(params, "path", str)
    if need(params, "max_bytes", int) < 0:
        raise ValueError("field 'max_bytes': must be >= 0")
    if need(params, "min_bytes", int, 0) < 0:
        raise ValueError("field 'min_bytes': must be >= 0")


def _run_size(params: dict, files: Mapping[str, bytes]) -> str:
    run_validate(params, _validate_size)
    path = params["path"]
    data = read_bytes(files, path, max_bytes=1 << 62)
    low, high = params.get("min_bytes", 0), params["max_bytes"]
    if len(data) > high:
        raise Fail(f"{path}: {len(data):,} bytes, above the limit of {high:,}")
    if len(data) < low:
        raise Fail(f"{path}: {len(data):,} bytes, below the minimum of {low:,}")
    return f"{path}: {len(data):,} bytes (limit {high:,})"


def _validate_schema(schema: Any, where: str, depth: int = 0) -> None:
    if depth > _MAX_SCHEMA_DEPTH:
        raise ValueError(f"field '{where}': schema nested too deeply")
    if not isinstance(schema, dict) or schema.get("type") not in _JSON_TYPES:
        raise ValueError(f"field '{where}': must be a table with type one of {sorted(_JSON_TYPES)}")
    required = schema.get("required", {})
    if not isinstance(required, dict):
        raise ValueError(f"field '{where}.required': must be a table of key = schema")
    for key, sub in required.items():
        _validate_schema(sub, f"{where}.required.{key}", depth + 1)
    if "items" in schema:
        _validate_schema(schema["items"], f"{where}.items", depth + 1)


def _validate_shape(params: dict) -> None:
    need(params, "path", str)
    need(params, "max_bytes", int, DEFAULT_MAX_BYTES)
    _validate_schema(need(params, "schema", dict), "schema")


def _match(value: Any, schema: dict, where: str) -> None:
    """Raise Fail at the first place ``value`` does not follow ``schema``."""
    typ = schema["type"]
    if not _JSON_TYPES[typ](value):
        raise Fail(f"{where}: expected {typ}, got {_json_type(value)}")
    if typ == "object":
        for key, sub in (schema.get("required") or {}).items():
            if key not in value:
                raise Fail(f"{where}: missing key {key!r}")
            _match(value[key], sub, f"{where}.{key}")
    if typ == "array" and "items" in schema:
        for i, item in enumerate(value):
            _match(item, schema["items"], f"{where}[{i}]")


def _json_type(value: Any) -> str:
    for name, test in _JSON_TYPES.items():
        if name != "any" and test(value):
            return name
    return "number" if isinstance(value, float) else type(value).__name__


def _run_shape(params: dict, files: Mapping[str, bytes]) -> str:
    run_validate(params, _validate_shape)
    path = params["path"]
    obj = read_json(files, path, params.get("max_bytes", DEFAULT_MAX_BYTES))
    _match(obj, params["schema"], path)
    return f"{path}: JSON shape ok"


TYPES = {
    "file_exists": CheckType("file_exists", "the file exists", _run_exists, _validate_exists,
                             frozenset({"path"})),
    "size": CheckType("size", "the file's size is within bounds", _run_size, _validate_size,
                      frozenset({"path", "max_bytes", "min_bytes"})),
    "json_shape": CheckType("json_shape", "the file is JSON with the required keys and types",
                            _run_shape, _validate_shape,
                            frozenset({"path", "schema", "max_bytes"})),
}
