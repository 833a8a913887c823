"""The record envelope and its hash chain (docs/FORMAT.md §2).

Pure and standard-library only (plus ``jsonio``): the offline verifier uses this module
to re-check every chain. A record's identity is its exact line bytes; nothing is
re-serialised before hashing, so a reader verifies the bytes it was given, not a parse of
them.
"""

from __future__ import annotations

import hashlib
import re
import time
from dataclasses import dataclass, field
from typing import Iterable, Iterator

from . import jsonio
from ..errors import FormatError, IntegrityError

__all__ = [
    "ENVELOPE_VERSION",
    "GENESIS",
    "Record",
    "encode",
    "encode_fields",
    "refs_and_floats",
    "line_hash",
    "parse_line",
    "envelope_problem",
    "MAX_LINE_BYTES",
    "verify_chain",
    "split_lines",
    "utc_now",
    "blob_refs",
    "DIGEST_RE",
    "RUN_KINDS",
    "JOURNAL_KINDS",
]

ENVELOPE_VERSION = 1
GENESIS = "0" * 64
DIGEST_RE = re.compile(r"^sha256:[0-9a-f]{64}$")
_HEX64 = re.compile(r"^[0-9a-f]{64}$")
MAX_LINE_BYTES = 16 * 1024 * 1024

RUN_KINDS = frozenset({"run.start", "call", "action", "check", "artifact", "run.end"})
JOURNAL_KINDS = frozenset({"prereg", "deviation", "grid.start", "run", "trial", "stop", "grid.end",
                           "correction"})


@dataclass(frozen=True)
class Record:
    """One line of a JSONL evidence file. ``line`` holds its exact bytes when read from disk."""

    seq: int
    prev: str
    at: str
    kind: str
    body: dict
    line: bytes = field(default=b"", compare=False, repr=False)

    def to_dict(self) -> dict:
        return {"v": ENVELOPE_VERSION, "seq": self.seq, "prev": self.prev, "at": self.at,
                "kind": self.kind, "body": self.body}

    @property
    def hash(self) -> str:
        """Hex SHA-256 of this record's line bytes (what the next record's ``prev`` holds)."""
        return line_hash(self.line or encode(self))


def utc_now() -> str:
    """The current UTC time as FORMAT.md writes it (microseconds, ``Z``): what
    ``strftime("%Y-%m-%dT%H:%M:%S.%fZ")`` writes for ``datetime.now(timezone.utc)``, with the
    part up to the second formatted once a second (every record is stamped)."""
    us = time.time_ns() // 1000
    sec, frac = divmod(us, 1_000_000)
    cached = _SECOND
    if cached[0] != sec:
        cached = _stamp_second(sec)
    return "%s%06dZ" % (cached[1], frac)


def _stamp_second(sec: int) -> tuple[int, str]:
    global _SECOND
    _SECOND = (sec, "%04d-%02d-%02dT%02d:%02d:%02d." % time.gmtime(sec)[:6])
    return _SECOND


_SECOND: tuple[int, str] = (-1, "")  # (a second since the epoch, its stamp up to the ".")


def encode(record: Record) -> bytes:
    """The canonical line bytes of a record, without the trailing newline."""
    return jsonio.dumps(record.to_dict())


def encode_fields(seq: int, prev: str, at: str, kind: str, body: dict, *, floatless: bool = False) -> bytes:
    """``encode`` of the record these fields make, without making it first (a writer
    makes the ``Record`` once, with its line). ``floatless``: the caller walked ``body`` and
    found no float (``refs_and_floats``), so ``jsonio.dumps_floatless`` skips that walk."""
    obj = {"v": ENVELOPE_VERSION, "seq": seq, "prev": prev, "at": at, "kind": kind, "body": body}
    return jsonio.dumps_floatless(obj) if floatless else jsonio.dumps(obj)


def line_hash(line: bytes) -> str:
    return hashlib.sha256(line).hexdigest()


def parse_line(line: bytes, where: str) -> Record:
    """Parse one line (without ``\\n``). Raises FormatError naming ``where`` on any defect."""
    if len(line) > MAX_LINE_BYTES:
        raise FormatError(f"{where}: line longer than {MAX_LINE_BYTES} bytes")
    try:
        obj = jsonio.loads(line)
    except ValueError as e:
        raise FormatError(f"{where}: not JSON ({e})") from None
    if not isinstance(obj, dict):
        raise FormatError(f"{where}: a record must be a JSON object")
    problem = envelope_problem(obj)
    if problem:
        raise FormatError(f"{where}: {problem}")
    return Record(obj["seq"], obj["prev"], obj["at"], obj["kind"], obj["body"], line)


