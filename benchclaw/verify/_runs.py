"""Step 2, the runs: each sealed run log is what its name says, unbroken, and complete.

For every ``runs/<aa>/<id>.jsonl``: its SHA-256 is its run id; its hash chain holds (no
record changed, inserted, removed or reordered; ``records.verify_chain`` on the exact
bytes); it starts with ``run.start`` and ends with ``run.end``; every ``sha256:`` string
in a body names an object present in the bundle whose bytes hash to it; and the task
files under ``tasks/<id>/v<N>/`` hash to the task digest the run recorded. Objects are
checked against their names too, referenced or not.

The reading stage has hashed every entry and parsed every run log (``_index.RunLog``);
this step reports each run's first fault in that order, and returns the runs it accepted:
steps 3-8 build on them only, so one fault is reported where it is, not five times
downstream.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

from ..checks.digest import task_digest
from ._errors import VerificationError, from_error
from ._index import Index, Run, RunLog, frozen
from ._report import Section
from ._shape import RUN
from .layout import task_entry
from .manifest import OBJECT_PATH, RUN_PATH, object_path

__all__ = ["verify_runs", "Runs"]


@dataclass(frozen=True)
class Runs:
    """What step 2 hands the later steps: the runs it accepted, by id, and the ids of the
    runs present but rejected (a journal naming one is not naming a missing run)."""

    accepted: Mapping[str, Run]
    rejected: frozenset

    @classmethod
    def none(cls) -> "Runs":
        return cls(frozen({}), frozenset())

    def values(self):
        return self.accepted.values()

    def get(self, run_id):
        return self.accepted.get(run_id)

    def __contains__(self, run_id) -> bool:
        return run_id in self.accepted

    def __len__(self) -> int:
        return len(self.accepted)


def verify_runs(ix: Index, sec: Section) -> Runs:
    # the objects whose bytes hash to their name, as raw digests (a record's refs are packed so)
    good = ix.digests.hashed_to_names(ix.names)
    for name in _doubted_objects(ix, good):
        sec.attempt(_check_object, ix, name)
    names = ix.names_under("runs/")
    accepted: dict[str, Run] = {}
    rejected: set[str] = set()
    digests: dict[str, str | ValueError] = {}  # task version -> its digest, computed once
    for name in names:
        sec.attempt(_check_run, ix, name, good, digests, accepted, rejected, sec)
    sec.count("runs", len(accepted))
    if not names:
        sec.fail(VerificationError("runs/", "the bundle holds no runs: nothing to verify"))
    return Runs(frozen(accepted), frozenset(rejected))


def _doubted_objects(ix: Index, good) -> list[str]:
    """The entries under ``objects/`` that ``_check_object`` could refuse, in archive order:
    every other one is an object entry (``_zip.Names`` keeps its name as the 32 bytes it
    spells, so it is an object name) whose bytes hash to its name, or that was unread (step
    1 reports it), which the check passes. No name is made for those."""
    names = ix.names
    doubted = set(good.odd()).union(i for i, n in names.plain() if n.startswith("objects/"))
    return [n for n in map(names.__getitem__, sorted(doubted)) if n.startswith("objects/")]


def _check_object(ix: Index, name: str) -> None:
    m = OBJECT_PATH.match(name)
    if not m or m.group(1) != m.group(2)[:2]:
        raise VerificationError(name, "not an object name (objects/<aa>/<64 hex>)")
    if name in ix.digests and ix.digests[name] != "sha256:" + m.group(2):
        raise VerificationError(name, f"object bytes hash to {ix.digests[name]}, not to its name")


def _check_run(ix: Index, name: str, good, digests: dict, accepted: dict, rejected: set,
               sec: Section) -> None:
    m = RUN_PATH.match(name)
    if not m or m.group(1) != m.group(2)[:2]:
        raise VerificationError(name, "not a run log name (runs/<aa>/<64 hex>.jsonl)")
    run_id = m.group(2)
    rejected.add(run_id)
    if ix.digests.get(name) != "sha256:" + run_id:
        raise VerificationError(name, "file bytes do not hash to the run id (the file was altered)")
    parsed = ix.run_logs[name]
    if isinstance(parsed, VerificationError):
        raise parsed
    if parsed.fault is not None:
        raise parsed.fault
    _check_records(ix, name, parsed, good, sec)
    _check_task(ix, name, parsed.first.body.get("task"), digests)
    rejected.discard(run_id)
    accepted[run_id] = Run(run_id, name, ix.run_logs, ix.recent)
    sec.count("records", parsed.count)


def _check_records(ix: Index, name: str, parsed: RunLog, good, sec: Section) -> None:
    """In record order: a body's types, then its references. The records are read only when
    something is wrong or to count: the reading stage checked every body and noted the
    references of a run whose records are all of known kinds and well typed."""
    refs = parsed.refs
    if parsed.known_kinds and not parsed.bad_line and good.holds_all(refs):
        return
    for i, rec in enumerate(parsed.records(), 1):
        if i == parsed.bad_line:
            raise parsed.bad
        refs = parsed.refs_of(i)
        for at in range(0, len(refs), 32):
            if refs[at:at + 32] not in good:
                _check_ref(ix, name, i, "sha256:" + refs[at:at + 32].hex())
        if rec.kind not in _KNOWN:
            sec.count(f"unknown kind {rec.kind}"[:80])


_KNOWN = frozenset(RUN)  # the kinds whose fields the steps read


def _check_ref(ix: Index, name: str, line: int, digest: str) -> None:
    obj = object_path(digest)
    if not ix.has(obj):
        raise VerificationError(name, f"references object {digest}, which the bundle lacks", line)
    if ix.digests.get(obj) != digest:
        raise VerificationError(name, f"object {digest} does not hash to its digest", line)


def _task_digest(files: Mapping[str, bytes], prefix: str, digests: dict) -> str:
    """``task_digest`` of a task version's files, once per version. Raises ValueError."""
    if prefix not in digests:
        try:
            digests[prefix] = task_digest(dict(files))
        except ValueError as e:
            digests[prefix] = e
    if isinstance(digests[prefix], ValueError):
        raise digests[prefix]
    return digests[prefix]


def _check_task(ix: Index, name: str, task, digests: dict) -> None:
    prefix = task_entry(task)
    if prefix is None:
        raise VerificationError(name, "run.start.task is not {id, version, digest}", 1)
    files = ix.task_files.get(prefix)
    if not files:
        raise VerificationError(name, f"task {task['id']} v{task['version']}: {prefix}/ is missing "
                                "from the bundle", 1)
    try:
        got = _task_digest(files, prefix, digests)
    except ValueError as e:
        raise VerificationError(prefix, str(e)) from None
    if got != task["digest"]:
        raise VerificationError(name, f"the task files under {prefix}/ hash to {got}, "
                                f"run.start says {task['digest']}", 1)
