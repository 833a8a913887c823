"""The evidence store: a content-addressed, append-only runs directory (FORMAT.md §1-5, §7).

Why it is built this way:
- Every record is written whole with one ``O_APPEND`` write before ``append`` returns, so a
  process crash loses at most the line being written; recovery keeps every complete line and
  sets a torn one aside.
- Durability is a group commit (``benchclaw.evidence._commit``): a write marks its file, one fsync
  pass on worker threads covers every file marked since the last, and a caller that needs
  its write on disk before its next step waits for the pass covering it: a sync caller
  blocks (``append(durable=True)``, ``put_blob``, ``seal``), the agent and runner await
  ``Store.commit`` and never block the event loop on a disk flush.
- Blobs and sealed runs are named by the SHA-256 of their bytes, so merging two runs
  directories is a union of files and any flipped byte is found by re-hashing.
- Appended files shared by several writers (journals, ledgers) are serialised with an
  ``flock`` on a sibling lock file and named per writer, so two machines never append to
  the same file.

Trade-off: a write the caller waits for costs a pass (a few ms: concurrent fsyncs share
the file system's journal commits) instead of one fsync, and the agent orders its writes
itself (a settlement only after the commit covering its call record); in exchange the event loop never
waits on a disk flush, so that latency overlaps with model calls, and 64 runs in flight share
one pass instead of queuing behind each other's fsyncs. ``fsync=False`` is offered for
throw-away stores in benchmarks and tests of unrelated behaviour.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import hashlib
import os
import threading
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator

from ..formats import jsonio
from ._commit import append_whole, committer, held_exclusively, storage_error
from .packs import BlobLoc, PackIndex, PackWriter, own_writers, pack_writer
from ..errors import FormatError, InputError, IntegrityError, StorageError, UsageError
from ..formats.names import safe_name
from ..formats.records import (GENESIS, Record, encode_fields, line_hash, parse_line, split_lines, utc_now,
                               verify_chain)

__all__ = ["Store", "RunWriter", "SealedRun", "ChainFile", "Journal", "JournalEntry", "VERSION_TEXT",
           "make_durable", "shared_lock", "default_writer", "write_atomically"]

VERSION_TEXT = b"benchclaw-runs 1\n"
_PRESENT_MAX = 65536  # blob digests a Store remembers as present (about 10 MB at most)


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def make_durable(fd: int) -> None:
    """fsync ``fd`` now, on this thread: for the rare writers outside the group commit
    (recovery, merge, the Ray landing). Appends and blobs go through ``benchclaw.evidence._commit``."""
    os.fsync(fd)


def write_atomically(path: Path, data: bytes, tmp: Path, *, fsync: bool, what: str) -> None:
    """Write ``data`` to ``tmp``, make it durable (when ``fsync``), then rename it onto
    ``path``, so a reader sees the whole file or none of it: blobs, a merged file, a run a
    Ray worker returned. Raises StorageError naming ``path`` and ``what`` was being done;
    the temporary file is removed."""
    try:
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            if fsync:
                make_durable(f.fileno())
        os.replace(tmp, path)
    except OSError as e:
        tmp.unlink(missing_ok=True)
        raise storage_error(path, what, e) from None


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
    """An append-only, hash-chained JSONL file: the one writer of run logs, journals and
    ledgers (FORMAT.md §2, "Locks").

    - **Append rule**: under the file's lock, fold in what other writers appended, build
      the next record from the tail (``seq``, ``prev``), write it as one ``O_APPEND`` write
      (``_commit.append_whole``), and cut the file back on a failed or short write.
    - **Refresh rule**: the tail is cached; before every append it is re-read from what
      was appended since, and each new line must follow (``seq`` + 1, ``prev`` = hash of
      the line before). A file that shrank, was replaced, or whose last known line changed
      is refused with IntegrityError, never silently started over.
    - **Durability rule**: the line is marked for the group commit (``benchclaw.evidence._commit``)
      and ``append`` waits for the pass covering it; with ``durable=False`` it does not wait,
      and the next commit anyone asks for (``Store.commit``, a durable append) carries it.
      ``ticket`` is the mark of the last append.

    Shared files (journals, ledgers) lock an ``flock`` on ``<file>.lock`` per append, and
    readers take it shared (``snapshot``), so a reader never sees half a line. A run log
    has one writer, which holds the lock on the file itself for the run's whole life
    (``RunWriter``): that lock is how recovery tells a live run from a dead one.
    """

    def __init__(self, path: Path, *, fsync: bool = True, clock: Callable[[], str] = utc_now):
        self.path = path
        self._name = str(path)  # the path as the committer keys it and ``stat`` takes it, made once
        self._fsync = fsync
        self._clock = clock
        self._size = 0          # bytes of whole lines folded in so far
        self._seq = 0
        self._prev = GENESIS
        self._last_len = 0      # length of the last folded line, newline included
        self._last_line = b""   # that line's bytes (without the newline)
        self._fd: int | None = None
        self._lock_fd: int | None = None
        self._ident: tuple[int, int] | None = None  # (st_dev, st_ino) of ``_fd``, fixed while it is open
        self._mutex = threading.Lock()
        self.ticket = 0         # the group-commit mark of the last append (0: none)

    awaits_commits = False
    """True when the owner awaits ``Store.commit`` itself (the agent, for its run file):
    ``append`` and ``seal`` then return once written, without waiting for their fsync."""

    # -- the hooks subclasses fill in -----------------------------------------------------
    def _fold(self, rec: Record) -> None:
        """Called for every record of the file, in order (read from disk or just appended)."""

    def _lock(self) -> None:
        fcntl.flock(self._lock_fd, fcntl.LOCK_EX)  # type: ignore[arg-type]

    def _unlock(self) -> None:
        fcntl.flock(self._lock_fd, fcntl.LOCK_UN)  # type: ignore[arg-type]

    # -- appending -----------------------------------------------------------------------
    def append(self, kind: str, body: dict, *, durable: bool = True) -> Record:
        """Append one record; on disk (its group commit done) when this returns unless
        ``durable=False``. Raises StorageError (disk full, read-only) or IntegrityError
        (the file was shrunk, replaced or rewritten by someone else)."""
        return self.append_with(lambda: (kind, body), durable=durable)

    def append_with(self, make: Callable[[], tuple[str, dict]], *, durable: bool = True) -> Record:
        """As ``append``, with ``make() -> (kind, body)`` called under the lock after every
        other writer's records were folded in (so a decision sees all of them)."""
        with self._mutex:  # ``locked()``, spelt out: this runs for every record
            self._open()
            self._lock()
            try:
                self._refresh()
                kind, body = make()
                return self._write(kind, body, durable and not self.awaits_commits)
            finally:
                self._unlock()

    def _wait_durable(self, good_size: int, seq: int) -> None:
        """Wait (under the lock, as an fsync in place would) for the commit covering the line
        just written; when it fails, cut the line back off and raise StorageError naming it."""
        try:
            committer().wait(self.ticket)
        except StorageError as e:
            try:
                os.ftruncate(self._fd, good_size)  # type: ignore[arg-type]
            except OSError:
                pass  # recovery sets a torn tail aside
            cause = getattr(e, "oserror", None)
            raise (storage_error(self.path, f"append record {seq}", cause) if cause else e) from None

    @contextlib.contextmanager
    def locked(self):
        """The thread mutex plus the file's flock; the cached tail may be refreshed inside."""
        with self._mutex:
            self._open()
            self._lock()
            try:
                yield self
            finally:
                self._unlock()

    def _open(self) -> None:
        if self._fd is not None:
            return
        lock = self.path.with_name(self.path.name + ".lock")
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._lock_fd = os.open(lock, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o644)
            self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o644)
            st = os.fstat(self._fd)
            self._ident = (st.st_dev, st.st_ino)
        except OSError as e:
            self.release()
            raise storage_error(self.path, "open for appending", e) from None

    floatless: object = None
    """The body object (by identity) its caller walked and found without a float
    (``records.refs_and_floats``; ``agent.evidence.append`` sets it before appending it):
    serialised without ``jsonio``'s own walk for floats. Any other body is walked."""

    def _write(self, kind: str, body: dict, wait: bool) -> Record:
        seq, prev, at = self._seq, self._prev, self._clock()
        line = encode_fields(seq, prev, at, kind, body, floatless=body is self.floatless)
        self.floatless = None
        append_whole(self._fd, self.path, self._size, line + b"\n",  # type: ignore[arg-type]
                     f"append record {seq}")
        if self._fsync:
            self.ticket = committer().mark_file(self._fd, self._name)  # type: ignore[arg-type]
            if wait:
                self._wait_durable(self._size, seq)
        rec = Record(seq, prev, at, kind, body, line)
        self._advance(rec, line)
        return rec

    def _advance(self, rec: Record, line: bytes) -> None:
        self._size += len(line) + 1
        self._seq, self._prev, self._last_len = rec.seq + 1, line_hash(line), len(line) + 1
        self._last_line = line
        self._fold(rec)

    def _refresh(self) -> None:
        """Fold in whatever was appended since (the caller holds the lock). Raises
        IntegrityError when the file is not the one this writer appended to.

        One ``stat`` of the path does what ``fstat`` + ``stat`` did: our descriptor's
        (device, inode) was kept when it was opened and cannot change while it is open (nor
        can the inode be reused), so a path naming that same inode reports our file's size."""
        fd = self._fd
        try:
            st = os.stat(self._name)
        except FileNotFoundError:
            st = None
        self._check_same_file(st, self._ident)
        start = self._size - self._last_len
        data = os.pread(fd, st.st_size - start, start)  # type: ignore[arg-type,union-attr]  (last known line + news)
        self._check_last_line(data[:self._last_len])
        if len(data) == self._last_len:
            return
        lines, torn = split_lines(data[self._last_len:])
        if torn:
            raise IntegrityError(f"{self.path}: last line is torn (a crash mid-write); "
                                 "run `benchclaw runs recover`")
        for line in lines:
            rec = parse_line(line, f"{self.path}:{self._seq + 1}")
            if rec.seq != self._seq or rec.prev != self._prev:
                raise IntegrityError(f"{self.path}:{self._seq + 1}: hash chain broken (seq/prev do not "
                                     "follow the line before)")
            self._advance(rec, line)

    def _check_same_file(self, named: os.stat_result | None, ident: tuple[int, int] | None) -> None:
        """Raise IntegrityError unless ``named`` (the path's stat, None when it is gone) is the
        file whose (device, inode) is ``ident`` (our descriptor's), at least as long as what
        we folded in."""
        if named is None or (named.st_dev, named.st_ino) != ident:
            raise IntegrityError(f"{self.path}: the file was removed or replaced underneath its writer; "
                                 "chain files are append-only")
        if named.st_size < self._size:
            raise IntegrityError(f"{self.path}: the file shrank ({named.st_size} < {self._size} bytes); "
                                 "chain files are append-only")

    def _check_last_line(self, last: bytes) -> None:
        """Raise IntegrityError unless ``last`` is the last line we folded in, unchanged (its
        bytes compared with those we kept: what comparing their hashes with ``prev`` says)."""
        if self._last_len and (len(last) != self._last_len or not last.endswith(b"\n")
                               or last[:-1] != self._last_line):
            raise IntegrityError(f"{self.path}:{self._seq}: rewritten since it was appended; "
                                 "chain files are append-only")

    def release(self) -> None:
        """Close the file descriptors (an append reopens them; a run writer's never do)."""
        if self._fd is not None and self._fsync:
            committer().release(self.path, self._fd)  # its copy for the group commit goes after its pass
        for fd in {self._fd, self._lock_fd} - {None}:
            try:
                os.close(fd)  # type: ignore[arg-type]
            except OSError:
                pass
        self._fd = self._lock_fd = None
        self._ident = None

    def __del__(self):
        try:
            self.release()
        except Exception:
            pass

    # -- reading -------------------------------------------------------------------------
    def snapshot(self) -> bytes:
        """The file's bytes at a moment no writer was mid-append (a shared flock on its
        lock file). Where the lock cannot be taken (a read-only copy), the bytes as they are.
        Raises FileNotFoundError when the file does not exist."""
        with shared_lock(self.path.with_name(self.path.name + ".lock")):
            return self.path.read_bytes()

    def read(self) -> list[Record]:
        """Every record, chain verified. Raises IntegrityError/FormatError naming the line."""
        data = self.snapshot()
        lines, torn = split_lines(data)
        if torn:
            raise IntegrityError(f"{self.path}:{len(lines) + 1}: torn last line (no newline)")
        return verify_chain(lines, str(self.path))


