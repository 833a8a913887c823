"""The SQL migration check: the agent's ``migration.sql`` run on a real SQLite database.

A migration that "looks right" can lose rows in a column rename, break on a NULL the
visible seed data never had, or drop an index while rebuilding a table. So the check
judges behaviour, not text: it builds a fresh in-memory database from the task's setup
scripts (schema and seed data; for a held-out check, other seed data the agent never saw),
applies the migration statement by statement, and then

1. requires that no transaction is left open and (with ``foreign_keys``) that
   ``PRAGMA foreign_key_check`` finds nothing;
2. runs every ``queries`` entry and compares its rows exactly, in order, types included
   (``1`` is not ``'1'``; write an ``ORDER BY``);
3. runs every ``rejects`` statement, which must fail with a constraint error (the
   constraint exists), and every ``accepts`` statement, which must succeed (a default
   applies, a valid row still fits); each runs in a savepoint that is rolled back.

Everything the migration runs goes through ``_sqlbox.SqlBox`` (no file access, a
deterministic step bound, size bounds, a wall-clock backstop). Setup scripts and check
queries are the task author's and run in the same box, each phase with its own budget.
Expected values come from TOML (no NULL there: write ``coalesce(x, '<null>')``) or a
held-out JSON file (``null`` is NULL).
"""

from __future__ import annotations

from typing import Any, Mapping

from ._base import CheckType, Fail, need, read_text, run_validate, short
from ._sqlbox import SqlBox, SqlBoxError, SqlLimits

__all__ = ["TYPES"]

MAX_MIGRATION_BYTES = 64 << 10
MAX_ITEMS = 500
MAX_SHOWN_ROWS = 2
_KEYS = frozenset({"migration", "setup", "setup_sql", "queries", "rejects", "accepts",
                   "foreign_keys", "max_steps"})


def _validate_items(params: dict, key: str, with_expected: bool) -> None:
    items = need(params, key, list, [])
    if len(items) > MAX_ITEMS:
        raise ValueError(f"field '{key}': at most {MAX_ITEMS} entries")
    for i, item in enumerate(items):
        if not isinstance(item, dict) or not isinstance(item.get("sql"), str) or not item["sql"].strip():
            raise ValueError(f"field '{key}[{i}]': must be a table with a non-empty 'sql'")
        if not isinstance(item.get("label", ""), str):
            raise ValueError(f"field '{key}[{i}].label': must be a string")
        if with_expected:
            rows = item.get("expected")
            if not isinstance(rows, list) or not all(isinstance(r, list) and all(_cell_ok(c) for c in r)
                                                     for r in rows):
                raise ValueError(f"field '{key}[{i}].expected': must be an array of rows "
                                 "(arrays of strings, integers or null)")


def _cell_ok(c: Any) -> bool:
    return c is None or isinstance(c, str) or isinstance(c, int) and not isinstance(c, bool)


def _validate(params: dict) -> None:
    need(params, "migration", str)
    setup = need(params, "setup", list)
    if not setup or not all(isinstance(s, str) and s for s in setup):
        raise ValueError("field 'setup': must be a non-empty array of workspace SQL files")
    need(params, "setup_sql", str, "")
    need(params, "foreign_keys", bool, True)
    steps = need(params, "max_steps", int, SqlLimits.max_steps)
    if not 1000 <= steps <= 200_000_000:
        raise ValueError("field 'max_steps': must be from 1,000 to 200,000,000")
    _validate_items(params, "queries", True)
    _validate_items(params, "rejects", False)
    _validate_items(params, "accepts", False)
    if not (params.get("queries") or params.get("rejects") or params.get("accepts")):
        raise ValueError("field 'queries': a check needs at least one query, reject or accept")


def _label(item: dict, n: int, kind: str) -> str:
    return f"{kind} {n} ({item['label']})" if item.get("label") else f"{kind} {n}"


def _render_row(row: Any) -> str:
    return short(list(row) if isinstance(row, (list, tuple)) else row, 80)


