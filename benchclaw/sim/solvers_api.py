"""The simulator's reading of an API description, and the contract tests it writes.

``parse_api`` reads the fixed phrases of an ``api.md`` (docs/writing-tasks.md, "API
contract tasks"): the base path, one resource with its fields and rules, the list
endpoint's paging, the status of each endpoint, the error statuses and codes, and the
documented data. ``build_cases`` turns that into one case per documented rule, the way a
careful tester works from a spec. The mistakes weaker tiers make are variants of the
same reading: test only the happy path, pin a volatile value from the example, or take
the old behaviour from the changelog.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field

__all__ = ["ApiDoc", "ApiDocError", "parse_api", "build_cases", "render", "stale"]


class ApiDocError(ValueError):
    """The document lacks a phrase the solver needs (names it)."""


@dataclass
class ApiDoc:
    base: str
    resource: str
    fields: dict[str, dict] = field(default_factory=dict)   # name -> {type, required, min, max, enum, default}
    per_page: int = 0
    max_per_page: int = 0
    filter: str = ""
    filter_value: str = ""
    filter_count: int = 0
    count: int = 0
    first: dict = field(default_factory=dict)
    valid: dict = field(default_factory=dict)
    statuses: dict = field(default_factory=dict)             # get/create/delete -> status
    not_found: tuple[int, str] = (404, "not_found")
    invalid: tuple[int, str] = (422, "invalid")
    example: dict = field(default_factory=dict)


def _m(pattern: str, text: str, what: str) -> re.Match:
    m = re.search(pattern, text, re.M)
    if not m:
        raise ApiDocError(f"the API description does not state {what}")
    return m


def _value(raw: str):
    raw = raw.strip()
    if raw.startswith("`") and raw.endswith("`"):
        return raw[1:-1]
    return int(raw) if re.fullmatch(r"-?\d+", raw) else raw


def _fields(text: str) -> dict[str, dict]:
    out = {}
    for name, kind, rule in re.findall(r"^- `(\w+)` \((string|integer)(?:, required)?\): (.+)$", text, re.M):
        line = re.search(rf"^- `{name}` \(([^)]*)\)", text, re.M).group(1)
        f: dict = {"type": kind, "required": "required" in line}
        rng = re.match(r"from (-?\d+) to (-?\d+)", rule) or re.match(r"(\d+) to (\d+) characters", rule)
        if rng and not rule.startswith("set by"):
            f["min"], f["max"] = int(rng.group(1)), int(rng.group(2))
        enum = re.match(r"one of (.+?); default `([^`]+)`", rule)
        if enum:
            f["enum"], f["default"] = re.findall(r"`([^`]+)`", enum.group(1)), enum.group(2)
        if not rule.startswith("set by"):
            out[name] = f
    return out


def parse_api(text: str) -> ApiDoc:
    """The API a document describes. Raises ApiDocError naming the missing phrase."""
    base = _m(r"^Base path: `([^`]+)`", text, "its base path").group(1)
    res = _m(r"^## Resource `(\w+)` at `([^`]+)`", text, "its resource")
    doc = ApiDoc(base=base, resource=res.group(1), fields=_fields(text))
    lst = _m(r"`per_page` defaults to (\d+) and is at most (\d+)", text, "its page size")
    doc.per_page, doc.max_per_page = int(lst.group(1)), int(lst.group(2))
    doc.filter = _m(r"Filter: `(\w+)`", text, "its list filter").group(1)
    data = _m(r"starts with (\d+) \w+, ids 1 to \d+; (\d+) of them have `\w+` `([^`]+)`", text, "its data")
    doc.count, doc.filter_count, doc.filter_value = int(data.group(1)), int(data.group(2)), data.group(3)
    first = _m(r"^\w+ 1: (.+)\.$", text, "its first record").group(1)
    doc.first = {k: _value(v) for k, v in re.findall(r"`(\w+)` is (`[^`]*`|-?\d+)", first)}
    valid = _m(r"^A valid new \w+: (.+)\.$", text, "a valid new record").group(1)
    doc.valid = {k: _value(v) for k, v in re.findall(r"`(\w+)` = (`[^`]*`|-?\d+)", valid)}
    for op, pattern in (("get", r"`GET [^`]+/\{id\}`: [^\n]*status (\d+)"), ("create", r"`POST [^`]+`: [^\n]*status (\d+)"),
                        ("delete", r"`DELETE [^`]+`: status (\d+)")):
        doc.statuses[op] = int(_m(pattern, text, f"the status of {op}").group(1))
    nf = _m(r"unknown id: status (\d+), `error.code` is `(\w+)`", text, "the not-found error")
    inv = _m(r"invalid body or parameter: status (\d+), `error.code` is `(\w+)`", text, "the validation error")
    doc.not_found, doc.invalid = (int(nf.group(1)), nf.group(2)), (int(inv.group(1)), inv.group(2))
    ex = re.search(r"```json\n(\{.*\})\n```", text)
    doc.example = json.loads(ex.group(1)) if ex else {}
    return doc


def _case(cid: str, method: str, path: str, status: int, checks: list, query: dict | None = None, body=None) -> dict:
    req: dict = {"method": method, "path": path}
    if query:
        req["query"] = query
    if body is not None:
        req["body"] = body
    return {"id": cid, "request": req, "expect": {"status": status, "body": checks}}


def build_cases(doc: ApiDoc) -> list[dict]:
    """One case per documented rule: the contract a careful tester writes."""
    col = f"{doc.base}/{doc.resource}"
    num = next(n for n, f in doc.fields.items() if f["type"] == "integer" and "min" in f)
    req_str = next(n for n, f in doc.fields.items() if f["type"] == "string" and f["required"])
    nf_status, nf_code = doc.not_found
    inv_status, inv_code = doc.invalid
    last_page = -(-doc.count // doc.per_page)
    on_last = doc.count - (last_page - 1) * doc.per_page
    first_on_last = (last_page - 1) * doc.per_page + 1
    eq = lambda p, v: {"path": p, "equals": v}  # noqa: E731
    return [
        _case("get-first", "GET", f"{col}/1", doc.statuses["get"], [eq(k, v) for k, v in doc.first.items()]),
        _case("list-default-page", "GET", col, 200, [{"path": "items", "length": doc.per_page},
                                                     eq("total", doc.count)]),
        _case("list-per-page-capped", "GET", col, 200, [eq("per_page", doc.max_per_page)],
              query={"per_page": str(doc.max_per_page * 10)}),
        _case("list-last-page", "GET", col, 200, [{"path": "items", "length": on_last},
                                                  eq("items[0].id", first_on_last)],
              query={"page": str(last_page)}),
        _case("list-filter", "GET", col, 200, [eq("total", doc.filter_count)],
              query={doc.filter: doc.filter_value}),
        _case("create-valid", "POST", col, doc.statuses["create"],
              [eq("id", doc.count + 1)] + [eq(k, f["default"]) for k, f in doc.fields.items() if "default" in f],
              body=dict(doc.valid)),
        _case(f"create-{num}-too-small", "POST", col, inv_status,
              [eq("error.code", inv_code), eq("error.field", num)],
              body={**doc.valid, num: doc.fields[num]["min"] - 1}),
        _case(f"create-{num}-too-large", "POST", col, inv_status,
              [eq("error.code", inv_code), eq("error.field", num)],
              body={**doc.valid, num: doc.fields[num]["max"] + 1}),
        _case(f"create-without-{req_str}", "POST", col, inv_status,
              [eq("error.code", inv_code), eq("error.field", req_str)],
              body={k: v for k, v in doc.valid.items() if k != req_str}),
        _case("get-unknown-id", "GET", f"{col}/{doc.count + 1000}", nf_status, [eq("error.code", nf_code)]),
        _case("delete-first", "DELETE", f"{col}/1", doc.statuses["delete"], []),
    ]


def render(cases: list[dict]) -> str:
    return json.dumps({"cases": cases}, indent=1, ensure_ascii=False) + "\n"


def stale(doc: ApiDoc, changelog: str) -> ApiDoc:
    """The API as the changelog says it *was*: a tester who read the old behaviour."""
    old = ApiDoc(**{**doc.__dict__, "fields": dict(doc.fields), "first": dict(doc.first),
                    "valid": dict(doc.valid), "statuses": dict(doc.statuses)})
    m = re.search(r"^- `per_page` now defaults to \d+ \(was (\d+)\)", changelog, re.M)
    if m:
        old.per_page = int(m.group(1))
    m = re.search(r"^- Field `(\w+)` is now `(\w+)` \(was `(\w+)`\)", changelog, re.M)
    if m and m.group(1) in old.first:
        old.first[m.group(3)] = old.first.pop(m.group(1))
    m = re.search(r"^- `POST [^`]+` now answers \d+ \(was (\d+)\)", changelog, re.M)
    if m:
        old.statuses["create"] = int(m.group(1))
    return old
