"""The reading stage: every entry of a bundle inflated, hashed and parsed once, into an ``Index``.

This is the only place that reads the zip, forks, or plays with memory and the garbage
collector; the numbered steps that follow read the index. In order:

Each phase that forks shares its items out as it goes (``_workers.Shares``): the worker
takes them from the front, this process from the back after its own work, until they
meet, so neither waits long for the other whatever else it had to do.

A. the zip's directory is validated (``_zip``), the manifest parsed; every run log and
   ledger is inflated, hashed and chain-parsed, and every other non-object entry (tasks,
   journals, summary, site) inflated, hashed and kept; a forked worker takes run logs and
   returns each as this process keeps it (``_index.packed_log``, in length-prefixed frames
   written to a temporary file of its own, never all held: nothing for it to parse), taken
   in before B forks. The run logs say
   which object is a request, a raw usage, a reply, or merely a digest to compare (an
   observation, a written content, an artifact), which decides what of each object is kept;
B. the objects (most of a bundle's bytes) are inflated, hashed and read on two cores: a
   forked worker (``_workers``) takes some and returns its results as bytes (the digests
   through the pipe, the kept readings back to back in a temporary file of its own, read
   out here one at a time), this process the rest. It forks once this process has taken in (spilled) the worker's run
   logs of A, so that the worker does not start with them resident;
C. each experiment's journal files are inflated, hashed, chain- and shape-checked a piece at
   a time as A meets them (their records kept as ``Rec``, those of its runs spilled at once,
   ``Journal``; at any defect a file is read whole, and the journal from the whole files,
   which says what is wrong), then merged in reader order, in A, while the worker reads
   run logs;
D. each run's records are parsed once more and the per-run functions of steps 3, 4 and 6
   (``per_run`` in ``_checks``, ``_costs``, ``_summary``: pure, on that run alone) are
   taken on them by two forked workers, one from the first run and one from the last,
   while this process waits (the records they parse never fragment the heap the index
   lives in), each returning each run's facts as this process keeps them (marshalled, in
   length-prefixed frames written to a temporary file of its own: nothing for it to parse). What a run holds
   is kept (``RunFacts``, marshalled); where a function raised, nothing is kept and the
   step reads the run itself and reports it (so its messages, and which step fails
   first, are the step's own). Without this, each of those steps parsed every run again.
   While the two workers take them, this process reads each ledger again and folds it for
   steps 5 and 6 (``LedgerFacts``: step 5's replay, step 6's reserved keys, pickled into the
   spill; as a run's, a conclusion that held, else None), then hands the fold's heap back.

Memory tactics: a bundle given as a path is memory-mapped, not read, and the pages already
walked or inflated are handed back to the kernel every ``_RELEASE_BYTES`` (they stay in the
page cache, out of this process's resident set); the manifest is inflated and its rows read,
and a ledger or journal file inflated, hashed and chain-checked, a megabyte at a time (never
held whole); a run log's and a ledger's records are
dropped once their chain is checked, and only where their bytes lie is kept (``Span``, read
again with ``pread`` when a step parses them); an object entry's name is kept as the 32
bytes it spells (``_zip.Names``), and what this stage notes of an object (its roles, its
manifest row, its reading) by the entry's position, never by a name string; the objects'
readings, the per-run facts, each run log with its first record and each journal's run
records are spilled to an unlinked temporary file (``Spill``, ``SpilledAt``, ``RunLogs``,
``Journal``) and read back with ``pread``; an object's bytes are dropped once hashed unless
a step reads them (``_index``); the zip's directory (arrays: ``_zip``) but its names is
dropped before D. GC
tactics: the collector is off for the whole ``with`` (the index holds millions of acyclic
records, built here and read by every step).

An unreadable container or manifest, a worker that crashed or overran
``Limits.worker_seconds`` raise ``UnreadableBundle`` (exit 2); an entry that fails to inflate
is kept as its error for step 1 to report, a run log or ledger that fails to parse as its
error for the step that reads it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import gc
import hashlib
import marshal
import mmap
import os
import pickle
import re
import struct
import zlib
from array import array
from binascii import unhexlify
from operator import itemgetter, methodcaller
from pathlib import Path
from typing import Iterator, NamedTuple

from ..analysis.fold import ReservedKeys
from ..formats import jsonio
from ..errors import BenchClawError
from ..formats.records import (ENVELOPE_VERSION, GENESIS, MAX_LINE_BYTES, blob_refs,
                               split_lines, verify_chain)
from ._costs import derive
from ._errors import UnreadableBundle, VerificationError, from_error
from ._journal import call_params, times_in_order
from ._index import (ENVELOPE, SEALED, Archive, Digests, Index, Journal, LedgerFacts, LedgerLog, ManifestRows, Rec, Run, RunLog,
                     RunLogs, Span, Spill, Spilled, SpilledAt, packed_log, line_chunks, frozen, kept, packed_facts, packed_rec,
                     recent_slot, seal)
from ._shape import JOURNAL, RUN, check_body
from ._workers import Raw, Shares, start
from ._zip import Limits, ZipView
from .experiment import chain_records, journal_records
from .manifest import MANIFEST, RUN_PATH, Manifest, parse_manifest

__all__ = ["reading"]

_MANIFEST_LIMIT = 512 << 20
_KEPT_PARAMS = 16           # distinct call params a run log keeps for step 7 (more: it reads the records)
_RELEASE_BYTES = 2 << 20    # archive bytes between two hand-backs of mapped pages (they count as resident)
_STORED = 0                 # a zip entry's method: stored as it is (else deflated)
_UNREAD = "-" * 64          # the worker's digest of an entry it could not inflate
_UNREAD_ASCII = _UNREAD.encode("ascii")

# What the steps read of an object, by the fields of the run records that name it (the
# needs of every field naming it, or-ed): a request or raw usage, its ``derive`` reading; a
# reply, its text; an observation, a written content or an artifact, only its digest; what
# ``run.start`` names (catalog, task listing, profile), its bytes. An object no run record
# names this way (a spec, a task file) is kept whole too.
_DIGEST, _REQUEST, _TEXT, _WHOLE, _USAGE, _SIM = 0, 1, 2, 4, 8, 16  # _SIM: a request to the simulator
_NOTED = 32  # in ``_Roles``: some run record names the object
_ROLES = {"call": (("request", _REQUEST), ("usage_raw", _USAGE), ("reply", _TEXT)),
          "artifact": (("digest", _DIGEST),), "action": (("observation", _DIGEST),)}
_DIGEST_STR = re.compile(r"sha256:[0-9a-f]{64}\Z")


class _Roles:
    """What the run records need of each object entry (``_ROLES``), a byte an entry of the
    zip by its position (``_zip.Names``): a digest string a record holds notes the object
    entry its hex names, if the zip has one (a dict of the digest strings was 150 bytes
    an object, and the reading stage's peak)."""

    __slots__ = ("names", "data")

    def __init__(self, names, data: bytes | None = None):
        self.names = names
        self.data = bytearray(len(names)) if data is None else bytearray(data)

    def note(self, digest, role: int) -> None:
        if type(digest) is str and _DIGEST_STR.match(digest):
            at = self.names.find_digest(bytes.fromhex(digest[7:]))
            if at >= 0:
                self.data[at] |= role | _NOTED

    def merge(self, other: bytes) -> None:
        """Or in the roles a worker noted (``data``'s bytes). Raises ValueError."""
        if len(other) != len(self.data):
            raise ValueError("roles")
        n = len(other)
        self.data = bytearray((int.from_bytes(self.data, "little") | int.from_bytes(other, "little")).to_bytes(n, "little"))

    def of(self, at: int, sha: bytes) -> int:
        """The needs of object entry ``at``, whose bytes hash to ``sha``: whole unless its name
        is that hash and a run record names it."""
        got = self.data[at]
        return got & ~_NOTED if got & _NOTED and self.names.digest_at(at) == sha else _WHOLE


@contextlib.contextmanager
def reading(source: str | os.PathLike | bytes, limits: Limits,
            registered: frozenset | None = None) -> Iterator[Index]:
    """The index of the bundle at ``source`` (a path or its bytes), for the steps to read
    inside the ``with``. Raises UnreadableBundle."""
    paused = gc.isenabled()
    gc.disable()  # millions of acyclic records, read and then read again: GC passes only cost time
    _fix_mmap_threshold()
    try:
        with _archive(source, limits) as (data, read_at), contextlib.closing(Spill()) as spill:
            yield _read(_Pages(data), Archive(read_at), spill, limits, registered)
    finally:
        if paused:
            gc.enable()


_MMAP_THRESHOLD = 128 << 10  # glibc's default, kept fixed (M_MMAP_THRESHOLD is mallopt's -3)


def _fix_mmap_threshold() -> None:
    """Keep glibc's malloc giving blocks above ``_MMAP_THRESHOLD`` (an inflated entry, a
    worker's result) their own mapping, returned to the kernel when freed. By default it
    raises the threshold to the largest block freed so far, so that each of this stage's
    megabyte-sized buffers lands in the heap after the first, and the heap's free space
    (between the index's long-lived values) stays resident. For this process and its
    workers, once set; elsewhere (another libc, no ctypes) nothing changes."""
    try:
        import ctypes

        mallopt = ctypes.CDLL(None).mallopt
    except (ImportError, OSError, AttributeError):
        return
    mallopt(-3, _MMAP_THRESHOLD)


# ------------------------------------------------------------------------------ the archive

@contextlib.contextmanager
def _archive(source, limits: Limits):
    """The archive's bytes: given, or the file memory-mapped read-only (pages the kernel can
    take back, where a read would hold the whole archive in this process); and a function
    that reads a range of them again (``_index.Archive``)."""
    if isinstance(source, (bytes, bytearray)):
        data = bytes(source)
        yield data, lambda offset, n: data[offset:offset + n]
        return
    path = Path(source)
    try:
        f = open(path, "rb")
    except IsADirectoryError:
        raise UnreadableBundle(str(path), "is a directory, not a bundle file") from None
    except OSError as e:
        raise UnreadableBundle(str(path), f"cannot read ({e.strerror or e})") from None
    with f:
        size = os.fstat(f.fileno()).st_size
        if size > limits.archive_bytes:
            raise UnreadableBundle(str(path), f"{size} bytes, above the limit of {limits.archive_bytes}")
        if size == 0:
            yield b"", lambda offset, n: b""
            return
        try:
            m = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        except (OSError, ValueError) as e:
            raise UnreadableBundle(str(path), f"cannot map ({e})") from None
        try:  # read again with pread: a run log read by a step maps no page in
            yield m, lambda offset, n, fd=f.fileno(): os.pread(fd, n, offset)
        finally:
            m.close()


class _Pages:
    """The archive bytes with a counter: every ``_RELEASE_BYTES`` read, the mapped pages are
    handed back to the kernel (``MADV_DONTNEED``: a later read faults them in again from
    the page cache). Bytes given in memory are left alone."""

    def __init__(self, data):
        self.data, self._read = data, 0
        self._mapped = isinstance(data, mmap.mmap) and hasattr(mmap, "MADV_DONTNEED")

    def read(self, view: ZipView, name: str) -> bytes:
        return self.read_raw(view, name)[1]

    def read_raw(self, view: ZipView, name: str) -> tuple[bytes, bytes]:
        """(the entry's bytes as the zip holds them, inflated)."""
        i = view.index(name)
        got = view.read_raw_at(i)
        self.walked(view.csizes[i])
        return got

    def read_at(self, view: ZipView, i: int) -> bytes:
        """Entry ``i``'s bytes (its position in the zip), inflated."""
        got = view.read_raw_at(i)[1]
        self.walked(view.csizes[i])
        return got

    def walked(self, nbytes: int) -> None:
        """``nbytes`` more of the archive were touched (read, or spanned by the directory
        walk, whose local headers are spread over every page)."""
        if self._mapped:
            self._read += nbytes
            if self._read >= _RELEASE_BYTES:
                self.release()

    def release(self) -> None:
        if self._mapped:
            self._read = 0
            self.data.madvise(mmap.MADV_DONTNEED)


# ------------------------------------------------------------------------------ the stage

def _read(pages: _Pages, archive: Archive, spill: Spill, limits: Limits, registered) -> Index:
    view = ZipView(pages.data, limits, pages.walked)  # its walk touches every local header's page
    pages.release()
    unread: dict[str, VerificationError] = {}
    run_logs, ledgers, content = RunLogs(spill, archive), {}, {}
    roles = _Roles(view.names)  # what the run records need of each object (_ROLES)
    shared: dict = {}  # the values the run logs' call params share (_shared)
    objects = view.names.positions_under("objects/")
    logs = [n for _, n in view.names.under("runs/")]
    shares, side = Shares(len(logs)), Spill()  # (the worker's run logs, written there: none held in memory)
    pending = start(_run_logs_in_worker, pages, view, archive, logs, shares, limits, side,
                    timeout=limits.worker_seconds)
    try:  # A: the run logs in a forked worker and here, the manifest and the rest but the objects here
        manifest = _manifest(pages, view)
        digests: dict[str, str] = {MANIFEST: manifest.digest}  # its bytes are not kept
        streamed: dict[str, list] = {}  # a journal file's records, read a piece at a time (_journal_items)
        held: dict = {}  # the strings the journals' records repeat (cell, tier, invocation...), held once
        for _, name in view.names.plain():
            if name.startswith(("objects/", "runs/")) or name == MANIFEST:
                continue
            if _is_journal(name, manifest):
                got = _streamed_journal_entry(pages, view, name, spill, held)
                if got is not None:
                    streamed[name], digests[name] = got
                    continue
            _read_entry(pages, view, archive, name, limits, digests, unread, run_logs, ledgers, content, roles, shared)
        # C, here while the worker reads run logs
        journals = _journals(manifest, content, unread, spill, streamed, lambda name: pages.read(view, name))
        del streamed, held
        mine = len(logs)
        for mine in shares.back():
            _read_entry(pages, view, archive, logs[mine], limits, digests, unread, run_logs, ledgers, content, roles,
                        shared)
        got = pending.result()
    finally:
        pending.cancel()
        shares.close()
    try:
        there, count, cut = _worker_logs(got)
        roles.merge(there)
    except (ValueError, TypeError, EOFError):
        raise UnreadableBundle("", "a verification worker returned a malformed result") from None
    del there, got
    with contextlib.closing(side):  # adopted (spilled here) before B forks its worker
        _adopt_logs(logs, side.reader(0, cut), cut, count, mine, pages, view, archive, limits, digests, unread,
                    run_logs, roles, shared)
    readings = SpilledAt(spill, view.names)  # ObjectReading's fields, kept()
    _read_objects(pages, view, objects, roles, digests, unread, readings)  # B: on two cores
    pages.release()
    del roles, shared, objects  # what B needed of the run logs
    sizes, unread = view.sizes(), frozen(unread)
    ix = Index(limits=limits, names=view.names, sizes=sizes,
               manifest=manifest, digests=Digests(digests, sizes, unread), unread=unread,
               run_logs=run_logs.ordered(name for _, name in view.names.under("runs/")),
               objects=readings, ledgers=frozen(ledgers), journals=frozen(journals),
               content=frozen(content), task_files=frozen(_task_files(content)), registered=registered)
    del view, run_logs  # the directory (its arrays, ~50 bytes an entry), before D's facts join the index
    ledger_facts: dict[str, LedgerFacts] = {}
    facts = _facts(ix, Spilled(spill), lambda: ledger_facts.update(_ledger_facts(ledgers, spill)))  # D: on two cores
    return dataclasses.replace(ix, facts=facts, ledger_facts=frozen(ledger_facts))


def _read_entry(pages: _Pages, view: ZipView, archive: Archive, name: str, limits: Limits, digests: dict,
                unread: dict, run_logs: RunLogs, ledgers: dict, content: dict, roles: "_Roles", shared: dict) -> None:
    """An entry that is not an object, inflated, hashed and read into its mapping."""
    if name.startswith("ledgers/"):
        got = _streamed_ledger(pages, view, archive, name)
        if got is not None:
            ledgers[name], digests[name] = got
            return
    raw, data = _inflate(pages, view, name, digests, unread)
    if data is None:
        return
    if name.startswith("runs/"):
        run_logs.put(name, _run_log(name, data, _packed(view, archive, name, raw), limits, roles, shared))
    elif name.startswith("ledgers/"):
        ledgers[name] = _ledger(name, data, _packed(view, archive, name, raw))
    elif not name.startswith("site/"):  # the pages: hashed for step 1, read by no step
        content[name] = data


def _manifest(pages: _Pages, view: ZipView):
    if MANIFEST not in view:
        raise UnreadableBundle("", f"not a BenchClaw bundle: no {MANIFEST}")
    if view.usize(MANIFEST) > _MANIFEST_LIMIT:
        raise UnreadableBundle(MANIFEST, f"larger than {_MANIFEST_LIMIT} bytes")
    names = view.names
    try:  # inflated a piece at a time: 40 MB at 20,000 runs, never held whole
        got = _canonical_manifest(_manifest_pieces(pages, view), names)
    except _Broken:
        got = None
    if got is not None:
        return got
    try:  # not canonical, or a corrupt entry: read whole, which says what is wrong
        data = view.read(MANIFEST)
    except VerificationError as e:
        raise UnreadableBundle(MANIFEST, e.message) from None
    m = parse_manifest(data)
    del data
    try:
        rows = ManifestRows.of(m.files, names)
    except OverflowError:  # a size no array holds: kept as parsed, for step 1 to refuse
        return m
    return Manifest(m.experiments, rows, m.digest, m.exploratory)


def _manifest_pieces(pages: _Pages, view: ZipView):
    """The manifest's bytes inflated a ``_PIECE`` at a time; ``_Broken`` after the last one
    when their CRC-32 or length is not the header's (or at a corrupt deflate stream)."""
    i = view.index(MANIFEST)
    start, usize = view.data_offsets[i], view.usizes[i]
    # as the zip holds it (deflated: a quarter of the size, 10 MB at 20,000 runs), taken a
    # ``_PIECE`` at a time (not copied whole), its mapped pages handed back as they are read
    raw = _raw_pieces(pages, view.data, start, start + view.csizes[i])
    crc, n = 0, 0
    for piece in _inflated(raw, view.methods[i] == _STORED, usize):
        crc, n = zlib.crc32(piece, crc), n + len(piece)
        yield piece
    if crc != view.crcs[i] or n != usize:
        raise _Broken()


def _raw_pieces(pages: _Pages, data, start: int, end: int):
    """``data[start:end]``, a ``_PIECE`` at a time, each counted as read by ``pages``."""
    for at in range(start, end, _PIECE):
        piece = data[at:min(at + _PIECE, end)]
        pages.walked(len(piece))
        yield piece


# A manifest as ``benchclaw export`` writes it (canonical JSON: keys sorted, no spaces): its
# rows are read one at a time, straight into ``ManifestRows``, where parsing it whole held
# every row as a dict of three strings (40 bytes of JSON become 700 of objects).
_FILES_AT = re.compile(rb'\{"experiments":\[[^\]]*\],(?:"exploratory":true,)?"files":\[')
_ROW = re.compile(rb'\{"digest":"sha256:([0-9a-f]{64})","path":"([^"\\\x00-\x1f]+)","size":(0|[1-9][0-9]{0,18})\}')
_ROW_BYTES = 4096  # bytes of a canonical row at most, when read a piece at a time (a longer one: parsed whole)


def _canonical_manifest(data, names) -> Manifest | None:
    """The manifest of ``data`` (its bytes, or an iterable of pieces of them) with its rows
    read one at a time, or None when it is not in the canonical form (``parse_manifest``
    then reads it whole, and says what is wrong). Everything but the rows is
    ``parse_manifest``'s own reading of the manifest without them; each row matched is one
    it accepts (a path, a ``sha256:<hex>``, a size)."""
    sha = hashlib.sha256()
    feed = _hashed((data,) if isinstance(data, (bytes, bytearray)) else data, sha)
    buf = next(feed, b"")
    head = _FILES_AT.match(buf)
    while head is None and len(buf) < (1 << 20):  # the experiments' list, in the first megabyte
        piece = next(feed, b"")
        if not piece:
            break
        buf += piece
        head = _FILES_AT.match(buf)
    if head is None:
        return None
    before, rows, pos, at, done = buf[:head.end()], ManifestRows(names), head.end(), -1, False
    match = _ROW.match
    while True:
        if not done and len(buf) - pos < _ROW_BYTES:  # a whole row ahead, unless at the end
            piece = next(feed, b"")
            done = not piece
            buf, pos = buf[pos:] + piece, 0
            continue
        if pos >= len(buf) or buf[pos] == 0x5D:  # ]
            break
        if len(rows):
            if buf[pos] != 0x2C:  # ,
                return None
            pos += 1
        row = match(buf, pos)
        if row is None:
            return None
        hexd, path, size = row.groups()
        try:
            text = path.decode("utf-8")
        except UnicodeDecodeError:
            return None
        # an object entry's name spelling the row's digest (``_zip.object_digest``, on the bytes)
        named = len(path) == 75 and path[11:] == hexd and path[:11] == b"objects/" + hexd[:2] + b"/"
        at = rows.add(text, bytes.fromhex(hexd.decode("ascii")), int(size), named, at + 1)
        pos = row.end()
    rest = buf[pos:] + b"".join(feed)
    m = parse_manifest(before + rest)  # the rest, rows aside (an empty list)
    return Manifest(m.experiments, rows, "sha256:" + sha.hexdigest(), m.exploratory)


def _hashed(pieces, sha):
    """``pieces``, each fed to ``sha`` as it is handed on."""
    for piece in pieces:
        sha.update(piece)
        yield piece


def _inflate(pages: _Pages, view: ZipView, name: str, digests: dict, unread: dict) -> tuple[bytes | None, bytes | None]:
    """(the entry's bytes as the zip holds them, inflated), its digest recorded; Nones (its
    error recorded) when corrupt."""
    try:
        raw, data = pages.read_raw(view, name)
    except VerificationError as e:
        unread[name] = e
        return None, None
    digests[name] = "sha256:" + hashlib.sha256(data).hexdigest()
    return raw, data


def _task_files(content: dict) -> dict:
    """Every entry under ``tasks/<id>/v<N>/``, by that prefix, as {relative path: bytes}."""
    out: dict[str, dict] = {}
    for name, data in content.items():
        parts = name.split("/", 3)
        if parts[0] == "tasks" and len(parts) == 4:
            out.setdefault("/".join(parts[:3]), {})[parts[3]] = data
    return {prefix: frozen(files) for prefix, files in out.items()}


# ------------------------------------------------------------------------------ run logs in a worker

def _run_logs_in_worker(pages: _Pages, view: ZipView, archive: Archive, logs: list[str], shares: Shares,
                        limits: Limits, side: Spill) -> Raw:
    """``_run_log`` of the run logs ``shares`` gives from the front, one frame each (``_FRAME``
    length, then the ``marshal``led ``_log_frame``), exactly what this process keeps of a log it
    reads itself, written one after another into ``side`` from its start (a temporary file
    this worker alone writes: the frames are never all held, here or by the parent); returns
    the objects' roles (``marshal``led), their length (8 bytes), the count of frames (4
    bytes) and their length in ``side`` (8 bytes, all little-endian)."""
    roles, shared, count, end, writes = _Roles(view.names), {}, 0, 0, _Appending(side)
    for i in shares.front():
        name = logs[i]
        try:
            raw, data = pages.read_raw(view, name)
        except VerificationError as e:
            frame = marshal.dumps(("unread", None, _error_fields(e)))
        else:
            log = _run_log(name, data, _packed(view, archive, name, raw), limits, roles, shared)
            frame = _log_frame(hashlib.sha256(data).hexdigest(), log)
        writes.put(_FRAME.pack(len(frame)))
        writes.put(frame)
        end += _FRAME.size + len(frame)
        count += 1
    writes.flush()
    out = bytearray(roles.data)
    out += _TAIL.pack(len(out), count, end)
    return Raw(out)


_TAIL = struct.Struct("<QIQ")  # a run-log worker's roles' length, count of frames, and their length


def _log_frame(hexd: str, log: RunLog | VerificationError) -> bytes:
    """A run log as the worker hands it on (``("again", hexd)``: one this process reads
    again, as it holds it as it is)."""
    if isinstance(log, VerificationError):
        return marshal.dumps(("error", hexd, _error_fields(log)))
    data = packed_log(log)
    first = None if log.first is None else tuple(log.first)
    if data is None:
        return marshal.dumps(("again", hexd))
    try:
        return marshal.dumps(("log", hexd, first, data))
    except ValueError:  # a first record marshal does not take
        return marshal.dumps(("again", hexd))


def _error_fields(e: VerificationError) -> tuple:
    return (e.path, e.message, e.record)


def _worker_logs(got: Raw) -> tuple[bytes, int, int]:
    """(the roles, the count of frames, where the frames end in the worker's file) of
    ``_run_logs_in_worker``'s result. Raises ValueError."""
    data = got.data
    if len(data) < _TAIL.size:
        raise ValueError("truncated")
    n, count, cut = _TAIL.unpack_from(data, len(data) - _TAIL.size)
    if n != len(data) - _TAIL.size:
        raise ValueError("truncated")
    return bytes(memoryview(data)[:n]), count, cut


def _adopt_logs(logs: list[str], frames, cut: int, count: int, mine: int, pages: _Pages, view: ZipView,
                archive: Archive, limits: Limits, digests: dict, unread: dict, run_logs: RunLogs, roles: "_Roles",
                shared: dict) -> None:
    """The worker's ``count`` run logs (the first of ``logs``, one frame each in the first
    ``cut`` bytes of ``frames``, a file) into this process's mappings, but those from
    ``mine`` on (this process read them too), each spilled with its first record
    (``RunLogs.put_packed``); a log it handed back is read here."""
    if count < mine or count > len(logs):
        raise UnreadableBundle("", "a verification worker returned a malformed result")
    try:
        for name, frame in zip(logs[:count], _read_frames(frames, cut, count), strict=True):
            if name in run_logs or name in unread:
                continue
            kind, hexd, *rest = marshal.loads(frame)
            if kind == "unread":
                unread[name] = VerificationError(*rest[0])
                continue
            if kind == "again":
                _read_entry(pages, view, archive, name, limits, digests, unread, run_logs, {}, {}, roles, shared)
                continue
            if type(hexd) is not str or len(hexd) != 64:
                raise ValueError("digest")
            digests[name] = "sha256:" + hexd
            if kind == "error":
                run_logs.put(name, VerificationError(*rest[0]))
            elif kind == "log":
                first, data = rest
                run_logs.put_packed(name, None if first is None else Rec(*first), data)
            else:
                raise ValueError("kind")
    except (ValueError, TypeError, EOFError):
        raise UnreadableBundle("", "a verification worker returned a malformed result") from None


# ------------------------------------------------------------------------------ run logs and ledgers

def _packed(view: ZipView, archive: Archive, name: str, raw: bytes) -> tuple[Span, bool]:
    """Where a run log's or ledger's bytes lie in the zip (``raw``, those just inflated and
    hashed: a third of their size, deflated) and whether they are stored as they are: what
    ``RunLog.records`` reads and parses again. Not the bytes: 80 MB at 20,000 runs."""
    e = view.entry(name)
    return archive.span(e.data_offset, raw), e.method == _STORED


def _run_log(name: str, data: bytes, packed: tuple[Span, bool], limits: Limits,
             roles: "_Roles", shared: dict) -> RunLog | VerificationError:
    """Chain, first and last record, then each body's shape in order (stopping at the first
    ill-typed one) and the digests it references; the objects' roles noted in ``roles``.
    The parsed records are dropped here: a step parses them again from ``packed``."""
    if not RUN_PATH.match(name):
        return VerificationError(name, "not a run log name (runs/<aa>/<64 hex>.jsonl)")
    try:
        records = _chain(name, data, limits)
    except VerificationError as e:
        return e
    first, last = (_compact(records[:1])[0], packed_rec(_compact(records[-1:])[0])) if records else (None, None)

    def log(bad_line=0, bad=None, refs=b"", ends=(), fault=None, known=False) -> RunLog:
        return RunLog(*packed, len(records), first, last, bad_line, bad, refs, array("I", ends), fault,
                      known, times_in_order(records), _call_params(records, shared))

    if not records or records[0].kind != "run.start":
        return log(fault=VerificationError(name, "a run must start with run.start", 1))
    if records[-1].kind != "run.end":
        return log(fault=VerificationError(name, "a sealed run must end with run.end", len(records)))
    refs, ends, bad_line, bad, known, end = [], [], 0, None, True, 0
    sim = records[0].body.get("sim") is not None  # its requests' readings add the simulator's facts
    for i, rec in enumerate(records, 1):
        try:
            check_body(rec.kind, rec.body, RUN, name, i)
        except VerificationError as e:
            bad_line, bad = i, e
            break
        mine = _refs(rec.line, rec.body)  # 32 bytes a digest, not 120
        refs.append(mine)
        end += len(mine)
        ends.append(end)
        if rec.kind == "run.start":  # what it names is read whole
            for digest in _ref_strings(rec.line, rec.body):
                roles.note(digest, _WHOLE)
        else:
            _note_roles(rec, roles, sim)
        known = known and rec.kind in RUN
    return log(bad_line, bad, b"".join(refs), ends, known=known)


def _call_params(records: list, shared: dict) -> tuple | None:
    """``_journal.call_params`` of the run's calls, for step 7, their strings held once."""
    got = call_params([(i, r) for i, r in enumerate(records, 1) if r.kind == "call"], _KEPT_PARAMS)
    if got is None:
        return None
    return tuple((line, values if values is None else tuple(_shared(v, shared) for v in values), e)
                 for line, values, e in got)


def _note_roles(rec, roles: _Roles, sim: bool) -> None:
    body = rec.body
    for key, role in _ROLES.get(rec.kind, ()):
        digest = body.get(key)
        if isinstance(digest, str):
            roles.note(digest, role | (_SIM if sim and role == _REQUEST else 0))
    if rec.kind == "action" and isinstance(body.get("args"), dict):
        content = body["args"].get("content")
        if isinstance(content, str):
            roles.note(content, 0)


def _chain(name: str, data: bytes, limits: Limits) -> list:
    lines, torn = split_lines(data)
    if torn:
        raise VerificationError(name, "torn last line (no newline) in a sealed run", len(lines) + 1)
    for i, line in enumerate(lines, 1):
        if len(line) > limits.line_bytes:
            raise VerificationError(name, f"line longer than {limits.line_bytes} bytes", i)
    records = _linked(lines)
    if records is None:  # a defect: the full check names it
        try:
            records = verify_chain(lines, name)
        except BenchClawError as e:
            raise from_error(e, name) from None
    for i, rec in enumerate(records, 1):
        if lines[i - 1].count(b"{") + lines[i - 1].count(b"[") <= limits.json_depth:
            continue  # fewer brackets than the limit: cannot nest deeper (a C-speed count)
        try:
            jsonio.check_depth(rec.body, limits.json_depth)
        except ValueError as e:
            raise VerificationError(name, str(e), i) from None
    return records


class _Line(NamedTuple):
    """A run log's record as ``_run_log`` reads it while its line is in hand (what it reads
    of a ``records.Record``, made at a tenth of the cost)."""

    seq: int
    at: str
    kind: str
    body: dict
    line: bytes


def _linked(lines: list[bytes]) -> list[_Line] | None:
    """``verify_chain(lines)`` when the chain holds, the lines parsed and hashed at
    C level and each envelope and link checked in one expression; None at any defect
    (``verify_chain`` then says which, as it says it). A ``prev`` equal to the SHA-256 hex
    before it (or to ``GENESIS``) is 64 hex digits, as ``envelope_problem`` asks."""
    if lines and max(map(len, lines)) > MAX_LINE_BYTES:
        return None
    try:  # one parse per line: lines joined into one array can parse as records no line holds
        objs = list(map(jsonio.loads, lines))
    except ValueError:
        return None
    out, prev, line_hex = [], GENESIS, map(_hexdigest, map(hashlib.sha256, lines))
    for i, obj, line in zip(range(len(objs)), objs, lines):
        if type(obj) is not dict or len(obj) != 6 or obj.get("v") != ENVELOPE_VERSION or obj.get("prev") != prev:
            return None
        try:
            seq, at, kind, body = ENVELOPE(obj)
        except KeyError:
            return None
        if type(seq) is not int or seq != i or type(at) is not str or type(kind) is not str or type(body) is not dict:
            return None
        out.append(_Line(seq, at, kind, body, line))
        prev = next(line_hex)
    return out


_REF = re.compile(rb'"sha256:([0-9a-f]{64})"')


def _refs(raw: bytes, body: dict) -> bytes:
    """The digests a record references, as raw 32-byte values one after another: a C-speed
    scan of its canonical line, or (when the line uses \\u escapes, which could spell a
    digest the scan would miss) the full walk."""
    if b"\\u" in raw:
        return b"".join(bytes.fromhex(d[7:]) for d in blob_refs(body))
    return unhexlify(b"".join(_REF.findall(raw)))


def _ref_strings(raw: bytes, body: dict) -> list[str]:
    """``_refs`` as the digest strings the record holds."""
    if b"\\u" in raw:
        return list(blob_refs(body))
    return ["sha256:" + m.decode() for m in _REF.findall(raw)]


def _compact(records: list) -> tuple[Rec, ...]:
    """The records without their line bytes and links, once the chain and references are
    checked: no step reads them, and they are the file's size again."""
    return tuple(Rec(r.seq, r.at, r.kind, r.body) for r in records)


def _shared(value, shared: dict, depth: int = 0):
    """``value``, or the equal value ``shared`` already holds (keyed by the BLAKE2b of its
    ``marshal`` bytes, which tell ``1``, ``1.0`` and ``true`` apart where ``==`` does not, as
    its ``repr`` does); a new
    container's own values are shared in turn, two levels down."""
    kind = type(value)
    if kind is str:
        return shared.setdefault(value, value) if len(value) <= 128 else value
    if (kind is not dict and kind is not list) or depth > 1:
        return value
    try:  # marshal (version 2: no back-references, which depend on the objects' sharing) is a repr at C speed
        key = hashlib.blake2b(marshal.dumps(value, 2), digest_size=16).digest()
    except ValueError:
        key = hashlib.blake2b(repr(value).encode("utf-8", "surrogatepass"), digest_size=16, person=b"repr").digest()
    got = shared.get(key)
    if got is None:
        if kind is dict:
            value = {k: _shared(v, shared, depth + 1) for k, v in value.items()}
        else:
            value = [_shared(v, shared, depth + 1) for v in value]
        shared[key] = got = value
    return got


def _ledger(name: str, data: bytes, packed: tuple[Span, bool]) -> LedgerLog | VerificationError:
    """The ledger's chain checked line by line, holding one record at a time (its records
    are a step's to parse again, as they fold them); a broken chain is the error
    ``chain_records`` gives, the whole ledger parsed again to name the line at fault."""
    try:
        count, first, last, earliest = _chain_stream(name, data)
    except (BenchClawError, _Broken):
        try:
            records = chain_records({name: data}, name)
        except VerificationError as e:
            return e
        count, first, last = len(records), _compact(records[:1]) or (None,), _compact(records[-1:]) or (None,)
        first, last, earliest = first[0], last[0], min((r.at for r in records), default=None)
    return LedgerLog(*packed, count, first, last, earliest)


def _streamed_ledger(pages: _Pages, view: ZipView, archive: Archive, name: str) -> tuple[LedgerLog, str] | None:
    """(the ledger as ``_ledger`` reads it, its digest), inflated, hashed and chain-checked a
    piece at a time: a grid's ledger is the largest entry of its bundle (60 MB at 20,000
    runs), never held whole. None at any defect, of its zip entry or of its chain: the
    whole entry is then read as any other, which says what is wrong."""
    e = view.entry(name)
    got = _EntryPieces(pages, view, e, sealed=True)
    try:
        count, first, last, earliest = _chain_stream(name, iter(got))
    except (BenchClawError, _Broken):
        return None
    if not got.whole():
        return None
    return LedgerLog(Span(archive, e.data_offset, e.csize, bytes(got.seals)), e.method == _STORED, count, first, last,
                     earliest), got.digest()


class _EntryPieces:
    """A zip entry's bytes inflated a piece at a time (iterating it), each piece hashed and
    CRC-summed as it passes, the deflated ones taken from the map a sealed piece at a time
    (``SEALED``: a fifth of the size) and their seals kept when ``sealed`` (a ``Span``'s)."""

    def __init__(self, pages: _Pages, view: ZipView, e, sealed: bool = False):
        self._pages, self._view, self._e = pages, view, e
        self._sha, self._sums = hashlib.sha256(), [0, 0]  # CRC-32, bytes
        self.seals = bytearray() if sealed else None

    def _deflated(self):
        e, data, seals = self._e, self._view.data, self.seals
        for at in range(e.data_offset, e.end, SEALED):
            piece = data[at:min(at + SEALED, e.end)]
            if seals is not None:
                seals.extend(seal(piece))
            self._pages.walked(len(piece))
            yield piece

    def __iter__(self):
        sha, sums = self._sha, self._sums
        for piece in _inflated(self._deflated(), self._e.method == _STORED, self._e.usize):
            sha.update(piece)
            sums[0], sums[1] = zlib.crc32(piece, sums[0]), sums[1] + len(piece)
            yield piece

    def whole(self) -> bool:
        """Whether the pieces iterated were the entry's bytes: its CRC-32 and size (and,
        sealed, a seal for each piece of its deflated bytes)."""
        e = self._e
        return self._sums == [e.crc, e.usize] and (self.seals is None or len(self.seals) == 16 * -(-e.csize // SEALED))

    def digest(self) -> str:
        return "sha256:" + self._sha.hexdigest()


def _inflated(raw, stored: bool, usize: int):
    """``raw``'s bytes (or an iterable of pieces of them) inflated, a ``_PIECE`` at most at a
    time, the input fed a piece at a time too (never the rest of it copied as a tail);
    ``_Broken`` past ``usize`` bytes, or at a corrupt, truncated or overlong deflate stream."""
    pieces = (raw,) if isinstance(raw, (bytes, bytearray, memoryview)) else raw
    d, n = (None if stored else zlib.decompressobj(-15)), 0
    for piece in pieces:
        view = memoryview(piece)
        for at in range(0, len(view), _PIECE):
            chunk = view[at:at + _PIECE]
            while chunk:
                if d is None:
                    out, chunk = bytes(chunk), b""
                else:
                    if d.eof:
                        raise _Broken()  # bytes after the end of the stream
                    try:
                        out = d.decompress(chunk, _PIECE)
                    except zlib.error:
                        raise _Broken() from None
                    chunk = d.unconsumed_tail
                n += len(out)
                if n > usize:
                    raise _Broken()
                if out:
                    yield out
    if d is not None:
        try:
            out = d.flush()  # what the last input left pending
        except zlib.error:
            raise _Broken() from None
        n += len(out)
        if n > usize or not d.eof or d.unused_data:
            raise _Broken()  # past the size, truncated, or followed by extra bytes
        if out:
            yield out


_PIECE = 1 << 20  # inflated bytes of a ledger handled at a time


class _Broken(Exception):
    """A ledger line that does not chain: ``chain_records`` says where and why."""


def _chain_stream(name: str, data) -> tuple[int, Rec | None, Rec | None, str | None]:
    """(count, first, last, the earliest ``at``) of a chained JSONL entry (its bytes, or an
    iterable of pieces of them), the chain checked as ``verify_chain`` checks it, a quarter
    megabyte of lines at a time (each parsed and hashed alone, at C level). Raises
    ``_Broken`` at the first defect (``chain_records`` then says which)."""
    first, obj, i, earliest = None, None, 0, None
    for objs in _chained(data):
        obj, i = objs[-1], i + len(objs)
        if first is None:
            first = ENVELOPE(objs[0])
        least = min(map(_AT, objs))  # each a string: the envelopes were checked
        earliest = least if earliest is None or least < earliest else earliest
    return i, (None if first is None else Rec(*first)), (None if obj is None else Rec(*ENVELOPE(obj))), earliest


def _chained(data):
    """The parsed records of a chained JSONL entry (its bytes, or an iterable of pieces of
    them), a list a quarter megabyte of lines at a time, the chain checked as
    ``verify_chain`` checks it (each line parsed and hashed alone, at C level). Raises
    ``_Broken`` at the first defect."""
    prev, i = GENESIS, 0
    for chunk in line_chunks(data, True):
        if not chunk.endswith(b"\n"):
            raise _Broken()  # torn last line
        lines = chunk[:-1].split(b"\n")
        if max(map(len, lines)) > MAX_LINE_BYTES:
            raise _Broken()
        try:  # one parse per line, as in _linked
            objs = list(map(jsonio.loads, lines))
        except ValueError:
            raise _Broken() from None
        for obj, line_hex in zip(objs, map(_hexdigest, map(hashlib.sha256, lines))):
            # envelope_problem's fast path, with the link: a prev equal to GENESIS or a SHA-256 hex is 64 hex digits
            if type(obj) is not dict or len(obj) != 6 or obj.get("v") != ENVELOPE_VERSION or \
                    obj.get("prev") != prev or type(obj.get("seq")) is not int or obj["seq"] != i or \
                    type(obj.get("at")) is not str or type(obj.get("kind")) is not str or \
                    type(obj.get("body")) is not dict:
                raise _Broken()
            prev, i = line_hex, i + 1
        yield objs


_AT = itemgetter("at")


_hexdigest = methodcaller("hexdigest")


def _is_journal(name: str, manifest: Manifest) -> bool:
    """Whether ``name`` is a journal file of one of the bundle's experiments."""
    parts = name.split("/")
    return len(parts) == 3 and parts[0] == "journals" and parts[2].endswith(".jsonl") and parts[1] in manifest.experiments


def _streamed_journal_entry(pages: _Pages, view: ZipView, name: str, spill: Spill, shared: dict):
    """(``_journal_items`` of journal file ``name``, its digest), inflated, hashed and parsed
    a piece at a time (a grid's journal, a record a run, is never held whole). None at any
    defect, of its zip entry, chain or shapes: the whole entry is then read as any other,
    and ``_journal`` says what is wrong."""
    got = _EntryPieces(pages, view, view.entry(name))
    try:
        items = _journal_items(name, iter(got), spill, shared)
    except (BenchClawError, _Broken):
        return None
    if not got.whole():
        return None
    return items, got.digest()


def _journals(manifest: Manifest, content: dict, unread: dict, spill: Spill, streamed: dict, read) -> dict:
    """Each experiment's ``_journal``, its files' bytes then dropped from ``content`` (they
    were for this parse: step 6 reads the records). ``streamed``: the files already read a
    piece at a time (``_streamed_journal_entry``); ``read(name)``: a file's bytes again."""
    journals = {exp: _journal(content, unread, exp, spill, streamed, read) for exp in manifest.experiments}
    for journal in journals.values():
        for name in {name for name, _, _ in journal} if isinstance(journal, Journal) else ():
            content.pop(name, None)
    return journals


def _journal(content: dict, unread: dict, exp: str, spill: Spill, streamed: dict, read) -> Journal | VerificationError:
    """The experiment's journal (entry, line, record) in reader order, chains verified and
    every body's shape checked, or the first error (an unreadable journal file's included).
    Its records are kept as ``Rec`` (no line bytes, no link: read by no step), those of its
    runs spilled (``Journal``) as each file is read a quarter megabyte at a time
    (``_journal_items``, ``streamed`` when the files were read so); at any defect, its files
    are read whole (``read``), which says what is wrong."""
    prefix = f"journals/{exp}/"
    broken = sorted(n for n in unread if n.startswith(prefix) and n.endswith(".jsonl"))
    if broken:
        return unread[broken[0]]
    names = sorted(n for n in (*content, *streamed) if n.startswith(prefix) and n.endswith(".jsonl"))  # as journal_records
    if all(n in streamed for n in names):
        return _merged(spill, [streamed[n] for n in names])
    for n in names:
        if n in streamed:  # read again whole, for the files beside it that were (one is broken)
            content[n] = read(n)
    shared: dict = {}  # the strings its records repeat (cell, tier, invocation, status...), held once
    try:
        return _merged(spill, [_journal_items(n, content[n], spill, shared) for n in names])
    except (_Broken, VerificationError):
        pass
    try:
        journal = journal_records(content, exp)
        for name, line, rec in journal:
            check_body(rec.kind, rec.body, JOURNAL, name, line)
    except VerificationError as e:
        return e
    return Journal(spill, ((name, line, _kept_rec(r.seq, r.at, r.kind, r.body, shared)) for name, line, r in journal))


def _kept_rec(seq: int, at: str, kind: str, body: dict, shared: dict) -> Rec:
    return Rec(seq, at, _shared(kind, shared), {k: _once(v, shared) for k, v in body.items()})


def _journal_items(name: str, data, spill: Spill, shared: dict) -> list:
    """(at, writer, seq, the record) of each record of journal file ``name`` (its bytes, or
    an iterable of pieces of them), its chain checked and each body's shape as it is parsed,
    the record as ``Journal`` takes it: (entry, line, ``Rec``), or where a ``run`` record now
    lies in ``spill`` (``Journal.spilled``: spilled at once). Raises ``_Broken`` or
    VerificationError at any defect."""
    order, writer, line = [], name[name.rindex("/") + 1:-len(".jsonl")], 0
    for objs in _chained(data):
        for obj in objs:
            line += 1
            kind, body = obj["kind"], obj["body"]
            check_body(kind, body, JOURNAL, name, line)
            # (a run record is spilled at once: its strings, one run's own, are not shared)
            at = Journal.spilled(spill, (name, line, Rec(obj["seq"], obj["at"], kind, body))) if kind == "run" else None
            order.append((obj["at"], writer, obj["seq"],
                          at or (name, line, _kept_rec(obj["seq"], obj["at"], kind, body, shared))))
    return order


def _merged(spill: Spill, files: list[list]) -> Journal:
    """The files' ``_journal_items`` (in the order of their names) in reader order, (at,
    writer, seq) as ``journal_records`` sorts them, as one ``Journal``."""
    order = [t for items in files for t in items]
    order.sort(key=_JOURNAL_ORDER)
    return Journal(spill, (t[3] for t in order))


_JOURNAL_ORDER = itemgetter(0, 1, 2)


def _once(value, shared: dict):
    """A string ``value`` held once per journal (other values as they are)."""
    return shared.setdefault(value, value) if type(value) is str and len(value) <= 128 else value


# ------------------------------------------------------------------------------ the objects

def _read_objects(pages: _Pages, view: ZipView, objects: array, roles: _Roles, digests: dict, unread: dict,
                  readings: SpilledAt) -> None:
    """Every object (``objects``: their positions in the zip) inflated, hashed and read once,
    the first ones in a forked worker while this process reads the last ones (``Shares``);
    the readings kept go to ``readings`` (this process's own at once: the worker does not
    write to the spill)."""
    # (mine: the positions this process took, an array: no boxed int each; the worker's
    # readings, written to side)
    shares, mine, side = Shares(len(objects)), array("i"), Spill()
    pending = start(_objects_in_worker, pages, view, objects, roles, shares, side, timeout=view.limits.worker_seconds)
    try:
        here = (*_objects(pages, view, _taking(shares.back(), objects, mine), roles, readings.put_at), {})
        there = pending.result(chunked=True)
    finally:
        pending.cancel()
        shares.close()
    with contextlib.closing(side):
        try:
            got = _from_worker(there, side)
            count = len(got[0]) // 64
            if not len(objects) - len(mine) <= count <= len(objects):  # one left out, or more than there are
                raise ValueError("count")
            _adopt(view, objects[:count], got, digests, unread, readings)
        except (ValueError, TypeError, KeyError, AttributeError):
            raise UnreadableBundle("", "a verification worker returned a malformed result") from None
    del there, got
    _adopt(view, mine, here, digests, unread, readings)  # the one both took, if any: read alike by both


def _taking(taken, names, mine):
    """The names (or positions) of the items ``taken`` gives, each noted in ``mine`` as it is taken."""
    for i in taken:
        mine.append(names[i])
        yield names[i]


_NONE = (1 << 64) - 1  # in the worker's lengths: nothing kept of that object


def _objects_in_worker(pages: _Pages, view: ZipView, objects: array, roles: _Roles, shares: Shares,
                       side: Spill) -> Raw:
    """``_objects`` of the ``objects`` ``shares`` gives from the front, as bytes, not JSON (the
    parent never holds them parsed whole): {"count": how many it took, "errors": ...,
    "kept": the kept readings' bytes} on one line, the SHA-256 hexes and each kept
    reading's length (``array("Q")``, ``_NONE``: nothing kept); the kept readings are
    written one after another into ``side`` from its start (a temporary file this worker
    alone writes: never all held, here or by the parent)."""
    taken = array("i")  # positions, as ``objects``
    lengths, kept, writes = array("Q"), [0], _Appending(side)

    def keep(at: int, got: bytes) -> None:
        lengths[-1] = len(got)
        writes.put(got)
        kept[0] += len(got)

    def taking():
        for at in _taking(shares.front(), objects, taken):
            lengths.append(_NONE)
            yield at

    hexes, errors = _objects(pages, view, taking(), roles, keep)
    writes.flush()
    out = bytearray(jsonio.dumps({"count": len(taken), "errors": errors, "kept": kept[0]}))
    out += b"\n"
    out += hexes.encode("ascii")
    out += lengths.tobytes()
    return Raw(out)


def _from_worker(got: Raw, side: Spill) -> tuple[str, dict, "_Streamed"]:
    """``_objects_in_worker``'s bytes (``Received``) as ``_objects`` gives them, the
    readings read out of ``side`` one at a time as ``_adopt`` asks. Raises ValueError."""
    data = got.data
    line = data.readline(1 << 30)
    if not line.endswith(b"\n"):
        raise ValueError("truncated")
    head = jsonio.loads(line)
    errors, n, kept = head["errors"], head["count"], head["kept"]
    hexes = data.read(64 * n).decode("ascii")
    lengths = array("Q")
    lengths.frombytes(data.read(8 * n))
    if data.left or len(lengths) != n or type(kept) is not int or sum(k for k in lengths if k != _NONE) != kept:
        raise ValueError("truncated")
    return hexes, errors, _Streamed(side.reader(0, kept), lengths)


class _Streamed:
    """The worker's kept readings, by position: ``get(i)`` their bytes (None: none kept),
    asked for in order, each once."""

    def __init__(self, data, lengths: array):
        self.data, self.lengths = data, lengths

    def get(self, i: int) -> bytes | None:
        k = self.lengths[i]
        if k == _NONE:
            return None
        got = self.data.read(k)
        if len(got) != k:
            raise ValueError("truncated")
        return got


def _objects(pages: _Pages, view: ZipView, objects, roles: _Roles, keep) -> tuple[str, dict]:
    """(the SHA-256 hexes as one string, read errors by entry name as dicts); each object's
    reading as the index keeps it (``_index.kept``) handed to ``keep(its position, it)``."""
    hexes, errors = bytearray(), {}
    for at in objects:
        try:
            data = pages.read_at(view, at)
        except VerificationError as e:
            hexes += _UNREAD_ASCII
            errors[view.names[at]] = e.to_dict()
            continue
        sha = hashlib.sha256(data)
        hexes += sha.hexdigest().encode("ascii")
        got = _reading_of(roles.of(at, sha.digest()), data)
        if got is not None:
            keep(at, got)
    return hexes.decode("ascii"), errors


def _reading_of(needs: int, data: bytes) -> bytes | None:
    """What is kept of an object the run records need as ``needs`` (``_ROLES``): its
    ``ObjectReading``'s fields, ``kept`` at once (no list of them is held for every object)."""
    if needs == _DIGEST:
        return None
    derived = text = whole = None
    if needs & (_REQUEST | _USAGE):
        derived = derive(data, sim=bool(needs & _SIM))
        kind = derived[0] if derived is not None else None
        if (needs & _REQUEST and kind != "r") or (needs & _USAGE and kind != "u") or \
                (needs & _SIM and kind == "r" and derived[6] is None):
            needs |= _WHOLE  # not what its field says it is: the step reads it and says why
    if needs & _TEXT:
        try:
            text = data.decode("utf-8", "surrogatepass")
        except UnicodeDecodeError:
            needs |= _WHOLE
    if needs & _WHOLE:
        whole = data
    return kept(tuple(derived) if derived is not None else None, text, whole)


def _adopt(view: ZipView, objects, got: tuple, digests: dict, unread: dict, readings: SpilledAt) -> None:
    """The hexes, errors and readings ``_objects`` (or the worker) gave of ``objects`` (their
    positions) into the index's mappings: a digest only when the name does not spell it."""
    hexes, errors, kept = got
    if not isinstance(hexes, str) or len(hexes) != 64 * len(objects):
        raise UnreadableBundle("", "a verification worker returned a malformed result")
    names = view.names
    for i, at in enumerate(objects):
        hexd = hexes[64 * i:64 * i + 64]
        if hexd != _UNREAD:
            said = names.digest_at(at)
            if said is None or said.hex() != hexd:  # else named: not held (_index.Digests)
                digests[names[at]] = "sha256:" + hexd
    for name, e in errors.items():
        unread[name] = VerificationError(e["path"], e["message"], e["record"])
    by_place = isinstance(kept, _Streamed)
    for i, at in enumerate(objects):
        got = kept.get(i if by_place else at)
        if got is not None:
            readings.put_at(at, got)


# ------------------------------------------------------------------------------ D: the ledgers' facts

def _ledger_facts(ledgers: dict, spill: Spill) -> dict[str, LedgerFacts]:
    """Each ledger's ``LedgerFacts``, in D while the worker takes the first runs: its
    records read again as the steps read them (``LedgerLog``, a piece at a time) and folded
    by steps 5 and 6 (``_LedgerFold``), their conclusions pickled into ``spill``."""
    out = {}
    for name, log in ledgers.items():
        if isinstance(log, LedgerLog):
            fold = _LedgerFold(name)
            for rec in log:
                if not fold.add(rec):
                    break
            got = fold.put(spill)
            if got is not None:
                out[name] = got
            del fold
            _trim_heap()  # the fold's parsed records and book, handed back
    return out


def _trim_heap() -> None:
    """Hand the free memory at the top and inside of glibc's heap back to the kernel
    (``malloc_trim``): a forked worker counts every page this process holds. Elsewhere
    (another libc, no ctypes) nothing changes."""
    try:
        import ctypes

        ctypes.CDLL(None).malloc_trim(0)
    except (ImportError, OSError, AttributeError):
        return


class _LedgerFold:
    """Steps 5's and 6's readings of a ledger on its own (``_ledgers.ledger_fold``,
    ``analysis.fold.ReservedKeys``), fed its records one at a time, so that neither step
    reads it again; ``put(spill)``: their ``LedgerFacts``. A fold that did not hold or
    raised is dropped (None in the facts): its step reads the ledger and reports it."""

    def __init__(self, name: str):
        from ._ledgers import ledger_fold

        self.replay, self.reserved = ledger_fold(name), ReservedKeys()

    def add(self, rec: Rec) -> bool:
        """The next record; False once neither fold is left."""
        if self.replay is not None:
            try:
                if not self.replay.add(rec):
                    self.replay = None
            except Exception:  # noqa: BLE001 - step 5 replays it and says why
                self.replay = None
        if self.reserved is not None:
            try:
                self.reserved.add(rec)
            except Exception:  # noqa: BLE001 - step 6 reads the ledger
                self.reserved = None
        return self.replay is not None or self.reserved is not None

    def put(self, spill: Spill) -> LedgerFacts | None:
        replay = reserved = None
        try:
            replay = None if self.replay is None else self.replay.result(None)
        except (VerificationError, LookupError):
            pass
        try:
            reserved = None if self.reserved is None else self.reserved.result()
        except Exception:  # noqa: BLE001 - step 6 reads the ledger
            pass
        self.replay = self.reserved = None  # (the folds' own values, dropped as they are pickled)
        if replay is None and reserved is None:
            return None
        try:
            return LedgerFacts.put(spill, replay, reserved)
        except (pickle.PicklingError, TypeError, ValueError, RecursionError, AttributeError):
            return None


# ------------------------------------------------------------------------------ D: per-run facts

def _facts(ix: Index, out: Spilled, meanwhile=lambda: None) -> Spilled:
    """Each run log's ``RunFacts`` (marshalled, into ``out``), taken by two forked workers,
    one from the first run and one from the last (``Shares``), while this process calls
    ``meanwhile()`` (the ledgers' folds) and then waits: the records each run's facts are
    taken from are parsed there, never in this process's heap, where the index lives (what
    was freed between its values would stay resident)."""
    from . import _checks, _costs, _summary  # noqa: F401 - the steps' modules (and the checks, sqlite3...),
    # imported here, before the fork, so that the workers inherit them rather than import them again
    names = [n for n in ix.run_logs if ix.run_logs.is_log(n) and RUN_PATH.match(n)]
    shares, sides = Shares(len(names)), (Spill(), Spill())  # (each worker's frames, written there)
    with contextlib.closing(sides[0]), contextlib.closing(sides[1]):
        front = start(_facts_in_worker, ix, names, shares, False, sides[0], timeout=ix.limits.worker_seconds)
        back = start(_facts_in_worker, ix, names, shares, True, sides[1], timeout=ix.limits.worker_seconds)
        try:
            meanwhile()
            firsts, lasts = front.result(), back.result()
        finally:
            front.cancel()
            back.cancel()
            shares.close()
        try:
            got = [_count(firsts), _count(lasts)]
            if got[0][0] + got[1][0] < len(names):  # one left out
                raise ValueError("count")
            for (count, end), side, taken in zip(got, sides, (names[:got[0][0]], names[::-1][:got[1][0]])):
                for name, packed in zip(taken, _read_frames(side.reader(0, end), end, count), strict=True):
                    if name not in out:  # the one both took, if any: taken alike by both
                        _keep(out, name, packed)
        except ValueError:
            raise UnreadableBundle("", "a verification worker returned a malformed result") from None
    return out


def _count(there: Raw) -> tuple[int, int]:
    """(how many frames, their length) of a ``_facts_in_worker`` result. Raises ValueError."""
    data = there.data
    if len(data) != _COUNT.size:
        raise ValueError("truncated")
    return _COUNT.unpack(data)


_COUNT = struct.Struct("<IQ")  # a facts worker's count of frames and their length


_FRAME = struct.Struct("<I")  # a frame's length; _NO_FACTS for a run with none
_NO_FACTS = 0xFFFFFFFF


def _facts_in_worker(ix: Index, names: list[str], shares: Shares, from_back: bool, side: Spill) -> Raw:
    """``_packed_facts`` of each run's ``_taken`` that ``shares`` gives from the front (or,
    ``from_back``, from the back: the frames then come last run first), one frame a run:
    its length (4 bytes, little-endian; ``_NO_FACTS``: none), then the marshalled facts,
    exactly what the parent keeps (no JSON written here and parsed there), written one
    after another into ``side`` from its start (a temporary file this worker alone writes);
    returns the count of frames (4 bytes) and their length (8)."""
    count, end, out = 0, 0, _Appending(side)
    for _, facts in _taken(ix, (names[i] for i in (shares.back() if from_back else shares.front()))):
        packed = _packed_facts(facts)
        out.put(_FRAME.pack(_NO_FACTS if packed is None else len(packed)))
        end += _FRAME.size
        if packed is not None:
            out.put(packed)
            end += len(packed)
        count += 1
    out.flush()
    return Raw(_COUNT.pack(count, end))


class _Appending:
    """A worker's writes into its ``Spill``, a quarter megabyte at a time (one system call
    for hundreds of small readings or frames)."""

    def __init__(self, spill: Spill):
        self._spill, self._buf = spill, bytearray()

    def put(self, data: bytes) -> None:
        self._buf += data
        if len(self._buf) >= _CHUNK_OUT:
            self.flush()

    def flush(self) -> None:
        if self._buf:
            self._spill.put(self._buf)
            self._buf = bytearray()


_CHUNK_OUT = 1 << 18


def _read_frames(f, end: int, count: int):
    """The ``count`` frames (``_FRAME`` length, then its bytes; ``_NO_FACTS``: None) of a
    worker in the first ``end`` bytes of file ``f``, one at a time, which they must tile
    (else ValueError)."""
    pos = 0
    for _ in range(count):
        head = f.read(_FRAME.size)
        if len(head) != _FRAME.size or pos + _FRAME.size > end:
            raise ValueError("truncated")
        (n,) = _FRAME.unpack(head)
        if n == _NO_FACTS:
            pos += _FRAME.size
            yield None
            continue
        pos += _FRAME.size + n
        frame = f.read(n)
        if len(frame) != n or pos > end:
            raise ValueError("truncated")
        yield frame
    if pos != end:
        raise ValueError("extra bytes")


def _taken(ix: Index, names):
    """(name, its facts) of each run of ``names``, in order, its facts [step 3's, step 4's,
    step 6's], each None when its ``per_run`` raised; None for a run whose records could not
    be read."""
    from . import _checks, _costs, _summary  # the steps' modules (``_facts`` imported them)

    checks, costs, slot = {}, {}, recent_slot()  # each step's pure recomputations; the run held
    summary = not ix.manifest.exploratory  # an exploratory bundle's step 6 is another (``_exploratory``)
    for name in names:
        run = Run(RUN_PATH.match(name).group(2), name, ix.run_logs, slot)
        try:
            records = run.records  # parsed once, read by the three
        except Exception:  # noqa: BLE001 - the steps read it again and say why
            yield name, None
            continue
        yield name, [_per_run(_checks.per_run, ix, run, checks), _per_run(_costs.per_run, ix, run, costs),
                     _per_run(_summary.per_run, run.run_id, records) if summary else None]


def _per_run(fn, *args):
    try:
        return fn(*args)
    except Exception:  # noqa: BLE001 - not held: the step reads the run itself and reports it
        return None


def _packed_facts(facts) -> bytes | None:
    """A run's facts as the index keeps them (marshalled: a few hundred bytes, where the
    lists and strings are kilobytes), None when there are none."""
    if facts is None or facts == [None, None, None]:
        return None
    try:
        return packed_facts(facts)
    except ValueError:  # a value marshal does not take: the steps read the run
        return None


def _keep(out: Spilled, name: str, packed: bytes | None) -> None:
    if packed is not None:
        out.put(name, packed)
