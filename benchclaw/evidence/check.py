"""Whole-store verification and crash recovery (FORMAT.md §5), split from store.py.

``check_store`` never stops at the first defect: it lists every damaged file with the
first bad line in it, so one flipped byte is reported as exactly one file and line.
``recover_store`` seals every open run whose writer is dead as ``aborted`` (a live writer
holds an ``flock`` on its open run, see ``store.RunWriter``), keeping every complete record
and setting a torn last line aside in ``quarantine/`` (never dropping it silently).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import time
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path

from ..errors import FormatError, IntegrityError
from ..formats.money import fmt_usd
from ..formats.records import (RUN_KINDS, Record, blob_refs, encode, line_hash, split_lines,
                               utc_now, verify_chain)
from .packs import list_packs, read_index, scan_pack, writer_alive
from .store import ChainFile, Store, make_durable, storage_error

__all__ = ["check_store", "recover_store", "recover_one", "run_totals", "Damage", "CheckReport", "Recovered"]


@dataclass(frozen=True)
class Damage:
    """One defect found by ``check_store``: the file, the 1-based line (0 = whole file)."""

    path: str
    line: int
    message: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.message}" if self.line else f"{self.path}: {self.message}"


@dataclass
class CheckReport:
    runs: int = 0
    blobs: int = 0
    journals: int = 0
    ledgers: int = 0
    open_runs: int = 0
    unknown_kinds: dict = field(default_factory=dict)
    damages: list[Damage] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.damages


@dataclass(frozen=True)
class Recovered:
    """What recovery did with one open run."""

    open_path: str
    run_id: str | None
    kept_records: int
    torn_bytes: int
    quarantined: str | None
    note: str
    live: bool = False     # left alone: a live process holds the run's lock


def check_store(store: Store) -> CheckReport:
    report = CheckReport()
    referenced: set[str] = set()
    for run_id in store.run_ids():
        _check_run(store, run_id, report, referenced)
    _check_blobs(store, report, referenced)
    for exp in store.experiments():
        for path in store.journal_paths(exp):
            report.journals += 1
            _check_chain_file(path, report)
    ledgers = store.root / "ledgers"
    for path in sorted(ledgers.glob("*.jsonl")) if ledgers.is_dir() else []:
        report.ledgers += 1
        _check_chain_file(path, report)
    report.open_runs = len(store.open_run_paths())
    return report


def _rel(store: Store, path: Path) -> str:
    try:
        return str(path.relative_to(store.root.parent)) if store.root.parent != Path() else str(path)
    except ValueError:
        return str(path)


def _check_run(store: Store, run_id: str, report: CheckReport, referenced: set[str]) -> None:
    path = store.run_path(run_id)
    report.runs += 1
    data = path.read_bytes()
    lines, torn = split_lines(data)
    try:
        if torn:
            raise IntegrityError(f"{path}:{len(lines) + 1}: torn last line (no newline)")
        records = verify_chain(lines, str(path))
    except (FormatError, IntegrityError) as e:
        report.damages.append(_damage_from(e, path))
        return
    if hashlib.sha256(data).hexdigest() != run_id:
        # The chain held, so the changed byte is in the last line (nothing chains after it).
        report.damages.append(Damage(str(path), len(lines), "file does not hash to its run id "
                                     "(this line or the file was altered)"))
        return
    _check_run_shape(path, records, report)
    for i, rec in enumerate(records):
        if rec.kind not in RUN_KINDS:
            report.unknown_kinds[rec.kind] = report.unknown_kinds.get(rec.kind, 0) + 1
        for digest in blob_refs(rec.body):
            referenced.add(digest)
            if not store.has_blob(digest):
                report.damages.append(Damage(str(path), i + 1, f"blob {digest} is missing"))


def _check_run_shape(path: Path, records: list[Record], report: CheckReport) -> None:
    if not records or records[0].kind != "run.start":
        report.damages.append(Damage(str(path), 1, "a run must start with run.start"))
    elif records[-1].kind != "run.end":
        report.damages.append(Damage(str(path), len(records), "a sealed run must end with run.end"))


def _damage_from(err: Exception, path: Path) -> Damage:
    msg = str(err)
    prefix = f"{path}:"
    if msg.startswith(prefix):
        rest = msg[len(prefix):]
        num, _, text = rest.partition(":")
        if num.isdigit():
            return Damage(str(path), int(num), text.strip())
    return Damage(str(path), 0, msg.removeprefix(f"{path}: "))


def _check_blobs(store: Store, report: CheckReport, referenced: set[str]) -> None:
    base = store.root / "objects"
    if not base.is_dir():
        return
    for sub in sorted(p for p in base.iterdir() if p.is_dir() and p.name not in ("tmp", "packs")):
        for blob in sorted(sub.iterdir()):
            report.blobs += 1
            if hashlib.sha256(blob.read_bytes()).hexdigest() != blob.name:
                report.damages.append(Damage(str(blob), 0, "blob bytes do not match its name"))
    for pack in list_packs(str(base)):
        _check_pack(pack, report)


def _check_pack(pack: str, report: CheckReport) -> None:
    """Re-hash every entry of a pack (the damage names the pack and the entry's number,
    1-based, as a line of a chain file is); bytes after the last whole entry are damage,
    unless they are a torn tail a live writer may still be appending to."""
    try:
        scan = scan_pack(pack)
        with open(pack, "rb") as f:
            for n, (hexd, offset, size) in enumerate(scan.entries, 1):
                report.blobs += 1
                f.seek(offset)
                if hashlib.sha256(f.read(size)).hexdigest() != hexd:
                    report.damages.append(Damage(pack, n, f"packed blob sha256:{hexd} (bytes {offset}-"
                                                 f"{offset + size}): bytes do not match its name"))
    except OSError as e:
        report.damages.append(Damage(pack, 0, f"cannot read the pack: {e.strerror or e}"))
        return
    if scan.problem and not (scan.torn and writer_alive(pack)):
        fix = "; run `benchclaw runs recover`" if scan.torn else ""
        report.damages.append(Damage(pack, len(scan.entries) + 1, f"{scan.problem} (after "
                                     f"{len(scan.entries)} whole entries){fix}"))
    index = read_index(pack)
    if index is not None and index.entries != scan.entries:
        report.damages.append(Damage(pack[:-len(".pack")] + ".idx", 0, "the index does not match its pack "
                                     "(it is derived: delete it, and readers scan the pack)"))


def _check_chain_file(path: Path, report: CheckReport) -> None:
    try:
        ChainFile(path).read()
    except (FormatError, IntegrityError) as e:
        report.damages.append(_damage_from(e, path))


def run_totals(records: list[Record]) -> dict:
    """Sums over a run's ``call`` records, as ``run.end`` carries them (FORMAT.md §3)."""

    usage = {"prompt": 0, "cached_read": 0, "cache_write": 0, "completion": 0, "reasoning": 0}
    low = high = Decimal(0)
    known = True
    calls = 0
    for rec in records:
        if rec.kind != "call":
            continue
        calls += 1
        for k, v in (rec.body.get("usage") or {}).items():
            if k in usage and isinstance(v, int):
                usage[k] += v
        cost = rec.body.get("cost") or {}
        low += Decimal(str(cost.get("low", "0")))
        high += Decimal(str(cost.get("high", "0")))
        known = known and bool(cost.get("known", False))
    return {"calls": calls, "usage": usage,
            "cost": {"known": known, "low": fmt_usd(low), "high": fmt_usd(high)}}


