"""The evidence store: a content-addressed, append-only runs directory (FORMAT.md §1-5, §7).

Why it is built this way:
- Every record is flushed and fsynced before ``append`` returns, so a crash loses at most
  the line being written; recovery keeps every complete line and sets a torn one aside.
- Blobs and sealed runs are named by the SHA-256 of their bytes, so merging two runs
  directories is a union of files and any flipped byte is found by re-hashing.
- Appended files shared by several writers (journals, ledgers) are serialised with an
  ``flock`` on a sibling lock file and named per writer, so two machines never append to
  the same file.

Trade-off: one fsync per record costs latency (a few ms on ordinary disks); the grid runs
many agents concurrently, so that latency overlaps with model calls. ``fsync=False`` is
offered for throw-away stores in benchmarks and tests of unrelated behaviour.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import socket
import threading
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator

from . import jsonio
from .errors import InputError, IntegrityError, StorageError
from .records import (GENESIS, Record, blob_refs, encode, line_hash, parse_line, split_lines,
                      utc_now, verify_chain)

__all__ = ["Store", "RunWriter", "SealedRun", "Damage", "CheckReport", "Recovered",
           "ChainFile", "Journal", "JournalEntry", "VERSION_TEXT"]

VERSION_TEXT = b"benchclaw-runs 1\n"
_SAFE_NAME = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.")


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def storage_error(path: Path, what: str, err: OSError) -> StorageError:
    """The StorageError for a failed write of ``path`` (names the file and the cause)."""
    reason = err.strerror or str(err)
    hint = " (the disk is full)" if err.errno == 28 else ""
    return StorageError(f"{path}: cannot {what}: {reason}{hint}; everything written before is safe; "
                        "free space, then run `benchclaw runs recover` (a grid run does it on start)")


def _append_line(f, path: Path, good_size: int, line: bytes, fsync: bool, what: str) -> None:
    """Append one line; on failure cut the file back to ``good_size`` (no torn line left)
    and raise StorageError."""
    try:
        f.write(line)
        f.flush()
        if fsync:
            os.fsync(f.fileno())
    except OSError as e:
        try:
            os.ftruncate(f.fileno(), good_size)
        except OSError:
            pass  # recovery sets a torn tail aside
        raise storage_error(path, what, e) from None


from .names import safe_name  # noqa: E402,F401  (moved to the pure benchclaw.names; re-exported)


@dataclass(frozen=True)
class Damage:
    """One defect found by ``Store.check``: the file, the 1-based line (0 = whole file)."""

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


@dataclass
class SealedRun:
    run_id: str
    path: Path
    records: list[Record]

    @property
    def start(self) -> dict:
        return self.records[0].body if self.records and self.records[0].kind == "run.start" else {}

    @property
    def end(self) -> dict:
        return self.records[-1].body if self.records and self.records[-1].kind == "run.end" else {}

    def of_kind(self, kind: str) -> list[Record]:
        return [r for r in self.records if r.kind == kind]


class ChainFile:
    """An append-only, hash-chained JSONL file shared by writers through an flock.

    The tail state (size, next seq, prev hash) is cached; under the lock it is refreshed
    from whatever other writers appended since, so appends stay O(1) in the file's length.
    """

    def __init__(self, path: Path, *, fsync: bool = True):
        self.path = path
        self._fsync = fsync
        self._size = 0
        self._seq = 0
        self._prev = GENESIS
        self._mutex = threading.Lock()

    def append(self, kind: str, body: dict) -> Record:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self._mutex, open(self.path.with_name(self.path.name + ".lock"), "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                self._refresh()
                rec = Record(self._seq, self._prev, utc_now(), kind, body)
                line = encode(rec)
                try:
                    f = open(self.path, "ab")
                except OSError as e:
                    raise storage_error(self.path, "open for appending", e) from None
                with f:
                    _append_line(f, self.path, self._size, line + b"\n", self._fsync,
                                 f"append record {rec.seq}")
                self._size += len(line) + 1
                self._seq += 1
                self._prev = line_hash(line)
                return Record(rec.seq, rec.prev, rec.at, kind, body, line)
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)

    def _refresh(self) -> None:
        try:
            size = self.path.stat().st_size
        except FileNotFoundError:
            self._size, self._seq, self._prev = 0, 0, GENESIS
            return
        if size == self._size:
            return
        if size < self._size:  # replaced underneath us: start over
            self._size, self._seq, self._prev = 0, 0, GENESIS
        with open(self.path, "rb") as f:
            f.seek(self._size)
            tail = f.read(size - self._size)
        lines, torn = split_lines(tail)
        if torn:
            raise IntegrityError(f"{self.path}: last line is torn; run `benchclaw runs recover`")
        for line in lines:
            rec = parse_line(line, str(self.path))
            self._seq, self._prev = rec.seq + 1, line_hash(line)
        self._size = size

    def read(self) -> list[Record]:
        """Every record, chain verified. Raises IntegrityError/FormatError naming the line."""
        data = self.path.read_bytes()
        lines, torn = split_lines(data)
        if torn:
            raise IntegrityError(f"{self.path}:{len(lines) + 1}: torn last line (no newline)")
        return verify_chain(lines, str(self.path))


class Journal(ChainFile):
    """One writer's experiment journal: ``journals/<experiment>/<writer>.jsonl``."""

    def __init__(self, path: Path, experiment: str, writer: str, *, fsync: bool = True):
        super().__init__(path, fsync=fsync)
        self.experiment = experiment
        self.writer = writer


