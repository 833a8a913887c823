"""The simulator's reading of a schema change request, and the migration it writes.

``parse_changes`` reads the fixed phrases of a change request's ``## Changes`` list
(docs/writing-tasks.md, "SQL migration tasks"): rename a column, add a column with a
definition, create an index, convert text dollars to integer cents, rebuild a table to
change a column's definition, split a comma-separated column into a table. ``render``
writes SQLite for them. ``flaws`` are the ways a weaker model gets such a migration
wrong, applied to every change they fit:

- ``lossy``: data lost on the way (a rename done as add-and-drop, a conversion without
  the backfill, a rebuild that copies only the rows it likes, a split keeping one tag);
- ``edge_unsafe``: right on the sample, wrong on edge cases (a NOT NULL column without
  its default, a NULL turned into 0 with float arithmetic, a rebuild that does not fill
  NULLs, empty tags kept);
- ``skips_constraint``: an index or constraint forgotten (the classic table rebuild that
  does not recreate the index).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["Change", "ChangeError", "parse_changes", "render", "FLAWS"]

FLAWS = ("lossy", "edge_unsafe", "skips_constraint")


class ChangeError(ValueError):
    """The change request states nothing the solver can turn into SQL."""


@dataclass(frozen=True)
class Change:
    kind: str
    args: tuple


_PATTERNS = {
    "rename": r"^- Rename column `(\w+)\.(\w+)` to `(\w+)`\.$",
    "add": r"^- Add column `(\w+)\.(\w+)` with definition `([^`]+)`\.$",
    "index": r"^- Create (unique )?index `(\w+)` on `(\w+)\(([^)]+)\)`\.$",
    "convert": r"^- Convert `(\w+)\.(\w+)` \(.*\) into integer cents in a new column `\w+\.(\w+)`;.*then drop `\w+\.\w+`\.$",
    "rebuild": r"^- Rebuild `(\w+)` so that column `(\w+)` is `([^`]+)`, filled with `([^`]+)`;.*$",
    "split": r"^- Split `(\w+)\.(\w+)` \(.*\) into a new table `(\w+)` with definition `([^`]+)`:.*then drop `\w+\.\w+`\.$",
}


def parse_changes(text: str) -> list[Change]:
    """The changes of the ``## Changes`` list, in order. Raises ChangeError."""
    section = re.search(r"^## Changes\n(.*?)(?=^## |\Z)", text, re.M | re.S)
    if not section:
        raise ChangeError("the change request has no '## Changes' list")
    out = []
    for line in section.group(1).split("\n"):
        for kind, pattern in _PATTERNS.items():
            m = re.match(pattern, line.strip())
            if m:
                out.append(Change(kind, m.groups()))
                break
        else:
            if line.strip().startswith("- "):
                raise ChangeError(f"I do not understand the change {line.strip()[:60]!r}")
    if not out:
        raise ChangeError("the '## Changes' list is empty")
    return out


# ---------------------------------------------------------------------------- rendering

def _rename(c: Change, flaws: set, schema: str) -> list[str]:
    table, old, new = c.args
    if "lossy" in flaws:
        return [f"ALTER TABLE {table} ADD COLUMN {new} {_column_type(schema, table, old)};",
                f"ALTER TABLE {table} DROP COLUMN {old};"]
    return [f"ALTER TABLE {table} RENAME COLUMN {old} TO {new};"]


def _add(c: Change, flaws: set, schema: str) -> list[str]:
    table, col, definition = c.args
    if "edge_unsafe" in flaws:
        definition = re.sub(r"\s+DEFAULT\s+('[^']*'|\S+)", "", definition, flags=re.I)
    return [f"ALTER TABLE {table} ADD COLUMN {col} {definition};"]


def _index(c: Change, flaws: set, schema: str) -> list[str]:
    unique, name, table, cols = c.args
    if "skips_constraint" in flaws:
        return []
    return [f"CREATE {'UNIQUE ' if unique else ''}INDEX {name} ON {table}({cols});"]


def _convert(c: Change, flaws: set, schema: str) -> list[str]:
    table, old, new = c.args
    out = [f"ALTER TABLE {table} ADD COLUMN {new} INTEGER;"]
    if "edge_unsafe" in flaws:
        out.append(f"UPDATE {table} SET {new} = CAST(coalesce(CAST(replace({old}, ',', '') AS REAL), 0) * 100 AS INTEGER);")
    elif "lossy" not in flaws:
        out.append(f"UPDATE {table} SET {new} = CAST(replace(replace({old}, ',', ''), '.', '') AS INTEGER) "
                   f"WHERE {old} IS NOT NULL;")
    return out + [f"ALTER TABLE {table} DROP COLUMN {old};"]


