"""Value types and bounded readers shared by every check type.

Checks judge untrusted bytes (an agent's artifact) and are re-run by the offline verifier,
so everything here is pure and standard-library only, and every reader is bounded before
it decodes: an artifact is size-checked before UTF-8 decoding, JSON is depth-checked after
parsing, CSV is row- and cell-bounded. A check body signals failure by raising ``Fail``
with the short human detail; ``run_checks`` turns it (and anything unexpected) into a
failed ``CheckResult``, so no artifact can make a check raise.
"""

from __future__ import annotations

import csv
import io
import re
from dataclasses import dataclass, field
from itertools import accumulate
from typing import Any, Callable, Mapping

from ..formats import jsonio

__all__ = [
    "CheckSpec", "CheckResult", "CheckType", "Fail",
    "read_bytes", "read_text", "read_json", "read_csv", "short", "DEFAULT_MAX_BYTES",
]

DEFAULT_MAX_BYTES = 1 << 20  # 1 MiB: far above any honest artifact, far below a hostile one
MAX_CSV_ROWS = 100_000
MAX_CSV_FIELD = 4096
JSON_MAX_DEPTH = 32


class Fail(Exception):
    """Raised inside a check body: the artifact fails; ``str`` is the human detail."""


@dataclass(frozen=True)
class CheckSpec:
    """One entry of ``checks.toml``: ``params`` are every key besides id, type and gate."""

    id: str
    type: str
    gate: bool
    params: dict = field(default_factory=dict)

    @property
    def heldout(self) -> bool:
        """A check is held-out when it reads a file of the task's ``heldout/`` folder."""
        return "heldout" in self.params

    def to_dict(self) -> dict:
        return {"id": self.id, "type": self.type, "gate": self.gate, "params": dict(self.params)}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "CheckSpec":
        """Raises ValueError naming the field when ``d`` is not a check spec."""
        for key, typ in (("id", str), ("type", str), ("gate", bool)):
            if not isinstance(d.get(key), typ):
                raise ValueError(f"field '{key}' must be a {typ.__name__}")
        params = d.get("params", {})
        if not isinstance(params, dict):
            raise ValueError("field 'params' must be a table")
        return cls(d["id"], d["type"], d["gate"], dict(params))


@dataclass(frozen=True)
class CheckResult:
    """The outcome of one check on one artifact; ``detail`` says which item and why."""

    id: str
    type: str
    gate: bool
    heldout: bool
    passed: bool
    detail: str

    def to_dict(self) -> dict:
        return {"id": self.id, "type": self.type, "gate": self.gate, "heldout": self.heldout,
                "passed": self.passed, "detail": self.detail}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "CheckResult":
        """Raises ValueError naming the field when ``d`` is not a check result."""
        kinds = {"id": str, "type": str, "gate": bool, "heldout": bool, "passed": bool,
                 "detail": str}
        for key, typ in kinds.items():
            if not isinstance(d.get(key), typ):
                raise ValueError(f"field '{key}' must be a {typ.__name__}")
        return cls(**{k: d[k] for k in kinds})


@dataclass(frozen=True)
class CheckType:
    """A registry entry: ``run(params, files) -> detail`` raises Fail; ``validate(params)``
    raises ValueError("field 'x': problem") for a spec that can never work."""

    name: str
    summary: str
    run: Callable[[dict, Mapping[str, bytes]], str]
    validate: Callable[[dict], None]
    keys: frozenset = frozenset()  # the params this type understands (besides ``heldout``)


def short(text: Any, limit: int = 60) -> str:
    """A quoted, single-line, length-bounded rendering of untrusted text for a detail."""
    s = str(text)
    s = s.replace("\n", "\\n").replace("\r", "\\r")
    if len(s) > limit:
        s = s[: limit - 1] + "…"
    return repr(s)


def read_bytes(files: Mapping[str, bytes], path: str, max_bytes: int = DEFAULT_MAX_BYTES) -> bytes:
    """The artifact's bytes, or Fail when it is missing or larger than ``max_bytes``."""
    data = files.get(path)
    if data is None:
        raise Fail(f"{path}: missing (the agent did not write it)")
    if len(data) > max_bytes:
        raise Fail(f"{path}: {len(data):,} bytes, above the limit of {max_bytes:,}")
    return data


def read_text(files: Mapping[str, bytes], path: str, max_bytes: int = DEFAULT_MAX_BYTES) -> str:
    """The artifact decoded as strict UTF-8 (no NUL bytes), or Fail naming the byte."""
    data = read_bytes(files, path, max_bytes)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise Fail(f"{path}: not valid UTF-8 at byte {e.start}") from None
    nul = text.find("\x00")
    if nul >= 0:
        raise Fail(f"{path}: contains a NUL byte at character {nul} (binary, not text)")
    return text


