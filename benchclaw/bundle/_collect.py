"""Gather the files of one experiment's bundle from a runs directory, without holding them.

Everything is read through the store's verifying readers (run ids re-hashed, chains
re-checked; blobs re-hashed as they are packed), so an export never packs evidence that
is already broken: it stops with an error naming the damaged file instead. Task versions,
catalogs and experiment specs are rebuilt from the blobs the runs reference (FORMAT.md
§3), not from whatever the working tree holds today, so the bundle shows exactly what the
runs used.

Memory stays flat in the number of runs: what is kept of a file is where to read it again,
its digest and its size (``Entry``; a run log, named by its digest, keeps only its size; a
blob only its 32-byte digest, spilled to a temporary file in sorted batches (``BlobSet``),
its size read again from the file), and each run is
condensed into the analysis's view of it (``analysis.fold``) as soon as it is read, then
dropped. Of the journal only the records the analysis reads are kept: a grid journals one
``run`` record per run, of which only the run id is needed (to pack the runs it names).

An exploratory journal (the studio's) is collected by ``collect_exploratory`` into the same
``Contents``: its runs are the ones its ``studio.run`` records name or whose
``run.start.policy.studio`` is it, and its ledgers are every session and day ledger opened
under its name (the day ledgers are named by no run, so they are found by name and by their
``ledger.open``). It has no spec and no summary, so its runs are not folded.
"""

from __future__ import annotations

import hashlib
import heapq
import os
import struct
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Iterator, NamedTuple

from ..analysis.fold import ExperimentFold
from ..errors import InputError, IntegrityError
from ..formats.records import Record, blob_refs
from ..analysis.report import ledger_stream
from ..evidence.store import VERSION_TEXT, SealedRun, Store, safe_name
from ..verify.layout import (catalog_entry, ledger_ids, parse_listing, spec_entry,
                             task_entry)
from ..verify.exploratory import is_exploratory, studio_ledger
from ..verify.manifest import object_path, path_order, run_path

__all__ = ["collect", "collect_exploratory", "journal_is_exploratory", "Contents", "Entry", "RunSizes"]


class Entry(NamedTuple):
    """A bundle file: its digest and size, and its source: the bytes themselves or a file
    whose ``size`` bytes from ``offset`` they are (journals and ledgers may grow meanwhile;
    a packed blob is a slice of its pack: a bundle holds every blob as ``objects/<aa>/<hex>``
    whatever the runs directory's layout, FORMAT.md "Packs")."""

    digest: str
    size: int
    source: bytes | str
    offset: int = 0


