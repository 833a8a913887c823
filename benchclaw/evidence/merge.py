"""Merging another machine's runs directory into this one (FORMAT.md §1, "Merging").

Why it is built this way: the evidence is made to be merged. Blobs and sealed runs are
named by the SHA-256 of their bytes, so the same name means the same bytes; journals are
one file per writer and ledgers one file per invocation, so two machines never append to
the same file. A merge is therefore a union of files, and a union does not depend on the
order it is taken in: merging A then B or B then A leaves the same files with the same
bytes, and merging twice changes nothing.

What a union cannot decide alone is refused, before anything is written:
1. the other directory must verify (``Store.check``: every chain, run id and blob) and
   have no open run (those are sealed by ``benchclaw runs recover`` first);
2. an experiment registered on both sides must have one registration history (one
   sequence of spec digests a prefix of the other's);
3. a unit (a cell's grid run at a tier, or a live trial's run at a tier) that called the
   model on both sides under different runs means the same shard ran twice: merging it
   would count those runs and their spend twice, so it is refused;
4. a file of the same name must hold the same bytes; an appended file (journal, ledger,
   pack: one per writer process, ``objects/packs/<id>.pack``) may have grown on one side, so one must be a byte prefix of the other (the longer is
   kept); anything else is a conflict, named.

Nothing of the merge itself is recorded (no journal record, no timestamp), so the result
is byte-identical whatever the order. Files are written as a blob is: a temporary file,
fsynced, renamed into place; objects (loose, then packs) first, then runs, ledgers and journals, so an
interrupted merge never leaves a journal naming a run that is not there, and re-running
it finishes the job.
"""

from __future__ import annotations

import contextlib
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from ._commit import storage_error
from .check import check_store
from ..errors import IntegrityError, UsageError
from ..formats.records import parse_line, split_lines
from .store import VERSION_TEXT, Store, write_atomically

__all__ = ["merge_store", "MergeReport"]

# (folder, glob, appended?) in the order files are written.
_LAYOUT = (("objects", "??/*", False), ("packs", "packs/*.pack", True), ("runs", "??/*.jsonl", False),
           ("ledgers", "*.jsonl", True), ("journals", "*/*.jsonl", True))


@dataclass
class MergeReport:
    """What a merge did: files copied or extended per folder, and files already present."""

    copied: dict[str, int] = field(default_factory=dict)
    extended: dict[str, int] = field(default_factory=dict)
    unchanged: int = 0

    @property
    def changed(self) -> int:
        return sum(self.copied.values()) + sum(self.extended.values())

    def line(self) -> str:
        parts = [f"{self.copied.get(k, 0)} {k}" for k, _, _ in _LAYOUT]
        grown = sum(self.extended.values())
        return (f"copied {', '.join(parts)}; {grown} appended file(s) extended; "
                f"{self.unchanged} already present")


def merge_store(dest: Store, other: Store) -> MergeReport:
    """Merge ``other`` into ``dest`` (created when missing). Raises UsageError when
    ``other`` is not a runs directory or has open runs, IntegrityError (naming the file)
    when it does not verify or conflicts with ``dest``; nothing is written then."""
    if dest.root.resolve() == other.root.resolve():
        raise UsageError(f"{other.root}: cannot merge a runs directory into itself")
    _require_verified(other)
    dest.ensure()
    report = MergeReport()
    with _experiments_locked(dest, other):  # no grid or deviation of theirs writes meanwhile
        _require_one_history(dest, other)
        _require_no_double_runs(dest, other)
        for folder, src, target, kind in _plan(dest, other):
            if kind == "same":
                report.unchanged += 1
                continue
            _copy(src, target, dest.fsync)
            bucket = report.copied if kind == "new" else report.extended
            bucket[folder] = bucket.get(folder, 0) + 1
    return report


@contextlib.contextmanager
def _experiments_locked(dest: Store, other: Store):
    """Hold ``dest``'s lock of every experiment ``other`` carries a journal of (the lock
    ``run``, ``demo`` and ``deviate`` hold while they write), in name order; raises
    UsageError at once when one of them is running here."""
    journals = other.root / "journals"
    names = sorted(p.name for p in journals.iterdir() if p.is_dir()) if journals.is_dir() else []
    with contextlib.ExitStack() as stack:
        for name in names:
            stack.enter_context(dest.experiment_lock(name))
        yield


# ------------------------------------------------------------------------------ 1. verify

