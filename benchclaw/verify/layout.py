"""Where things live inside a bundle, derived from the records that reference them.

Export and verify both call these, so a bundle's layout is defined once. Pure.

- ``tasks/<task id>/v<N>/<path>``: every file of a task version a run used (its canonical
  listing is the blob of the run's ``task.digest``);
- ``catalogs/<name>-<12 hex>.toml``: each catalog a run used (and the catalogs it
  extends), named by its name and the start of its digest so two versions never collide;
- ``experiments/<id>.toml``: the spec last registered (earlier versions stay as blobs);
- ``ledgers/<ledger id>.jsonl``: each ledger a run or grid invocation names.
"""

from __future__ import annotations

import re
from typing import Iterable

__all__ = ["task_entry", "parse_listing", "catalog_entry", "spec_entry", "ledger_ids",
           "SAFE_ID"]

SAFE_ID = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$")
_DIGEST = re.compile(r"^sha256:[0-9a-f]{64}$")
_LISTING_LINE = re.compile(r"^(sha256:[0-9a-f]{64})  (.+)$")
_MAX_EXTENDS = 8


def task_entry(task) -> str | None:
    """``tasks/<id>/v<N>`` for a ``run.start`` ``task`` object, or None if it is malformed."""
    if not isinstance(task, dict):
        return None
    tid, version, digest = task.get("id"), task.get("version"), task.get("digest")
    if not (isinstance(tid, str) and SAFE_ID.match(tid) and type(version) is int and version >= 0
            and isinstance(digest, str) and _DIGEST.match(digest)):
        return None
    return f"tasks/{tid}/v{version}"


def parse_listing(data: bytes) -> list[tuple[str, str]]:
    """(path, digest) rows of a canonical task listing. Raises ValueError on a bad line."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise ValueError("not UTF-8") from None
    if text and not text.endswith("\n"):
        raise ValueError("does not end with a newline")
    rows = []
    for i, line in enumerate(text.split("\n")[:-1], 1):
        m = _LISTING_LINE.match(line)
        if not m:
            raise ValueError(f"line {i} is not '<sha256:hex>  <path>'")
        path = m.group(2)
        if path.startswith("/") or "\\" in path or any(p in ("", ".", "..") for p in path.split("/")):
            raise ValueError(f"line {i}: path {path!r} is not a clean relative path")
        rows.append((path, m.group(1)))
    return rows


def catalog_entry(ref, _depth: int = 0) -> list[tuple[str, str]]:
    """(bundle path, digest) of a ``run.start`` ``catalog`` object and what it extends."""
    if not isinstance(ref, dict) or _depth > _MAX_EXTENDS:
        return []
    name, digest = ref.get("name"), ref.get("digest")
    out = []
    if isinstance(name, str) and SAFE_ID.match(name) and isinstance(digest, str) and _DIGEST.match(digest):
        out.append((f"catalogs/{name}-{digest[7:19]}.toml", digest))
    return out + catalog_entry(ref.get("extends"), _depth + 1)


def spec_entry(experiment: str) -> str:
    return f"experiments/{experiment}.toml"


def ledger_ids(run_starts: Iterable[dict], journal_bodies: Iterable[dict]) -> list[str]:
    """Every well-formed ledger id named by a ``run.start`` or a ``grid.start`` body."""
    ids = set()
    for body in [*run_starts, *journal_bodies]:
        lid = body.get("ledger") if isinstance(body, dict) else None
        if isinstance(lid, str) and SAFE_ID.match(lid):
            ids.add(lid)
    return sorted(ids)