@dataclass
class Contents:
    """Every file of the bundle but the manifest, and the analysis input being folded."""

    store: Store
    fold: ExperimentFold
    journal: list[tuple[str, Record]] = field(default_factory=list)  # every record but ``run`` (see ``_journals``)
    named: "RunIds | set[str]" = field(default_factory=set)  # the run ids the journal's ``run`` records name
    files: dict[str, Entry] = field(default_factory=dict)  # journals, ledgers, tasks, catalogs, spec, site
    runs: "RunSizes" = field(default_factory=lambda: RunSizes())  # run id -> size (runs/<aa>/<id>.jsonl)
    objects: "BlobSet" = field(default_factory=lambda: BlobSet())  # the blobs packed under objects/<aa>/<hex>

    def add_bytes(self, path: str, data: bytes) -> None:
        self.files[path] = Entry("sha256:" + hashlib.sha256(data).hexdigest(), len(data), data)

    def analysed(self) -> None:
        """Drop the analysis input once ``ExperimentData`` is made (it is most of what is
        held), and the store's blob index with the store (a fresh ``Store`` keeps the root):
        the zip's passes read where each blob is from ``objects`` (``BlobSet.located``), so
        no index is built again. (The index is a Store's own, built on first need: about 56
        bytes a blob of the whole runs directory, some 11 blobs a run.)"""
        self.fold = ExperimentFold(self.fold.experiment)
        self.journal, self.named = [], set()
        self.store = Store(self.store.root, fsync=self.store.fsync)

    def count(self) -> int:
        return len(self.files) + len(self.runs) + self.objects.count()

    def blob_entry(self, digest: str) -> Entry:
        """The blob's Entry: its size and where its bytes are (loose or packed). Raises
        InputError when it is nowhere."""
        loc = self.store.find_blob(digest)
        if loc is None:
            raise InputError(f"{self.store.blob_path(digest)}: blob {digest} is missing")
        return Entry(digest, loc.size, loc.path, loc.offset)

    def entries(self) -> Iterator[tuple[str, Entry]]:
        """Every (bundle path, Entry) in manifest order (by the UTF-8 bytes of the path)."""
        runs_dir = f"{self.store.root}{os.sep}runs{os.sep}"
        blobs = ((object_path(d), Entry(d, size, path, offset))  # located when collected: no index is built again
                 for d, path, offset, size in (("sha256:" + raw.hex(), p, o, n) for raw, p, o, n in self.objects.located()))
        runs = ((run_path(r), Entry("sha256:" + r, n, f"{runs_dir}{r[:2]}{os.sep}{r}.jsonl"))
                for r, n in self.runs)
        files = sorted(self.files.items(), key=lambda kv: path_order(kv[0]))
        return heapq.merge(files, blobs, runs, key=lambda kv: path_order(kv[0]))


class RunSizes:
    """Run id -> the size of its log, for every packed run, kept in a temporary file: the
    runs are read in run id order, and read back in that order (manifest and zip). Held as
    a dict, 20,000 of them cost about 4 MB through the analysis."""

    def __init__(self):
        self._file = tempfile.TemporaryFile()
        self._n, self._last = 0, ""

    def add(self, run_id: str, size: int) -> None:
        """Raises ValueError for a run id not after the last one added."""
        if run_id <= self._last:
            raise ValueError(f"run {run_id} added out of order")
        self._file.seek(0, os.SEEK_END)
        self._file.write(b"%s %d\n" % (run_id.encode("ascii"), size))
        self._n, self._last = self._n + 1, run_id

    def __len__(self) -> int:
        return self._n

    def __iter__(self) -> Iterator[tuple[str, int]]:
        """(run id, size) in run id order (one pass at a time)."""
        self._file.seek(0)
        for line in self._file:
            run_id, size = line.split(b" ")
            yield run_id.decode("ascii"), int(size)