def _require_verified(other: Store) -> None:
    version = other.root / "VERSION"
    if not other.root.is_dir() or not version.is_file():
        raise UsageError(f"{other.root}: not a runs directory (no VERSION file)")
    if version.read_bytes() != VERSION_TEXT:
        raise UsageError(f"{version}: unknown runs directory version {version.read_bytes()[:40]!r}")
    report = check_store(other)
    if not report.ok:
        raise IntegrityError(f"{other.root} does not verify, nothing merged: {report.damages[0]} "
                             f"({len(report.damages)} damaged in all; see `benchclaw runs check --runs {other.root}`)")
    if report.open_runs:
        raise UsageError(f"{other.root}: {report.open_runs} open run(s); seal them first with "
                         f"`benchclaw runs recover --runs {other.root}` (or let its grid finish)")


# -------------------------------------------------------------------------------- 4. plan

def _plan(dest: Store, other: Store) -> list[tuple[str, Path, Path, str]]:
    """(folder, source, target, new | same | extend) for every evidence file of ``other``."""
    plan = []
    for folder, pattern, appended in _LAYOUT:
        base = other.root / ("objects" if folder == "packs" else folder)
        for src in sorted(base.glob(pattern)) if base.is_dir() else []:
            if not src.is_file() or src.parent.name == "tmp" or src.name.startswith("."):
                continue  # staged blobs, and packs still being created (``.new-*``)
            target = dest.root / src.relative_to(other.root)
            plan.append((folder, src, target, _compare(src, target, appended)))
    return plan


def _compare(src: Path, target: Path, appended: bool) -> str:
    if not target.exists():
        return "new"
    mine, theirs = target.read_bytes(), src.read_bytes()
    if mine == theirs:
        return "same"
    if appended and theirs.startswith(mine):
        return "extend"
    if appended and mine.startswith(theirs):
        return "same"
    what = ("an appended file that diverged on the two sides (same writer name on two machines? "
            "set BENCHCLAW_WRITER)" if appended else
            "a content-addressed file whose bytes differ (one side is damaged: run `benchclaw runs check`)")
    raise IntegrityError(f"{target}: conflicts with {src}: {what}; nothing merged")


# ----------------------------------------------------------------- 2-3. one history, no twice

def _journal_bodies(store: Store, experiment: str) -> list[tuple[str, dict]]:
    out = []
    for path in store.journal_paths(experiment):
        lines, _ = split_lines(path.read_bytes())
        out.extend((rec.kind, rec.body) for rec in (parse_line(ln, str(path)) for ln in lines))
    return out


def _registrations(store: Store, experiment: str) -> list[str]:
    """The spec digests registered, in journal order, repeats collapsed."""
    seq: list[str] = []
    for e in store.read_journal(experiment):
        if e.kind in ("prereg", "deviation"):
            d = e.body.get("spec_digest")
            if not seq or seq[-1] != d:
                seq.append(d)
    return seq


def _require_one_history(dest: Store, other: Store) -> None:
    for exp in sorted(set(dest.experiments()) & set(other.experiments())):
        a, b = _registrations(dest, exp), _registrations(other, exp)
        short, long_ = sorted((a, b), key=len)
        if long_[:len(short)] != short:
            raise IntegrityError(f"experiment {exp}: registered as {a} in {dest.root} but as {b} in "
                                 f"{other.root}; one experiment cannot have two registration histories; "
                                 "nothing merged")


def _called_units(store: Store, experiment: str) -> dict[tuple, set[str]]:
    units: dict[tuple, set[str]] = {}
    for kind, b in _journal_bodies(store, experiment):
        if kind == "run" and b.get("called_model"):
            key = (b.get("policy"), b.get("cell"), b.get("tier"), b.get("trial"), bool(b.get("rerun")))
            units.setdefault(key, set()).add(b.get("run_id"))
    return units


def _require_no_double_runs(dest: Store, other: Store) -> None:
    for exp in sorted(set(dest.experiments()) & set(other.experiments())):
        mine, theirs = _called_units(dest, exp), _called_units(other, exp)
        for key in sorted(set(mine) & set(theirs), key=str):
            if mine[key] - theirs[key] and theirs[key] - mine[key]:
                policy, cell, tier = key[:3]
                raise IntegrityError(
                    f"experiment {exp}: cell {cell} ({policy}, tier {tier}) called the model in both "
                    f"{dest.root} (run {sorted(mine[key] - theirs[key])[0][:12]}) and {other.root} (run "
                    f"{sorted(theirs[key] - mine[key])[0][:12]}): the same shard ran twice; merging would "
                    "count those runs and their spend twice; nothing merged")


# ------------------------------------------------------------------------------- writing

def _copy(src: Path, target: Path, fsync: bool) -> None:
    data = src.read_bytes()
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise storage_error(target, "merge", e) from None
    tmp = target.with_name(f".{target.name}.{uuid.uuid4().hex}.merge")
    write_atomically(target, data, tmp, fsync=fsync, what="merge")