def open_lock_file(path: Path, *, make_parent: bool = False) -> int | None:
    """A descriptor to flock ``path`` shared: opened for writing (created if missing), else
    read-only (a read-only runs directory), else None (nothing can be writing there)."""
    for flags in (os.O_WRONLY | os.O_CREAT | os.O_APPEND, os.O_RDONLY):
        try:
            if make_parent and flags & os.O_CREAT:
                path.parent.mkdir(exist_ok=True)
            return os.open(path, flags | os.O_CLOEXEC, 0o644)
        except OSError:
            continue
    return None


@contextlib.contextmanager
def shared_lock(lock_path: Path):
    """Hold ``lock_path`` shared (readers of a shared chain file). Opens it read-only when it
    cannot be created (a read-only runs directory) and skips locking when it cannot be opened."""
    fd = open_lock_file(lock_path)
    try:
        if fd is not None:
            fcntl.flock(fd, fcntl.LOCK_SH)
        yield
    finally:
        if fd is not None:
            os.close(fd)


class Journal(ChainFile):
    """One writer's experiment journal: ``journals/<experiment>/<writer>.jsonl``."""

    def __init__(self, path: Path, experiment: str, writer: str, *, fsync: bool = True,
                 clock: Callable[[], str] = utc_now):
        super().__init__(path, fsync=fsync, clock=clock)
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