class BlobSet:
    """The raw SHA-256 digests of the blobs to pack, each listed once with where its bytes
    are, in bounded memory.

    A set of 32-byte strings costs about 100 bytes a blob (20,000 runs name about 220,000
    blobs); here at most ``BATCH`` are held, and each full batch is written, sorted, to a
    temporary file, a blob as its digest and its location (pack or loose file, offset,
    size: 52 bytes). ``sorted()`` and ``located()`` merge the batches (a digest seen in two
    batches comes out once), so every pass over the bundle's blobs reads them back in order,
    and the zip's passes need no blob index (a ``Store`` builds one for the whole runs
    directory, some 12 MB at 20,000 runs, and each lookup stats a loose path first)."""

    BATCH = 32768
    _SIZE = 32
    _REC = _SIZE + 20  # digest, then ``>IQQ``: path number (LOOSE: its loose file), offset, size
    _LOOSE = 1 << 31

    def __init__(self):
        self._recent: dict[bytes, bytes] = {}  # digest -> its location, packed
        self._spill = None  # the temporary file of sorted batches
        self._batches: list[tuple[int, int]] = []  # (offset, records) of each batch in it
        self._paths: dict[str, int] = {}  # a pack (or the objects/ folder of loose blobs) -> its number

    def __contains__(self, raw: bytes) -> bool:
        return raw in self._recent  # a digest in a written batch may be added again: merged out

    def add(self, raw: bytes, path: str = "", offset: int = 0, size: int = 0) -> None:
        """Add ``raw``, whose bytes are ``size`` bytes of ``path`` from ``offset``."""
        hexd = raw.hex()
        tail = f"{os.sep}{hexd[:2]}{os.sep}{hexd}"
        if offset == 0 and path.endswith(tail):  # a loose blob: its folder is numbered, not its path
            no = self._LOOSE | self._paths.setdefault(path[:-len(tail)], len(self._paths))
        else:
            no = self._paths.setdefault(path, len(self._paths))
        self._recent[raw] = _LOC.pack(no, offset, size)
        if len(self._recent) >= self.BATCH:
            self._write_batch()

    def flush(self) -> None:
        """Write the digests held so far as a batch (before the analysis: up to ``BATCH``
        of them, about 6 MB, need not be held while it runs)."""
        if self._recent:
            self._write_batch()

    def _write_batch(self) -> None:
        if self._spill is None:
            self._spill = tempfile.TemporaryFile()
        self._spill.seek(0, os.SEEK_END)
        self._batches.append((self._spill.tell(), len(self._recent)))
        self._spill.write(b"".join(raw + self._recent[raw] for raw in sorted(self._recent)))
        self._recent = {}

    def _read_batch(self, offset: int, n: int) -> Iterator[bytes]:
        size, left = self._REC, n
        while left:
            self._spill.seek(offset + (n - left) * size)
            chunk = self._spill.read(min(left, 4096) * size)
            left -= len(chunk) // size
            yield from (chunk[i:i + size] for i in range(0, len(chunk), size))

    def _records(self) -> Iterator[bytes]:
        """Every record once (the first of a digest's), in digest order."""
        batches = [self._read_batch(o, n) for o, n in self._batches]
        batches.append(iter([raw + self._recent[raw] for raw in sorted(self._recent)]))
        last = None
        for rec in heapq.merge(*batches, key=lambda r: r[:32]):
            raw = rec[:32]
            if raw != last:
                yield rec
                last = raw

    def sorted(self) -> Iterator[bytes]:
        """Every digest once, in byte order."""
        return (rec[:32] for rec in self._records())

    def located(self) -> Iterator[tuple[bytes, str, int, int]]:
        """(digest, path, offset, size) of every blob once, in digest order."""
        paths = {no: path for path, no in self._paths.items()}
        for rec in self._records():
            raw = rec[:32]
            no, offset, size = _LOC.unpack_from(rec, 32)
            if no & self._LOOSE:
                hexd = raw.hex()
                yield raw, f"{paths[no & ~self._LOOSE]}{os.sep}{hexd[:2]}{os.sep}{hexd}", offset, size
            else:
                yield raw, paths[no], offset, size

    def count(self) -> int:
        return sum(1 for _ in self._records())


_LOC = struct.Struct(">IQQ")


def collect(store: Store, experiment: str, include_site: Path | None = None) -> Contents:
    """Every file of the bundle except the manifest and ``summary.json``.

    Raises InputError when the experiment has no journal or a named run or blob is
    missing, IntegrityError when a run, journal or blob is damaged.
    """
    safe_name(experiment, "experiment id")
    c = Contents(store, ExperimentFold(experiment, spill=True))
    c.add_bytes("VERSION", VERSION_TEXT)
    _journals(c, experiment)
    bodies = [b for _, b in ((w, r.body) for w, r in c.journal)]
    # the registered specs, and the simulator profiles a registration pins (FORMAT.md §8)
    _blobs(c, [{"spec_digest": b.get("spec_digest"), "sim_profiles": b.get("sim_profiles")} for b in bodies])
    starts = _runs(c, experiment)
    _ledgers(c, ledger_ids(starts.ledgers, bodies))
    _tasks(c, starts.tasks)
    _catalogs(c, starts.catalogs)
    _spec(c, experiment)
    if include_site is not None:
        _site(c, Path(include_site))
    c.objects.flush()
    return c