def read_json(files: Mapping[str, bytes], path: str, max_bytes: int = DEFAULT_MAX_BYTES) -> Any:
    """The artifact parsed as JSON (bounded size and depth), or Fail saying why not."""
    text = read_text(files, path, max_bytes)
    _precheck_depth(text, path)
    try:
        obj = jsonio.loads(text.encode("utf-8"))
    except (ValueError, RecursionError) as e:
        raise Fail(f"{path}: not valid JSON ({short(e, 80)[1:-1]})") from None
    try:
        jsonio.check_depth(obj, JSON_MAX_DEPTH)
    except ValueError:
        raise Fail(f"{path}: JSON nested deeper than {JSON_MAX_DEPTH} levels") from None
    return obj


def _precheck_depth(text: str, path: str) -> None:
    """Reject deep nesting before parsing, so no parser recursion limit is ever reached.
    Brackets inside strings do not count; an unterminated string runs to the end. Done at C
    speed on the UTF-8 bytes (every check of a JSON artifact reads it; a walk per character
    cost milliseconds): fewer openers than the limit cannot nest past it; else the strings
    are cut out (split at the quotes when no backslash can escape one, else by a regular
    expression) and the depth is the running sum over the brackets left."""
    data = text.encode("utf-8", "surrogatepass")
    if data.count(b"[") + data.count(b"{") <= JSON_MAX_DEPTH:
        return
    outside = b"".join(data.split(b'"')[0::2]) if b"\\" not in data else _JSON_STRING.sub(b"", data)
    brackets = outside.translate(None, _NOT_BRACKETS)
    if len(brackets) > JSON_MAX_DEPTH and max(accumulate(map(_DEPTH_STEP.__getitem__, brackets))) > JSON_MAX_DEPTH:
        raise Fail(f"{path}: JSON nested deeper than {JSON_MAX_DEPTH} levels")


# A JSON string from its opening quote: escapes taken as pairs, closed by the first
# unescaped quote, or running to the end of the text (a lone backslash last) when never
# closed, so a match never fails once started and the pass stays linear. (Bytes: a
# character's continuation bytes are never a quote, a backslash or a bracket.)
_JSON_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*(?:"|\\?\Z)', re.S)
_NOT_BRACKETS = bytes(b for b in range(256) if b not in b"[]{}")
_DEPTH_STEP = [1 if b in b"[{" else -1 if b in b"]}" else 0 for b in range(256)]


def read_csv(files: Mapping[str, bytes], path: str, max_bytes: int = DEFAULT_MAX_BYTES) -> list[list[str]]:
    """The artifact as CSV rows (RFC 4180 quoting, bounded rows and cells), or Fail."""
    text = read_text(files, path, max_bytes)
    return parse_csv_text(text, path)


def parse_csv_text(text: str, path: str) -> list[list[str]]:
    """Rows of ``text``; Fail on malformed quoting, oversized cells or too many rows."""
    rows: list[list[str]] = []
    reader = csv.reader(io.StringIO(text, newline=""), strict=True)
    try:
        for row in reader:
            if len(rows) >= MAX_CSV_ROWS:
                raise Fail(f"{path}: more than {MAX_CSV_ROWS:,} rows")
            if any(len(cell) > MAX_CSV_FIELD for cell in row):
                raise Fail(f"{path}: row {len(rows) + 1} has a cell longer than {MAX_CSV_FIELD} characters")
            rows.append(row)
    except csv.Error as e:
        raise Fail(f"{path}: not valid CSV near row {reader.line_num} ({e})") from None
    return rows


_TYPE_NAMES = {str: "a string", int: "an integer", bool: "true or false", list: "an array",
               dict: "a table"}


def need(params: Mapping[str, Any], key: str, typ: type, default: Any = ...) -> Any:
    """``params[key]`` checked to be of ``typ``; raises ValueError("field 'key': ...").

    A missing key returns ``default`` when one is given, else raises."""
    if key not in params:
        if default is ...:
            raise ValueError(f"field '{key}': required")
        return default
    value = params[key]
    if typ is int and isinstance(value, bool) or not isinstance(value, typ):
        raise ValueError(f"field '{key}': must be {_TYPE_NAMES.get(typ, typ.__name__)}")
    return value


def need_str_list(params: Mapping[str, Any], key: str, default: Any = ...) -> list[str]:
    """A list of strings (non-empty); raises ValueError naming the field."""
    value = need(params, key, list, default)
    if value is default and default is not ...:
        return value
    if not value or not all(isinstance(v, str) and v for v in value):
        raise ValueError(f"field '{key}': must be a non-empty array of strings")
    return value


def run_validate(params: Mapping[str, Any], fn: Callable[[dict], Any]) -> Any:
    """Call a validator at run time: a bad spec fails the check instead of raising."""
    try:
        return fn(dict(params))
    except ValueError as e:
        raise Fail(f"bad check spec: {e}") from None
