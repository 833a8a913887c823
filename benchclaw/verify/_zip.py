"""A strict, bounded reader for the zip container of a bundle. It never writes to disk.

Why not just ``zipfile``: it is built to be lenient (it tolerates prepended data, trusts
the central directory, decompresses whatever size a header claims), and an auditor's
bundle may be crafted. So this module parses the end record, the central directory and
every local header itself with ``struct``, and refuses anything a bundle written by
``benchclaw export`` never contains or that two readers could interpret differently:

- truncated archives, multi-disk archives, prepended or trailing bytes;
- entries whose local and central headers disagree, entries that overlap or leave
  unlisted bytes between them (the entries must tile the archive exactly);
- encrypted entries, streamed entries (data descriptors), methods other than stored and
  deflate, symlinks and any other non-regular file, directory entries;
- names that are not UTF-8, absolute, contain ``..``, ``.``, empty parts, backslashes or
  control characters, and names that are equal after case folding and Unicode (NFKC)
  normalisation;
- more entries, bigger entries, a bigger total or a higher compression ratio than
  ``Limits`` allow.

The directory is kept in parallel arrays (offsets, sizes, CRCs, methods) beside the list
of names, found by bisection (a bundle lists its entries sorted, so the names are their own
index; any other order gets a sorted copy): about 50 bytes an entry beyond its name, not
the ~240 of an object per entry with its boxed ints and a dict slot.

Those are ``UnreadableBundle`` (exit 2). Member bytes are inflated here too, with
``zlib`` and an output cap of the declared size + 1, so a member can never inflate past
what its header promised; a CRC or size mismatch in one member is a ``VerificationError``
for that entry only (exit 1), because the rest of the bundle is still readable. Memory is
bounded by the limits: the archive bytes plus the inflated members.
"""

from __future__ import annotations

import re
import struct
import zlib
from array import array
from bisect import bisect_left
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Callable, Iterator

from ..formats.names import ENTRY_NAME_BYTES, entry_name_fold, entry_name_problem
from ._errors import UnreadableBundle, VerificationError

__all__ = ["Limits", "Entry", "ZipView", "Sizes"]

_EOCD = struct.Struct("<4s4H2LH")
_Z64_LOC = struct.Struct("<4sLQL")
_Z64_EOCD = struct.Struct("<4sQ2H2L4Q")
_CENTRAL = struct.Struct("<4s2B5H3L5H2L")
_LOCAL = struct.Struct("<4s5H3L2H")
_SIG_EOCD, _SIG_Z64_LOC, _SIG_Z64 = b"PK\x05\x06", b"PK\x06\x07", b"PK\x06\x06"
_SIG_CENTRAL, _SIG_LOCAL = b"PK\x01\x02", b"PK\x03\x04"
_MAX_COMMENT = 0xFFFF
_STORED, _DEFLATED = 0, 8
_FLAG_ENCRYPTED, _FLAG_DESCRIPTOR, _FLAG_STRONG = 0x1, 0x8, 0x40
_UNIX = 3
_S_IFMT, _S_IFREG, _S_IFLNK = 0o170000, 0o100000, 0o120000
_DOS_DIR = 0x10
_ODD_FLAGS = _FLAG_ENCRYPTED | _FLAG_DESCRIPTOR | _FLAG_STRONG  # any of them: _check_kind refuses the entry
_WALKED = 1 << 20  # archive bytes the directory walk spans between two calls of ``walked``
# A plain name (every part letters, digits, '-', '_' and '.', none of them '.' or '..'): one
# ``entry_name_problem`` accepts and ``entry_name_fold`` folds to its lower case (ASCII: NFKC
# leaves it as it is), checked by one regex match (every name of an honest bundle is one).
_PLAIN_NAME = re.compile(r"(?!\.\.?(?:/|\Z))[A-Za-z0-9_.\-]+(?:/(?!\.\.?(?:/|\Z))[A-Za-z0-9_.\-]+)*\Z")


@dataclass(frozen=True)
class Limits:
    """What the verifier agrees to read. Defaults are far above an honest bundle of tens of
    thousands of runs and far below what would exhaust a laptop."""

    archive_bytes: int = 2 << 30
    entries: int = 2_000_000
    entry_bytes: int = 256 << 20
    total_bytes: int = 4 << 30
    ratio: int = 200          # uncompressed / compressed, for entries above ratio_floor
    ratio_floor: int = 1 << 20
    name_bytes: int = 512
    line_bytes: int = 1 << 20
    json_depth: int = 64
    worker_seconds: float = 3600.0  # a forked verification worker still running is stopped (exit 2)


