"""Packs: the blobs of one writer process appended to one file (FORMAT.md §1, "Packs").

Why it is built this way (measured by ``bench/packs.py``: blobs were 94% of a runs
directory's files, a median 344 bytes each, one file creation, one fsync and one rename
each):

- **One pack per writer process and runs directory**, ``objects/packs/<32 hex>.pack``, as a
  ledger is one file per invocation: no two processes ever append to the same pack, so an
  append needs no lock, and merging two runs directories stays a union of files (a pack is
  append-only: of two versions one is a prefix of the other).
- **An entry is self-describing**: ``<64 hex> <size>\\n`` then the bytes then ``\\n``. The blob
  is still named and verified by its SHA-256 (every read re-hashes), and the index (digest ->
  pack, offset, size) is derived: a scan of the headers rebuilds it, so no index file has to
  be kept in step, made durable or merged.
- **Durability is the group commit's**: an entry is one ``O_APPEND`` write; the pack is
  marked for the next pass like any appended file, so one fsync covers every blob a pass
  takes instead of one fsync and one rename each. A crash can tear only the last entry
  (found by the scan: bytes short of the header's size); recovery sets such a tail aside
  once the pack's writer is dead (its ``flock`` on the pack is gone).
- **Readers never trust the index**: ``Store.get_blob`` re-hashes what it reads; a live
  writer's entry half-written when scanned is simply not indexed yet.
"""

from __future__ import annotations

import atexit
import fcntl
import os
import threading
import uuid
from array import array
from dataclasses import dataclass
from typing import Iterator, NamedTuple

from ._commit import append_whole, committer, held_exclusively, storage_error

__all__ = ["PACK_MAGIC", "BlobLoc", "PackScan", "PackWriter", "PackIndex", "scan_pack", "pack_writer",
           "entry_bytes", "pack_dir", "finish_packs", "own_writers", "list_packs", "writer_alive",
           "read_index", "write_index"]

PACK_MAGIC = b"benchclaw-pack 1\n"
IDX_MAGIC = b"benchclaw-packidx 1 "
_HEADER_MAX = 64 + 1 + 20 + 1  # "<64 hex> <size>\n"
_PACK_ENTRIES = 65536  # entries per pack: a writer's own index (about 200 bytes an entry) stays bounded


class BlobLoc(NamedTuple):
    """Where a blob's bytes are: ``size`` bytes of file ``path`` from ``offset``."""

    path: str
    offset: int
    size: int

    def read(self) -> bytes:
        """The bytes (not re-hashed: the caller does). Raises OSError."""
        with open(self.path, "rb") as f:
            f.seek(self.offset)
            return f.read(self.size)


def pack_dir(objects: str) -> str:
    return f"{objects}/packs"


def entry_bytes(hexd: str, data: bytes) -> bytes:
    return b"%s %d\n%s\n" % (hexd.encode("ascii"), len(data), data)


@dataclass
class PackScan:
    """What a scan of a pack found: its whole entries, where they end, and what follows."""

    entries: list[tuple[str, int, int]]  # (hex, offset of the bytes, size)
    good_end: int                        # the end of the last whole entry
    size: int                            # the file's size when scanned
    problem: str | None = None           # None, or why the bytes after good_end are not an entry
    torn: bool = False                   # the problem is a torn tail (a crash mid-append)


def _parse_header(line: bytes) -> tuple[str, int] | None:
    """``<64 lowercase hex> <decimal size>\\n`` -> (hex, size), else None."""
    if len(line) < 67 or not line.endswith(b"\n") or line[64:65] != b" ":
        return None
    hexd, digits = line[:64], line[65:-1]
    if not digits.isdigit() or (len(digits) > 1 and digits[:1] == b"0"):
        return None
    try:
        int(hexd, 16)
    except ValueError:
        return None
    if hexd != hexd.lower():
        return None
    return hexd.decode("ascii"), int(digits)


def scan_pack(path: str, start: int = 0, *, add=None) -> PackScan:
    """Read a pack's headers from ``start`` (0, or a ``good_end`` of an earlier scan; an
    append-only file only grows there). The bytes are skipped, not read or hashed. With
    ``add``, each whole entry is given to ``add(hex, offset, size)`` and not listed in
    ``entries``. Raises OSError when the file cannot be read."""
    with open(path, "rb", buffering=1 << 16) as f:
        size = os.fstat(f.fileno()).st_size
        if start == 0:
            magic = f.read(len(PACK_MAGIC))
            if magic != PACK_MAGIC:
                torn = PACK_MAGIC.startswith(magic)
                return PackScan([], 0, size, "no pack header" if not torn else "torn pack header", torn)
            start = len(PACK_MAGIC)
        return _scan_entries(f, start, size, add)


