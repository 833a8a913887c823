"""Step 2, the runs: each sealed run log is what its name says, unbroken, and complete.

For every ``runs/<aa>/<id>.jsonl``: its SHA-256 is its run id; its hash chain holds (no
record changed, inserted, removed or reordered; ``records.verify_chain`` on the exact
bytes); it starts with ``run.start`` and ends with ``run.end``; every ``sha256:`` string
in a body names an object present in the bundle whose bytes hash to it; and the task
files under ``tasks/<id>/v<N>/`` hash to the task digest the run recorded. Objects are
checked against their names too, referenced or not.

What needs no object digest (the run id, the chain, the record types) is done by
``parse_run`` before step 1 has the objects' digests, while a forked worker hashes them;
step 2 then reports each run's first fault exactly where a single pass would have.
"""

from __future__ import annotations

import re

from .. import jsonio
from ..checks.digest import task_digest
from ..errors import BenchClawError
from ..records import blob_refs, split_lines, verify_chain
from ._context import Bundle, RunData
from ._errors import VerificationError
from ._report import Section
from ._shape import RUN, check_body
from .layout import task_entry
from .manifest import OBJECT_PATH, RUN_PATH, object_path

__all__ = ["verify_runs", "from_error", "parse_run"]

_WHERE = re.compile(r"^(?P<path>[^:]*):(?P<line>\d+): (?P<msg>.*)$", re.S)


def from_error(err: BenchClawError, path: str) -> VerificationError:
    """A record/store error ("path:line: message") as a VerificationError with fields."""
    m = _WHERE.match(str(err))
    if m and m.group("path") == path:
        return VerificationError(path, m.group("msg"), int(m.group("line")))
    return VerificationError(path, str(err).removeprefix(f"{path}: "))


def verify_runs(b: Bundle, sec: Section) -> None:
    for name in b.view.names:
        if name.startswith("objects/"):
            sec.attempt(_check_object, b, name)
    names = [n for n in b.view.names if n.startswith("runs/")]
    for name in names:
        sec.attempt(_check_run, b, name, sec)
    sec.count("runs", len(b.runs))
    if not names:
        sec.fail(VerificationError("runs/", "the bundle holds no runs: nothing to verify"))


def _check_object(b: Bundle, name: str) -> None:
    m = OBJECT_PATH.match(name)
    if not m or m.group(1) != m.group(2)[:2]:
        raise VerificationError(name, "not an object name (objects/<aa>/<64 hex>)")
    if name in b.digests and b.digests[name] != "sha256:" + m.group(2):
        raise VerificationError(name, f"object bytes hash to {b.digests[name]}, not to its name")


def parse_run(b: Bundle, name: str) -> None:
    """Parse one run log ahead of step 2, while a worker hashes the objects and the run logs:
    what ``_check_run`` needs no digest for. Its outcome, error included, is kept for step 2
    to report in its place, after the run id check that comes first.

    The log's bytes are not kept: its records hold its lines, and a run that fails here is
    read again where it is needed."""
    try:
        data = b.view.read(name)
    except VerificationError:
        return  # step 1 reports the corrupt entry, step 2 reads it again and fails
    try:
        b.parsed[name] = _parse(b, name, data, check_id=False)
    except VerificationError as e:
        b.parsed[name] = e


def _parse(b: Bundle, name: str, data: bytes | None = None, *,
           check_id: bool = True) -> tuple[list, int, VerificationError | None, list]:
    """(records, line of the first record whose body is ill-typed or 0, its error, the
    digests each record before it references)."""
    m = RUN_PATH.match(name)
    if not m or m.group(1) != m.group(2)[:2]:
        raise VerificationError(name, "not a run log name (runs/<aa>/<64 hex>.jsonl)")
    if data is None:
        data = b.read(name)
    if check_id:
        _check_id(b, name, m.group(2))
    records = _chain(b, name, data)
    if not records or records[0].kind != "run.start":
        raise VerificationError(name, "a run must start with run.start", 1)
    if records[-1].kind != "run.end":
        raise VerificationError(name, "a sealed run must end with run.end", len(records))
    refs = []
    for i, rec in enumerate(records, 1):
        try:
            check_body(rec.kind, rec.body, RUN, name, i)
        except VerificationError as e:
            return records, i, e, refs
        refs.append(_refs(rec.line, rec.body))
        _forget_line(rec)
    return records, 0, None, refs


def _forget_line(rec) -> None:
    """Drop a record's line bytes once its chain and references are checked: nothing after
    step 2 reads them (``Record.hash`` would re-encode), and they are a run log's size again."""
    object.__setattr__(rec, "line", b"")  # a frozen dataclass: as its own __post_init__ would