def envelope_problem(obj: dict) -> str | None:
    """What is wrong with a parsed record's envelope (None when nothing is)."""
    # Fast path: a well-formed envelope (nearly every line) passes with one expression; the
    # checks below run only to name what is wrong. Verifying a bundle parses every record.
    prev = obj.get("prev")
    if (len(obj) == 6 and obj.get("v") == ENVELOPE_VERSION and type(obj.get("seq")) is int
            and type(prev) is str and type(obj.get("at")) is str and type(obj.get("kind")) is str
            and type(obj.get("body")) is dict and _HEX64.match(prev)):
        return None
    if obj.get("v") != ENVELOPE_VERSION:
        return f"unknown envelope version {obj.get('v')!r} (expected {ENVELOPE_VERSION})"
    checks = (("seq", int), ("prev", str), ("at", str), ("kind", str), ("body", dict))
    for key, typ in checks:
        val = obj.get(key)
        if not isinstance(val, typ) or (typ is int and isinstance(val, bool)):
            return f"field {key!r} missing or not {typ.__name__}"
    if not _HEX64.match(obj["prev"]):
        return "field 'prev' is not 64 hex digits"
    extra = set(obj) - {"v", "seq", "prev", "at", "kind", "body"}
    if extra:
        return f"unexpected envelope field(s) {sorted(extra)}"
    return None


def split_lines(data: bytes) -> tuple[list[bytes], bytes]:
    """Split file bytes into complete lines (without ``\\n``) and a torn tail (maybe b"")."""
    parts = data.split(b"\n")
    return parts[:-1], parts[-1]


def verify_chain(lines: Iterable[bytes], where: str) -> list[Record]:
    """Parse and verify a sequence of lines. Raises IntegrityError/FormatError naming
    ``where`` and the 1-based line number of the first defect."""
    lines = lines if isinstance(lines, list) else list(lines)
    records: list[Record] = []
    prev = GENESIS
    for i, line in enumerate(lines):
        rec = parse_line(line, f"{where}:{i + 1}")
        if rec.seq != i:
            raise IntegrityError(f"{where}:{i + 1}: seq is {rec.seq}, expected {i} "
                                 "(a line was inserted, removed or reordered)")
        if rec.prev != prev:
            raise IntegrityError(_break_message(lines, i, where))
        prev = line_hash(line)
        records.append(rec)
    return records


def _break_message(lines, i: int, where: str) -> str:
    """Name the line most likely altered when line ``i`` (0-based) does not chain to i-1.

    If the link *after* line i still holds, line i is intact and line i-1 was altered
    (its hash changed); otherwise line i itself was changed, inserted or moved.
    """
    nxt = lines[i + 1] if i + 1 < len(lines) else None
    if nxt is not None:
        try:
            follows = parse_line(nxt, where).prev == line_hash(lines[i])
        except FormatError:
            follows = False
        if follows:
            return (f"{where}:{i}: line {i} was altered (line {i + 1}'s prev no longer matches "
                    "its hash)")
    return (f"{where}:{i + 1}: prev does not match the hash of line {i} "
            "(this line or the one before it was changed, inserted, removed or reordered)")


def blob_refs(body, _depth: int = 0) -> Iterator[str]:
    """Every ``sha256:`` digest string in a record body: each names a blob in objects/.
    (Collected in one walk, in order, then iterated: this runs for every record an agent
    writes, so a scalar costs no call of its own.)"""
    out: list[str] = []
    if _depth > jsonio.MAX_DEPTH:
        pass
    elif isinstance(body, str):
        if body.startswith("sha256:") and DIGEST_RE.match(body):
            out.append(body)
    elif isinstance(body, (dict, list)):
        _collect_refs(body, _depth, out)
    return iter(out)


def refs_and_floats(body: dict) -> tuple[list[str], bool]:
    """``blob_refs`` of a record body, and whether a float sits anywhere in it, in one walk
    (an agent checks both for every record it writes: ``agent.evidence.append``). The float
    test is ``jsonio._has_float``'s: exact types first, subclasses as ``isinstance`` finds
    them; a container beyond ``MAX_DEPTH`` counts as holding a float (the walk that would
    decide is not made), which only costs the slower canonical ``dumps``."""
    out: list[str] = []
    return out, _walk_refs_floats(body, 0, out)


def _walk_refs_floats(node, depth: int, out: list[str]) -> bool:
    child = depth + 1
    if child > jsonio.MAX_DEPTH:
        return True
    floats = False
    for v in (node.values() if isinstance(node, dict) else node):
        t = type(v)
        if t is str:
            if v.startswith("sha256:") and DIGEST_RE.match(v):
                out.append(v)
        elif t is int or t is bool or v is None:
            pass
        elif t is dict or t is list:
            floats = _walk_refs_floats(v, child, out) or floats
        elif isinstance(v, str):
            if v.startswith("sha256:") and DIGEST_RE.match(v):
                out.append(v)
        elif isinstance(v, (dict, list)):
            floats = _walk_refs_floats(v, child, out) or floats
        elif isinstance(v, tuple):
            floats = floats or jsonio._has_float(v, child)
        else:
            floats = floats or isinstance(v, float) or not isinstance(v, int)
    return floats


def _collect_refs(node, depth: int, out: list[str]) -> None:
    """The digests in the values of ``node`` (a dict or list at ``depth``), in order."""
    child = depth + 1
    if child > jsonio.MAX_DEPTH:
        return
    for v in (node.values() if isinstance(node, dict) else node):
        t = type(v)
        if t is str or isinstance(v, str):
            if v.startswith("sha256:") and DIGEST_RE.match(v):
                out.append(v)
        elif t is dict or t is list or isinstance(v, (dict, list)):
            _collect_refs(v, child, out)