def recover_store(store: Store) -> list[Recovered]:
    """Seal every open run whose writer is dead (its lock can be taken) as ``aborted``; a
    run whose writer is alive is reported ``live`` and left alone. Then cut torn tails
    of journals and ledgers, under their lock. Torn pack tails go first, so a record naming
    a blob only a torn tail held counts as naming a blob that is nowhere."""
    results = [r for r in map(lambda p: _cut_torn_pack(store, p), _packs(store)) if r is not None]
    for path in store.open_run_paths():
        done = recover_one(store, path)
        if done is not None:
            results.append(done)
    _drop_unborn(store)
    for path in _appended_files(store):
        repaired = _cut_torn_tail(store, path)
        if repaired is not None:
            results.append(repaired)
    return results


@contextlib.contextmanager
def _dead_writer(path: Path):
    """Yields True while this process holds the open run's lock (its writer is dead), False
    when a live writer holds it, None when the file is gone (sealed meanwhile)."""
    try:
        fd = os.open(path, os.O_RDWR | os.O_CLOEXEC)
    except FileNotFoundError:
        yield None
        return
    except OSError as e:
        raise storage_error(path, "open the run for recovery", e) from None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            yield False
            return
        st, named = os.fstat(fd), _stat(path)
        # Another process may have sealed it between our open and our lock.
        yield None if named is None or (named.st_dev, named.st_ino) != (st.st_dev, st.st_ino) else True
    finally:
        os.close(fd)


