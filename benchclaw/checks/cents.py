"""The integer-cents CSV check: a ledger that keeps every input row and adds up exactly.

Money in a ledger is an integer number of cents written as plain digits with an optional
leading minus: ``12.3``, ``1,234`` or ``0.30000000000000004`` are not cents, whatever they
mean, and fail. The check compares the ledger to the task's source CSV row by row (no row
lost, duplicated or reordered; the group column copied), checks the totals file against
the ledger's own rows, and, when the spec carries ``expected_amounts``/``expected_totals``
(usually from ``heldout/``), checks every value exactly. All arithmetic is on ints.
"""

from __future__ import annotations

import re
from collections import Counter
from typing import Mapping

from ._base import CheckType, Fail, need, need_str_list, parse_csv_text, read_csv, read_text, \
    run_validate, short

__all__ = ["TYPES", "CENTS_RE"]

_KEYS = frozenset({"artifact", "source", "header", "id_column", "group_column", "amount_column",
                   "totals", "totals_header", "grand_label", "expected_amounts", "expected_totals"})
CENTS_RE = re.compile(r"^-?(0|[1-9][0-9]{0,14})$")


def _validate(params: dict) -> None:
    need(params, "artifact", str)
    need(params, "source", str)
    header = need_str_list(params, "header")
    for key in ("id_column", "group_column", "amount_column"):
        if need(params, key, str) not in header:
            raise ValueError(f"field '{key}': {params[key]!r} is not in the header")
    if "totals" in params:
        need(params, "totals", str)
        if len(need_str_list(params, "totals_header")) != 2:
            raise ValueError("field 'totals_header': must name exactly two columns")
        need(params, "grand_label", str, "TOTAL")
    for key in ("expected_amounts", "expected_totals"):
        for k, v in need(params, key, dict, {}).items():
            if not isinstance(v, int) or isinstance(v, bool):
                raise ValueError(f"field '{key}.{k}': must be an integer number of cents")


def _source_rows(params: dict, files: Mapping[str, bytes]) -> list[tuple[str, str]]:
    """(id, group) of every data row of the source CSV, in order."""
    path = params["source"]
    rows = parse_csv_text(read_text(files, path), path)
    if not rows:
        raise Fail(f"source {path} is empty")
    head = rows[0]
    try:
        i, g = head.index(params["id_column"]), head.index(params["group_column"])
    except ValueError:
        raise Fail(f"source {path}: header lacks {params['id_column']!r} or {params['group_column']!r}") from None
    return [(r[i], r[g]) for r in rows[1:] if len(r) > max(i, g)]


def _ledger(params: dict, files: Mapping[str, bytes]) -> list[list[str]]:
    path, header = params["artifact"], params["header"]
    rows = read_csv(files, path)
    if not rows or rows[0] != header:
        got = ",".join(rows[0]) if rows else "nothing"
        raise Fail(f"{path}: header must be {','.join(header)!r}, got {short(got)}")
    for n, row in enumerate(rows[1:], 2):
        if len(row) != len(header):
            raise Fail(f"{path}: line {n} has {len(row)} fields, expected {len(header)}")
    return rows[1:]


def _compare_ids(path: str, want: list[str], got: list[str]) -> None:
    """Fail naming the first lost, duplicated, unknown or reordered row id."""
    cw, cg = Counter(want), Counter(got)
    lost = [i for i in want if cg[i] < cw[i]]
    if lost:
        raise Fail(f"{path}: row id {short(lost[0], 30)} from the source is missing "
                   f"({len(set(lost))} lost; {len(got)} rows instead of {len(want)})")
    extra = [i for i in got if cg[i] > cw[i]]
    if extra:
        kind = "duplicated" if extra[0] in cw else "not in the source"
        raise Fail(f"{path}: row id {short(extra[0], 30)} is {kind}")
    for n, (w, g) in enumerate(zip(want, got), 2):
        if w != g:
            raise Fail(f"{path}: rows reordered: line {n} is {short(g, 30)}, expected {short(w, 30)}")