def _file_entry(path: Path) -> Entry:
    h, size = hashlib.sha256(), 0
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
            size += len(chunk)
    return Entry("sha256:" + h.hexdigest(), size, str(path))


def _journals(c: Contents, experiment: str) -> None:
    store = c.store
    paths = store.journal_paths(experiment)
    if not paths:
        raise InputError(f"{store.root}/journals/{experiment}: experiment {experiment!r} has no "
                         "journal (register it with `benchclaw prereg` and run it first)")
    # Each writer's chain is verified as it streams (as ``Store.read_journal`` does); kept in
    # its reader order: (at, writer, seq), FORMAT.md §7.
    for path in paths:
        for rec in ledger_stream(path):
            if rec.kind == "run":  # the analysis reads the runs themselves, never these
                c.named.add(rec.body.get("run_id"))
            else:
                c.journal.append((path.stem, rec))
        c.files[f"journals/{experiment}/{path.name}"] = _file_entry(path)
    c.journal.sort(key=lambda e: (e[1].at, e[0], e[1].seq))
    c.named.discard(None)
    c.named = RunIds(c.named)


class _Starts(NamedTuple):
    """What the packed runs' ``run.start`` records name, each once (in run order)."""

    ledgers: list[dict]  # {"ledger": id}
    tasks: dict[str, dict]  # tasks/<id>/v<N> -> the first run's task object
    catalogs: dict[str, str]  # catalogs/<name>-<hex>.toml -> digest


def _runs(c: Contents, experiment: str) -> _Starts:
    """Read every sealed run (verifying it); pack the experiment's and those its journal
    names, folding each into the analysis input."""
    named = c.named
    missing = sorted(named.difference(c.store.run_ids()))  # (a list of every id, dropped at once)
    if missing:
        raise InputError(f"{c.store.root}: the journal of {experiment} names run {missing[0]} "
                         f"which is not in runs/ ({len(missing)} missing)")
    starts = _Starts([], {}, {})
    for run_id in _run_ids(c.store):
        run = c.store.read_run(run_id)
        policy = run.start.get("policy") or {}
        if run_id in named or (isinstance(policy, dict) and policy.get("experiment") == experiment):
            _pack_run(c, run, starts)
    return starts


def _run_ids(store: Store) -> Iterator[str]:
    """``store.run_ids()`` one folder at a time (a run's folder is its id's first two
    characters, so folders in order give ids in order): the whole list of ids is about 120
    bytes a run. Any other layout: the whole sorted list."""
    base = store.root / "runs"
    folders = sorted(p for p in base.iterdir() if p.is_dir()) if base.is_dir() else []
    if any(len(f.name) != 2 for f in folders):
        yield from store.run_ids()
        return
    for folder in folders:
        ids = sorted(p.stem for p in folder.glob("*.jsonl"))
        if any(not i.startswith(folder.name) for i in ids):
            raise InputError(f"{folder}: a sealed run whose id does not start with {folder.name}")
        yield from ids


class RunIds:
    """A set of run ids held as their raw SHA-256 digests, sorted, in one bytes object
    (32 bytes an id instead of about 180 in a set of strings); ids of another form are
    kept as strings."""

    def __init__(self, ids: Iterable[str]):
        raw, self._odd = [], set()
        for i in ids:
            try:
                b = bytes.fromhex(i) if isinstance(i, str) and len(i) == 64 else None
            except ValueError:
                b = None
            if b is not None and b.hex() == i:
                raw.append(b)
            else:
                self._odd.add(i)
        raw.sort()
        self._raw, self._n = b"".join(raw), len(raw)

    def __contains__(self, run_id: str) -> bool:
        if run_id in self._odd:
            return True
        try:
            key = bytes.fromhex(run_id) if len(run_id) == 64 else None
        except ValueError:
            return False
        if key is None:
            return False
        lo, hi = 0, self._n
        while lo < hi:
            mid = (lo + hi) // 2
            got = self._raw[32 * mid:32 * mid + 32]
            if got < key:
                lo = mid + 1
            elif got > key:
                hi = mid
            else:
                return True
        return False

    def __iter__(self) -> Iterator[str]:
        for i in range(self._n):
            yield self._raw[32 * i:32 * i + 32].hex()
        yield from self._odd

    def difference(self, other: Iterable[str]) -> set[str]:
        return set(self) - set(other)