class RunWriter(ChainFile):
    """An open run: ``open/<uuid>.jsonl``, appended record by record.

    An owner on an event loop (the agent) sets ``awaits_commits``: its appends then do not
    wait for their fsync, and it awaits ``Store.commit`` where it needs the records on disk
    (before it settles the calls they record) and ``seal_async`` to seal. ``seal`` hands the
    rename to the commit pass that fsyncs the file (``Store.seal_after_sync``), so the file is
    never renamed before every record of it is durable.

    The writer holds an exclusive ``flock`` on the file from its creation until it is
    sealed or closed: recovery (any process's) seals only open runs whose lock it can take,
    that is, whose writer is dead. The file is created under a name recovery ignores
    (``.new-<name>``), locked, then renamed, so no recovery ever sees it unlocked.

    ``on_append``, when given, is called with each record once it is written (a live view
    follows a run this way); what it raises propagates to the appender, so it must not."""

    def __init__(self, store: "Store", path: Path, on_append: Callable[[Record], None] | None = None, *,
                 clock: Callable[[], str] = utc_now):
        super().__init__(path, fsync=store.fsync, clock=clock)
        self.store = store
        self.on_append = on_append
        self.records: list[Record] = []
        self._hash = hashlib.sha256()
        self._failure: StorageError | None = None
        self.run_id: str | None = None
        new = path.with_name(".new-" + path.name)
        try:
            fd = os.open(new, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_APPEND | os.O_CLOEXEC, 0o644)
        except OSError as e:
            raise storage_error(path, "create the run file", e) from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # a new file: nobody else holds it
            os.rename(new, path)
        except OSError as e:
            os.close(fd)
            new.unlink(missing_ok=True)
            raise storage_error(path, "create the run file", e) from None
        self._fd = self._lock_fd = fd
        if self._fsync:  # its name is durable with its first records (the pass that fsyncs them)
            committer().mark_dir(path.parent)

    # The lock is held for the run's life, so an append only takes the thread mutex.
    def _lock(self) -> None:
        pass

    def _unlock(self) -> None:
        pass

    def _open(self) -> None:
        if self._fd is None:
            if self._failure is not None:
                raise StorageError(f"{self._failure} (this run stopped being writable then; "
                                   "recovery will seal what is on disk)")
            raise IntegrityError(f"{self.path}: run is sealed or closed; a run file is never reopened")

    def _refresh(self) -> None:
        """A run file has one writer, which holds its lock for the run's life, so nothing is
        ever folded in: an append only checks the file's size (one ``fstat``: a file grown or
        shrunk underneath is refused); that the file at the path is still this one with its
        last line unchanged is checked once, before sealing (``_hand_over_seal``)."""
        size = os.fstat(self._fd).st_size  # type: ignore[arg-type]
        if size != self._size:
            raise IntegrityError(f"{self.path}: the file {'shrank' if size < self._size else 'grew'} underneath "
                                 f"its writer ({size} != {self._size} bytes); a run file has one writer")

    def _verify_whole(self) -> None:
        """The full check of ``ChainFile._refresh``, without folding anything in."""
        st = os.fstat(self._fd)  # type: ignore[arg-type]
        self._refresh()
        try:
            named = os.stat(self.path)
        except FileNotFoundError:
            named = None
        self._check_same_file(named, (st.st_dev, st.st_ino))
        self._check_last_line(os.pread(self._fd, self._last_len, self._size - self._last_len))  # type: ignore[arg-type]

    def _fold(self, rec: Record) -> None:
        self._hash.update(rec.line)
        self._hash.update(b"\n")
        self.records.append(rec)
        if self.on_append is not None:
            self.on_append(rec)

    def append(self, kind: str, body: dict, *, durable: bool = True) -> Record:
        """Append one record; durable when this returns, unless ``awaits_commits`` (then
        written, and durable with the next commit). ``ChainFile.append`` spelt out for a
        file whose lock is held for the run's life (a run appends every record this way)."""
        try:
            with self._mutex:
                self._open()
                self._refresh()
                return self._write(kind, body, durable and not self.awaits_commits)
        except StorageError as e:
            if self._fd is not None:
                self._failure = e
                self.close_unsealed()  # this run cannot go on; recovery seals what is on disk
            raise

    def seal(self) -> str:
        """Rename the finished run to ``runs/<aa>/<sha256>.jsonl`` once every record of it is
        durable; returns the run id once the rename is durable too. Idempotent: sealing again
        returns the same id. The rename happens while the writer's lock is held, so no
        recovery can seal the same file."""
        self._hand_over_seal()
        if self.run_id is not None:
            committer().wait(self.ticket)  # records durable, renamed, directories fsynced
        return self.run_id  # type: ignore[return-value]

    async def seal_async(self) -> str:
        """``seal`` for the event loop: awaits its commit (one pass: the records, the rename,
        its directories) instead of blocking; the run is sealed and durable when it returns."""
        self._hand_over_seal()
        try:
            await committer().commit(self.ticket)
        except asyncio.CancelledError:
            # Cut off (an interrupt) with the rename under way: finish it (one pass at most),
            # so whoever holds this writer finds the run sealed, as ``run_id`` says.
            if self.run_id is not None:
                committer().wait(self.ticket)
            raise
        return self.seal()  # done by now: returns at once

    def _hand_over_seal(self) -> None:
        """Give the rename to the commit pass that fsyncs the records (``Store.seal_after_sync``;
        at once without fsync) and close the file: the committer's duplicate of the descriptor
        holds the lock until the rename is done. Nothing to do once handed over or closed."""
        with self._mutex:
            if self._fd is None:
                return
            if not self.records or self.records[-1].kind != "run.end":
                raise IntegrityError(f"{self.path}: a run is sealed only after its run.end record")
            self._verify_whole()
            hexd = self._hash.hexdigest()
            if self._fsync:
                self.ticket = self.store.seal_after_sync(self._fd, self.path, hexd)  # type: ignore[arg-type]
            else:
                self.store.seal_file(self.path, hexd)
            self.run_id = hexd
            self.release()

    def close_unsealed(self) -> None:
        """Close the file without sealing; this releases the run's lock, so recovery will
        seal it as aborted (and make what it keeps durable)."""
        committer().forget(self.path)
        self.release()