@dataclass(frozen=True)
class JournalEntry:
    writer: str
    record: Record

    @property
    def kind(self) -> str:
        return self.record.kind

    @property
    def body(self) -> dict:
        return self.record.body


class RunWriter:
    """An open run: ``open/<uuid>.jsonl``, appended and fsynced record by record.

    ``on_append``, when given, is called with each record once it is on disk (a live view
    follows a run this way); what it raises propagates to the appender, so it must not."""

    def __init__(self, store: "Store", path: Path, on_append: Callable[[Record], None] | None = None):
        self.store = store
        self.path = path
        self.on_append = on_append
        self.records: list[Record] = []
        self._prev = GENESIS
        self._hash = hashlib.sha256()
        self._size = 0
        self._failure: StorageError | None = None
        try:
            self._file = open(path, "xb")
        except OSError as e:
            raise storage_error(path, "create the run file", e) from None
        self.run_id: str | None = None

    def append(self, kind: str, body: dict) -> Record:
        """Append one record; it is on disk (fsynced) when this returns."""
        if self._file is None:
            if self._failure is not None:
                raise StorageError(f"{self._failure} (this run stopped being writable then; "
                                   "recovery will seal what is on disk)")
            raise IntegrityError(f"{self.path}: run is sealed; a sealed run is never written again")
        rec = Record(len(self.records), self._prev, utc_now(), kind, body)
        line = encode(rec)
        try:
            _append_line(self._file, self.path, self._size, line + b"\n", self.store.fsync,
                         f"append record {rec.seq}")
        except StorageError as e:
            self._failure = e
            self.close_unsealed()  # this run cannot go on; recovery seals what is on disk
            raise
        self._size += len(line) + 1
        self._hash.update(line + b"\n")
        self._prev = line_hash(line)
        rec = Record(rec.seq, rec.prev, rec.at, kind, body, line)
        self.records.append(rec)
        if self.on_append is not None:
            self.on_append(rec)
        return rec

    def seal(self) -> str:
        """Rename the finished run to ``runs/<aa>/<sha256>.jsonl``; returns the run id.
        Idempotent: sealing again returns the same id."""
        if self._file is None:
            return self.run_id  # type: ignore[return-value]
        if not self.records or self.records[-1].kind != "run.end":
            raise IntegrityError(f"{self.path}: a run is sealed only after its run.end record")
        self.close_unsealed()
        self.run_id = self.store._seal_file(self.path, self._hash.hexdigest())
        return self.run_id

    def close_unsealed(self) -> None:
        """Close the file without sealing (recovery will seal it as aborted)."""
        f, self._file = self._file, None
        if f is not None:
            try:
                f.close()
            except OSError:
                pass  # what reached the disk is what recovery keeps