def _amounts(params: dict, rows: list[list[str]]) -> list[int]:
    header, path = params["header"], params["artifact"]
    a, i = header.index(params["amount_column"]), header.index(params["id_column"])
    out = []
    for n, row in enumerate(rows, 2):
        if not CENTS_RE.match(row[a]) or row[a] == "-0":
            raise Fail(f"{path}: line {n} (id {short(row[i], 30)}): amount {short(row[a], 30)} "
                       "is not an integer number of cents (digits, optional leading '-')")
        out.append(int(row[a]))
    return out


def _totals(params: dict, files: Mapping[str, bytes], groups: list[str], cents: list[int]) -> dict[str, int]:
    """Check the totals file against the ledger; returns its totals by key."""
    path, header, label = params["totals"], params["totals_header"], params.get("grand_label", "TOTAL")
    rows = read_csv(files, path)
    if not rows or rows[0] != header:
        got = ",".join(rows[0]) if rows else "nothing"
        raise Fail(f"{path}: header must be {','.join(header)!r}, got {short(got)}")
    sums: dict[str, int] = {}
    for g, c in zip(groups, cents):
        sums[g] = sums.get(g, 0) + c
    want = [(g, sums[g]) for g in sorted(sums)] + [(label, sum(cents))]
    got = rows[1:]
    for n, (w, row) in enumerate(zip(want, got), 2):
        if len(row) != 2 or row[0] != w[0]:
            raise Fail(f"{path}: line {n} should be the total of {short(w[0], 30)}, got {short(','.join(row))}")
        if not CENTS_RE.match(row[1]) or row[1] == "-0":
            raise Fail(f"{path}: line {n} ({w[0]}): total {short(row[1], 30)} is not an integer number of cents")
        if int(row[1]) != w[1]:
            raise Fail(f"{path}: line {n} ({w[0]}): total {row[1]} does not match the ledger rows, "
                       f"which add up to {w[1]}")
    if len(got) != len(want):
        raise Fail(f"{path}: {len(got)} total rows, expected {len(want)} "
                   f"(one per {header[0]} in ascending order, then {label})")
    return dict(want)


def _expected(params: dict, ids: list[str], cents: list[int], totals: dict[str, int] | None) -> None:
    path = params["artifact"]
    for n, (i, c) in enumerate(zip(ids, cents), 2):
        want = params.get("expected_amounts", {}).get(i)
        if want is not None and want != c:
            raise Fail(f"{path}: line {n} (id {i}): expected {want} cents, got {c}")
    for key, want in params.get("expected_totals", {}).items():
        got = (totals or {}).get(key)
        if got != want:
            raise Fail(f"{params.get('totals', path)}: total of {key}: expected {want} cents, got {got}")


def _run(params: dict, files: Mapping[str, bytes]) -> str:
    run_validate(params, _validate)
    header, path = params["header"], params["artifact"]
    rows = _ledger(params, files)
    source = _source_rows(params, files)
    ids = [r[header.index(params["id_column"])] for r in rows]
    _compare_ids(path, [s[0] for s in source], ids)
    gi = header.index(params["group_column"])
    for n, (row, (sid, group)) in enumerate(zip(rows, source), 2):
        if row[gi] != group:
            raise Fail(f"{path}: line {n} (id {sid}): {params['group_column']} is {short(row[gi], 30)}, "
                       f"the source says {short(group, 30)}")
    cents = _amounts(params, rows)
    totals = _totals(params, files, [r[gi] for r in rows], cents) if "totals" in params else None
    _expected(params, ids, cents, totals)
    checked = " and every expected value" if params.get("expected_amounts") else ""
    return f"{len(rows)} rows in source order, integer cents, totals consistent{checked}"


TYPES = {
    "cents_csv": CheckType("cents_csv", "a ledger CSV of integer cents that keeps every source row "
                           "and whose totals add up", _run, _validate, _KEYS),
}