def _scan_entries(f, pos: int, size: int, add=None) -> PackScan:
    """The entries from ``pos``; with ``add``, each is given to ``add(hex, offset, size)``
    as it is found instead of listed (the index: no list of a whole pack's entries)."""
    entries = []
    if add is None:
        add = lambda *e: entries.append(e)  # noqa: E731
    while pos < size:
        f.seek(pos)
        line = f.readline(_HEADER_MAX)
        head = _parse_header(line)
        if head is None:
            return _stop(f, entries, pos, size, f"unreadable entry header at byte {pos}",
                         torn=not line.endswith(b"\n") and pos + len(line) == size)
        hexd, n = head
        body = pos + len(line)
        end = body + n + 1
        if end > size:
            return _stop(f, entries, pos, size, f"entry at byte {pos} ends past the end of the file", torn=True)
        f.seek(end - 1)
        if f.read(1) != b"\n":
            return _stop(f, entries, pos, size, f"entry at byte {pos} is not followed by a newline")
        add(hexd, body, n)
        pos = end
    return PackScan(entries, pos, size)


def _stop(f, entries: list, pos: int, size: int, problem: str, *, torn: bool = False) -> PackScan:
    """The scan ends at ``pos``. A tail of zero bytes (a power cut that kept a file's new size
    but not its data, as some file systems do) is torn too, not damage."""
    if not torn:
        f.seek(pos)
        torn = not f.read(size - pos).strip(b"\0")
    return PackScan(entries, pos, size, problem, torn)


def read_index(pack: str) -> PackScan | None:
    """The pack's entries from ``<id>.idx`` (FORMAT.md "Packs": derived, written by a writer
    that finished the pack), when the index is whole and covers the pack's size exactly;
    None otherwise (the caller scans). An index is trusted for where entries are, never for
    their bytes: every read re-hashes."""
    try:
        with open(pack[:-len(".pack")] + ".idx", "rb") as f:
            data = f.read()
        size = os.stat(pack).st_size
    except OSError:
        return None
    head, _, body = data.partition(b"\n")
    if not head.startswith(IDX_MAGIC) or head[len(IDX_MAGIC):] != b"%d" % size or not data.endswith(b"\n"):
        return None
    entries = []
    try:
        for line in body.splitlines():
            hexd, offset, n = line.split(b" ")
            entries.append((hexd.decode("ascii"), int(offset), int(n)))
    except ValueError:
        return None
    return PackScan(entries, size, size)


def _index_into(pack: str, add) -> int | None:
    """``read_index`` giving each entry to ``add(raw digest, offset, size)`` as its line is
    read (no list of the pack's entries, no copy of the file); returns the pack's size, or
    None when the index is not whole (some entries may have been given: the caller drops
    them)."""
    try:
        with open(pack[:-len(".pack")] + ".idx", "rb", buffering=1 << 16) as f:
            size = os.stat(pack).st_size
            if f.readline() != IDX_MAGIC + b"%d\n" % size:
                return None
            fromhex = bytes.fromhex
            for line in f:
                hexd, offset, n = line.split(b" ")
                raw = fromhex(hexd.decode("ascii"))
                if len(raw) != 32 or not line.endswith(b"\n"):
                    return None
                add(raw, int(offset), int(n))
    except (OSError, ValueError):
        return None
    return size


def write_index(pack: str, entries, size: int) -> None:
    """Write ``<id>.idx`` for a finished pack (temporary file, then rename; not fsynced: it
    is derived, and one that does not match its pack is ignored). Best effort."""
    idx = pack[:-len(".pack")] + ".idx"
    tmp = f"{idx}.{os.getpid()}.tmp"
    try:
        with open(tmp, "wb") as f:
            f.write(IDX_MAGIC + b"%d\n" % size)
            f.write(b"".join(b"%s %d %d\n" % (h.encode("ascii"), o, n) for h, o, n in entries))
        os.replace(tmp, idx)
    except OSError:
        try:
            os.unlink(tmp)
        except OSError:
            pass