def _compare(label: str, want: list[list], got: list[tuple]) -> None:
    got_rows = [list(r) for r in got]
    if got_rows == want:
        return
    for i, (w, g) in enumerate(zip(want, got_rows), 1):
        if w != g or [type(x) for x in w] != [type(x) for x in g]:
            raise Fail(f"{label}: row {i} expected {_render_row(w)}, got {_render_row(g)}")
    if len(got_rows) != len(want):
        extra = got_rows[len(want)] if len(got_rows) > len(want) else want[len(got_rows)]
        what = "first extra row" if len(got_rows) > len(want) else "first missing row"
        raise Fail(f"{label}: {len(got_rows)} rows, expected {len(want)} ({what}: {_render_row(extra)})")
    # same values, different types (1 vs '1')
    raise Fail(f"{label}: values have the wrong types: expected {_render_row(want)}, got {_render_row(got_rows)}")


def _setup(box: SqlBox, params: dict, files: Mapping[str, bytes]) -> None:
    box.phase()
    for path in params["setup"]:
        try:
            box.run_script(read_text(files, path))
        except Fail as e:
            raise Fail(f"bad task setup: {e}") from None
        except SqlBoxError as e:
            raise Fail(f"bad task setup: {path}: {e}") from None
    if params.get("setup_sql"):
        try:
            box.run_script(params["setup_sql"])
        except SqlBoxError as e:
            raise Fail(f"bad task setup: held-out data: {e}") from None


def _migrate(box: SqlBox, params: dict, files: Mapping[str, bytes]) -> None:
    path = params["migration"]
    text = read_text(files, path, max_bytes=MAX_MIGRATION_BYTES)
    box.phase()
    try:
        box.run_script(text)
    except SqlBoxError as e:
        raise Fail(f"{path}: {e}") from None
    if box.in_transaction:
        raise Fail(f"{path}: leaves a transaction open (a BEGIN without COMMIT is rolled back "
                   "when the connection closes)")


def _after(box: SqlBox, params: dict) -> None:
    box.phase()
    if params.get("foreign_keys", True):
        try:
            bad = box.query("PRAGMA foreign_key_check", max_rows=5, truncate=True)
        except SqlBoxError as e:
            raise Fail(f"foreign key check: {e}") from None
        if bad:
            t, rowid, parent, _ = bad[0]
            count = f"{len(bad)}" if len(bad) <= 5 else "more than 5"
            raise Fail(f"foreign key check: {t} row {rowid} points to a missing {parent} row "
                       f"({count} broken)")
    for n, q in enumerate(params.get("queries", []), 1):
        label = _label(q, n, "query")
        try:
            rows = box.query(q["sql"])
        except SqlBoxError as e:
            raise Fail(f"{label}: {e}") from None
        _compare(label, q["expected"], rows)
    for key, must_fail in (("rejects", True), ("accepts", False)):
        for n, item in enumerate(params.get(key, []), 1):
            _probe(box, item, _label(item, n, key[:-1]), must_fail)


def _probe(box: SqlBox, item: dict, label: str, must_fail: bool) -> None:
    box.execute("SAVEPOINT probe")
    try:
        box.run_script(item["sql"])
        error = None
    except SqlBoxError as e:
        error = str(e)
    finally:
        box.execute("ROLLBACK TO probe")
        box.execute("RELEASE probe")
    if must_fail and error is None:
        raise Fail(f"{label}: the statement was accepted; a constraint should reject it")
    if must_fail and "constraint failed" not in error:
        raise Fail(f"{label}: failed for another reason than a constraint: {error}")
    if not must_fail and error is not None:
        raise Fail(f"{label}: rejected: {error}")


def _run(params: dict, files: Mapping[str, bytes]) -> str:
    run_validate(params, _validate)
    limits = SqlLimits(max_steps=params.get("max_steps", SqlLimits.max_steps))
    with SqlBox(limits) as box:
        if not params.get("foreign_keys", True):
            box.execute("PRAGMA foreign_keys = OFF")
        _setup(box, params, files)
        _migrate(box, params, files)
        _after(box, params)
    parts = [f"{len(params.get(k, []))} {k}" for k in ("queries", "rejects", "accepts") if params.get(k)]
    # no step count in the detail: it depends on the SQLite build, the verdict does not
    return f"{params['migration']}: applied; " + ", ".join(parts) + " as expected"


TYPES = {
    "sql_migration": CheckType("sql_migration", "the migration runs on a fresh SQLite database and "
                               "the queries, constraints and defaults come out as expected",
                               _run, _validate, _KEYS),
}
