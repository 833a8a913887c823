"""The sql_migration check: references pass, broken migrations fail with a detail, and a
hostile migration fails cleanly inside its bounds without writing anything anywhere."""

from __future__ import annotations

import os
import re
import time

import pytest

from benchclaw.checks import CheckSpec, run_check
from benchclaw.checks._sqlbox import split_statements
from benchclaw.checks.tasks import check_artifacts, find_tasks, get_task

SQL_TASKS = [t for t in find_tasks() if t.family == "sql"]
IDS = [t.id for t in SQL_TASKS]


def failures(task, migration: str) -> dict[str, str]:
    results = check_artifacts(task, {"migration.sql": migration.encode()})
    return {r.id: r.detail for r in results if not r.passed}


@pytest.mark.parametrize("task", SQL_TASKS, ids=IDS)
def test_reference_passes(task):
    assert failures(task, task.reference["migration.sql"].decode()) == {}


@pytest.mark.parametrize("task", SQL_TASKS, ids=IDS)
def test_dropping_any_statement_fails(task):
    text = task.reference["migration.sql"].decode()
    stmts = [s for _, s in split_statements(text)]
    for i, stmt in enumerate(stmts):
        broken = "\n".join(s for j, s in enumerate(stmts) if j != i)
        assert failures(task, broken), f"dropping statement {i + 1} ({stmt[:40]!r}) still passes"


@pytest.mark.parametrize("task", SQL_TASKS, ids=IDS)
def test_changing_any_number_or_string_literal_fails(task):
    text = task.reference["migration.sql"].decode()
    code = "\n".join(" " * len(ln) if ln.lstrip().startswith("--") else ln  # not in comments
                     for ln in text.split("\n"))
    spots = [m for m in re.finditer(r"\b\d+\b|'[^']*'", code)]
    for m in spots:
        lit = m.group(0)
        new = str(int(lit) + 1) if lit.isdigit() else "'" + lit[1:-1] + "x'"
        broken = text[:m.start()] + new + text[m.end():]
        assert failures(task, broken), f"changing {lit!r} at {m.start()} still passes"


def test_sample_and_heldout_failures_name_the_row_and_values():
    task = get_task("sql-orders")
    naive = ("ALTER TABLE orders ADD COLUMN total_cents INTEGER;\n"
             "UPDATE orders SET total_cents = CAST(CAST(replace(total, ',', '') AS REAL) * 100 AS INTEGER)"
             " WHERE total IS NOT NULL;\nALTER TABLE orders DROP COLUMN total;\n"
             "CREATE INDEX orders_customer_day ON orders(customer, placed_on);\n")
    bad = failures(task, naive)  # float cents: 0.29 * 100 truncates to 28
    assert "row 1 expected" in bad["migrate-heldout"] and "29" in bad["migrate-heldout"]
    assert "28" in bad["migrate-heldout"]


def test_open_transaction_and_syntax_error_fail_with_a_detail():
    task = get_task("sql-customers")
    ref = task.reference["migration.sql"].decode()
    assert "transaction open" in failures(task, ref.replace("COMMIT;", ""))["migrate-sample"]
    detail = failures(task, ref.replace("RENAME COLUMN", "RENAME COLUMNN"))["migrate-sample"]
    assert detail.startswith("migration.sql: statement 2 (line 3)") and "syntax error" in detail


def test_missing_migration_fails():
    assert "missing" in failures(get_task("sql-tags"), "")["migrate-sample"] or \
        failures(get_task("sql-tags"), "")


# ---------------------------------------------------------------------------- hostile