class Store:
    """A runs directory. Creating a Store does not touch the disk until something is written."""

    def __init__(self, root: Path | str, *, fsync: bool = True):
        self.root = Path(root)
        self.fsync = fsync
        self._journals: dict[tuple[str, str], Journal] = {}
        self._ensured = False
        self._objects: str | None = None
        self._present: set[str] = set()  # hex digests seen in objects/ (``_seen``)
        self._packs: PackIndex | None = None  # every pack's entries, built on first need
        self._sealed_dirs: set[str] = set()  # ``runs/<aa>`` folders made (or found) by this Store

    # -- layout ---------------------------------------------------------------------------
    @classmethod
    def existing(cls, root: Path | str, **kw) -> "Store":
        """Open a runs directory that must exist (with its VERSION file). Raises InputError
        naming it otherwise, FormatError for another format's VERSION."""
        root = Path(root)
        if not root.is_dir():
            raise InputError(f"{root}: no such runs directory")
        try:
            version = (root / "VERSION").read_bytes()
        except OSError:
            raise InputError(f"{root}: not a runs directory (no VERSION file; `benchclaw prereg`, `run` "
                             "and `try` create one)") from None
        if version != VERSION_TEXT:
            raise FormatError(f"{root}/VERSION: not a runs directory of this format "
                              f"(expected {VERSION_TEXT!r})")
        return cls(root, **kw)

    def ensure(self) -> None:
        """Create the runs directory's folders and VERSION file, once (InputError-free; a
        failure is a StorageError)."""
        if self._ensured:
            return
        try:
            for sub in ("objects/packs", "runs", "open", "journals", "ledgers"):
                (self.root / sub).mkdir(parents=True, exist_ok=True)
            version = self.root / "VERSION"
            if not version.exists():
                version.write_bytes(VERSION_TEXT)
        except OSError as e:
            raise storage_error(self.root, "create the runs directory", e) from None
        self._ensured = True

    # -- blobs (FORMAT.md §1 "Objects" and "Packs") ---------------------------------------
    def blob_path(self, digest: str) -> Path:
        """Where a loose blob (``objects/<aa>/<hex>``) is or would be; blobs written now go
        to this process's pack (``find_blob`` says where a blob really is)."""
        hexd = digest.removeprefix("sha256:")
        return self.root / "objects" / hexd[:2] / hexd

    def put_blob(self, data: bytes) -> str:
        """Store bytes (appended to this process's pack; durable when this returns);
        returns ``sha256:<hex>``."""
        digest, ticket = self._stage(data)
        try:
            committer().wait(ticket)
        except StorageError:
            # After a failed fsync the kernel may have dropped the pack's unwritten pages
            # while reads still see them: later blobs (this one again too) go to a new pack.
            self._writer().close()
            raise
        return digest

    def put_json_blob(self, obj) -> str:
        return self.put_blob(jsonio.dumps(obj))

    def stage_blob_ticket(self, data: bytes) -> tuple[str, int]:
        """``stage_blob`` and the ticket that makes it durable (0: it already is)."""
        return self._stage(data)

    def stage_blob(self, data: bytes) -> str:
        """``put_blob`` without waiting: the bytes are appended to this process's pack now
        (any process can read them) and made durable by the next commit (``commit``). A run
        record may name it before that commit (the commit making the record durable makes
        the blob durable too; recovery cuts a run at a record whose blob a power cut lost)."""
        return self._stage(data)[0]

    def stage_json_blob(self, obj) -> str:
        return self.stage_blob(jsonio.dumps(obj))

    def stage_blobs(self, datas: list[bytes]) -> list[str]:
        """``stage_blob`` of each of ``datas`` (their digests, in order), the new ones
        appended to the pack in one write: a call record's reply, usage and request."""
        digests, new = [], []
        present = self._present
        for data in datas:
            hexd = hashlib.sha256(data).hexdigest()
            digests.append("sha256:" + hexd)
            if hexd not in present:
                new.append((hexd, data))
        if new:
            self.ensure()
            self._writer().add_many(new)
        return digests

    def _stage(self, data: bytes) -> tuple[str, int]:
        """Append a blob to this process's pack (once: the pack remembers what it holds);
        returns the digest and the ticket to wait for (0: nothing to wait for). A copy in
        another pack or loose file is not looked for: a stat or a scan per new blob costs
        more than the rare duplicate, which content addressing makes harmless."""
        hexd = hashlib.sha256(data).hexdigest()
        digest = "sha256:" + hexd
        if hexd in self._present:
            return digest, 0
        self.ensure()
        return digest, self._writer().add(hexd, data)

    def _writer(self) -> PackWriter:
        return pack_writer(self._objects_dir(), self.fsync)

    async def commit(self, ticket: int | None = None) -> None:
        """Wait, without blocking the event loop, until everything written so far in this
        process (records, staged blobs, seals, in any store) is durable and in place; with
        ``ticket`` (a mark: ``ChainFile.ticket``, ``stage_blob_ticket``), only what was
        written up to that mark (a pass already under way may cover it)."""
        await committer().commit(ticket)

    def commit_sync(self) -> None:
        """``commit`` for threads that may block."""
        committer().wait()

    def has_blob(self, digest: str) -> bool:
        hexd = digest.removeprefix("sha256:")
        return hexd in self._present or self.find_blob(digest) is not None

    def find_blob(self, digest: str) -> BlobLoc | None:
        """Where blob ``digest``'s bytes are (not re-hashed: ``get_blob`` does), looked up in
        the order it costs least: this process's pack, a loose file, every pack of the
        directory. None: nowhere."""
        hexd = digest.removeprefix("sha256:")
        for w in own_writers(self._objects_dir()):
            loc = w.find(hexd)
            if loc is not None:
                return loc
        name = self._blob_name(hexd)
        try:
            size = os.stat(name).st_size
            self._seen(hexd)  # a loose blob is durable once named (fsync, then rename)
            return BlobLoc(name, 0, size)
        except FileNotFoundError:
            pass
        return self._pack_index().find(hexd) if len(hexd) == 64 else None

    def iter_blobs(self) -> Iterator[tuple[str, BlobLoc]]:
        """Every blob of the directory once: loose files, then packed ones not loose."""
        seen = set()
        base = self.root / "objects"
        for path in sorted(base.glob("??/*")) if base.is_dir() else []:
            seen.add(path.name)
            yield path.name, BlobLoc(str(path), 0, path.stat().st_size)
        for hexd, loc in self._pack_index():
            if hexd not in seen:
                yield hexd, loc

    def _pack_index(self) -> PackIndex:
        if self._packs is None:
            self._packs = PackIndex(self._objects_dir())
        return self._packs

    def _seen(self, hexd: str) -> None:
        """Remember that blob ``hexd`` is durable in ``objects/``, so asking again costs no
        ``stat``: every run names its task's files, the catalog and the profile again. Blobs
        are never removed (FORMAT.md §1), so what was seen stays true; the set is emptied at
        ``_PRESENT_MAX`` to bound its memory."""
        if len(self._present) >= _PRESENT_MAX:
            self._present.clear()
        self._present.add(hexd)

    def _objects_dir(self) -> str:
        """``objects/`` as an absolute path, fixed at first use: it keys this process's pack
        writer for the directory (``packs.pack_writer``), which outlives this Store, so a
        relative one would name another directory after a ``chdir`` (a later Store of
        ``runs`` in another folder was handed the first folder's pack)."""
        if self._objects is None:
            self._objects = os.path.abspath(self.root / "objects")
        return self._objects

    def _blob_name(self, hexd: str) -> str:
        """``blob_path`` as a string (cheaper)."""
        return f"{self._objects_dir()}/{hexd[:2]}/{hexd}"

    def get_blob(self, digest: str) -> bytes:
        """The blob's bytes, re-hashed. Raises InputError if missing, IntegrityError if altered
        (naming the file, and for a packed blob where in its pack)."""
        hexd = digest.removeprefix("sha256:")
        data = None
        for w in own_writers(self._objects_dir()):
            got = w.read(hexd)  # a pread on the open pack: no open() per read
            if got is not None:
                data, loc = got
                break
        else:
            loc = self.find_blob(digest)
            if loc is None:
                raise InputError(f"{self.blob_path(digest)}: blob {digest} is missing (not loose, not in a pack)")
        where = loc.path if loc.offset == 0 else f"{loc.path} (bytes {loc.offset}-{loc.offset + loc.size})"
        if data is None:
            try:
                data = loc.read()
            except OSError as e:
                raise InputError(f"{where}: blob {digest} cannot be read: {e.strerror or e}") from None
        if "sha256:" + hashlib.sha256(data).hexdigest() != digest:
            raise IntegrityError(f"{where}: bytes do not match digest {digest}")
        return data

    # -- runs -----------------------------------------------------------------------------
    def open_run(self, *, on_append: Callable[[Record], None] | None = None,
                 clock: Callable[[], str] = utc_now) -> RunWriter:
        """A new open run, locked by this writer until sealed; ``on_append`` observes each
        record as it lands (``RunWriter``), ``clock`` stamps ``at``."""
        self.ensure()
        return RunWriter(self, self.root / "open" / f"{uuid.uuid4().hex}.jsonl", on_append, clock=clock)

    def seal_file(self, open_path: Path, hexd: str) -> str:
        """Seal a complete, durable run file (``hexd`` = the SHA-256 of its bytes): rename it to
        ``runs/<aa>/<hexd>.jsonl`` (or drop it when those bytes are already sealed), then fsync
        both directories now (recovery, the Ray landing; a run writer seals by ``seal_after_sync``)."""
        target = self._sealed_path(hexd)
        if target.exists():
            open_path.unlink()  # same bytes already sealed: nothing to do
        else:
            os.replace(open_path, target)
        if self.fsync:
            _fsync_dir(target.parent)
            _fsync_dir(open_path.parent)
        return hexd

    def seal_after_sync(self, fd: int, open_path: Path, hexd: str) -> int:
        """``seal_file`` in one commit pass: the run file (``fd``, its flock held until then)
        is fsynced, renamed to ``runs/<aa>/<hexd>.jsonl`` (or dropped when those bytes are
        sealed already), then the new name's directory fsynced. Returns the ticket to wait
        for; until it is done the run is still in ``open/``, locked.

        ``open/`` is not fsynced for the rename: no promise needs the old name gone (FORMAT.md
        "Durability"). A power cut may bring ``open/<uuid>.jsonl`` back beside the sealed run;
        its bytes are the sealed run's, ``run.end`` last, so recovery seals it to the same
        name and drops it. (``open/`` is fsynced when a run file is created, by the pass
        that makes its first records durable.)"""
        try:
            target = self._sealed_path(hexd)
        except OSError as e:
            raise storage_error(self.run_path(hexd), "seal the run", e) from None
        return committer().rename_after_sync(fd, open_path, target, dirs=(target.parent,))

    def _sealed_path(self, hexd: str) -> Path:
        """``runs/<aa>/<hexd>.jsonl``, its folder made first: once per folder and Store (a
        runs folder is never removed, and ``mkdir`` of one that exists costs a failed system
        call and an exception per run). Raises OSError when it cannot be made."""
        aa = hexd[:2]
        folder = self.root / "runs" / aa
        if aa not in self._sealed_dirs:
            folder.mkdir(parents=True, exist_ok=True)
            self._sealed_dirs.add(aa)
        return folder / f"{hexd}.jsonl"

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
        """Open runs, not the ``.new-*`` files a writer is still creating (``RunWriter``)."""
        base = self.root / "open"
        return sorted(p for p in base.glob("*.jsonl") if not p.name.startswith(".")) if base.is_dir() else []

    # -- journals -------------------------------------------------------------------------
    def journal(self, experiment: str, writer: str | None = None) -> Journal:
        """The journal this process appends to (one file per writer, lock-serialised)."""
        safe_name(experiment, "experiment id")
        writer = safe_name(writer or default_writer(), "journal writer")
        key = (experiment, writer)
        if key not in self._journals:
            self.ensure()
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

    # -- locks (FORMAT.md "Locks") -------------------------------------------------------
    def experiment_lock_path(self, experiment: str) -> Path:
        return self.root / "locks" / f"{safe_name(experiment, 'experiment id')}.lock"

    @contextlib.contextmanager
    def experiment_lock(self, experiment: str):
        """Held (exclusive ``flock``) by the one process running or amending an experiment:
        ``benchclaw run``/``demo`` for the grid's whole life, ``deviate`` while it appends.
        Raises UsageError at once when another process holds it."""
        self.ensure()
        path = self.experiment_lock_path(experiment)
        try:
            path.parent.mkdir(exist_ok=True)
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o644)
        except OSError as e:
            raise storage_error(path, "take the experiment's lock", e) from None
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                raise UsageError(f"{self.root}: {experiment} is being run by another process "
                                 f"({path} is locked); wait for it to finish") from None
            yield
        finally:
            os.close(fd)

    @contextlib.contextmanager
    def experiment_quiet(self, experiment: str, note: Callable[[str], None] | None = None):
        """Hold the experiment's lock shared, so no grid or deviation of it writes while a
        reader (``export``) reads: waits while one runs, telling ``note`` so. Where the lock
        cannot be opened (a read-only copy) nothing can be writing, and nothing is held."""
        path = self.experiment_lock_path(experiment)
        fd = open_lock_file(path, make_parent=True)
        try:
            if fd is not None:
                try:
                    fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
                except BlockingIOError:
                    if note is not None:
                        note(f"waiting: experiment {experiment} is being run by another process "
                             f"({path}); its evidence is read once that grid ends")
                    fcntl.flock(fd, fcntl.LOCK_SH)
            yield
        finally:
            if fd is not None:
                os.close(fd)

    def experiment_live(self, experiment: str) -> bool:
        """True while a process holds the experiment's lock (its grid is running)."""
        return held_exclusively(self.experiment_lock_path(experiment))

_PROCESS_WRITER: list[str] = []


def default_writer() -> str:
    """This process's journal writer id: ``BENCHCLAW_WRITER`` when set, else a random id
    drawn once per process (``w-<16 hex>``). It names the journal file this process appends
    to, so two machines (or processes) never append to the same file, and it reveals no
    host or user name in published evidence."""
    env = os.environ.get("BENCHCLAW_WRITER")
    if env:
        return env
    if not _PROCESS_WRITER:
        _PROCESS_WRITER.append("w-" + uuid.uuid4().hex[:16])
    return _PROCESS_WRITER[0]

