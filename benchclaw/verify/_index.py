"""What the reading stage (``_reading``) found in a bundle: a typed, read-only index.

Every entry has been inflated and hashed once by then; the steps read only this index (and
hand each other what they accepted: step 2 the runs, step 4 the calls' costs), never the
zip. What the index keeps of an entry is what some step reads of it, and no more:

- every entry: its size and SHA-256, or the error that kept it from being read;
- a run log (spilled with its first record, ``RunLogs``): where its bytes lie in the zip (read again, and checked against the BLAKE2b
  taken when they were hashed, when a step asks), its first and last record, the digests
  its records reference, or the error its parse stopped at (``RunLog``). Its records are
  parsed again from those bytes when a step asks (``RunLog.records``), never all held at
  once: at 20,000 runs they would be a gigabyte;
- an object: its digest; a request's or raw usage blob's reading (``_costs.derive``); a
  reply's text (each kept ``marshal``led and spilled, ``SpilledAt``, an ``ObjectReading`` again when a step asks); the bytes of the few objects read whole (catalogs, specs, task listings),
  and of one no reading could be taken of (the step that needs it reports why). Requests,
  observations, written contents and artifacts are not kept: the steps compare what they
  recompute with the object's digest;
- a ledger: where its bytes lie in the zip, as a run log's, its first and last record, or its chain
  error (``LedgerLog``): it reads as its records, parsed again as they are iterated;
- each experiment's journal, its records as ``Rec``;
- every other entry (tasks, summary, spec) but the site pages (read by no step) and the
  journals parsed into the index: its bytes;
- each run log's per-run facts (``RunFacts``): what steps 3, 4 and 6 conclude about that
  run alone, taken by the reading stage with the records parsed once (on two cores), so
  that those steps parse no record of an honest run. A fact is only ever "this run holds,
  and here is what the step counts and hands on"; a run without one (it failed, or could
  not be taken) is read by the step itself, which reports it as it always did;
- each ledger's facts (``LedgerFacts``, spilled): step 5's replay and step 6's reserved
  keys, taken by the reading stage on the ledger alone, each only when it held.

Nothing here changes once ``_reading.reading`` yields it: the mappings are read-only.
"""

from __future__ import annotations

import hashlib
import io
import marshal
import os
import pickle
import sys
import tempfile
import zlib
from array import array
from itertools import starmap
from operator import itemgetter
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Callable, Mapping, NamedTuple, Sequence

from ..formats import jsonio
from ._errors import UnreadableBundle, VerificationError
from ._zip import Limits, object_digest
from .manifest import FileEntry, Manifest, object_path

__all__ = ["Index", "Archive", "Span", "Digests", "Journal", "NAMED", "RunLog", "LedgerLog", "ManifestRows", "Run", "ObjectReading", "Rec", "frozen", "kept",
           "ENVELOPE", "line_chunks", "RunFacts", "unkept", "holds_bytes", "packed_rec", "recent_slot",
           "packed_facts", "taken_facts", "LedgerFacts", "Spill", "Spilled", "SpilledAt", "RunLogs", "SEALED", "seal", "held_records", "packed_log"]


def frozen(d: dict) -> Mapping:
    """A read-only view of ``d`` (the reading stage hands over and forgets the dict)."""
    return MappingProxyType(d)


class Rec(NamedTuple):
    """A chained record of a run log or ledger once its chain is checked: what the steps and
    the analysis read of a ``records.Record`` (its line bytes and link to the one before
    are read by nothing after the check), in a fifth of the memory."""

    seq: int
    at: str
    kind: str
    body: dict


class Archive:
    """The bundle's bytes, read again where the index keeps only where an entry lies
    (``Span``): ``read_at(offset, length)`` (a ``pread`` of the file, which maps nothing
    into the process, or a slice of bytes given in memory)."""

    __slots__ = ("_read_at",)

    def __init__(self, read_at: Callable[[int, int], bytes]):
        self._read_at = read_at

    def span(self, offset: int, raw: bytes) -> "Span":
        """Where ``raw``, the bytes the reading stage inflated and hashed, lie."""
        return Span(self, offset, len(raw), _seal(raw))

    def read(self, span: "Span") -> bytes:
        """The span's bytes, exactly those the reading stage had (else UnreadableBundle:
        the file changed under the verifier, and what it hashed is no longer what it reads)."""
        data = self._read_at(span.offset, span.length)
        if len(data) != span.length or _seal(data) != span.seal:
            raise _changed()
        return data

    def pieces(self, span: "Span"):
        """The span's bytes a ``_PIECE`` at a time, each checked against its own seal
        before it is handed on (as ``read``, without holding them all: a grid's ledger
        is tens of megabytes deflated)."""
        for k, at in enumerate(range(0, span.length, _PIECE)):
            n = min(_PIECE, span.length - at)
            data = self._read_at(span.offset + at, n)
            if len(data) != n or _seal(data) != span.seal[16 * k:16 * k + 16]:
                raise _changed()
            yield data


_PIECE = 1 << 20  # bytes of a span sealed apart (a step reads a long one again a piece at a time)
SEALED = _PIECE  # (a ``Span``'s seal is the ``seal`` of each piece of this many bytes, one after another)


def seal(raw: bytes) -> bytes:
    """``Span.seal`` of ``raw``: one 16-byte BLAKE2b a ``SEALED`` bytes (``Archive.span``)."""
    return _seal(raw)


def _seal(raw: bytes) -> bytes:
    """A 16-byte BLAKE2b of each ``_PIECE`` of ``raw``, one after another."""
    view = memoryview(raw)
    return b"".join(hashlib.blake2b(view[at:at + _PIECE], digest_size=16).digest()
                    for at in range(0, len(view), _PIECE))