def _create_block(schema: str, table: str) -> str:
    m = re.search(rf"CREATE TABLE {table} \((.*?)\n\);", schema, re.S)
    if not m:
        raise ChangeError(f"the schema has no CREATE TABLE {table}")
    return m.group(1)


def _columns(block: str) -> list[str]:
    names = []
    for line in block.split("\n"):
        word = line.strip().split(" ")[0] if line.strip() else ""
        if word and word.upper() not in ("PRIMARY", "UNIQUE", "FOREIGN", "CHECK", "CONSTRAINT"):
            names.append(word)
    return names


def _column_type(schema: str, table: str, col: str) -> str:
    m = re.search(rf"^\s*{col} (\w+)", _create_block(schema, table), re.M)
    return m.group(1) if m else "TEXT"


def _rebuild(c: Change, flaws: set, schema: str) -> list[str]:
    table, col, definition, fill = c.args
    block = _create_block(schema, table)
    new_block = re.sub(rf"^(\s*){col} [^,\n]*", lambda m: f"{m.group(1)}{col} {definition}", block, flags=re.M)
    cols = _columns(block)
    if "edge_unsafe" in flaws:
        fill = re.sub(r"coalesce\((\w+), [^)]*\)", r"\1", fill)
    select = ", ".join(fill if n == col else n for n in cols)
    where = f" WHERE {col} IS NOT NULL" if "lossy" in flaws else ""
    indexes = [] if "skips_constraint" in flaws else \
        re.findall(rf"^CREATE (?:UNIQUE )?INDEX \w+ ON {table}\([^)]*\);", schema, re.M)
    return ["PRAGMA foreign_keys = OFF;", "BEGIN;", f"CREATE TABLE {table}_new ({new_block}\n);",
            f"INSERT INTO {table}_new ({', '.join(cols)})\n  SELECT {select} FROM {table}{where};",
            f"DROP TABLE {table};", f"ALTER TABLE {table}_new RENAME TO {table};", *indexes,
            "COMMIT;", "PRAGMA foreign_keys = ON;"]


def _split(c: Change, flaws: set, schema: str) -> list[str]:
    table, col, new, definition = c.args
    parts = [p.strip().split(" ")[0] for p in definition.strip("()").split(",")]
    owner, item = parts[0], parts[1]
    if "skips_constraint" in flaws:
        definition = f"({owner} INTEGER, {item} TEXT)"
    keep = f"{item} IS NOT NULL" + ("" if "edge_unsafe" in flaws else f" AND {item} <> ''")
    if "lossy" in flaws:
        fill = (f"INSERT OR IGNORE INTO {new} ({owner}, {item})\n  SELECT id, trim(substr({col} || ',', 1, "
                f"instr({col} || ',', ',') - 1)) FROM {table} WHERE {col} IS NOT NULL AND {col} <> '';")
    else:
        fill = (f"WITH RECURSIVE split(id, {item}, rest) AS (\n"
                f"  SELECT id, NULL, {col} || ',' FROM {table} WHERE {col} IS NOT NULL\n"
                f"  UNION ALL\n"
                f"  SELECT id, trim(substr(rest, 1, instr(rest, ',') - 1)), substr(rest, instr(rest, ',') + 1)\n"
                f"    FROM split WHERE rest <> ''\n)\n"
                f"INSERT OR IGNORE INTO {new} ({owner}, {item})\n  SELECT id, {item} FROM split WHERE {keep};")
    return [f"CREATE TABLE {new} {definition};", fill, f"ALTER TABLE {table} DROP COLUMN {col};"]


_RENDER = {"rename": _rename, "add": _add, "index": _index, "convert": _convert, "rebuild": _rebuild,
           "split": _split}


def render(changes: list[Change], schema: str, flaws: set | frozenset = frozenset(), title: str = "") -> str:
    """The migration for ``changes`` (with ``flaws``); one transaction unless a rebuild
    manages its own (it must switch foreign keys off outside a transaction)."""
    body: list[str] = []
    for c in changes:
        body += _RENDER[c.kind](c, set(flaws), schema)
    own_tx = any(c.kind == "rebuild" for c in changes)
    lines = [f"-- {title}".rstrip()] if title else []
    lines += body if own_tx else ["BEGIN;", *body, "COMMIT;"]
    return "\n".join(lines) + "\n"
