"""``BuildStore``: the build's ``Store``, which finds its few packed blobs without indexing
every blob of the runs directory.

The parent process of a build reads few blobs itself (the worker processes read the runs'
blobs): the task listings and files, each experiment's spec and pre-registration, and the
copies of those the pages link. A ``Store`` finds a packed blob through a ``PackIndex`` of
every blob of the directory (some 56 bytes a blob, about 615 bytes a run, and twice that
while it grows), which it builds on the first lookup and keeps; the build used to build it
three times (task pages, the analyses' spec and task reads, the copies), and two of them
raised the build's peak by about 17 MB each at 20,000 runs.

Here a lookup reads the packs' index files (``<id>.idx``, FORMAT.md "Packs") a slice at a
time, in the order ``PackIndex`` indexes them, and stops at the first pack that holds the
digest: the same copy ``PackIndex`` finds first, so the same bytes. The locations found
are remembered (a few). A pack without a whole index file is scanned (its headers only).
Past ``_LOOKUPS_MAX`` lookups (a site whose copied blobs were deleted: every linked blob is
copied again) a whole ``PackIndex`` is built after all, as a plain ``Store`` would.
"""

from __future__ import annotations

import os
import struct
import tempfile
from array import array

from ..evidence.packs import IDX_MAGIC, BlobLoc, PackIndex, list_packs, scan_pack
from ..evidence.store import Store

__all__ = ["BuildStore", "SharedIndex", "WorkerStore"]

_CHUNK = 1 << 20       # bytes of an index file read at a time
_LOOKUPS_MAX = 256     # lookups by reading index files before a whole PackIndex is built


class BuildStore(Store):
    """A ``Store`` whose packed-blob lookups read the pack index files (see the module)."""

    def _pack_index(self):
        if self._packs is None:
            self._packs = _FewIndex(self._objects_dir())
        return self._packs


class _FewIndex:
    """``PackIndex.find`` for a few digests, holding only their locations."""

    def __init__(self, objects: str):
        self.objects = objects
        self._found: dict[str, BlobLoc] = {}
        self._lookups = 0
        self._whole: PackIndex | None = None

    def find(self, hexd: str) -> BlobLoc | None:
        if self._whole is not None:
            return self._whole.find(hexd)
        loc = self._found.get(hexd)
        if loc is not None:
            return loc
        self._lookups += 1
        if self._lookups > _LOOKUPS_MAX:
            self._whole = PackIndex(self.objects)
            return self._whole.find(hexd)
        try:
            bytes.fromhex(hexd)
        except ValueError:
            return None
        for pack in list_packs(self.objects):
            try:
                loc = _in_pack(pack, hexd)
            except OSError:
                continue  # unreadable now: a lookup misses it (as PackIndex's), check reports it
            if loc is not None:
                self._found[hexd] = loc
                return loc
        return None  # not remembered: a live grid may add it

    def __iter__(self):
        if self._whole is None:
            self._whole = PackIndex(self.objects)
        return iter(self._whole)


def _in_pack(pack: str, hexd: str) -> BlobLoc | None:
    """Where ``hexd`` is in ``pack``, from its index file when that is whole (its header names
    the pack's size and it ends with a newline, as ``read_index`` asks), else by scanning the
    pack's headers."""
    got = _from_index_file(pack, hexd)
    if got is not False:
        return got
    found = []
    scan_pack(pack, add=lambda h, o, n: found.append((o, n)) if h == hexd and not found else None)
    return BlobLoc(pack, *found[0]) if found else None


def _from_index_file(pack: str, hexd: str):
    """The location from ``pack``'s index file, None when it has no such line, False when
    the file is missing or not whole."""
    needle = hexd.encode("ascii") + b" "
    try:
        with open(pack[:-len(".pack")] + ".idx", "rb") as f:
            size = os.stat(pack).st_size
            if f.readline() != IDX_MAGIC + b"%d\n" % size:
                return False
            found, tail = None, b""
            while chunk := f.read(_CHUNK):
                data = tail + chunk
                cut = data.rfind(b"\n") + 1  # whole lines only; the rest waits for the next slice
                lines, tail = data[:cut], data[cut:]
                if found is None:
                    at = lines.find(needle)
                    while at > 0 and lines[at - 1] != 0x0A:  # a line's start only
                        at = lines.find(needle, at + 1)
                    if at >= 0:
                        line = lines[at:lines.index(b"\n", at)]
                        _, offset, n = line.split(b" ")
                        found = BlobLoc(pack, int(offset), int(n))
            if tail:
                return False  # not ending with a newline: not whole
            return found
    except (OSError, ValueError):
        return False