def _changed() -> UnreadableBundle:
    return UnreadableBundle("", "the bundle file changed while it was being verified")


class Span(NamedTuple):
    """An entry's bytes as the zip holds them (deflated, unless stored): where they lie and
    their BLAKE2b, 16 bytes a megabyte (``_seal``), so a step parses exactly what the
    reading stage hashed."""

    archive: Archive
    offset: int
    length: int
    seal: bytes

    def read(self) -> bytes:
        return self.archive.read(self)


@dataclass(frozen=True, slots=True)
class RunLog:
    """A run log as read, in a few hundred bytes: ``packed``, where its bytes lie in the zip
    (deflated; ``stored``: as they are); ``count`` records, the ``first`` and ``last`` (every step
    reads them; the last kept ``ended``, marshalled); the first record whose body is ill-typed (its line and error, or 0 and
    None); the digests each record before it references, as raw 32-byte SHA-256 values
    one after another in ``refs``, record i's ending at ``ref_ends[i]``; ``fault``: a first
    record that is not ``run.start`` or a last that is not ``run.end``. A log whose chain
    is broken is its ``VerificationError`` instead. The last three are what steps 2 and 7
    read of every record, taken while the reading stage held them, so that those steps
    parse no record of an honest run (a step reads the records when they say no)."""

    packed: Span
    stored: bool
    count: int
    first: Rec | None
    ended: bytes | None  # the last record, ``packed_rec``: its values are the run's own, unshared
    bad_line: int
    bad: VerificationError | None
    refs: bytes
    ref_ends: array
    fault: VerificationError | None = None
    known_kinds: bool = False            # every record before ``bad_line`` of a kind ``_shape.RUN`` knows
    times_ok: bool = False               # ``_journal.times_in_order`` of the records
    call_params: tuple | None = None     # ``_journal.call_params`` of its calls (None: not taken)

    @property
    def last(self) -> Rec | None:
        return None if self.ended is None else Rec(*marshal.loads(self.ended))

    def records(self) -> tuple[Rec, ...]:
        """The records, parsed afresh from ``packed`` (nothing is kept: the caller holds
        them as long as it reads them). The bytes, chain and envelopes were checked by
        the reading stage, so this parse cannot fail."""
        raw = self.packed.read()
        data = raw if self.stored else zlib.decompress(raw, -15)
        # one JSON array, not a parse a line: each line parsed alone as a JSON object, and a
        # raw newline cannot occur inside one, so the newlines are exactly the separators
        # (each record made by C-level map/starmap, not a Python call a record: half the time)
        return tuple(starmap(Rec, map(ENVELOPE, jsonio.loads(b"[" + data[:-1].replace(b"\n", b",") + b"]"))))

    def refs_of(self, line: int) -> bytes:
        """The raw digests record ``line`` (1-based, before ``bad_line``) references."""
        return self.refs[self.ref_ends[line - 2] if line > 1 else 0:self.ref_ends[line - 1]]


ENVELOPE = itemgetter("seq", "at", "kind", "body")  # a parsed record's ``Rec`` fields, in order


def packed_rec(rec: Rec | None) -> bytes | None:
    """A record as ``RunLog.ended`` keeps it: ``marshal``led, a third of the memory of its
    dicts (its values are this stage's parse of JSON: marshal keeps 1, 1.0 and true apart)."""
    return None if rec is None else marshal.dumps(tuple(rec))


_CHUNK = 1 << 18  # inflated bytes parsed at a time when a ledger is streamed (parsed, a dozen times that)


@dataclass(frozen=True, slots=True)
class LedgerLog:
    """A ledger as read: where its bytes lie in the zip (deflated; ``stored``: as they are),
    its ``count`` records and the ``first`` and ``last``. It reads as the tuple of its records
    (``len``, iteration, ``[0]`` and ``[-1]``) without holding them: each iteration parses
    the bytes again, a megabyte at a time. A grid's ledger has two records a call, 60 MB
    at 20,000 runs, four times that parsed; the steps that read it fold it in one pass."""

    packed: Span
    stored: bool
    count: int
    first: Rec | None
    last: Rec | None
    earliest: str | None = None  # the least ``at`` of its records (None: not taken, or none)

    def __len__(self) -> int:
        return self.count

    def __iter__(self):
        for chunk in line_chunks(self.packed.archive.pieces(self.packed), self.stored):
            yield from starmap(Rec, map(ENVELOPE, jsonio.loads(b"[" + chunk[:-1].replace(b"\n", b",") + b"]")))

    def __getitem__(self, i: int) -> Rec:
        """Record ``i``: the first and last at once, any other by streaming up to it."""
        j = i + self.count if i < 0 else i
        if not 0 <= j < self.count:
            raise IndexError(i)
        if j in (0, self.count - 1):
            return self.first if j == 0 else self.last
        return next(r for k, r in enumerate(self) if k == j)


def line_chunks(packed, stored: bool):
    """The inflated bytes in runs of whole lines, about ``_CHUNK`` each (the bytes end
    with a newline: the reading stage refused a torn last line). ``packed``: the bytes
    as the zip holds them, or an iterable of pieces of them."""
    pieces = (packed,) if isinstance(packed, (bytes, bytearray, memoryview)) else packed
    d, tail = (None if stored else zlib.decompressobj(-15)), b""
    step = _CHUNK if stored else _CHUNK // 4
    for piece in pieces:
        view = memoryview(piece)
        for at in range(0, len(view), step):
            buf = tail + (view[at:at + step] if d is None else d.decompress(view[at:at + step]))
            cut = buf.rfind(b"\n") + 1
            if cut:
                yield buf[:cut]
            tail = buf[cut:]
    rest = tail if d is None else tail + d.flush()
    if rest:
        yield rest


