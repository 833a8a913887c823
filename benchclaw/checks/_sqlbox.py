"""A sandboxed in-memory SQLite database for running an agent's untrusted SQL.

The ``sql_migration`` check applies a migration the agent wrote, and the offline verifier
applies it again, so the sandbox must be deterministic, must never touch a file, and must
stop anything runaway with a clear reason. Layers, from the one that decides to the one
that only backs up:

1. **No file access.** The database is ``:memory:`` with ``temp_store = MEMORY`` (sorts and
   temp tables never spill to disk). An authorizer denies ``ATTACH``/``DETACH`` (and so
   ``VACUUM`` and ``VACUUM INTO``, which SQLite runs as an attach), virtual-table creation,
   extension loading, every pragma outside a short list of harmless ones (no
   ``journal_mode``, ``writable_schema``, ``temp_store_directory``, ...), and the
   functions whose result changes from run to run (``random``, ``randomblob``,
   ``current_timestamp``...). ``SQLITE_LIMIT_ATTACHED`` is 0 as a second lock.
2. **A deterministic step bound.** A progress handler counts virtual-machine steps;
   past ``max_steps`` the statement is interrupted. The same SQL on the same SQLite build
   takes the same steps, so the verifier reaches the same verdict.
3. **Size bounds.** ``max_page_count`` caps the main and temp databases; connection
   limits cap one value, one statement, expression depth, columns, trigger depth; rows a
   statement returns are dropped as they come, and a check query's result is capped in
   rows and bytes.
   A process-wide ``hard_heap_limit`` caps SQLite's heap as a last line.
4. **A wall-clock backstop** (``max_seconds``), checked in the same progress handler. It
   should never decide a result: when it fires the detail says so, distinctly, because a
   time-based verdict is not reproducible.

``date('now')`` is not blocked (the authorizer sees function names, not arguments); a
migration that stores the current time is non-deterministic and a verifier run on another
day may disagree with the recorded result, which it reports.
"""

from __future__ import annotations

import sqlite3
import time
from dataclasses import dataclass

__all__ = ["SqlBox", "SqlLimits", "SqlBoxError", "split_statements"]

_ALLOWED_PRAGMAS = frozenset({
    "foreign_keys", "foreign_key_check", "foreign_key_list", "defer_foreign_keys",
    "table_info", "table_xinfo", "table_list", "index_list", "index_info", "index_xinfo",
    "integrity_check", "quick_check", "user_version", "legacy_alter_table",
    "recursive_triggers", "case_sensitive_like", "collation_list",
})
_DENIED_FUNCTIONS = frozenset({
    "load_extension", "fts3_tokenizer", "random", "randomblob", "current_time",
    "current_date", "current_timestamp", "sqlite_compileoption_get", "changes",
    "total_changes", "last_insert_rowid",
})
_DENIED_ACTIONS = {
    sqlite3.SQLITE_ATTACH: "ATTACH, VACUUM and VACUUM INTO are not allowed (no file access)",
    sqlite3.SQLITE_DETACH: "DETACH is not allowed",
    sqlite3.SQLITE_CREATE_VTABLE: "virtual tables are not allowed",
    sqlite3.SQLITE_DROP_VTABLE: "virtual tables are not allowed",
}
HEAP_LIMIT = 256 << 20
_PAGE_SIZE = 4096


class SqlBoxError(Exception):
    """SQL in the box failed; ``str`` is the reason for a person (denied, bound, error)."""


@dataclass(frozen=True)
class SqlLimits:
    """The bounds of one sandbox. ``max_steps`` is per phase (setup, migration, checks)."""

    max_steps: int = 20_000_000
    max_db_bytes: int = 16 << 20
    max_value_bytes: int = 1 << 20
    max_seconds: float = 10.0
    max_statements: int = 500
    max_result_bytes: int = 4 << 20