def list_packs(objects: str) -> list[str]:
    """The packs of a runs directory (not ``.new-*`` files being created), sorted."""
    try:
        names = os.listdir(pack_dir(objects))
    except FileNotFoundError:
        return []
    return sorted(f"{pack_dir(objects)}/{n}" for n in names if n.endswith(".pack") and not n.startswith("."))


# ------------------------------------------------------------------------------ writing

class PackWriter:
    """This process's pack in one runs directory: created on the first blob, locked
    (``flock``, exclusive) for the process's life so recovery knows it is live, appended
    one write per blob, or per record's blobs (``add_many``). Thread-safe. ``own`` indexes
    what this process wrote."""

    def __init__(self, objects: str, fsync: bool):
        self.objects, self.fsync = objects, fsync
        self.path: str | None = None
        self.fd: int | None = None
        self.size = 0
        self.own: dict[str, tuple[int, int, int]] = {}  # hex -> (offset, size, ticket of its write)
        self._mutex = threading.Lock()

    def add(self, hexd: str, data: bytes) -> int:
        """Append blob ``hexd`` (its bytes ``data``) unless this pack has it; returns the
        group-commit ticket that makes it durable (0: nothing to wait for). Raises
        StorageError naming the pack (the entry is cut back off)."""
        return self.add_many(((hexd, data),))

    def add_many(self, blobs) -> int:
        """``add`` of several ``(hexd, data)`` in one write (the blobs of one record): the
        entries this pack lacks, in order, each once; returns the ticket that makes them all
        durable. On a failed write none of them is kept (the pack is cut back)."""
        with self._mutex:
            ticket, new = 0, {}
            for hexd, data in blobs:
                got = self.own.get(hexd)
                if got is not None:
                    ticket = max(ticket, got[2])  # one already durable costs its waiter nothing
                else:
                    new.setdefault(hexd, data)
            if not new:
                return ticket
            if self.fd is None:
                self._create()
            entries, at, where = [], self.size, {}
            for hexd, data in new.items():
                entry = entry_bytes(hexd, data)
                entries.append(entry)
                at += len(entry)
                where[hexd] = (at - len(data) - 1, len(data))
            what = f"store blob sha256:{next(iter(new))}" + (f" and {len(new) - 1} more" if len(new) > 1 else "")
            append_whole(self.fd, self.path, self.size, entries[0] if len(entries) == 1 else b"".join(entries),  # type: ignore[arg-type]
                         what)
            mark = committer().mark_file(self.fd, self.path) if self.fsync else 0  # type: ignore[arg-type]
            for hexd, (offset, n) in where.items():
                self.own[hexd] = (offset, n, mark)
            self.size = at
            if len(self.own) >= _PACK_ENTRIES:
                self._finish()  # the next blob starts a new pack; this one is read by its index
            return max(ticket, mark)

    def close(self) -> None:
        """Finish this pack: write its index, close it (its lock goes with the last
        descriptor: a pending commit holds a duplicate until its pass is done); the next
        blob starts a new pack."""
        with self._mutex:
            self._finish()

    def _finish(self) -> None:
        if self.fd is not None:
            entries = sorted(((h, o, n) for h, (o, n, _) in self.own.items()), key=lambda e: e[1])
            write_index(self.path, entries, self.size)  # type: ignore[arg-type]
            if self.fsync:
                committer().release(self.path, self.fd)  # type: ignore[arg-type]
            os.close(self.fd)
        self.fd, self.path, self.size, self.own = None, None, 0, {}

    def find(self, hexd: str) -> BlobLoc | None:
        got = self.own.get(hexd)
        return BlobLoc(self.path, got[0], got[1]) if got else None  # type: ignore[arg-type]

    def read(self, hexd: str) -> tuple[bytes, BlobLoc] | None:
        """Bytes this process wrote and where (a pread on its own descriptor: no open per read)."""
        with self._mutex:
            got = self.own.get(hexd)
            if got is None:
                return None
            return os.pread(self.fd, got[1], got[0]), BlobLoc(self.path, got[0], got[1])  # type: ignore[arg-type]

    def _create(self) -> None:
        """``objects/packs/.new-<id>.pack``, locked, its header written, then renamed: no
        reader ever sees the pack unlocked while its writer lives (as a run file, FORMAT.md
        "Locks"); the directory entry is made durable by the first commit."""
        base = pack_dir(self.objects)
        name = uuid.uuid4().hex
        new, path = f"{base}/.new-{name}.pack", f"{base}/{name}.pack"
        try:
            os.makedirs(base, exist_ok=True)
            fd = os.open(new, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_APPEND | os.O_CLOEXEC, 0o644)
        except OSError as e:
            raise storage_error(path, "create a pack", e) from None  # type: ignore[arg-type]
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            append_whole(fd, path, 0, PACK_MAGIC, "create a pack")
            os.replace(new, path)
        except OSError as e:
            os.close(fd)
            raise storage_error(path, "create a pack", e) from None  # type: ignore[arg-type]
        self.fd, self.path, self.size = fd, path, len(PACK_MAGIC)
        if self.fsync:
            committer().mark_dir(base)