def _stat(path: Path):
    try:
        return os.stat(path)
    except FileNotFoundError:
        return None


# A writer creates ``.new-*`` (O_EXCL) and locks it a moment later: in between it is unlocked
# with nothing written. An empty one is taken for a dead writer's only once it is this old,
# so recovery in another process never deletes a file a live writer is about to lock (git
# keeps its temporary objects a while for the same reason).
UNBORN_GRACE_S = 60.0


def _drop_if_unborn_and_dead(path: Path) -> None:
    """Remove a ``.new-*`` file whose writer died before naming it: unlocked, and either
    written to (a writer writes only after locking) or empty for ``UNBORN_GRACE_S``."""
    st = _stat(path)
    if st is None or (st.st_size == 0 and time.time() - st.st_mtime < UNBORN_GRACE_S):
        return
    with _dead_writer(path) as dead:
        if dead:
            path.unlink(missing_ok=True)


def _drop_unborn(store: Store) -> None:
    """``open/.new-*`` files: run files whose writer died before naming them (no record)."""
    for path in sorted((store.root / "open").glob(".new-*")) if (store.root / "open").is_dir() else []:
        _drop_if_unborn_and_dead(path)


def _appended_files(store: Store) -> list[Path]:
    """Journals and ledgers: the append-only files shared by writers."""
    files = sorted((store.root / "ledgers").glob("*.jsonl")) if (store.root / "ledgers").is_dir() else []
    for exp in store.experiments():
        files.extend(store.journal_paths(exp))
    return files


def _packs(store: Store) -> list[str]:
    """The packs, after dropping ``objects/packs/.new-*`` files whose writer died before
    naming them (nothing refers to a blob in them)."""
    base = store.root / "objects" / "packs"
    for path in sorted(base.glob(".new-*")) if base.is_dir() else []:
        _drop_if_unborn_and_dead(path)
    return list_packs(str(store.root / "objects"))


def _cut_torn_pack(store: Store, pack: str) -> Recovered | None:
    """A dead writer's pack whose last entry is torn (a crash mid-append): the tail is
    kept in quarantine/ and cut off, so every reader sees whole entries only. Damage that
    is not a torn tail (a changed header mid-pack) is left for ``check`` to report."""
    path = Path(pack)
    if read_index(pack) is not None or not scan_pack(pack).problem:
        return None  # the common case (a finished pack's index covers it whole), without the lock
    with _dead_writer(path) as dead:
        if not dead:
            return None  # a live writer may be appending the entry: not torn
        scan = scan_pack(pack)
        if not (scan.problem and scan.torn):
            return None
        with open(path, "r+b") as f:
            f.seek(scan.good_end)
            tail = f.read()
            quarantine = store.root / "quarantine"
            quarantine.mkdir(exist_ok=True)
            kept = quarantine / f"packs--{path.stem}.{hashlib.sha256(tail).hexdigest()[:12]}.torn"
            kept.write_bytes(tail)
            f.truncate(scan.good_end)
            if store.fsync:
                make_durable(f.fileno())
        if scan.good_end == 0:
            path.unlink()  # not even its header was whole: a pack of nothing
    return Recovered(pack, None, len(scan.entries), len(tail), str(kept),
                     f"torn pack tail set aside at {kept}; {len(scan.entries)} whole blobs kept")