_REC = 48  # a shared index record: raw digest (32), offset (8), pack no << 40 | size (8)


class SharedIndex:
    """Every packed blob's location, as the render workers look them up: built once in the
    parent before the workers are forked, from a ``PackIndex`` (so the same copy is found),
    then written to an unlinked temporary file as fixed records grouped by the digest's
    first two bytes, and the ``PackIndex`` dropped. What stays in memory is the pack paths
    and a table of 65,537 record numbers (256 KB); a lookup reads one group (a few records,
    ``os.pread``: no mapped pages counted in a worker's memory). A worker used to build its
    own ``PackIndex`` (about 56 bytes a blob, some 11 blobs a run, plus array slack)."""

    def __init__(self, objects: str):
        whole = PackIndex(objects)
        whole.refresh()
        whole._slots = None  # not looked up again: only its entries are read
        keys, offs, locs = whole._keys, whole._offs, whole._locs
        self.paths = list(whole._paths)
        n = len(offs)
        fan = array("I", bytes(4 * 65537))
        for i in range(n):
            fan[(keys[32 * i] << 8 | keys[32 * i + 1]) + 1] += 1
        for p in range(65536):
            fan[p + 1] += fan[p]
        at, order = array("I", fan[:65536]), array("I", bytes(4 * n))  # entry numbers, grouped
        for i in range(n):
            p = keys[32 * i] << 8 | keys[32 * i + 1]
            order[at[p]] = i
            at[p] += 1
        del at
        self._file = tempfile.TemporaryFile()
        for start in range(0, n, 1 << 14):  # written a slice at a time: no second copy held
            chunk = bytearray()
            for i in order[start:start + (1 << 14)]:
                chunk += keys[32 * i:32 * i + 32]
                chunk += struct.pack("<QQ", offs[i], locs[i])
            self._file.write(chunk)
        self._file.flush()
        del whole, keys, offs, locs, order
        self.fd = self._file.fileno()
        self.fan = fan

    def find(self, raw: bytes) -> BlobLoc | None:
        p = raw[0] << 8 | raw[1]
        lo, hi = self.fan[p], self.fan[p + 1]
        if lo == hi:
            return None
        data = os.pread(self.fd, _REC * (hi - lo), _REC * lo)
        for j in range(0, len(data), _REC):
            if data[j:j + 32] == raw:
                off, loc = struct.unpack_from("<QQ", data, j + 32)
                return BlobLoc(self.paths[loc >> PackIndex._SIZE_BITS], off,
                               loc & ((1 << PackIndex._SIZE_BITS) - 1))
        return None


class WorkerStore(Store):
    """A render worker's ``Store``: packed blobs are found through the parent's
    ``SharedIndex``; a digest it does not hold (a blob missing from the runs, or packed
    after the build started) is looked up as a plain ``Store`` would (a whole ``PackIndex``)."""

    shared: SharedIndex | None = None  # set by the parent around the fork

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._shared = type(self).shared

    def _pack_index(self):
        if self._packs is None:
            self._packs = _SharedLookup(self._shared, self._objects_dir())
        return self._packs


class _SharedLookup:
    def __init__(self, shared: SharedIndex, objects: str):
        self.shared, self.objects = shared, objects
        self._whole: PackIndex | None = None

    def find(self, hexd: str) -> BlobLoc | None:
        if self._whole is None:
            loc = self.shared.find(bytes.fromhex(hexd))
            if loc is not None:
                return loc
            self._whole = PackIndex(self.objects)
        return self._whole.find(hexd)

    def __iter__(self):
        if self._whole is None:
            self._whole = PackIndex(self.objects)
        return iter(self._whole)