def _check_run(b: Bundle, name: str, sec: Section) -> None:
    m = RUN_PATH.match(name)
    if not m or m.group(1) != m.group(2)[:2]:
        raise VerificationError(name, "not a run log name (runs/<aa>/<64 hex>.jsonl)")
    run_id = m.group(2)
    b.bad_runs.add(run_id)
    parsed = b.parsed.pop(name, None)
    if parsed is None:
        parsed = _parse(b, name)
    else:
        _check_id(b, name, run_id)  # parsed early: the id check comes first, as in _parse
    if isinstance(parsed, VerificationError):
        raise parsed
    records, bad_line, bad, refs = parsed
    good = _good_objects(b)
    for i, rec in enumerate(records, 1):  # in record order: a body's types, then its references
        if i == bad_line:
            raise bad
        for digest in refs[i - 1]:
            if "objects/" + digest[7:9] + "/" + digest[7:] not in good:
                _check_ref(b, name, i, digest)
        if rec.kind not in _KNOWN:
            sec.count(f"unknown kind {rec.kind}"[:80])
    _check_task(b, name, records[0].body.get("task"))
    b.bad_runs.discard(run_id)
    b.runs[run_id] = RunData(run_id, name, records)
    sec.count("records", len(records))


def _check_id(b: Bundle, name: str, run_id: str) -> None:
    if b.digests.get(name) != "sha256:" + run_id:
        raise VerificationError(name, "file bytes do not hash to the run id (the file was altered)")


_KNOWN = frozenset({"run.start", "call", "action", "check", "artifact", "run.end"})


def _chain(b: Bundle, name: str, data: bytes) -> list:
    lines, torn = split_lines(data)
    if torn:
        raise VerificationError(name, "torn last line (no newline) in a sealed run", len(lines) + 1)
    for i, line in enumerate(lines, 1):
        if len(line) > b.limits.line_bytes:
            raise VerificationError(name, f"line longer than {b.limits.line_bytes} bytes", i)
    try:
        records = verify_chain(lines, name)
    except BenchClawError as e:
        raise from_error(e, name) from None
    for i, rec in enumerate(records, 1):
        if lines[i - 1].count(b"{") + lines[i - 1].count(b"[") <= b.limits.json_depth:
            continue  # fewer brackets than the limit: cannot nest deeper (a C-speed count)
        try:
            jsonio.check_depth(rec.body, b.limits.json_depth)
        except ValueError as e:
            raise VerificationError(name, str(e), i) from None
    return records


_REF = re.compile(rb'"(sha256:[0-9a-f]{64})"')


def _refs(raw: bytes, body: dict):
    """The digests a record references: a C-speed scan of its canonical line, or (when the
    line uses \\u escapes, which could spell a digest the scan would miss) the full walk."""
    if b"\\u" in raw:
        return blob_refs(body)
    return [m.decode() for m in _REF.findall(raw)]


def _good_objects(b: Bundle) -> set[str]:
    """The object entries whose bytes hash to their name (computed once, after step 1)."""
    good = b.memo.get("good objects")
    if good is None:
        good = b.memo["good objects"] = {
            n for n in b.view.entries if n.startswith("objects/") and b.digests.get(n) == "sha256:" + n[11:]}
    return good


def _check_ref(b: Bundle, name: str, line: int, digest: str) -> None:
    obj = object_path(digest)
    if obj not in b.view.entries:
        raise VerificationError(name, f"references object {digest}, which the bundle lacks", line)
    if b.digests.get(obj) != digest:
        raise VerificationError(name, f"object {digest} does not hash to its digest", line)


def task_files(b: Bundle, prefix: str) -> dict[str, bytes]:
    """The files of one task version in the bundle, by path relative to ``prefix``."""
    if prefix not in b.task_files:
        start = prefix + "/"
        b.task_files[prefix] = {n[len(start):]: b.read(n) for n in _task_names(b).get(prefix, ())}
    return b.task_files[prefix]


def _task_names(b: Bundle) -> dict[str, list[str]]:
    """Every entry under ``tasks/<id>/v<N>/``, by that prefix (one pass over the names)."""
    index = b.memo.get("task names")
    if index is None:
        index = b.memo["task names"] = {}
        for n in b.view.entries:
            if n.startswith("tasks/"):
                parts = n.split("/", 3)
                if len(parts) == 4:
                    index.setdefault("/".join(parts[:3]), []).append(n)
    return index


def _task_digest(b: Bundle, prefix: str, files: dict[str, bytes]) -> str:
    """``task_digest`` of a task version's files, once per version. Raises ValueError."""
    key = ("task digest", prefix)
    if key not in b.memo:
        try:
            b.memo[key] = task_digest(files)
        except ValueError as e:
            b.memo[key] = e
    if isinstance(b.memo[key], ValueError):
        raise b.memo[key]
    return b.memo[key]


def _check_task(b: Bundle, name: str, task) -> None:
    prefix = task_entry(task)
    if prefix is None:
        raise VerificationError(name, "run.start.task is not {id, version, digest}", 1)
    files = task_files(b, prefix)
    if not files:
        raise VerificationError(name, f"task {task['id']} v{task['version']}: {prefix}/ is missing "
                                "from the bundle", 1)
    try:
        got = _task_digest(b, prefix, files)
    except ValueError as e:
        raise VerificationError(prefix, str(e)) from None
    if got != task["digest"]:
        raise VerificationError(name, f"the task files under {prefix}/ hash to {got}, "
                                f"run.start says {task['digest']}", 1)