_WRITERS: dict[tuple[str, bool], PackWriter] = {}
_WRITERS_LOCK = threading.Lock()
_WRITERS_MAX = 16  # open packs per process; past it the oldest is finished (a test run or a
                   # Ray worker stores blobs in many scratch directories, one descriptor each)


def pack_writer(objects: str, fsync: bool) -> PackWriter:
    """This process's writer for the runs directory whose ``objects/`` is ``objects``, an
    absolute path (the writer outlives the Store that asked: a relative key would name
    another directory after a ``chdir``). One per process: every Store of the directory
    shares it; a forked child starts its own.
    A throw-away store (``fsync=False``) gets a pack of its own, so a blob it wrote is never
    taken for a durable one."""
    w = _WRITERS.get((objects, fsync))
    if w is None:
        with _WRITERS_LOCK:
            w = _WRITERS.get((objects, fsync))
            if w is None:
                while len(_WRITERS) >= _WRITERS_MAX:
                    _WRITERS.pop(next(iter(_WRITERS))).close()
                w = _WRITERS[(objects, fsync)] = PackWriter(objects, fsync)
    return w


def own_writers(objects: str) -> list[PackWriter]:
    """This process's writers in a runs directory, if any (looking never creates one)."""
    objects = os.path.abspath(objects)
    return [w for w in (_WRITERS.get((objects, True)), _WRITERS.get((objects, False))) if w is not None]


def finish_packs(objects: str) -> None:
    """Close this process's packs in a runs directory (a scratch directory about to go)."""
    objects = os.path.abspath(objects)
    with _WRITERS_LOCK:
        for fsync in (True, False):
            w = _WRITERS.pop((objects, fsync), None)
            if w is not None:
                w.close()


def _finish_all() -> None:
    """At exit, finish every pack (their indexes written); the committer's exit pass, which
    runs after this, still fsyncs what was marked (it holds its own descriptors)."""
    for w in list(_WRITERS.values()):
        try:
            w.close()
        except Exception:  # noqa: BLE001 - exiting; an index is only a cache
            pass


os.register_at_fork(after_in_child=_WRITERS.clear)
atexit.register(_finish_all)


# ------------------------------------------------------------------------------ reading