class SqlBox:
    """One in-memory database behind the authorizer and bounds above. Use as a context
    manager; ``run_script``/``query``/``execute`` raise SqlBoxError with the reason."""

    def __init__(self, limits: SqlLimits = SqlLimits()) -> None:
        self.limits = limits
        self.conn = sqlite3.connect(":memory:", isolation_level=None, check_same_thread=False)
        self._denied: str | None = None
        self._tripped: str | None = None
        self._steps = 0
        self._deadline = 0.0
        self._configure()
        self.phase()

    def __enter__(self) -> "SqlBox":
        return self

    def __exit__(self, *exc) -> None:
        self.conn.close()

    # -- setup ---------------------------------------------------------------------

    def _configure(self) -> None:
        c, lim = self.conn, self.limits
        pages = max(16, lim.max_db_bytes // _PAGE_SIZE)
        c.execute(f"PRAGMA hard_heap_limit = {HEAP_LIMIT}")
        for stmt in ("PRAGMA temp_store = MEMORY", f"PRAGMA page_size = {_PAGE_SIZE}",
                     f"PRAGMA main.max_page_count = {pages}", f"PRAGMA temp.max_page_count = {pages}",
                     "PRAGMA trusted_schema = OFF", "PRAGMA foreign_keys = ON"):
            c.execute(stmt)
        for limit, value in ((sqlite3.SQLITE_LIMIT_ATTACHED, 0), (sqlite3.SQLITE_LIMIT_LENGTH, lim.max_value_bytes),
                             (sqlite3.SQLITE_LIMIT_SQL_LENGTH, 1 << 20), (sqlite3.SQLITE_LIMIT_EXPR_DEPTH, 200),
                             (sqlite3.SQLITE_LIMIT_COLUMN, 200), (sqlite3.SQLITE_LIMIT_COMPOUND_SELECT, 100),
                             (sqlite3.SQLITE_LIMIT_TRIGGER_DEPTH, 10), (sqlite3.SQLITE_LIMIT_WORKER_THREADS, 0),
                             (sqlite3.SQLITE_LIMIT_FUNCTION_ARG, 100), (sqlite3.SQLITE_LIMIT_VDBE_OP, 250_000),
                             (sqlite3.SQLITE_LIMIT_LIKE_PATTERN_LENGTH, 1000)):
            c.setlimit(limit, value)
        c.set_authorizer(self._authorize)
        c.set_progress_handler(self._progress, 1000)

    def _authorize(self, action: int, arg1, arg2, db, trigger) -> int:
        reason = _DENIED_ACTIONS.get(action)
        if action == sqlite3.SQLITE_PRAGMA and str(arg1).lower() not in _ALLOWED_PRAGMAS:
            reason = f"PRAGMA {arg1} is not allowed"
        elif action == sqlite3.SQLITE_FUNCTION and str(arg2).lower() in _DENIED_FUNCTIONS:
            reason = f"the function {arg2}() is not allowed"
        if reason is None:
            return sqlite3.SQLITE_OK
        self._denied = self._denied or reason
        return sqlite3.SQLITE_DENY

    def _progress(self) -> int:
        self._steps += 1000
        if self._steps > self.limits.max_steps:
            self._tripped = f"stopped after {self.limits.max_steps:,} execution steps (the step bound)"
            return 1
        if time.monotonic() > self._deadline:  # backstop only: the step bound should fire first
            self._tripped = (f"stopped by the {self.limits.max_seconds:g} s wall-clock backstop before the "
                             "step bound (a time-based verdict: not reproducible)")
            return 1
        return 0

    # -- running -------------------------------------------------------------------

    def phase(self) -> None:
        """Start a new phase: a fresh step budget and deadline."""
        self._steps = 0
        self._deadline = time.monotonic() + self.limits.max_seconds

    def _call(self, fn, *args):
        self._denied = self._tripped = None
        try:
            return fn(*args)
        except SqlBoxError:
            raise
        except (sqlite3.Error, OverflowError, ValueError, MemoryError) as e:
            raise SqlBoxError(self._reason(e)) from None

    def _reason(self, e: BaseException) -> str:
        if self._tripped:
            return self._tripped
        if self._denied:
            return f"denied: {self._denied}"
        text = str(e) or type(e).__name__
        if "out of memory" in text or isinstance(e, MemoryError):
            return f"out of memory (the SQLite heap is capped at {HEAP_LIMIT >> 20} MiB)"
        if "database or disk is full" in text:
            return f"the database grew past {self.limits.max_db_bytes:,} bytes (database or disk is full)"
        if "too big" in text:
            return f"{text} (one value may hold at most {self.limits.max_value_bytes:,} bytes)"
        return text

    def execute(self, sql: str, params: tuple = ()) -> None:
        """Run one statement; rows it returns are read and dropped (never accumulated),
        at most ``max_result_bytes`` of them in all."""
        def run():
            size = 0
            for row in self.conn.execute(sql, params):
                size += sum(len(v) if isinstance(v, (str, bytes)) else 8 for v in row)
                if size > self.limits.max_result_bytes:
                    raise SqlBoxError(f"the statement returned more than {self.limits.max_result_bytes:,} bytes")
        self._call(run)

    def query(self, sql: str, max_rows: int = 10_000, *, truncate: bool = False) -> list[tuple]:
        """The rows of one query. More than ``max_rows`` rows is an error, or (``truncate``)
        the first ``max_rows + 1`` are returned; more than ``max_result_bytes`` of values is
        an error (a hostile view can generate far more than the database holds)."""
        def run():
            rows, size = [], 0
            for row in self.conn.execute(sql):
                size += sum(len(v) if isinstance(v, (str, bytes)) else 8 for v in row)
                if size > self.limits.max_result_bytes:
                    raise SqlBoxError(f"the query returned more than {self.limits.max_result_bytes:,} bytes")
                rows.append(row)
                if len(rows) > max_rows:
                    break
            return rows
        rows = self._call(run)
        if len(rows) > max_rows and not truncate:
            raise SqlBoxError(f"the query returned more than {max_rows:,} rows")
        return rows

    def run_script(self, text: str) -> None:
        """Run every statement of ``text`` in order; the error names the statement and line."""
        stmts = split_statements(text)
        if len(stmts) > self.limits.max_statements:
            raise SqlBoxError(f"{len(stmts)} statements, above the limit of {self.limits.max_statements}")
        for n, (line, sql) in enumerate(stmts, 1):
            try:
                self.execute(sql)
            except SqlBoxError as e:
                raise SqlBoxError(f"statement {n} (line {line}) {_head(sql)}: {e}") from None

    @property
    def in_transaction(self) -> bool:
        return self.conn.in_transaction


def _head(sql: str) -> str:
    words = " ".join(_strip_comments(sql).split())
    return repr(words[:50] + ("…" if len(words) > 50 else ""))


def _strip_comments(sql: str) -> str:
    lines = [ln for ln in sql.split("\n") if not ln.strip().startswith("--")]
    return "\n".join(lines)


def split_statements(text: str, max_pieces: int = 2000) -> list[tuple[int, str]]:
    """``(first line, statement)`` of every complete statement of ``text``, in order;
    a trailing statement without ``;`` counts too. Comment-only pieces are dropped.
    A ``;`` inside a string, quoted name or comment never splits; at any other ``;``
    SQLite's own ``complete_statement`` decides (so a trigger body stays whole). Raises
    SqlBoxError past ``max_pieces`` candidate splits (a hostile text cannot make this
    quadratic)."""
    out: list[tuple[int, str]] = []
    start, i, n, tries = 0, 0, len(text), 0
    closers = {"'": "'", '"': '"', "`": "`", "[": "]"}
    while i < n:
        ch = text[i]
        if ch in closers:
            j = text.find(closers[ch], i + 1)
            i = n if j < 0 else j + 1
            continue
        if text.startswith("--", i) or text.startswith("/*", i):
            j = text.find("\n" if ch == "-" else "*/", i + 2)
            i = n if j < 0 else j + (1 if ch == "-" else 2)
            continue
        if ch == ";":
            tries += 1
            if tries > max_pieces:
                raise SqlBoxError(f"more than {max_pieces} statements")
            if sqlite3.complete_statement(text[start:i + 1]):
                _add(out, text, start, i + 1)
                start = i + 1
        i += 1
    _add(out, text, start, n)
    return out


def _add(out: list, text: str, start: int, end: int) -> None:
    piece = text[start:end]
    if not _has_code(piece):
        return
    lead = len(piece) - len(piece.lstrip())
    line = text.count("\n", 0, start + lead) + 1
    # skip leading comment lines, so the line number is the statement's first code line
    for ln in piece[lead:].split("\n"):
        if ln.strip() and not ln.strip().startswith("--"):
            break
        line += 1
    out.append((line, piece.strip()))


def _has_code(piece: str) -> bool:
    """False for a piece that holds only comments and whitespace (``--`` and ``/* */``)."""
    i, n = 0, len(piece)
    while i < n:
        if piece.startswith("--", i):
            j = piece.find("\n", i)
            i = n if j < 0 else j + 1
        elif piece.startswith("/*", i):
            j = piece.find("*/", i + 2)
            i = n if j < 0 else j + 2
        elif piece[i].isspace() or piece[i] == ";":
            i += 1
        else:
            return True
    return False