class ObjectReading(NamedTuple):
    """What the steps read of an object besides its digest. ``derived``: ``_costs.derive``'s
    reading of a request or raw usage blob (None when it could not take one); ``text``: a
    reply's text; ``data``: the bytes, for an object read whole. (A tuple: made again on
    every read of one, a few hundred thousand times in a grid's steps.)"""

    derived: tuple | None = None
    text: str | None = None
    data: bytes | None = None


NAMED = object()  # in ``Digests``' dict: the entry's bytes hash to the 64 hex its name ends with
_OBJECTS = "objects/"


class Digests(Mapping):
    """entry -> ``sha256:<hex>`` of its bytes, read-only. An object whose bytes hash to its
    name (``objects/<aa>/<hex>``: all of them in an honest bundle) is not in the dict at all
    (or holds ``NAMED``): the reading stage reads every object entry, and one it could not
    read is in ``unread``, so an object entry of the zip (``sizes``) in neither is one
    whose name already says its digest. 200,000 digest strings are 25 MB, and a dict entry
    for each of them, with its table, ten more at 20,000 runs."""

    __slots__ = ("_d", "_sizes", "_unread")

    def __init__(self, d: dict, sizes: Mapping[str, int] = MappingProxyType({}),
                 unread: Mapping = MappingProxyType({})):
        self._d, self._sizes, self._unread = d, sizes, unread

    def _named(self, name) -> bool:
        return type(name) is str and name.startswith(_OBJECTS) and name in self._sizes and name not in self._unread

    def __getitem__(self, name: str) -> str:
        got = self._d.get(name)
        if got is None:
            if not self._named(name):
                raise KeyError(name)
            got = NAMED
        return "sha256:" + name[11:] if got is NAMED else got

    def get(self, name: str, default=None):
        got = self._d.get(name)
        if got is None:
            if not self._named(name):
                return default
            got = NAMED
        return "sha256:" + name[11:] if got is NAMED else got

    def __contains__(self, name) -> bool:
        return name in self._d or self._named(name)

    def __iter__(self):
        """The entries of the dict, then the named objects in archive order."""
        yield from self._d
        d, unread = self._d, self._unread
        for name in self._sizes:
            if name.startswith(_OBJECTS) and name not in d and name not in unread:
                yield name

    def __len__(self) -> int:
        return sum(1 for _ in self)

    def hashed_to_names(self, names) -> "HashedToNames":
        """The object entries whose bytes hash to the 32 bytes their name spells, as a
        container of those raw digests over ``names`` (``_zip.Names``): no set of them."""
        odd = {names.find(n) for n in self._d if self.get(n) != "sha256:" + n[11:]}
        odd.update(names.find(n) for n in self._unread)
        return HashedToNames(names, odd)


class HashedToNames:
    """``Digests.hashed_to_names``: ``raw in it`` for a 32-byte digest, by the zip's table of
    names (``_zip.Names.find_digest``) and the few object entries that are not so."""

    __slots__ = ("_names", "_odd")

    def __init__(self, names, odd: set):
        self._names, self._odd = names, odd

    def __contains__(self, raw) -> bool:
        at = self._names.find_digest(raw) if type(raw) is bytes else -1
        return at >= 0 and at not in self._odd

    def at(self, i: int) -> bool:
        """Whether entry ``i`` (a position) is an object entry whose bytes hash to its name."""
        return i not in self._odd and self._names.digest_at(i) is not None

    def holds_all(self, packed: bytes) -> bool:
        """Whether each 32 bytes of ``packed`` (a run's ``refs``) are ``in`` this."""
        if len(packed) % 32:
            return False
        found = self._names.find_digests(packed)
        return not found or (min(found) >= 0 and self._odd.isdisjoint(found))

    def odd(self) -> list[int]:
        """The positions of the entries read or unread that are not object entries whose
        bytes hash to their name, in archive order."""
        return sorted(i for i in self._odd if i >= 0)