class PackIndex:
    """Digest -> location over every pack of a runs directory, built by scanning headers
    (or reading a finished pack's index) and extended (only the new bytes of grown packs,
    and new packs) when a lookup misses. The first copy indexed of a blob is the one found.
    Thread-safe.

    Compact, because export and the site build hold it for every blob of the directory
    (some 11 blobs a run): entry ``i`` is the raw 32-byte digest at ``_keys[32*i:]`` and
    ``_locs[i]`` (pack number << 40 | size) and ``_offs[i]``; ``_slots`` is an open-addressing
    table (linear probing, at most half full) of entry numbers + 1 (0: empty), placed by
    the digest's first 8 bytes (a SHA-256 is uniform already). About 56 bytes a blob; a
    dict of raw digest -> int was about 150."""

    _SIZE_BITS = 40

    def __init__(self, objects: str):
        self.objects = objects
        self._paths: list[str] = []
        self._nos: dict[str, int] = {}        # pack -> its number in _paths
        self._scanned: dict[str, int] = {}    # pack -> good_end scanned so far
        self._keys = bytearray()              # raw digests, 32 bytes each, in the order indexed
        self._offs = array("Q")               # where each entry's bytes start in its pack
        self._locs = array("Q")               # (pack no << 40) | size
        self._slots = array("I", bytes(4 * 16))
        self._mutex = threading.Lock()

    def find(self, hexd: str) -> BlobLoc | None:
        raw = bytes.fromhex(hexd)
        i = self._lookup(raw)
        if i < 0:
            self.refresh()
            i = self._lookup(raw)
        if i < 0:
            return None
        return self._loc(i)

    def _loc(self, i: int) -> BlobLoc:
        loc = self._locs[i]
        return BlobLoc(self._paths[loc >> self._SIZE_BITS], self._offs[i], loc & ((1 << self._SIZE_BITS) - 1))

    def _lookup(self, raw: bytes) -> int:
        """The entry number of ``raw``, or -1. (Reads without the mutex: an entry is stored
        before its slot, and a grown table replaces the old one whole.)"""
        slots, keys = self._slots, self._keys
        mask = len(slots) - 1
        at = int.from_bytes(raw[:8], "big") & mask
        while (e := slots[at]) and keys[32 * e - 32:32 * e] != raw:
            at = (at + 1) & mask
        return e - 1

    def refresh(self) -> None:
        """Index what was appended to the packs since the last look."""
        with self._mutex:
            for path in list_packs(self.objects):
                try:
                    done = self._scanned.get(path, 0)
                    if os.stat(path).st_size > done:
                        self._index(path, done)
                except OSError:
                    continue  # unreadable now: a lookup misses it, check reports it

    def _index(self, path: str, done: int) -> None:
        """Index ``path`` from ``done`` (0: the whole pack, from its index when it has a
        whole one). Entries are gathered first, compactly, and stored once the pack's index
        is known to be whole (else the pack is scanned)."""
        keys, offs, sizes = bytearray(), array("Q"), array("Q")

        def add(raw: bytes, offset: int, size: int) -> None:
            keys.extend(raw)
            offs.append(offset)
            sizes.append(size)

        end = _index_into(path, add) if done == 0 else None
        if end is None:
            del keys[:], offs[:], sizes[:]
            end = scan_pack(path, done, add=lambda hexd, o, n: add(bytes.fromhex(hexd), o, n)).good_end
        no = self._nos.setdefault(path, len(self._paths))
        if no == len(self._paths):
            self._paths.append(path)
        if max(sizes, default=0) >> self._SIZE_BITS:
            raise OSError(f"{path}: an entry of {max(sizes)} bytes is larger than a pack index holds")
        self._grow(len(self._offs) + len(offs))
        # each entry is stored unless a copy is indexed already (the first stays the one found)
        slots, all_keys, all_offs, all_locs = self._slots, self._keys, self._offs, self._locs
        mask, high, e = len(slots) - 1, no << self._SIZE_BITS, len(all_offs)
        for i in range(len(offs)):
            raw = keys[32 * i:32 * i + 32]
            at = int.from_bytes(raw[:8], "big") & mask
            while (f := slots[at]) and all_keys[32 * f - 32:32 * f] != raw:
                at = (at + 1) & mask
            if not f:
                all_keys += raw
                all_offs.append(offs[i])
                all_locs.append(high | sizes[i])
                e += 1
                slots[at] = e
        self._scanned[path] = end

    @staticmethod
    def _place(slots: array, e: int, raw: bytes) -> None:
        mask = len(slots) - 1
        at = int.from_bytes(raw[:8], "big") & mask
        while slots[at]:
            at = (at + 1) & mask
        slots[at] = e

    def _grow(self, entries: int) -> None:
        """Make the table at most half full with ``entries`` entries (a new table, filled,
        then put in place of the old one)."""
        n = len(self._slots)
        if entries * 2 <= n:
            return
        while entries * 2 > n:
            n *= 2
        slots, keys = array("I", bytes(4 * n)), self._keys
        for e in range(1, len(self._offs) + 1):
            self._place(slots, e, keys[32 * e - 32:32 * e])
        self._slots = slots

    def __len__(self) -> int:
        return len(self._offs)

    def __iter__(self) -> Iterator[tuple[str, BlobLoc]]:
        """Every packed blob once (the first copy found), in the order indexed, after a
        refresh."""
        self.refresh()
        for i in range(len(self._offs)):
            yield self._keys[32 * i:32 * i + 32].hex(), self._loc(i)


def writer_alive(path: str) -> bool:
    """True while a process holds the pack's lock (its writer lives)."""
    return held_exclusively(path)