def _pack_run(c: Contents, run: SealedRun, starts: _Starts, *, fold: bool = True) -> None:
    c.runs.add(run.run_id, os.path.getsize(run.path))
    _blobs(c, (r.body for r in run.records))
    if fold:
        c.fold.add(run.run_id, run.records)
    start = run.start
    if "ledger" in start and not any(s["ledger"] == start["ledger"] for s in starts.ledgers):
        starts.ledgers.append({"ledger": start["ledger"]})
    prefix = task_entry(start.get("task") or {})
    if prefix is not None:
        starts.tasks.setdefault(prefix, start["task"])
    for path, digest in catalog_entry(start.get("catalog")):
        starts.catalogs.setdefault(path, digest)


def _blobs(c: Contents, bodies) -> None:
    for body in bodies:
        for digest in blob_refs(body):
            _blob(c, digest)


def _blob(c: Contents, digest: str) -> None:
    """Add a blob to the bundle, once. Raises InputError when it is missing."""
    raw = bytes.fromhex(digest.removeprefix("sha256:"))
    if raw not in c.objects:
        e = c.blob_entry(digest)  # where it is (blobs are immutable; the zip writer re-hashes them)
        c.objects.add(raw, e.source, e.offset, e.size)


def _ledgers(c: Contents, ids: list[str]) -> None:
    for lid in ids:
        path = c.store.root / "ledgers" / f"{lid}.jsonl"
        if not path.is_file():
            raise InputError(f"{path}: ledger {lid} named by the runs is missing")
        entry = _file_entry(path)
        _blobs(c, (r.body for r in ledger_stream(path)))  # verifies the chain as it reads
        c.files[f"ledgers/{lid}.jsonl"] = entry


def _tasks(c: Contents, tasks: dict[str, dict]) -> None:
    for prefix, task in tasks.items():
        listing = c.store.get_blob(task["digest"])
        try:
            rows = parse_listing(listing)
        except ValueError as e:
            raise IntegrityError(f"{c.store.blob_path(task['digest'])}: task listing: {e}") from None
        for path, digest in rows:
            # the blobs the listing names too: a run "can be rebuilt from objects/ alone"
            # (FORMAT.md §3), and the analysis reads task.toml by digest (lures)
            _blob(c, digest)
            c.files[f"{prefix}/{path}"] = c.blob_entry(digest)


def _catalogs(c: Contents, catalogs: dict[str, str]) -> None:
    for path, digest in catalogs.items():
        c.files[path] = _verified_entry(c, digest)


def _verified_entry(c: Contents, digest: str) -> Entry:
    """The entry of a blob that is bundled under another name only (not under objects/),
    its bytes re-hashed now (``get_blob``)."""
    c.store.get_blob(digest)
    return c.blob_entry(digest)


def _spec(c: Contents, experiment: str) -> None:
    digest = None
    for _, rec in c.journal:
        if rec.kind in ("prereg", "deviation") and isinstance(rec.body.get("spec_digest"), str):
            digest = rec.body["spec_digest"]
    if digest is None:
        raise InputError(f"experiment {experiment}: the journal holds no registration (prereg)")
    c.files[spec_entry(experiment)] = _verified_entry(c, digest)


def _site(c: Contents, site: Path) -> None:
    if not site.is_dir():
        raise InputError(f"{site}: no such site folder (build it with `benchclaw build`)")
    for p in sorted(site.rglob("*")):
        if p.is_symlink():
            raise InputError(f"{p}: a site file is a symbolic link; a bundle holds regular files only")
        if p.is_file():
            c.files["site/" + p.relative_to(site).as_posix()] = _file_entry(p)


