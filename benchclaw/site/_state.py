"""What the build's stages share: the ``Build`` they fill in, stage by stage, and the key
of a page's inputs.

It sits below every stage module: ``_build`` runs the stages in order, each stage reads and
fills a ``Build``, and no stage imports ``_build`` (or a stage after it).
"""

from __future__ import annotations

import hashlib
import heapq
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Iterator, NamedTuple, Sequence

from ..formats import jsonio

from ..evidence.store import Store
from ._cache import BuildCache, PageWriter, Spill, fast_dumps
from ._render import Scrubber

if TYPE_CHECKING:
    from ._runpages import Workers

__all__ = ["Build", "BuildReport", "RunFacts", "Summaries", "digest_of"]


@dataclass(frozen=True)
class BuildReport:
    """What a build did. ``seconds`` is wall time (a measurement, not money)."""

    pages_written: int
    pages_skipped: int
    seconds: float
    runs: int = 0
    runs_rendered: int = 0
    warnings: tuple[str, ...] = ()


class RunFacts(NamedTuple):
    """What most stages ask of every run (which experiment, simulated or not), kept in
    memory so that they need not read every summary back: ``policy.experiment`` and
    ``simulated`` as the summary holds them."""

    at: str
    id: str
    experiment: object
    simulated: object


class Summaries(Sequence):
    """Every run's summary (``_runview.summarise_run``) in (at, id) order, read back from the
    build's spill of cache entries when asked for: held, 20,000 summaries cost about 60 MB,
    while the pages that list them read a page of 100 at a time. ``facts`` is the same
    order's ``RunFacts``, in memory. A summary is a fresh object on each read: a stage that
    needs one again reads it again (or keeps it)."""

    def __init__(self, runs: Spill | None = None, facts: list[RunFacts] | None = None):
        self._runs = runs
        self.facts = facts or []

    def get(self, run_id: str) -> dict:
        return jsonio.loads(self._runs[run_id])["s"]

    def __len__(self) -> int:
        return len(self.facts)

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [self.get(f.id) for f in self.facts[i]]
        return self.get(self.facts[i].id)

    def __iter__(self) -> Iterator[dict]:
        return (self.get(f.id) for f in self.facts)


@dataclass
class Build:
    """Everything the stages share."""

    store: Store
    out: Path
    templates: Path
    tasks_dir: Path | None
    public: bool
    bundle: Path | None
    workers: "Workers"  # the page renderers (``_runpages.start_workers``)
    cache: BuildCache
    pages: PageWriter
    scrub: Scrubber
    runs: Spill = field(default_factory=Spill)  # run id -> its cache entry ({"s": summary, "l": blobs}) and
    # (second) this build's analysis payload, on disk
    summaries: Summaries = field(default_factory=Summaries)
    experiments: dict[str, dict] = field(default_factory=dict)
    objects: "DigestSet" = field(default_factory=lambda: DigestSet())  # blobs pages link; run pages' added in stage 6
    warnings: list[str] = field(default_factory=list)
    rendered: int = 0
    comparison: dict | None = None  # stage 4b's, when the runs hold more than one experiment

    @property
    def new_records(self):
        """Run id -> this build's analysis payload (JSON bytes): ``runs``' second values."""
        return self.runs.second

    def reader(self) -> Store:
        """The ``Store`` a stage reads blobs from: ``store``, a ``BuildStore``, which keeps
        only the few blob locations it looked up, not an index of every blob (``_blobs``), so
        one serves every stage. (A plain ``Store`` per stage used to build that index three
        times, and it was held through each experiment's fold.)"""
        return self.store

    def payload(self, run_id: str):
        """The analysis's condensed run (``_experiment.run_payload``), from this build or cached
        by an earlier one; None when it must be read again (lost, or not readable)."""
        if run_id in self.new_records:
            return self.new_records[run_id]
        return self.cache.records().get(run_id)


def digest_of(obj) -> str:
    """A short stable key for page inputs (canonical JSON, SHA-256)."""
    return hashlib.sha256(fast_dumps(obj)).hexdigest()


class DigestSet:
    """SHA-256 digests (the blobs the pages link: ``sha256:<hex>``, or bare hex), each kept
    once, in bounded memory: at most ``BATCH`` are held as raw bytes in a set; each full
    batch is written, sorted, to a temporary file, and ``sorted()`` merges the batches. As a
    set of strings a 20,000-run site's ~130,000 linked blobs cost about 25 MB. A digest is
    held as a tag byte (bare hex 0, ``sha256:`` 1: the strings' own order, as "s" sorts
    after every hex digit) and its 32 bytes; one of another shape is kept as it is
    (``_odd``)."""

    BATCH = 16384
    _PREFIX = ("", "sha256:")  # by tag byte
    _SIZE = 33

    def __init__(self):
        self._recent: set[bytes] = set()
        self._odd: set[str] = set()
        self._spill = None
        self._batches: list[tuple[int, int]] = []

    def add(self, digest: str) -> None:
        raw = self._raw(digest)
        if raw is None:
            self._odd.add(digest)
            return
        self._recent.add(raw)
        if len(self._recent) >= self.BATCH:
            if self._spill is None:
                self._spill = tempfile.TemporaryFile()
            self._spill.seek(0, os.SEEK_END)
            self._batches.append((self._spill.tell(), len(self._recent)))
            self._spill.write(b"".join(sorted(self._recent)))
            self._recent = set()

    def _raw(self, digest) -> bytes | None:
        """Tag byte and raw digest, or None when ``_text`` would not give ``digest`` back."""
        if not isinstance(digest, str):
            return None
        tag = 1 if len(digest) == 71 and digest.startswith("sha256:") else 0
        hexd = digest[7:] if tag else digest
        try:
            raw = bytes.fromhex(hexd) if len(hexd) == 64 else None
        except ValueError:
            return None
        if raw is None or raw.hex() != hexd:
            return None
        return bytes((tag,)) + raw

    def _text(self, raw: bytes) -> str:
        return self._PREFIX[raw[0]] + raw[1:].hex()

    def update(self, digests) -> None:
        for d in digests:
            self.add(d)

    def _batch(self, offset: int, n: int) -> Iterator[bytes]:
        done, size = 0, self._SIZE
        while done < n:
            self._spill.seek(offset + size * done)
            chunk = self._spill.read(size * min(n - done, 2048))
            done += len(chunk) // size
            yield from (chunk[i:i + size] for i in range(0, len(chunk), size))

    def sorted(self) -> Iterator[str]:
        """Every digest once, in order (one pass at a time)."""
        batches = [self._batch(o, n) for o, n in self._batches] + [iter(sorted(self._recent))]
        texts, last = (self._text(raw) for raw in heapq.merge(*batches)), None
        for d in heapq.merge(texts, iter(sorted(self._odd))):
            if d != last:
                yield d
                last = d