@dataclass(frozen=True, slots=True)  # one per entry: hundreds of thousands in a large bundle
class Entry:
    """One member as the central directory describes it (validated against its local header)."""

    name: str
    method: int
    crc: int
    csize: int
    usize: int
    header_offset: int
    data_offset: int = 0

    @property
    def end(self) -> int:
        return self.data_offset + self.csize


def _bad(message: str) -> UnreadableBundle:
    return UnreadableBundle("", f"not a readable bundle: {message}")


class ZipView:
    """A validated view of zip bytes: ``names`` in archive order, ``read(name)``.

    Construction raises ``UnreadableBundle`` for anything in the module docstring's list.
    """

    def __init__(self, data: bytes, limits: Limits = Limits(), walked: Callable[[int], None] | None = None):
        """``walked(n)``: told the archive bytes each local header check spanned (the
        header and its entry's data), so a caller holding the archive memory-mapped can
        hand the pages this walk touched back to the kernel as it goes."""
        self.data = data
        self.limits = limits
        self._walked = walked
        if len(data) > limits.archive_bytes:
            raise _bad(f"the archive is {len(data)} bytes, above the limit of {limits.archive_bytes}")
        cd_offset, cd_end, count = self._end_records()
        self.names: list[str] = []  # in archive order; entry i's fields are item i of each array
        self.methods, self.crcs = array("B"), array("I")
        self.csizes, self.usizes = array("Q"), array("Q")
        self.header_offsets, self.data_offsets = array("Q"), array("Q")
        self._parse_central(cd_offset, cd_end, count)
        self._check_tiling(cd_offset)
        self._keys, self._order = self._lookup()

    @property
    def entries(self) -> Mapping[str, Entry]:
        """name -> ``Entry``, each made when asked for (made per access: no cycle to the view,
        which is freed once its last name goes, with the collector off)."""
        return _Entries(self)

    def index(self, name: str) -> int:
        """Entry ``name``'s position in archive order. Raises KeyError if there is none."""
        return _find(self._keys, self._order, name)

    def __contains__(self, name: str) -> bool:
        keys = self._keys
        i = bisect_left(keys, name)
        return i < len(keys) and keys[i] == name

    def sizes(self) -> Mapping[str, int]:
        """name -> uncompressed size, over this view's arrays but not the view (it outlives it)."""
        return Sizes(self.names, self._keys, self._order, self.usizes)

    def entry(self, name: str) -> Entry:
        """Entry ``name`` as an object, made on each call. Raises KeyError."""
        return self._entry(self.index(name))

    def _entry(self, i: int) -> Entry:
        return Entry(self.names[i], self.methods[i], self.crcs[i], self.csizes[i], self.usizes[i],
                     self.header_offsets[i], self.data_offsets[i])

    def csize(self, name: str) -> int:
        return self.csizes[self.index(name)]

    def usize(self, name: str) -> int:
        return self.usizes[self.index(name)]

    def _lookup(self) -> tuple[list[str], array | None]:
        """(the names sorted, their archive positions or None when already in that order).
        Names are unique here (``_check_name``), so sorted means strictly increasing."""
        names = self.names
        if all(a < b for a, b in zip(names, names[1:])):
            return names, None
        order = array("L", sorted(range(len(names)), key=names.__getitem__))
        return [names[i] for i in order], order

    # -- end records ------------------------------------------------------------------
    def _end_records(self) -> tuple[int, int, int]:
        data = self.data
        eocd = self._find_eocd()
        _, disk, cd_disk, n_disk, n_total, cd_size, cd_offset, _ = _EOCD.unpack_from(data, eocd)
        cd_end = eocd
        loc = eocd - _Z64_LOC.size
        if loc >= 0 and data[loc:loc + 4] == _SIG_Z64_LOC:
            disk, cd_disk, n_disk, n_total, cd_size, cd_offset, cd_end = self._zip64(loc, (
                disk, cd_disk, n_disk, n_total, cd_size, cd_offset))
        if disk or cd_disk or n_disk != n_total:
            raise _bad("multi-disk (split) archives are not supported")
        if n_total > self.limits.entries:
            raise _bad(f"{n_total} entries, above the limit of {self.limits.entries}")
        if cd_offset + cd_size != cd_end:
            raise _bad("the central directory does not end where its end record begins "
                       "(truncated, or bytes were inserted)")
        return cd_offset, cd_end, n_total

    def _find_eocd(self) -> int:
        data = self.data
        if len(data) < _EOCD.size:
            raise _bad("too short to be a zip archive (truncated?)")
        floor = max(0, len(data) - _EOCD.size - _MAX_COMMENT)
        pos = data.rfind(_SIG_EOCD, floor)
        while pos >= 0:
            if pos + _EOCD.size <= len(data):
                comment_len = struct.unpack_from("<H", data, pos + 20)[0]
                if pos + _EOCD.size + comment_len == len(data):
                    return pos
            pos = data.rfind(_SIG_EOCD, floor, pos)
        raise _bad("no end-of-central-directory record: truncated, or not a zip archive")

    def _zip64(self, loc: int, classic: tuple) -> tuple:
        data = self.data
        _, z_disk, z_offset, z_disks = _Z64_LOC.unpack_from(data, loc)
        if z_disk != 0 or z_disks != 1:
            raise _bad("multi-disk (split) archives are not supported")
        if z_offset + _Z64_EOCD.size > loc or data[z_offset:z_offset + 4] != _SIG_Z64:
            raise _bad("the zip64 end record is missing or misplaced")
        fields = _Z64_EOCD.unpack_from(data, z_offset)
        rec_size, disk, cd_disk, n_disk, n_total, cd_size, cd_offset = fields[1], *fields[4:]
        if z_offset + 12 + rec_size != loc:
            raise _bad("the zip64 end record does not end where its locator begins")
        sentinels = (0xFFFF, 0xFFFF, 0xFFFF, 0xFFFF, 0xFFFFFFFF, 0xFFFFFFFF)
        for old, new, sentinel in zip(classic, (disk, cd_disk, n_disk, n_total, cd_size, cd_offset),
                                      sentinels):
            if old not in (new, sentinel):
                raise _bad("the zip64 and classic end records disagree")
        return disk, cd_disk, n_disk, n_total, cd_size, cd_offset, z_offset

    # -- central directory ------------------------------------------------------------
    def _parse_central(self, pos: int, cd_end: int, count: int) -> None:
        seen: dict[str, str] = {}
        data, lim, total, walked, unwalked = self.data, self.limits, 0, self._walked, 0
        unpack, size, local, local_size, end_of_data = _CENTRAL.unpack_from, _CENTRAL.size, _LOCAL.unpack_from, \
            _LOCAL.size, len(self.data)
        small = min(lim.entry_bytes, lim.ratio_floor)  # a size below it passes both of _check_size's bounds
        names, methods, crcs = self.names.append, self.methods.append, self.crcs.append
        csizes, usizes, heads, starts = (self.csizes.append, self.usizes.append, self.header_offsets.append,
                                         self.data_offsets.append)
        for _ in range(count):
            if pos + size > cd_end:
                raise _bad("the central directory is truncated")
            (sig, _cver, system, _xver, flags, method, mtime, mdate, crc, csize, usize,
             name_len, extra_len, comment_len, disk, _iattr, eattr, offset) = unpack(data, pos)
            if sig != _SIG_CENTRAL:
                raise _bad(f"bad central directory signature at byte {pos}")
            end = pos + size + name_len + extra_len + comment_len
            if end > cd_end:
                raise _bad("the central directory is truncated")
            raw_name = data[pos + size:pos + size + name_len]
            name = self._check_name(raw_name, flags, seen)
            # an entry as ``benchclaw export`` writes it passes _check_kind and _check_size (they only raise)
            if flags & _ODD_FLAGS or method not in (_STORED, _DEFLATED) or disk or eattr & _DOS_DIR or \
                    (system == _UNIX and (eattr >> 16) & _S_IFMT not in (0, _S_IFREG)) or \
                    0xFFFFFFFF in (csize, usize, offset):
                self._check_kind(name, flags, method, system, eattr, disk, (csize, usize, offset))
            if usize >= small or (method == _STORED and csize != usize):
                self._check_size(name, method, csize, usize)
            total += usize
            if total > lim.total_bytes:
                raise _bad(f"entries inflate to more than the limit of {lim.total_bytes} bytes")
            # the local header, checked against this one (as _check_local, which says what is wrong)
            start = offset + local_size
            if start > end_of_data:
                raise _bad(f"entry {name!r}: local header beyond the end of the archive")
            lsig, _lxver, lflags, lmethod, lmtime, lmdate, lcrc, lcsize, lusize, lname_len, lextra_len = \
                local(data, offset)
            if lsig != _SIG_LOCAL or lflags != flags or lmethod != method or lmtime != mtime or lmdate != mdate or \
                    lcrc != crc or lcsize != csize or lusize != usize or data[start:start + lname_len] != raw_name:
                self._check_local(name, offset, crc, csize, usize, raw_name, (flags, method, mtime, mdate))
            data_offset = start + lname_len + lextra_len
            names(name)
            methods(method)
            crcs(crc)
            csizes(csize)
            usizes(usize)
            heads(offset)
            starts(data_offset)
            if walked is not None:
                unwalked += data_offset + csize - offset
                if unwalked >= _WALKED:
                    walked(unwalked)
                    unwalked = 0
            pos = end
        if walked is not None and unwalked:
            walked(unwalked)
        if pos != cd_end:
            raise _bad("the central directory holds more than its end record counts")

    def _check_name(self, raw: bytes, flags: int, seen: dict[str, str]) -> str:
        if len(raw) > self.limits.name_bytes or not raw:
            raise _bad(f"an entry name is empty or longer than {self.limits.name_bytes} bytes")
        try:
            name = raw.decode("utf-8")
        except UnicodeDecodeError:
            raise _bad(f"entry name {raw[:80]!r} is not UTF-8") from None
        if _PLAIN_NAME.match(name) and len(raw) <= ENTRY_NAME_BYTES:  # the checks below pass: only the fold
            folded = name.lower()
            if folded in seen:
                same = "duplicate" if seen[folded] == name else "differs only by case or Unicode normalisation from"
                raise _bad(f"entry {name!r}: {same} entry {seen[folded]!r}")
            seen[folded] = name
            return name
        if not name.isascii() and not flags & 0x800:
            raise _bad(f"entry {name!r}: non-ASCII name without the UTF-8 flag (ambiguous)")
        if name.endswith("/"):
            raise _bad(f"entry {name!r} is a directory entry (a bundle holds files only)")
        problem = entry_name_problem(name)  # the rules the task loader applies too
        if problem:
            raise _bad(f"entry {name!r}: {problem}")
        folded = entry_name_fold(name)
        if folded in seen:
            same = "duplicate" if seen[folded] == name else "differs only by case or Unicode normalisation from"
            raise _bad(f"entry {name!r}: {same} entry {seen[folded]!r}")
        seen[folded] = name
        return name

    def _check_kind(self, name: str, flags: int, method: int, system: int, eattr: int,
                    disk: int, fields: tuple[int, int, int]) -> None:
        if flags & (_FLAG_ENCRYPTED | _FLAG_STRONG):
            raise _bad(f"entry {name!r} is encrypted")
        if flags & _FLAG_DESCRIPTOR:
            raise _bad(f"entry {name!r} uses a data descriptor (streamed entries are not accepted)")
        if method not in (_STORED, _DEFLATED):
            raise _bad(f"entry {name!r}: compression method {method} (only stored and deflate)")
        mode = eattr >> 16
        if system == _UNIX and (mode & _S_IFMT) == _S_IFLNK:
            raise _bad(f"entry {name!r} is a symbolic link")
        if (system == _UNIX and (mode & _S_IFMT) not in (0, _S_IFREG)) or eattr & _DOS_DIR:
            raise _bad(f"entry {name!r} is not a regular file")
        if disk != 0:
            raise _bad(f"entry {name!r} starts on another disk")
        if 0xFFFFFFFF in fields:
            raise _bad(f"entry {name!r}: zip64 entry fields (a bundle entry is below 4 GiB)")

    def _check_size(self, name: str, method: int, csize: int, usize: int) -> None:
        lim = self.limits
        if usize > lim.entry_bytes:
            raise _bad(f"entry {name!r} inflates to {usize} bytes, above the limit of {lim.entry_bytes}")
        if method == _STORED and csize != usize:
            raise _bad(f"entry {name!r}: stored entry with compressed size != size")
        if usize > lim.ratio_floor and usize > csize * lim.ratio:
            raise _bad(f"entry {name!r}: compression ratio above {lim.ratio}:1 (zip bomb?)")

    def _check_local(self, name: str, pos: int, crc: int, csize: int, usize: int, raw_name: bytes,
                     central: tuple) -> int:
        """Where the entry's data begins, once its local header is checked against the central one."""
        if pos + _LOCAL.size > len(self.data):
            raise _bad(f"entry {name!r}: local header beyond the end of the archive")
        (sig, _xver, flags, method, mtime, mdate, lcrc, lcsize, lusize,
         name_len, extra_len) = _LOCAL.unpack_from(self.data, pos)
        start = pos + _LOCAL.size
        if sig != _SIG_LOCAL:
            raise _bad(f"entry {name!r}: no local header at byte {pos}")
        if (flags, method, mtime, mdate) != central or (lcrc, lcsize, lusize) != (crc, csize, usize) or \
                self.data[start:start + name_len] != raw_name:
            raise _bad(f"entry {name!r}: local and central headers disagree")
        return start + name_len + extra_len

    def _check_tiling(self, cd_offset: int) -> None:
        heads, starts, csizes = self.header_offsets, self.data_offsets, self.csizes
        order: range | list[int] = range(len(heads))
        if not all(a < b for a, b in zip(heads, heads[1:])):  # a bundle's entries are in archive order
            order = sorted(order, key=heads.__getitem__)
        pos = 0
        for i in order:
            if heads[i] < pos:
                raise _bad(f"entry {self.names[i]!r} overlaps the entry before it")
            if heads[i] > pos:
                raise _bad(f"{heads[i] - pos} unlisted bytes before entry {self.names[i]!r}")
            pos = starts[i] + csizes[i]
        if pos > cd_offset:
            raise _bad("the last entry overlaps the central directory (truncated?)")
        if pos < cd_offset:
            raise _bad(f"{cd_offset - pos} unlisted bytes before the central directory")

    # -- members ----------------------------------------------------------------------
    def read(self, name: str) -> bytes:
        """The member's bytes, inflated with a cap and CRC-checked.

        Raises KeyError for an unknown name, ``VerificationError`` (naming the entry) when
        its data is corrupt: bad deflate stream, wrong size, wrong CRC.
        """
        return self.read_raw(name)[1]

    def read_raw(self, name: str) -> tuple[bytes, bytes]:
        """(the member's bytes as the archive holds them, inflated), as ``read``."""
        return self.read_raw_at(self.index(name))

    def read_raw_at(self, i: int) -> tuple[bytes, bytes]:
        """``read_raw`` of entry ``i`` (its position in archive order)."""
        start, usize = self.data_offsets[i], self.usizes[i]
        raw = self.data[start:start + self.csizes[i]]
        out = raw if self.methods[i] == _STORED else self._inflate(self.names[i], raw, usize)
        if len(out) != usize:
            raise VerificationError(self.names[i], f"inflates to {len(out)} bytes, the header says {usize}")
        if zlib.crc32(out) != self.crcs[i]:
            raise VerificationError(self.names[i], "CRC-32 does not match the header (corrupt entry)")
        return raw, out

    @staticmethod
    def _inflate(name: str, raw: bytes, usize: int) -> bytes:
        d = zlib.decompressobj(-15)
        try:
            out = d.decompress(raw, usize + 1)
        except zlib.error as err:
            raise VerificationError(name, f"corrupt deflate data ({err})") from None
        if len(out) > usize:
            raise VerificationError(name, f"inflates beyond the {usize} bytes its header declares")
        if not d.eof or d.unused_data:
            raise VerificationError(name, "deflate stream truncated or followed by extra bytes")
        return out