# ---------------------------------------------------------------------------- exploratory form

def journal_is_exploratory(store: Store, journal_id: str) -> bool:
    """True when ``journals/<journal_id>/`` is an exploratory (studio) journal. Raises
    IntegrityError for a damaged journal; False when there is none (``collect`` says so)."""
    safe_name(journal_id, "experiment id")
    first = None  # the least (at, writer, seq) seen, with its record: reader order's first
    for path in store.journal_paths(journal_id):
        for rec in ledger_stream(path):  # every chain verified, one record held at a time
            key = (rec.at, path.stem, rec.seq)
            if first is None or key < first[0]:
                first = (key, rec)
    # (``read_journal`` would hold a grid's whole journal, one ``run`` record per run, to
    # look at one record: about 28 MB at 20,000 runs, while export's floor is 40 MB.)
    return first is not None and is_exploratory([(first[1].kind, first[1].body)])


def collect_exploratory(store: Store, journal_id: str, include_site: Path | None = None) -> Contents:
    """Every file of an exploratory journal's bundle but the manifest (it has no spec and no
    summary); its runs are not folded (there is no analysis to feed).

    Raises InputError when the studio left runs unfinished (killed and not restarted: its
    restart recovers and journals them) or a named run or blob is missing, IntegrityError
    when a run, journal, ledger or blob is damaged.
    """
    safe_name(journal_id, "experiment id")
    c = Contents(store, ExperimentFold(journal_id))
    c.add_bytes("VERSION", VERSION_TEXT)
    _journals(c, journal_id)
    journal = [(r.kind, r.body) for _, r in c.journal]
    _refuse_unfinished(store, journal_id, journal)
    starts = _studio_runs(c, journal_id, journal)
    _studio_ledgers(c, journal_id)
    _tasks(c, starts.tasks)
    _catalogs(c, starts.catalogs)
    if include_site is not None:
        _site(c, Path(include_site))
    return c


def _refuse_unfinished(store: Store, journal_id: str, journal: list[tuple[str, dict]]) -> None:
    started = {b.get("attempt") for k, b in journal if k == "studio.run.start"}
    started -= {b.get("attempt") for k, b in journal if k == "studio.run"}
    if started:
        raise InputError(f"{store.root}/journals/{journal_id}: the studio stopped with {len(started)} run(s) "
                         "unfinished (killed?); start it once more, so that it seals and journals them "
                         "and settles their reservations, then export")


def _studio_runs(c: Contents, journal_id: str, journal: list[tuple[str, dict]]) -> _Starts:
    """Read every sealed run (verifying it); pack the studio's, unfolded."""
    store = c.store
    named = {b.get("run_id") for k, b in journal if k == "studio.run"}
    named.discard(None)
    have = set(store.run_ids())
    missing = sorted(r for r in named if r not in have)
    if missing:
        raise InputError(f"{store.root}: the journal of {journal_id} names run {missing[0]} "
                         f"which is not in runs/ ({len(missing)} missing)")
    starts = _Starts([], {}, {})
    for run_id in sorted(have):
        run = store.read_run(run_id)
        policy = run.start.get("policy") or {}
        if run_id in named or (isinstance(policy, dict) and policy.get("studio") == journal_id):
            _pack_run(c, run, starts, fold=False)
    return starts


def _studio_ledgers(c: Contents, journal_id: str) -> None:
    from ..evidence.store import ChainFile

    for path in sorted((c.store.root / "ledgers").glob(f"{journal_id}-*.jsonl")):
        if studio_ledger(journal_id, path.stem) is None:
            continue
        entry = _file_entry(path)  # first: the ledger may grow while it is read
        records = ChainFile(path).read()
        if not records or records[0].body.get("experiment") != journal_id:
            continue  # another studio's ledger whose label extends this one's
        _blobs(c, (r.body for r in records))
        c.files[f"ledgers/{path.name}"] = entry