HOSTILE = {
    "attach": ("ATTACH DATABASE 'stolen.db' AS s; CREATE TABLE s.t(x);", "ATTACH"),
    "attach-memory": ("ATTACH ':memory:' AS m;", "ATTACH"),
    "vacuum-into": ("VACUUM INTO 'copy.db';", "VACUUM INTO"),
    "vacuum": ("VACUUM;", "VACUUM"),
    "load-extension": ("SELECT load_extension('/tmp/evil.so');", "load_extension"),
    "journal-pragma": ("PRAGMA journal_mode = WAL;", "PRAGMA journal_mode"),
    "writable-schema": ("PRAGMA writable_schema = ON;", "PRAGMA writable_schema"),
    "temp-dir": ("PRAGMA temp_store_directory = '/tmp';", "PRAGMA temp_store_directory"),
    "temp-store-file": ("PRAGMA temp_store = FILE;", "PRAGMA temp_store"),
    "random": ("UPDATE customers SET name = hex(randomblob(4));", "randomblob"),
    "virtual-table": ("CREATE VIRTUAL TABLE f USING fts5(x);", "virtual tables"),
    "runaway": ("WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT count(*) FROM c;",
                "execution steps"),
    "runaway-trigger": ("PRAGMA recursive_triggers = ON; CREATE TABLE loop(x); CREATE TRIGGER t AFTER INSERT ON loop BEGIN "
                        "INSERT INTO loop SELECT x + 1 FROM loop; END; INSERT INTO loop VALUES (1);",
                        "constraint|trigger|too many levels|execution steps"),
    "huge-value": ("SELECT zeroblob(500000000);", "too big"),
    "huge-select": ("WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 100000) "
                    "SELECT zeroblob(1000000) FROM c;", "returned more than 4,194,304 bytes"),
    "huge-view": ("DROP TABLE orders; ALTER TABLE customers RENAME TO old; CREATE VIEW customers AS "
                  "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 100000) "
                  "SELECT x AS id, zeroblob(1000000) AS email FROM c;", "more than 4,194,304 bytes|out of memory"),
    "huge-table": ("CREATE TABLE big(x); WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c "
                   "WHERE x < 100000) INSERT INTO big SELECT zeroblob(500000) FROM c;",
                   "grew past|execution steps"),
}


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_hostile_migration_fails_cleanly_within_its_limits_and_writes_nothing(name, tmp_path, monkeypatch):
    sql, reason = HOSTILE[name]
    monkeypatch.chdir(tmp_path)
    task = get_task("sql-customers")
    start = time.monotonic()
    bad = failures(task, sql)
    elapsed = time.monotonic() - start
    assert re.search(reason, bad["migrate-sample"]), bad["migrate-sample"]
    assert "wall-clock" not in bad["migrate-sample"]  # the deterministic bounds decide
    assert elapsed < 20  # each of the two sql checks has a 10 s backstop; the bounds fire far sooner
    assert os.listdir(tmp_path) == []
    assert not (tmp_path.parent / "stolen.db").exists()


def test_step_bound_is_deterministic_and_configurable():
    spec = CheckSpec("m", "sql_migration", True, {
        "migration": "m.sql", "setup": ["s.sql"], "max_steps": 50_000,
        "queries": [{"sql": "SELECT count(*) FROM t", "expected": [[3000]]}]})
    files = {"s.sql": b"CREATE TABLE t(x);",
             "m.sql": b"WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 3000) "
                      b"INSERT INTO t SELECT x FROM c;"}
    first = run_check(spec, files, {})
    assert not first.passed and "50,000 execution steps" in first.detail
    assert run_check(spec, files, {}) == first
    roomy = CheckSpec("m", "sql_migration", True, {**spec.params, "max_steps": 5_000_000})
    assert run_check(roomy, files, {}).passed


def test_wall_clock_backstop_has_its_own_detail(monkeypatch):
    from benchclaw.checks import _sqlbox
    box = _sqlbox.SqlBox(_sqlbox.SqlLimits(max_steps=10**9, max_seconds=0.05))
    box.phase()
    with pytest.raises(_sqlbox.SqlBoxError, match="wall-clock backstop.*not reproducible"):
        box.execute("WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT count(*) FROM c")


def test_split_statements_keeps_strings_comments_and_triggers_whole():
    text = ("-- intro; not a statement\nCREATE TABLE t(a);\nINSERT INTO t VALUES ('a;b');\n"
            "CREATE TRIGGER g AFTER INSERT ON t BEGIN\n  DELETE FROM t; UPDATE t SET a = 1;\nEND;\n/* x; */")
    got = split_statements(text)
    assert [line for line, _ in got] == [2, 3, 4]
    assert got[2][1].endswith("END;")


def test_split_statements_is_bounded():
    from benchclaw.checks._sqlbox import SqlBoxError
    with pytest.raises(SqlBoxError, match="more than"):
        split_statements("CREATE TRIGGER g AFTER INSERT ON t BEGIN " + "SELECT 1;" * 5000)


def test_spec_validation_names_the_field():
    from benchclaw.checks import validate_spec
    with pytest.raises(ValueError, match="field 'setup'"):
        validate_spec(CheckSpec("m", "sql_migration", True, {"migration": "m.sql", "setup": [],
                                                              "queries": [{"sql": "x", "expected": []}]}), {})
    with pytest.raises(ValueError, match=r"queries\[0\].expected"):
        validate_spec(CheckSpec("m", "sql_migration", True, {"migration": "m.sql", "setup": ["s"],
                                                              "queries": [{"sql": "x", "expected": [[1.5]]}]}), {})


def test_broken_foreign_keys_are_named_even_when_many():
    task = get_task("sql-accounts")
    detail = failures(task, "PRAGMA foreign_keys = OFF;\nDELETE FROM accounts;\n")["migrate-sample"]
    assert detail == "foreign key check: transfers row 1 points to a missing accounts row (more than 5 broken)"