def _cut_torn_tail(store: Store, path: Path) -> Recovered | None:
    """A torn last line (a crash or a full disk mid-write) is moved to quarantine/ and cut
    off, so appends can go on; the complete lines before it are kept as they are. Done
    under the file's lock, so a line a live writer is appending is never mistaken for torn."""
    if not split_lines(path.read_bytes())[1]:
        return None  # the common case, decided without a lock (a read-only copy stays untouched)
    chain = ChainFile(path, fsync=store.fsync)
    with chain.locked():
        data = path.read_bytes()
        lines, torn = split_lines(data)
        if not torn:
            return None
        quarantine = store.root / "quarantine"
        quarantine.mkdir(exist_ok=True)
        kept = quarantine / f"{path.parent.name}--{path.stem}.{hashlib.sha256(torn).hexdigest()[:12]}.torn"
        kept.write_bytes(torn)
        with open(path, "r+b") as f:  # under the chain's lock; the cut is durable before it is released
            f.truncate(len(data) - len(torn))
            if store.fsync:
                make_durable(f.fileno())
    chain.release()
    return Recovered(str(path), None, len(lines), len(torn), str(kept),
                     f"torn last line set aside at {kept}; {len(lines)} complete records kept")


def recover_one(store: Store, path: Path) -> Recovered | None:
    """Seal one open run as aborted, if its writer is dead. None when it was sealed meanwhile."""
    with _dead_writer(path) as dead:
        if dead is None:
            return None
        if dead is False:
            return Recovered(str(path), None, 0, 0, None,
                             "left open: a live process is writing it (it holds the run's lock)", live=True)
        return _seal_dead(store, path)


def _seal_dead(store: Store, path: Path) -> Recovered:
    data = path.read_bytes()
    lines, torn = split_lines(data)
    quarantine = store.root / "quarantine"
    torn_note = None
    if torn:
        quarantine.mkdir(exist_ok=True)
        torn_path = quarantine / f"{path.stem}.torn"
        torn_path.write_bytes(torn)
        torn_note = str(torn_path)
    try:
        records = verify_chain(lines, str(path))
    except (FormatError, IntegrityError) as e:
        quarantine.mkdir(exist_ok=True)
        dest = quarantine / path.name
        os.replace(path, dest)
        return Recovered(str(path), None, 0, len(torn), str(dest), f"chain broken, file set aside: {e}")
    lines, records, cut_note = _keep_stored(store, path, lines, records)
    if not records:
        quarantine.mkdir(exist_ok=True)
        dest = quarantine / path.name
        os.replace(path, dest)
        return Recovered(str(path), None, 0, len(torn), str(dest), "no complete record; set aside")
    if store.fsync:
        store.commit_sync()  # a blob this process staged for the run is in place before the seal
    run_id = _seal_recovered(store, path, lines, records, torn_note, cut_note)
    note = ("sealed as aborted" + (f"; torn last line kept at {torn_note}" if torn_note else "")
            + (f"; records naming a missing blob kept at {cut_note}" if cut_note else ""))
    return Recovered(str(path), run_id, len(records), len(torn), torn_note or cut_note, note)