class Store:
    """A runs directory. Creating a Store does not touch the disk until something is written."""

    def __init__(self, root: Path | str, *, fsync: bool = True):
        self.root = Path(root)
        self.fsync = fsync
        self._journals: dict[tuple[str, str], Journal] = {}
        self._ensured = False
        self._blob_dirs: set[str] = set()

    # -- layout ---------------------------------------------------------------------------
    @classmethod
    def existing(cls, root: Path | str, **kw) -> "Store":
        """Open a runs directory that must exist. Raises InputError naming it otherwise."""
        root = Path(root)
        if not root.is_dir():
            raise InputError(f"{root}: no such runs directory")
        return cls(root, **kw)

    def _ensure(self) -> None:
        if self._ensured:
            return
        try:
            for sub in ("objects/tmp", "runs", "open", "journals", "ledgers"):
                (self.root / sub).mkdir(parents=True, exist_ok=True)
            version = self.root / "VERSION"
            if not version.exists():
                version.write_bytes(VERSION_TEXT)
        except OSError as e:
            raise storage_error(self.root, "create the runs directory", e) from None
        self._ensured = True

    # -- blobs ----------------------------------------------------------------------------
    def blob_path(self, digest: str) -> Path:
        hexd = digest.removeprefix("sha256:")
        return self.root / "objects" / hexd[:2] / hexd

    def put_blob(self, data: bytes) -> str:
        """Store bytes once (temp file + fsync + rename); returns ``sha256:<hex>``."""
        hexd = hashlib.sha256(data).hexdigest()
        digest = "sha256:" + hexd
        path = self.blob_path(digest)
        if path.exists():
            return digest
        self._ensure()
        tmp = self.root / "objects" / "tmp" / f"{hexd}.{uuid.uuid4().hex}"
        try:
            if hexd[:2] not in self._blob_dirs:
                path.parent.mkdir(exist_ok=True)
                self._blob_dirs.add(hexd[:2])
            with open(tmp, "wb") as f:
                f.write(data)
                f.flush()
                if self.fsync:
                    os.fsync(f.fileno())
            os.replace(tmp, path)
        except OSError as e:
            tmp.unlink(missing_ok=True)
            raise storage_error(path, f"store blob {digest}", e) from None
        return digest

    def put_json_blob(self, obj) -> str:
        return self.put_blob(jsonio.dumps(obj))

    def has_blob(self, digest: str) -> bool:
        return self.blob_path(digest).is_file()

    def get_blob(self, digest: str) -> bytes:
        """The blob's bytes, re-hashed. Raises InputError if missing, IntegrityError if altered."""
        path = self.blob_path(digest)
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            raise InputError(f"{path}: blob {digest} is missing") from None
        if "sha256:" + hashlib.sha256(data).hexdigest() != digest:
            raise IntegrityError(f"{path}: bytes do not match digest {digest}")
        return data

    # -- runs -----------------------------------------------------------------------------
    def open_run(self, *, on_append: Callable[[Record], None] | None = None) -> RunWriter:
        """A new open run; ``on_append`` observes each record as it lands (``RunWriter``)."""
        self._ensure()
        return RunWriter(self, self.root / "open" / f"{uuid.uuid4().hex}.jsonl", on_append)

    def _seal_file(self, open_path: Path, hexd: str) -> str:
        target = self.root / "runs" / hexd[:2] / f"{hexd}.jsonl"
        target.parent.mkdir(parents=True, exist_ok=True)
        if target.exists():
            open_path.unlink()  # same bytes already sealed: nothing to do
        else:
            os.replace(open_path, target)
        if self.fsync:
            _fsync_dir(target.parent)
            _fsync_dir(open_path.parent)
        return hexd

    def run_path(self, run_id: str) -> Path:
        return self.root / "runs" / run_id[:2] / f"{run_id}.jsonl"

    def run_ids(self) -> list[str]:
        base = self.root / "runs"
        if not base.is_dir():
            return []
        return sorted(p.stem for p in base.glob("*/*.jsonl"))

    def read_run(self, run_id: str, *, verify: bool = True) -> SealedRun:
        """Read a sealed run. With ``verify``, its bytes must hash to its id and its chain hold."""
        path = self.run_path(run_id)
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            raise InputError(f"{path}: no sealed run {run_id}") from None
        if verify and hashlib.sha256(data).hexdigest() != run_id:
            raise IntegrityError(f"{path}: file bytes do not hash to the run id (the file was altered)")
        lines, torn = split_lines(data)
        if torn:
            raise IntegrityError(f"{path}:{len(lines) + 1}: torn last line in a sealed run")
        records = verify_chain(lines, str(path)) if verify else [
            parse_line(ln, f"{path}:{i + 1}") for i, ln in enumerate(lines)]
        return SealedRun(run_id, path, records)

    def iter_runs(self, *, verify: bool = True) -> Iterator[SealedRun]:
        for run_id in self.run_ids():
            yield self.read_run(run_id, verify=verify)

    def open_run_paths(self) -> list[Path]:
        base = self.root / "open"
        return sorted(base.glob("*.jsonl")) if base.is_dir() else []

    # -- journals -------------------------------------------------------------------------
    def journal(self, experiment: str, writer: str | None = None) -> Journal:
        """The journal this process appends to (one file per writer, lock-serialised)."""
        safe_name(experiment, "experiment id")
        writer = safe_name(writer or default_writer(), "journal writer")
        key = (experiment, writer)
        if key not in self._journals:
            self._ensure()
            path = self.root / "journals" / experiment / f"{writer}.jsonl"
            self._journals[key] = Journal(path, experiment, writer, fsync=self.fsync)
        return self._journals[key]

    def journal_paths(self, experiment: str) -> list[Path]:
        base = self.root / "journals" / safe_name(experiment, "experiment id")
        return sorted(base.glob("*.jsonl")) if base.is_dir() else []

    def read_journal(self, experiment: str) -> list[JournalEntry]:
        """Every writer's entries, each chain verified, ordered by time then writer and seq."""
        entries = []
        for path in self.journal_paths(experiment):
            for rec in ChainFile(path).read():
                entries.append(JournalEntry(path.stem, rec))
        entries.sort(key=lambda e: (e.record.at, e.writer, e.record.seq))
        return entries

    def experiments(self) -> list[str]:
        base = self.root / "journals"
        return sorted(p.name for p in base.iterdir() if p.is_dir()) if base.is_dir() else []

    # -- integrity and recovery (implemented in _store_check to keep this file short) -----
    def check(self) -> CheckReport:
        from ._store_check import check_store

        return check_store(self)

    def recover(self) -> list[Recovered]:
        from ._store_check import recover_store

        return recover_store(self)


def default_writer() -> str:
    """A per-machine writer id, so shards of a grid on two machines never share a file."""
    host = "".join(c if c in _SAFE_NAME else "-" for c in socket.gethostname())[:48] or "host"
    return os.environ.get("BENCHCLAW_WRITER") or host


__all__ += ["default_writer", "safe_name", "blob_refs", "storage_error"]