def _find(keys: list[str], order: array | None, name: str) -> int:
    """``name``'s archive position: ``keys`` are the names sorted, ``order`` their positions
    (None: the archive order is the sorted one). Raises KeyError."""
    i = bisect_left(keys, name)
    if i == len(keys) or keys[i] != name:
        raise KeyError(name)
    return i if order is None else order[i]


class Sizes(Mapping):
    """name -> uncompressed size (the index's ``sizes``): the names and one array, not a dict
    of boxed ints (~70 bytes an entry, held through every step)."""

    __slots__ = ("_names", "_keys", "_order", "_sizes")

    def __init__(self, names: list[str], keys: list[str], order: array | None, sizes: array):
        self._names, self._keys, self._order, self._sizes = names, keys, order, sizes

    def __getitem__(self, name: str) -> int:
        return self._sizes[_find(self._keys, self._order, name)]

    def __contains__(self, name: object) -> bool:
        if not isinstance(name, str):
            return False
        keys = self._keys
        i = bisect_left(keys, name)
        return i < len(keys) and keys[i] == name

    def __iter__(self) -> Iterator[str]:
        return iter(self._names)

    def __len__(self) -> int:
        return len(self._names)

    def values(self):
        return iter(self._sizes)


class _Entries(Mapping):
    """``ZipView.entries``: name -> ``Entry``, each made when asked for (the view holds arrays)."""

    __slots__ = ("_view",)

    def __init__(self, view: ZipView):
        self._view = view

    def __getitem__(self, name: str) -> Entry:
        return self._view.entry(name)

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and name in self._view

    def __iter__(self) -> Iterator[str]:
        return iter(self._view.names)

    def __len__(self) -> int:
        return len(self._view.names)
