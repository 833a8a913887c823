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

The directory is kept in parallel arrays (offsets, sizes, CRCs, methods) beside the names
(``Names``): an object entry's name (``objects/<aa>/<64 hex>``, nine in ten of a bundle's) is
kept as the 32 bytes its hex spells and made again when asked for, found by an
open-addressing table of positions in an array; any other name is kept as a string; the
other fields are 4 bytes each (the central header's 32-bit fields). About 60 bytes an
object entry in all, not the ~200 of a name string in a list, a sorted copy and a dict of
them.

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
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Callable, Iterator

from ..formats.names import ENTRY_NAME_BYTES, entry_name_fold, entry_name_problem
from ._errors import UnreadableBundle, VerificationError

__all__ = ["Limits", "Entry", "ZipView", "Sizes", "Names", "object_digest"]

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
_U32 = "I" if array("I").itemsize >= 4 else "L"  # an unsigned array of 32-bit (or wider) items
_WALKED = 1 << 20  # archive bytes the directory walk spans between two calls of ``walked``
# A plain name (every part letters, digits, '-', '_' and '.', none of them '.' or '..'): one
# ``entry_name_problem`` accepts and ``entry_name_fold`` folds to its lower case (ASCII: NFKC
# leaves it as it is), checked by one regex match (every name of an honest bundle is one).
_PLAIN_NAME = re.compile(r"(?!\.\.?(?:/|\Z))[A-Za-z0-9_.\-]+(?:/(?!\.\.?(?:/|\Z))[A-Za-z0-9_.\-]+)*\Z")
# An object entry's name: ``objects/<aa>/<64 hex>``, lower case, ``aa`` the first two of the hex.
_OBJECT_NAME = re.compile(r"objects/([0-9a-f]{2})/\1[0-9a-f]{62}\Z")
_OBJECT_NAME_BYTES = re.compile(rb"objects/([0-9a-f]{2})/\1[0-9a-f]{62}\Z")


def object_digest(name) -> bytes | None:
    """The 32 bytes an object entry's name spells (``Names`` keeps it so), or None for any
    other name."""
    if type(name) is str and len(name) == 75 and _OBJECT_NAME.match(name):
        return bytes.fromhex(name[11:])
    return None


def _object_name(raw) -> str:
    hexd = raw.hex()
    return "objects/" + hexd[:2] + "/" + hexd


class Names(Sequence):
    """The entry names in archive order, read-only once the directory walk has added them.
    An object entry's name (``object_digest``) is kept as its 32 bytes and made again when
    asked for, found by an open-addressing table (an array of positions + 1, slots chosen
    by the bytes' salted ``hash``, probed linearly); any other name is a string, in a dict."""

    __slots__ = ("_n", "_raw", "_plain", "_at", "_table", "_mask")

    def __init__(self, count: int):
        """Room for ``count`` entries (the table is never resized)."""
        size = 8
        while size < 2 * count:
            size <<= 1
        # the 32 bytes of each entry's name, all made at once (grown by appending, the
        # bytearray's spare room and the copy made as it grows would add a fifth)
        self._n, self._raw, self._plain, self._at = 0, bytearray(32 * count), {}, {}
        self._table, self._mask = array("i", [0]) * size, size - 1

    def add(self, name: str, digest: bytes | None) -> int | None:
        """Append ``name`` (``digest``: its ``object_digest``); the position of an entry of
        the same name already added instead (nothing is appended)."""
        if digest is None:
            got = self._at.get(name)
            if got is not None:
                return got
            self._plain[self._n] = name
            self._at[name] = self._n
        else:
            slot = self._slot(digest)
            if self._table[slot]:
                return self._table[slot] - 1
            if self._n >= self._mask:
                raise ValueError("more names than the table was made for")
            self._table[slot] = self._n + 1
            self._raw[32 * self._n:32 * self._n + 32] = digest
        self._n += 1
        return None

    def _slot(self, digest: bytes) -> int:
        """The table slot holding the object entry ``digest`` spells, or the empty one where it
        would go."""
        table, mask, raw = self._table, self._mask, self._raw
        i = hash(digest) & mask
        while True:
            at = table[i]
            if not at or raw[32 * at - 32:32 * at] == digest:
                return i
            i = (i + 1) & mask

    def find(self, name) -> int:
        """Entry ``name``'s position, -1 when there is none."""
        digest = object_digest(name)
        if digest is None:
            return self._at.get(name, -1)
        return self._table[self._slot(digest)] - 1

    def find_digest(self, digest: bytes) -> int:
        """The position of the object entry whose name spells ``digest`` (32 bytes), -1 when
        there is none."""
        return self._table[self._slot(digest)] - 1 if len(digest) == 32 else -1

    def find_digests(self, packed: bytes) -> list[int]:
        """``find_digest`` of each 32 bytes of ``packed`` in turn (``_slot``'s probe, inline:
        step 2 looks up every digest every run references)."""
        table, mask, raw, out = self._table, self._mask, self._raw, []
        for k in range(0, len(packed) - 31, 32):
            digest = packed[k:k + 32]
            i = hash(digest) & mask
            while True:
                at = table[i]
                if not at or raw[32 * at - 32:32 * at] == digest:
                    break
                i = (i + 1) & mask
            out.append(at - 1)
        return out

    def index(self, name) -> int:
        """Entry ``name``'s position. Raises KeyError."""
        got = self.find(name)
        if got < 0:
            raise KeyError(name)
        return got

    def digest_at(self, i: int) -> bytes | None:
        """The 32 bytes the name of entry ``i`` spells when it is an object entry's, else None."""
        return None if i in self._plain else bytes(self._raw[32 * i:32 * i + 32])

    def __contains__(self, name) -> bool:
        return self.find(name) >= 0

    def __len__(self) -> int:
        return self._n

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [self[k] for k in range(*i.indices(self._n))]
        if i < 0:
            i += self._n
        if not 0 <= i < self._n:
            raise IndexError(i)
        name = self._plain.get(i)
        return _object_name(self._raw[32 * i:32 * i + 32]) if name is None else name

    def __iter__(self):
        plain, raw = self._plain.get, memoryview(self._raw)
        for i in range(self._n):
            name = plain(i)
            if name is None:
                hexd = raw[32 * i:32 * i + 32].hex()
                name = "objects/" + hexd[:2] + "/" + hexd
            yield name

    def plain(self):
        """(position, name) of every entry that is not an object entry, in archive order."""
        return iter(self._plain.items())

    def positions_under(self, prefix: str) -> array:
        """The positions of the entries whose name starts with ``prefix``, in archive order (an
        array: no list of a boxed int each, 8 MB at 20,000 runs)."""
        if prefix == "objects/":  # every object entry, no name made
            plain = self._plain
            return array("i", (i for i in range(self._n) if i not in plain or plain[i].startswith(prefix)))
        return array("i", (i for i, _ in self.under(prefix)))

    def under(self, prefix: str):
        """(position, name) of every entry whose name starts with ``prefix``, in archive order
        (an object entry's name made only when ``prefix`` could begin one)."""
        if "objects/".startswith(prefix) or prefix.startswith("objects/"):
            return ((i, n) for i, n in enumerate(self) if n.startswith(prefix))
        return ((i, n) for i, n in self._plain.items() if n.startswith(prefix))


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
        # in archive order; entry i's fields are item i of each array. Room for no more entries
        # than the directory's bytes can hold (a crafted count is refused as truncated first)
        self.names = Names(min(count, (cd_end - cd_offset) // _CENTRAL.size))
        # 4 bytes a field where it fits: sizes, CRCs and header offsets are the central
        # header's 32-bit fields (zip64 entries are refused), and a data offset is at most
        # the archive's length + the local header's two 16-bit lengths (_parse_central
        # refuses a local header past the end)
        self.methods, self.crcs = array("B"), array(_U32)
        self.csizes, self.usizes = array(_U32), array(_U32)
        self.header_offsets = array(_U32)
        self.data_offsets = array(_U32 if len(data) + (1 << 18) < 1 << 32 else "Q")
        self._parse_central(cd_offset, cd_end, count)
        self._check_tiling(cd_offset)

    @property
    def entries(self) -> Mapping[str, Entry]:
        """name -> ``Entry``, each made when asked for (made per access: no cycle to the view,
        which is freed once its last name goes, with the collector off)."""
        return _Entries(self)

    def index(self, name: str) -> int:
        """Entry ``name``'s position in archive order. Raises KeyError if there is none."""
        return self.names.index(name)

    def __contains__(self, name: str) -> bool:
        return name in self.names

    def sizes(self) -> Mapping[str, int]:
        """name -> uncompressed size, over this view's arrays but not the view (it outlives it)."""
        return Sizes(self.names, self.usizes)

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
        names, methods, crcs = self.names.add, self.methods.append, self.crcs.append
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
            name, digest = self._check_name(raw_name, flags, seen)
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
            names(name, digest)  # new: _check_name refused a name seen before
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

    def _check_name(self, raw: bytes, flags: int, seen: dict[str, str]) -> tuple[str, bytes | None]:
        """(the name, its ``object_digest``), once it is checked against the rules and the
        names before it (``seen``: every name but an object entry's, folded, to itself; the
        object entries' are ``self.names``, their own fold)."""
        if len(raw) > self.limits.name_bytes or not raw:
            raise _bad(f"an entry name is empty or longer than {self.limits.name_bytes} bytes")
        if len(raw) == 75 and _OBJECT_NAME_BYTES.match(raw):  # lower case ASCII: its own fold
            name = raw.decode("ascii")
            if name in seen:
                raise _bad(f"entry {name!r}: differs only by case or Unicode normalisation from entry {seen[name]!r}")
            digest = bytes.fromhex(name[11:])
            if self.names.find_digest(digest) >= 0:
                raise _bad(f"entry {name!r}: duplicate entry {name!r}")
            return name, digest
        try:
            name = raw.decode("utf-8")
        except UnicodeDecodeError:
            raise _bad(f"entry name {raw[:80]!r} is not UTF-8") from None
        if _PLAIN_NAME.match(name) and len(raw) <= ENTRY_NAME_BYTES:  # the checks below pass: only the fold
            return name, self._unseen(name, name.lower(), seen)
        if not name.isascii() and not flags & 0x800:
            raise _bad(f"entry {name!r}: non-ASCII name without the UTF-8 flag (ambiguous)")
        if name.endswith("/"):
            raise _bad(f"entry {name!r} is a directory entry (a bundle holds files only)")
        problem = entry_name_problem(name)  # the rules the task loader applies too
        if problem:
            raise _bad(f"entry {name!r}: {problem}")
        return name, self._unseen(name, entry_name_fold(name), seen)

    def _unseen(self, name: str, folded: str, seen: dict[str, str]) -> None:
        """Raises unless ``folded`` (``name``'s fold) is new; then notes it in ``seen``. None:
        ``name`` is not an object entry's (``_check_name`` took those)."""
        before = seen.get(folded)
        if before is None and object_digest(folded) is not None and folded in self.names:
            before = folded
        if before is not None:
            same = "duplicate" if before == name else "differs only by case or Unicode normalisation from"
            raise _bad(f"entry {name!r}: {same} entry {before!r}")
        seen[folded] = name
        return None

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




class Sizes(Mapping):
    """name -> uncompressed size (the index's ``sizes``): the ``Names`` and one array, not a
    dict of boxed ints (~70 bytes an entry, held through every step)."""

    __slots__ = ("_names", "_sizes")

    def __init__(self, names: Names, sizes: array):
        self._names, self._sizes = names, sizes

    def __getitem__(self, name: str) -> int:
        return self._sizes[self._names.index(name)]

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and self._names.find(name) >= 0

    def __iter__(self) -> Iterator[str]:
        return iter(self._names)

    def __len__(self) -> int:
        return len(self._names)

    def values(self):
        return iter(self._sizes)

    def by_position(self) -> memoryview:
        """The sizes by the entry's position in the zip (``Names``), read-only."""
        return memoryview(self._sizes).toreadonly()


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