class ManifestRows:
    """The manifest's rows as the index keeps them: each path as the position of the zip
    entry of that name (``Names``; -1 and the path itself for one the zip lacks), each
    SHA-256 as nothing when it is the one an object entry's path spells (nine rows in ten)
    and as its raw 32 bytes otherwise, the sizes in an array; a ``FileEntry`` again as each
    is read. A quarter million rows would be a hundred megabytes of objects."""

    __slots__ = ("_names", "_at", "_paths", "_slots", "_digests", "_sizes")

    def __init__(self, names: Sequence[str]):
        """No rows yet (``add`` them); ``names``: the zip's (``Names``)."""
        self._names, self._at, self._paths = names, array("i"), {}
        self._slots, self._digests, self._sizes = array("i"), bytearray(), array("Q")

    def add(self, path: str, digest: bytes, size: int, named: bool = False, hint: int = -1) -> int:
        """A row: ``digest`` its raw SHA-256; ``named``: the caller saw that ``path`` is the
        object entry name that spells it (else this checks); ``hint``: where the entry of
        that name is likely to be (a manifest lists the entries in the zip's order). Returns
        the entry's position (-1: none). Raises OverflowError for a size past 64 bits."""
        self._sizes.append(size)
        said = digest if named else object_digest(path)
        if said is None:
            at = self._names.find(path)
        elif hint >= 0 and self._names.digest_at(hint) == said:
            at = hint
        else:
            at = self._names.find_digest(said)
        if at < 0:
            self._paths[len(self._at)] = path
        self._at.append(at)
        if said == digest:
            self._slots.append(-1)
        else:
            self._slots.append(len(self._digests) // 32)
            self._digests += digest
        return at

    @classmethod
    def of(cls, rows, names: Sequence[str]) -> "ManifestRows":
        """``rows`` (``FileEntry``) kept so. Raises OverflowError for a size past 64 bits
        (the caller keeps the rows as they are: step 1 reports it)."""
        out = cls(names)
        for r in rows:
            out.add(r.path, bytes.fromhex(r.digest[7:]), r.size)
        return out

    def by_position(self):
        """(the position of the entry of the row's path, -1 when the zip has none; the row's
        size; its SHA-256 as ``sha256:<hex>``, or None where it is the one the path spells:
        the entry at that position is then the object entry of that name) of each row, in
        order, no path made (step 1 compares them with the entries by position)."""
        digests = self._digests
        for at, size, slot in zip(self._at, self._sizes, self._slots):
            yield at, size, None if slot < 0 else "sha256:" + digests[32 * slot:32 * slot + 32].hex()

    def __len__(self) -> int:
        return len(self._at)

    def __getitem__(self, i: int) -> FileEntry:
        i = range(len(self._at))[i]  # negative indexes and IndexError as a tuple's
        at, slot = self._at[i], self._slots[i]
        path = self._names[at] if at >= 0 else self._paths[i]
        hexd = path[11:] if slot < 0 else self._digests[32 * slot:32 * slot + 32].hex()
        return FileEntry(path, "sha256:" + hexd, self._sizes[i])

    def __iter__(self):
        return map(self.__getitem__, range(len(self._at)))


def recent_slot() -> list:
    """What ``Run``s share of the run read last: [its bundle path, its log (None until
    read), its records (None until parsed), its records by kind, the log whose ``run.end``
    body is held, that body, its first record when read alone, and the rest of its log as
    read with it (``RunLogs.first_and_rest``: made a ``RunLog`` without reading it again)]."""
    return [None, None, None, {}, None, None, None, None]


@dataclass(frozen=True)
class Run:
    """A run that step 2 accepted: its id, bundle path, and the index's run logs (``logs``,
    its own read from them when asked for: they are spilled, ``RunLogs``). Its log and
    records are read on first use and kept in ``_recent``, a slot the index shares between
    all its runs: the steps read runs one at a time, so at most one run's log and records
    are held, however many runs the bundle has (reading another run's replaces them). Its
    ``run.end`` body, unmarshalled on first use, and its first record read alone, are kept
    there the same way (``recent_slot``)."""

    run_id: str
    path: str
    logs: Mapping = field(repr=False, compare=False)
    _recent: list = field(default_factory=lambda: recent_slot(), repr=False, compare=False)

    @property
    def log(self) -> RunLog:
        slot = self._recent
        if slot[0] != self.path:
            slot[:] = recent_slot()  # the old run's log and records go first
            slot[:2] = [self.path, self.logs[self.path]]
        elif slot[1] is None:  # its first record was read alone: not made again, nor read
            slot[1] = self.logs.with_first(self.path, slot[6], slot[7])
            slot[7] = None
        return slot[1]

    @property
    def records(self) -> tuple[Rec, ...]:
        log, slot = self.log, self._recent
        if slot[2] is None:
            slot[2] = log.records()
        return slot[2]

    @property
    def first(self) -> Rec:
        """``run.start``, without reading the rest of the log from the spill (``RunLogs``
        holds every log's first record: steps 7 and 8 read little else of most runs)."""
        slot = self._recent
        if slot[0] == self.path:
            return slot[1].first if slot[1] is not None else slot[6]
        first_and_rest = getattr(self.logs, "first_and_rest", None)
        if first_and_rest is None:
            return self.log.first
        slot[:] = recent_slot()  # the old run's log and records go first
        slot[0] = self.path
        slot[6], slot[7] = first_and_rest(self.path)
        return slot[6]

    @property
    def start(self) -> dict:
        return self.first.body

    @property
    def end(self) -> dict:
        slot = self._recent
        log = self.log
        if slot[4] is not log:
            slot[5] = log.last.body
            slot[4] = log
        return slot[5]

    @property
    def started_at(self) -> str:
        """``run.start``'s ``at``, without parsing the records."""
        return self.first.at

    @property
    def count(self) -> int:
        """How many records the run has (the last one's line), without parsing them."""
        return self.log.count

    @property
    def policy(self) -> dict:
        """``run.start.policy`` ({} when null); its field types were checked in step 2."""
        return self.start.get("policy") or {}

    def of_kind(self, kind: str) -> list[tuple[int, Rec]]:
        """(1-based line, record) of every record of ``kind`` (grouped on first use)."""
        records = self.records
        kinds = self._recent[3]
        if not kinds:
            for i, r in enumerate(records, 1):
                kinds.setdefault(r.kind, []).append((i, r))
        return kinds.get(kind, [])


class RunFacts:
    """What steps 3, 4 and 6 concluded about one run on their own (each None when not
    taken: the step reads the run itself). ``checks``: step 3 holds, with this many check
    results; ``costs``: step 4 holds, its confirmed calls as ``_costs.RunCalls.row``;
    ``condensed``: step 6's ``analysis.fold.condensed_to_packed`` of the run. Each is kept
    marshalled on its own (``packed_facts``) and unmarshalled when its step reads it: a
    step reads its own fact only, of every run."""

    __slots__ = ("_parts",)

    def __init__(self, parts: tuple = (None, None, None)):
        self._parts = parts

    @property
    def checks(self) -> int | None:
        return _unpacked(self._parts[0])

    @property
    def costs(self) -> tuple | None:
        return _unpacked(self._parts[1])

    @property
    def condensed(self) -> tuple | None:
        return _unpacked(self._parts[2])


class LedgerFacts:
    """What steps 5 and 6 concluded about one ledger on its own, taken by the reading stage
    as it streamed the ledger (each None when not taken: the step reads the ledger itself).
    ``replay``: step 5's replay (``_ledgers.LedgerReplay``), every record of it held;
    ``reserved``: ``analysis.fold.ReservedKeys.result`` of its records. Each lies ``pickle``d
    on its own in a ``Spill`` (its values are this stage's own objects, made from the parsed
    records: no bundle bytes are unpickled), written and read back a piece at a time, and
    is unpickled when its step reads it: step 6 reads a few hundred kilobytes, not step 5's
    replay, and neither holds the pickle whole beside what it makes of it."""

    __slots__ = ("_spill", "_at")

    def __init__(self, spill: "Spill | None" = None, at: tuple = (None, None)):
        self._spill, self._at = spill, at  # each part's (offset, length) in the spill, or None

    @classmethod
    def put(cls, spill: "Spill", replay, reserved) -> "LedgerFacts":
        """The facts (each None when not taken), pickled into ``spill``. Raises what
        ``pickle.dump`` raises for a value it does not take."""
        return cls(spill, tuple(None if f is None else _pickled_into(spill, f) for f in (replay, reserved)))

    @property
    def replay(self):
        return self._part(0)

    @property
    def reserved(self):
        return self._part(1)

    def _part(self, i: int):
        at = self._at[i]
        if at is None:
            return None
        return pickle.load(io.BufferedReader(_SpillReader(self._spill, *at), 1 << 16))


def _pickled_into(spill: "Spill", value) -> tuple[int, int]:
    """(offset, length) of ``value`` pickled into ``spill``, written as pickle writes it."""
    out = _SpillWriter(spill)
    pickle.dump(value, out, protocol=pickle.HIGHEST_PROTOCOL)
    return out.at, out.length


class _SpillWriter:
    """A file ``pickle.dump`` writes into a ``Spill``: its writes lie one after another."""

    def __init__(self, spill: "Spill"):
        self._spill, self.at, self.length = spill, None, 0

    def write(self, data) -> int:
        n = len(data)
        if n:
            at = self._spill.put(data)
            if self.at is None:
                self.at = at
            elif at != self.at + self.length:  # another writer between two writes
                raise ValueError("the spill was written in between")
            self.length += n
        return n


class _SpillReader(io.RawIOBase):
    """``length`` bytes of a ``Spill`` from ``at``, as a raw file (``pread``, a piece at a time)."""

    def __init__(self, spill: "Spill", at: int, length: int):
        self._spill, self._pos, self._end = spill, at, at + length

    def readable(self) -> bool:
        return True

    def readinto(self, buf) -> int:
        n = min(len(buf), self._end - self._pos)
        if n <= 0:
            return 0
        buf[:n] = self._spill.get(self._pos, n)
        self._pos += n
        return n


_NO_LEDGER_FACTS = LedgerFacts()


def _unpacked(part: bytes | None):
    return None if part is None else marshal.loads(part)


def packed_facts(facts: list) -> bytes:
    """A run's facts [step 3's, step 4's, step 6's] (each None when not taken) as the index
    keeps them: each marshalled alone, the three together (``RunFacts``). Raises
    ValueError for a value marshal does not take."""
    return marshal.dumps(tuple(None if f is None else marshal.dumps(f) for f in facts))


def taken_facts(packed: bytes) -> tuple[bool, bool, bool]:
    """Which of a run's facts ``packed_facts`` holds (steps 3, 4, 6), none unmarshalled."""
    return tuple(part is not None for part in marshal.loads(packed))


_NO_FACTS = RunFacts()


class Spill:
    """Bytes the index keeps out of this process's memory: appended to an unlinked
    temporary file (gone when closed, or when the process ends) and read back with
    ``pread``. Per-run values a step reads once each (its facts) cost no resident memory
    this way, where held they grow with the runs."""

    def __init__(self):
        self._file = tempfile.TemporaryFile()
        self._fd, self._end = self._file.fileno(), 0

    def put(self, data: bytes) -> int:
        """Where ``data`` now lies (read it with ``get(at, len(data))``)."""
        at, view = self._end, memoryview(data)
        while view:
            view = view[os.pwrite(self._fd, view, self._end):]
            self._end = at + len(data) - len(view)
        return at

    def get(self, at: int, n: int) -> bytes:
        data = os.pread(self._fd, n, at)
        if len(data) != n:
            raise UnreadableBundle("", "the verifier's temporary file was truncated")
        return data

    def reader(self, at: int, n: int):
        """The ``n`` bytes from ``at`` as a file, read a piece at a time (``pread``)."""
        return io.BufferedReader(_SpillReader(self, at, n), 1 << 16)

    def close(self) -> None:
        self._file.close()


class Spilled(Mapping):
    """name -> bytes, the bytes in a ``Spill`` (each read again when asked for); the names
    in a dict to where their bytes lie. Read-only once the reading stage has filled it."""

    __slots__ = ("_spill", "_at")

    def __init__(self, spill: Spill):
        self._spill, self._at = spill, {}

    def put(self, name: str, data: bytes) -> None:
        self._at[name] = self._spill.put(data) << 32 | len(data)

    def __getitem__(self, name: str) -> bytes:
        at = self._at[name]
        return self._spill.get(at >> 32, at & 0xFFFFFFFF)

    def __contains__(self, name) -> bool:
        return name in self._at

    def __iter__(self):
        return iter(self._at)

    def __len__(self) -> int:
        return len(self._at)


class SpilledAt(Mapping):
    """name -> bytes, the bytes in a ``Spill`` (each read again when asked for); where they
    lie in an array by the entry's position in the zip (``Names``): eight bytes an entry,
    not a dict slot and a name string. Read-only once the reading stage has filled it."""

    __slots__ = ("_spill", "_names", "_at")

    def __init__(self, spill: Spill, names: Sequence[str]):
        self._spill, self._names, self._at = spill, names, array("Q", bytes(8 * len(names)))

    def put_at(self, i: int, data: bytes) -> None:
        """The bytes of entry ``i`` (its position in the zip)."""
        self._at[i] = (self._spill.put(data) << 32 | len(data)) + 1

    def __getitem__(self, name: str) -> bytes:
        at = self._at[self._names.index(name)] - 1
        if at < 0:
            raise KeyError(name)
        return self._spill.get(at >> 32, at & 0xFFFFFFFF)

    def of_digest(self, raw: bytes) -> bytes | None:
        """``get`` of the object entry whose name spells ``raw`` (32 bytes), its name not made."""
        i = self._names.find_digest(raw)
        at = self._at[i] - 1 if i >= 0 else -1
        return None if at < 0 else self._spill.get(at >> 32, at & 0xFFFFFFFF)

    def __contains__(self, name) -> bool:
        i = self._names.find(name) if type(name) is str else -1
        return i >= 0 and self._at[i] != 0

    def __iter__(self):
        names = self._names
        return (names[i] for i, at in enumerate(self._at) if at)

    def __len__(self) -> int:
        return len(self._at) - self._at.count(0)


class Journal(Sequence):
    """An experiment's journal as read: its (entry, line, ``Rec``) in reader order,
    read-only. The records of kind ``run`` (one a run, twenty fields each: a kilobyte and a
    half as objects) lie in a ``Spill``, marshalled, and are made again each time they are
    read, so two readings of one are equal but not the same object; every other record (a
    handful: the registrations, grid starts and ends, corrections...) is held as it is, read
    as the same object each time. A record with a value ``marshal`` does not take is held."""

    __slots__ = ("_spill", "_held", "_at")

    def __init__(self, spill: Spill, items):
        """``items``: (entry, line, ``Rec``) in reader order, or what ``spilled`` made of one."""
        self._spill, self._held, self._at = spill, {}, array("Q")
        for i, item in enumerate(items):
            at = item if type(item) is int else self.spilled(spill, item)
            if at is None:
                self._held[i] = item
                self._at.append(0)
            else:
                self._at.append(at)

    @staticmethod
    def spilled(spill: Spill, item) -> int | None:
        """Where a ``run`` record's (entry, line, ``Rec``) now lies in ``spill`` (None: any
        other record, or one with a value ``marshal`` does not take, held as it is)."""
        name, line, rec = item
        if rec.kind != "run":
            return None
        try:
            data = marshal.dumps((name, line, rec.seq, rec.at, _interned(rec.kind), _keys_interned(rec.body)))
        except (ValueError, TypeError):
            return None
        return spill.put(data) << 32 | len(data)

    def __len__(self) -> int:
        return len(self._at)

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [self[k] for k in range(*i.indices(len(self)))]
        at = self._at[i]  # IndexError as a list's
        if at == 0:
            return self._held[i % len(self._at)]
        name, line, *rec = marshal.loads(self._spill.get(at >> 32, at & 0xFFFFFFFF))
        return name, line, Rec(*rec)

    def __iter__(self):
        for i in range(len(self._at)):
            yield self[i]

    def held(self) -> list:
        """The records held, in journal order: every one but the spilled ``run`` records.
        A step looking for records of another kind reads these, and no ``run`` record."""
        return list(self._held.values())


def held_records(journal) -> Sequence:
    """Every record of ``journal`` a step looking for a kind other than ``run`` needs: a
    ``Journal``'s held ones (its ``run`` records are not made again), else all of them."""
    return journal.held() if isinstance(journal, Journal) else journal


def _keys_interned(value, depth: int = 0):
    """``value`` with its dicts' keys (two levels down) interned, so that ``marshal`` writes
    them so and each record read back shares them (twenty keys a run record: a kilobyte)."""
    if type(value) is not dict or depth > 1:
        return value
    return {_interned(k): _keys_interned(v, depth + 1) for k, v in value.items()}


def _interned(s):
    return sys.intern(s) if type(s) is str else s


_VALUES = 1024  # first-record values ``RunLogs`` reads as one object (the first ones met twice)
_ONCE = 4096    # hashes of values met once ``RunLogs`` remembers (forgotten all together when full)


class RunLogs(Mapping):
    """runs/... entry -> its ``RunLog`` (or the error its parse stopped at), read-only once
    the reading stage has filled it. A log, its first record with it, a couple of kilobytes,
    lies in a ``Spill`` and is made a ``RunLog`` again each time it is asked for (its first
    record alone by ``first_of``: no step holds every run's). A log whose first record
    ``marshal`` does not take holds that record; one with another value marshal does not
    take (an exception other than a ``VerificationError``) is held as it is."""

    __slots__ = ("_spill", "_archive", "_at", "_values", "_once")

    def __init__(self, spill: Spill, archive: Archive):
        self._spill, self._archive, self._at = spill, archive, {}
        self._values: dict[bytes, object] = {}  # a first record's body value, by its marshal bytes
        # (version 2: no references nor interning flags, which depend on the objects' sharing,
        # so that equal values are equal bytes)
        self._once: set[int] = set()  # the hashes of those bytes met once (a run's policy is its own)

    def put(self, name: str, log) -> None:
        data = packed_log(log) if isinstance(log, RunLog) else None
        if data is None:
            self._at[name] = log
            return
        self.put_packed(name, log.first, data)

    def put_packed(self, name: str, first: Rec | None, data: bytes) -> None:
        """A ``RunLog`` given as its first record and ``packed_log``'s bytes of it."""
        try:
            packed = None if first is None else \
                (first.seq, first.at, first.kind, tuple((k, marshal.dumps(v, 2)) for k, v in first.body.items()))
            both = marshal.dumps((packed, data))
        except ValueError:
            self._at[name] = (first, self._spill.put(data) << 32 | len(data))
            return
        self._at[name] = self._spill.put(both) << 32 | len(both)

    def _spilled(self, at: int) -> tuple[Rec | None, bytes]:
        """(the first record, ``packed_log``'s bytes) ``put_packed`` spilled at ``at``."""
        first, data = marshal.loads(self._spill.get(at >> 32, at & 0xFFFFFFFF))
        return self._first(first), data

    def _first(self, packed: tuple | None) -> Rec | None:
        """A first record as ``put_packed`` spilled it, its body's values read as the same
        objects each time they are equal (the catalog, task, prices... every ``run.start``
        repeats: a step may key what it recomputes by them; ``_VALUES`` of them at most, each
        kept from the second time it is met, so that values no other run has, such as its
        policy, do not take the room of those every run shares)."""
        if packed is None:
            return None
        seq, at, kind, items = packed
        values, once, body = self._values, self._once, {}
        for key, raw in items:
            value = values.get(raw)
            if value is None:
                value = marshal.loads(raw)
                if len(values) < _VALUES:
                    h = hash(raw)
                    if h in once:
                        values[raw] = value
                    elif len(once) < _ONCE:
                        once.add(h)
                    else:
                        once.clear()
            body[key] = value
        return Rec(seq, at, kind, body)

    def is_log(self, name: str) -> bool:
        """Whether ``name`` holds a ``RunLog`` (not the error its parse stopped at), told
        without making it again."""
        got = self._at[name]
        return type(got) is int or type(got) is tuple or isinstance(got, RunLog)

    def first_of(self, name: str) -> Rec | None:
        """Log ``name``'s first record, the rest of it left in the spill (None for an error)."""
        return self.first_and_rest(name)[0]

    def first_and_rest(self, name: str) -> tuple[Rec | None, bytes | None]:
        """(``first_of(name)``, the rest of the log as ``with_first`` takes it: the bytes
        read with the first record, not yet unmarshalled; None when there are none)."""
        got = self._at[name]
        if type(got) is int:
            return self._spilled(got)
        if type(got) is tuple:
            return got[0], None
        return (got.first if isinstance(got, RunLog) else None), None

    def with_first(self, name: str, first: Rec | None, rest: bytes | None = None) -> "RunLog | VerificationError":
        """``self[name]``, given its first record as ``first_of`` read it (not made again),
        and ``rest`` as ``first_and_rest`` read it (None: read again)."""
        got = self._at[name]
        if type(got) is not int:
            return self[name]
        if rest is None:
            rest = marshal.loads(self._spill.get(got >> 32, got & 0xFFFFFFFF))[1]
        return _log_of(first, marshal.loads(rest), self._archive)

    def ordered(self, names) -> "RunLogs":
        """This mapping iterating in the order of ``names`` (the archive's)."""
        at = self._at
        self._at = {n: at[n] for n in names if n in at}
        return self

    def __getitem__(self, name: str):
        got = self._at[name]
        if type(got) is int:
            first, data = self._spilled(got)
            return _log_of(first, marshal.loads(data), self._archive)
        if type(got) is not tuple:
            return got
        first, at = got
        return _log_of(first, marshal.loads(self._spill.get(at >> 32, at & 0xFFFFFFFF)), self._archive)

    def __contains__(self, name) -> bool:
        return name in self._at

    def __iter__(self):
        return iter(self._at)

    def __len__(self) -> int:
        return len(self._at)


def packed_log(log: RunLog) -> bytes | None:
    """A ``RunLog`` but its first record as ``RunLogs`` keeps it (``marshal``led), or None
    for one with a value marshal does not take (it is held as it is)."""
    try:
        return marshal.dumps(_log_fields(log))
    except (ValueError, TypeError):
        return None


def _log_fields(log: RunLog) -> tuple:
    """A ``RunLog`` but its first record, as ``marshal`` takes it. Raises TypeError for an
    error that is not a plain ``VerificationError`` (kept as it is)."""
    p = log.packed
    return (p.offset, p.length, p.seal, log.stored, log.count, log.ended, log.bad_line, _error_fields(log.bad),
            log.refs, log.ref_ends.tobytes(), _error_fields(log.fault), log.known_kinds, log.times_ok,
            None if log.call_params is None else tuple((line, values, _error_fields(e)) for line, values, e in log.call_params))


def _error_fields(e) -> tuple | None:
    if e is None:
        return None
    if type(e) is not VerificationError:
        raise TypeError("not a plain VerificationError")
    return (e.path, e.message, e.record)


def _log_of(first, fields: tuple, archive: Archive) -> RunLog:
    (offset, length, seal, stored, count, ended, bad_line, bad, refs, ends, fault, known, times_ok, params) = fields
    ref_ends = array("I")
    ref_ends.frombytes(ends)
    if params is not None:
        params = tuple((line, values, _error_of(e)) for line, values, e in params)
    return RunLog(Span(archive, offset, length, seal), stored, count, first, ended, bad_line, _error_of(bad), refs,
                  ref_ends, _error_of(fault), known, times_ok, params)


def _error_of(fields: tuple | None) -> VerificationError | None:
    return None if fields is None else VerificationError(*fields)


@dataclass(frozen=True)
class Index:
    limits: Limits
    names: Sequence[str]                         # every entry, in archive order (``_zip.Names``)
    sizes: Mapping[str, int]                     # entry -> uncompressed size
    manifest: Manifest
    digests: Mapping[str, str]                   # entry -> sha256:<hex> of its bytes (read ones)
    unread: Mapping[str, VerificationError]      # entry -> why it could not be inflated
    run_logs: Mapping[str, RunLog | VerificationError]   # runs/... entry -> its parse (RunLogs)
    objects: SpilledAt                           # objects/... entry -> what is kept of it (kept(), spilled)
    ledgers: Mapping[str, LedgerLog | VerificationError]  # ledgers/... entry -> its chained records
    journals: Mapping[str, Journal | VerificationError]  # experiment -> (entry, line, Rec)
    content: Mapping[str, bytes]                 # every other entry's bytes (not a parsed journal's)
    task_files: Mapping[str, Mapping[str, bytes]]  # tasks/<id>/v<N> -> {relative path: bytes}
    registered: frozenset | None                 # registration digests the auditor holds
    facts: Mapping[str, bytes] = field(default_factory=lambda: MappingProxyType({}))  # runs/... entry -> its RunFacts, marshalled
    ledger_facts: Mapping[str, "LedgerFacts"] = field(default_factory=lambda: MappingProxyType({}))  # ledgers/... entry -> its LedgerFacts
    recent: list = field(default_factory=lambda: recent_slot(), repr=False, compare=False)
    # ^ the one run whose records are held (``Run.records``): a memo, not evidence
    read_last: dict = field(default_factory=dict, init=False, repr=False, compare=False)
    # ^ the objects' readings made last (``reading``): a memo, not evidence

    def has(self, name: str) -> bool:
        return name in self.sizes

    def read(self, name: str, where: str = "", record: int | str | None = None) -> bytes:
        """The bytes of an entry the index keeps whole. Raises VerificationError (naming
        ``where`` and ``record`` when given) if the bundle lacks it or it was unreadable."""
        if name in self.content:
            return self.content[name]
        got = self.objects.get(name)
        data = marshal.loads(got)[0] if got is not None else None
        if data is not None:
            return data
        if name not in self.sizes:
            raise VerificationError(where or name, f"{name} is missing from the bundle", record)
        if name in self.unread:
            raise self.unread[name]
        raise VerificationError(where or name, f"{name} is not kept by the reading stage", record)

    def read_json(self, name: str, where: str = "", record: int | str | None = None):
        """Parse entry ``name`` as JSON, depth-bounded. Raises VerificationError."""
        data = self.read(name, where, record)
        try:
            obj = jsonio.loads(data)
            jsonio.check_depth(obj, self.limits.json_depth)
        except ValueError as e:
            raise VerificationError(name, f"not valid JSON ({e})") from None
        return obj

    def reading(self, digest: str) -> ObjectReading:
        """What is kept of the object ``digest`` (an empty reading when nothing is). The
        last ``_READ_LAST`` made are kept (``read_last``): steps 3 and 4 each read a run's
        requests and replies, one after the other; a reading holding bytes or a long text
        is not kept, so what is held stays small."""
        memo = self.read_last
        got = memo.get(digest)
        if got is None:
            raw = _raw_digest(digest)
            got = self.objects.get(object_path(digest)) if raw is None else self.objects.of_digest(raw)
            got = _NOTHING if got is None else unkept(got)
            if got.data is None and (got.text is None or len(got.text) <= _READ_LAST_CHARS):
                if len(memo) >= _READ_LAST:
                    memo.clear()
                memo[digest] = got
        return got

    def facts_of(self, name: str) -> RunFacts:
        """The per-run facts the reading stage took of run log ``name`` (all None if none)."""
        got = self.facts.get(name)
        return _NO_FACTS if got is None else RunFacts(marshal.loads(got))

    def ledger_facts_of(self, name: str) -> "LedgerFacts":
        """The facts the reading stage took of ledger ``name`` as it streamed it (all None if none)."""
        return self.ledger_facts.get(name, _NO_LEDGER_FACTS)

    def names_under(self, prefix: str) -> list[str]:
        """The entries whose name starts with ``prefix``, in archive order (an object
        entry's name made only when ``prefix`` could begin one: ``Names.under``)."""
        return [n for _, n in self.names.under(prefix)]


_NOTHING = ObjectReading()


def _raw_digest(digest) -> bytes | None:
    """The 32 bytes ``sha256:<64 lower-case hex>`` spells (the object entry ``object_path``
    names), None for any other value."""
    if type(digest) is str and len(digest) == 71 and digest.startswith("sha256:"):
        hexd = digest[7:]
        try:
            raw = bytes.fromhex(hexd)
        except ValueError:
            return None
        if raw.hex() == hexd:  # 32 bytes, no space, no upper case
            return raw
    return None


_READ_LAST, _READ_LAST_CHARS = 256, 1 << 14  # readings ``Index.reading`` keeps, and the longest text one may hold


def kept(derived: tuple | None, text: str | None, data: bytes | None) -> bytes:
    """An ``ObjectReading``'s fields as the index keeps them: ``marshal``led, a third of the
    memory of the tuple (and of its strings and numbers) they are, for each of the hundreds
    of thousands of requests and usages of a large bundle. The values are this stage's own
    (``_costs.derive``'s plain tuples, lists, dicts, strings and numbers), never the
    bundle's bytes unmarshalled. The bytes come first, so that ``holds_bytes`` reads one byte."""
    return marshal.dumps((data, derived, text))


def unkept(got: bytes) -> ObjectReading:
    """The ``ObjectReading`` ``kept`` made ``got`` of."""
    data, derived, text = marshal.loads(got)
    return ObjectReading(derived, text, data)


def holds_bytes(got: bytes) -> bool:
    """Whether ``kept`` kept the object's bytes: the first value of its tuple (a type byte,
    the count, then that value's type byte) is not None, which marshal writes as ``N``."""
    return got[2:3] != b"N"