def _keep_stored(store: Store, path: Path, lines: list[bytes],
                 records: list[Record]) -> tuple[list[bytes], list[Record], str | None]:
    """The records before the first one naming a blob that is nowhere, and where the rest
    were set aside (None: nothing was). A record is written before the commit that moves its
    blobs durable (FORMAT.md "Durability"): after a process was killed its blob is in its
    pack (made durable here) or, in the older layout, waits in ``objects/tmp/`` and is moved
    into place here; after a power cut it may be gone, and the run is cut before that
    record, so a sealed run never names a missing blob."""
    synced: set[str] = set()
    for i, rec in enumerate(records):
        for digest in blob_refs(rec.body):
            if _durable_blob(store, digest, synced) or _adopt_staged(store, digest):
                continue
            quarantine = store.root / "quarantine"
            quarantine.mkdir(exist_ok=True)
            kept = quarantine / f"{path.stem}.unstored"
            kept.write_bytes(b"".join(ln + b"\n" for ln in lines[i:]))
            return lines[:i], records[:i], str(kept)
    return lines, records, None


def _durable_blob(store: Store, digest: str, synced: set[str]) -> bool:
    """True when blob ``digest`` is stored, made durable first when it is in a pack: a dead
    writer's last entries may never have been fsynced, and the sealed run must not outlive
    them in a power cut (each pack is fsynced once per recovery)."""
    loc = store.find_blob(digest)
    if loc is None:
        return False
    if store.fsync and loc.path.endswith(".pack") and loc.path not in synced:
        try:
            with open(loc.path, "rb") as f:
                make_durable(f.fileno())
        except OSError as e:
            raise storage_error(Path(loc.path), f"make packed blob {digest} durable", e) from None
        synced.add(loc.path)
    return True


def _adopt_staged(store: Store, digest: str) -> bool:
    """Move a staged copy of blob ``digest`` (``objects/tmp/<hex>.<id>``, whole: its bytes
    hash to its name) into place, durable; False when there is none. It is linked, not
    renamed, so a live writer that staged the same bytes still finds its file."""
    hexd = digest.removeprefix("sha256:")
    for tmp in sorted((store.root / "objects" / "tmp").glob(f"{hexd}.*")):
        try:
            data = tmp.read_bytes()
        except OSError:
            continue
        if hashlib.sha256(data).hexdigest() != hexd:
            continue  # torn by a power cut: not this blob
        dst = store.blob_path(digest)
        try:
            dst.parent.mkdir(exist_ok=True)
            if store.fsync:
                with open(tmp, "rb") as f:
                    make_durable(f.fileno())
            try:
                os.link(tmp, dst)
            except FileExistsError:
                pass  # moved meanwhile: the same bytes
            if store.fsync:
                fd = os.open(dst.parent, os.O_RDONLY)
                try:
                    make_durable(fd)
                finally:
                    os.close(fd)
        except OSError as e:
            raise storage_error(dst, f"move staged blob {digest} into place", e) from None
        return True
    return False


def _seal_recovered(store: Store, path: Path, lines: list[bytes], records: list[Record],
                    torn_note: str | None, cut_note: str | None = None) -> str:
    if records[-1].kind == "run.end" and cut_note is None:
        body = None  # finished but not renamed: just seal it
    else:
        totals = run_totals(records)
        reason = "recovered after crash: the run was interrupted before run.end"
        if torn_note:
            reason += " (torn last line set aside)"
        if cut_note:
            reason += " (records naming a blob lost in the crash set aside)"
        body = {"status": "aborted", "reason": reason, "recovered": True,
                "turns": sum(1 for r in records if r.kind == "action"),
                "gate_passed": False, "passed": False, "elapsed_ms": None,
                "injection_attempts": 0, "denials": 0, **totals}
    content = b"".join(ln + b"\n" for ln in lines)
    with open(path, "r+b") as f:
        f.truncate(len(content))  # the torn tail is already kept in quarantine/
        if body is not None:
            rec = Record(len(records), line_hash(lines[-1]), utc_now(), "run.end", body)
            end_line = encode(rec) + b"\n"
            f.seek(len(content))
            f.write(end_line)
            content += end_line
        f.flush()
        if store.fsync:
            make_durable(f.fileno())
    return store.seal_file(path, hashlib.sha256(content).hexdigest())
