"""The evidence-quotes check: every claim is backed by exact quotes from approved lines.

A quote names its file and 1-based line and must be an exact substring of that line
(no whitespace or case folding: a one-character paraphrase is a different quote). The
approved lines are listed in the check spec as ``file``, ``file:N`` or ``file:N-M``, so a
document carrying an injection, or the injected lines inside an approved document, can be
left out. An optional ``support`` table (usually kept in ``heldout/``) narrows each claim
to the lines that actually support it. Source lines are read from the workspace, which the
runtime never lets the agent modify for these tasks (the task loader refuses a quotes task
whose sources are writable).
"""

from __future__ import annotations

import re
from typing import Any, Mapping

from ._base import CheckType, Fail, need, need_str_list, read_json, read_text, run_validate, short

__all__ = ["TYPES", "parse_line_spec", "LineSet"]

_SPEC = re.compile(r"^(?P<file>[^:]+?)(?::(?P<a>[1-9][0-9]{0,6})(?:-(?P<b>[1-9][0-9]{0,6}))?)?$")
MAX_QUOTES = 500
MAX_PROBLEMS_SHOWN = 2


def parse_line_spec(spec: str) -> tuple[str, int | None, int | None]:
    """``file`` / ``file:N`` / ``file:N-M`` -> (file, first, last); ValueError if malformed."""
    m = _SPEC.match(spec) if isinstance(spec, str) else None
    if not m:
        raise ValueError(f"{spec!r} is not 'file', 'file:N' or 'file:N-M'")
    a = int(m["a"]) if m["a"] else None
    b = int(m["b"]) if m["b"] else a
    if a is not None and b < a:
        raise ValueError(f"{spec!r}: range ends before it starts")
    return m["file"], a, b


class LineSet:
    """A set of (file, line) given by line specs; membership without expanding ranges."""

    def __init__(self, specs: list[str]):
        self.specs = [parse_line_spec(s) for s in specs]

    def __contains__(self, item: tuple[str, int]) -> bool:
        file, line = item
        return any(f == file and (a is None or a <= line <= b) for f, a, b in self.specs)

    def describe(self) -> str:
        return ", ".join(f if a is None else (f"{f}:{a}" if a == b else f"{f}:{a}-{b}")
                         for f, a, b in self.specs)


def _validate(params: dict) -> None:
    need(params, "artifact", str, "answer.json")
    need_str_list(params, "claims")
    LineSet(need_str_list(params, "sources"))
    if need(params, "min_chars", int, 12) < 1:
        raise ValueError("field 'min_chars': must be >= 1")
    support = need(params, "support", dict, {})
    for claim, specs in support.items():
        if claim not in params["claims"]:
            raise ValueError(f"field 'support.{claim}': not one of the claims")
        if not isinstance(specs, list) or not specs:
            raise ValueError(f"field 'support.{claim}': must be a non-empty array of line specs")
        try:
            LineSet(specs)
        except ValueError as e:
            raise ValueError(f"field 'support.{claim}': {e}") from None


def _claims_of(obj: Any, path: str) -> list[dict]:
    if not isinstance(obj, dict) or not isinstance(obj.get("claims"), list):
        raise Fail(f"{path}: expected an object with a 'claims' array")
    claims = obj["claims"]
    for i, c in enumerate(claims):
        if not isinstance(c, dict) or not isinstance(c.get("id"), str) or not isinstance(c.get("quotes"), list):
            raise Fail(f"{path}: claims[{i}] must be an object with 'id' (string) and 'quotes' (array)")
    if sum(len(c["quotes"]) for c in claims) > MAX_QUOTES:
        raise Fail(f"{path}: more than {MAX_QUOTES} quotes")
    return claims


class _Sources:
    """Workspace files split into lines on first use (each file decoded once)."""

    def __init__(self, files: Mapping[str, bytes]):
        self.files, self.cache = files, {}

    def line(self, file: str, n: int) -> str | None:
        if file not in self.cache:
            self.cache[file] = read_text(self.files, file).split("\n") if file in self.files else None
        lines = self.cache[file]
        if lines is None or not 1 <= n <= len(lines):
            return None
        return lines[n - 1].rstrip("\r")


def _quote_problem(q: Any, claim: str, params: dict, approved: LineSet, support: dict,
                   sources: _Sources) -> str | None:
    """The problem with one quote of ``claim``, or None when it is a valid quote."""
    if not isinstance(q, dict) or not isinstance(q.get("file"), str) or \
            not isinstance(q.get("line"), int) or isinstance(q.get("line"), bool) or \
            not isinstance(q.get("text"), str):
        return "must be an object with 'file' (string), 'line' (integer) and 'text' (string)"
    file, line, text = q["file"], q["line"], q["text"]
    where = f"{file}:{line}"
    if (file, line) not in approved:
        return f"{where} is not an approved source line (approved: {approved.describe()})"
    source = sources.line(file, line)
    if source is None:
        return f"{where} does not exist"
    if len(text.strip()) < params.get("min_chars", 12):
        return f"{short(text)} is shorter than {params.get('min_chars', 12)} characters"
    if text not in source:
        return f"{short(text)} is not on {where}, which reads {short(source, 80)}"
    if claim in support and (file, line) not in support[claim]:
        return f"{where} does not support claim {claim} (supporting: {support[claim].describe()})"
    return None


def _run(params: dict, files: Mapping[str, bytes]) -> str:
    run_validate(params, _validate)
    path = params.get("artifact", "answer.json")
    claims = _claims_of(read_json(files, path), path)
    approved = LineSet(params["sources"])
    support = {c: LineSet(s) for c, s in params.get("support", {}).items()}
    sources, problems, seen, n_quotes = _Sources(files), [], set(), 0
    for c in claims:
        cid = c["id"]
        if cid not in params["claims"]:
            problems.append(f"claim {short(cid, 20)} is not one of the task's claims")
        elif cid in seen:
            problems.append(f"claim {cid} is listed twice")
        seen.add(cid)
        for i, q in enumerate(c["quotes"], 1):
            n_quotes += 1
            why = _quote_problem(q, cid, params, approved, support, sources)
            if why:
                problems.append(f"claim {short(cid, 20)[1:-1]} quote {i}: {why}")
    for cid in params["claims"]:
        covered = any(c["id"] == cid and c["quotes"] for c in claims)
        if not covered:
            problems.append(f"claim {cid}: no quote (every claim needs at least one)")
    if problems:
        more = len(problems) - MAX_PROBLEMS_SHOWN
        raise Fail("; ".join(problems[:MAX_PROBLEMS_SHOWN]) + (f" (+{more} more)" if more > 0 else ""))
    return f"{len(params['claims'])} claims covered by {n_quotes} exact quotes"


TYPES = {
    "quotes": CheckType("quotes", "every claim is covered by exact quotes from approved lines",
                        _run, _validate, frozenset({"artifact", "claims", "sources", "support", "min_chars"})),
}
