"""The build cache and the page writer: rewrite only what changed.

The output folder keeps ``.benchclaw-build/``: the renderer digest it was built with,
each page's input key, and per sealed run the facts other pages need (summary, the
analysis's view of the run, blobs it links). A run id names immutable bytes, so its cached
entry never goes stale; a new renderer digest (templates, CSS, site or analysis code, the
public flag) discards the whole cache.

The cache is derived data: deleting it (or the whole ``site/``) only costs a full build.
It is written atomically, in canonical JSON, so the same inputs give the same bytes here
too. A page is written through a temporary file and a rename, and only when its bytes
change, so a static host or a browser never sees half a page.
"""

from __future__ import annotations

import hashlib
import heapq
import itertools
import os
import tempfile
from pathlib import Path
from typing import Iterable, Iterator

from ..formats import jsonio
from ._render import run_url

__all__ = ["BuildCache", "PageWriter", "Spill", "compact_dumps", "write_atomic", "fast_dumps", "CACHE_DIR"]

CACHE_DIR = ".benchclaw-build"
_SLICE = 4096  # list items or dict entries dumped at once when the state is written
CACHE_VERSION = 6  # 3: records.jsonl holds the analysis's view of each run; 4: aborted runs are read whole;
# 5: run summaries and call views carry the provider-truth flags (usage doubts, simulated replies);
# 6: records.jsonl holds the analysis's CondensedRun of each run (null: read the run again)


def fast_dumps(obj) -> bytes:
    """Sorted-key JSON bytes for derived data (the cache, page keys). Not evidence, so it
    skips ``jsonio.dumps``'s float scan, which costs seconds on a 10,000-run cache."""
    try:
        import orjson

        return orjson.dumps(obj, option=orjson.OPT_SORT_KEYS)
    except ImportError:  # pragma: no cover - orjson is a dependency
        return jsonio.dumps(obj)


def compact_dumps(obj) -> bytes:
    """JSON bytes of derived data held for later in this build (``Spill``), in the object's
    own key order, so that loading them gives back an equal object iterated in the same
    order (``fast_dumps`` sorts keys: for the cache file and page keys)."""
    import orjson

    return orjson.dumps(obj)


def write_atomic(path: Path, data: bytes | Iterable[bytes]) -> None:
    """Write ``data`` (bytes, or chunks of them) through a temporary file and a rename
    (folders are made on first need)."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        f = open(tmp, "wb")
    except FileNotFoundError:
        os.makedirs(path.parent, exist_ok=True)
        f = open(tmp, "wb")
    with f:
        if isinstance(data, bytes):
            f.write(data)
        else:
            for chunk in data:
                f.write(chunk)
    os.replace(tmp, path)


class BuildCache:
    """What the previous build of this output folder left behind.

    ``state.json`` holds pages, run summaries, experiments and copied blobs; the analysis's
    condensed run (``_experiment.run_payload``) is in ``records.jsonl``
    (append-only, one run per line; a later line for a run wins), loaded only when an
    experiment must be analysed again.
    """

    def __init__(self, out: Path, renderer: str):
        self.dir = out / CACHE_DIR
        self.renderer = renderer
        self.pages: dict[str, str] = {}
        self.runs: dict[str, dict] = {}
        self.experiments: dict[str, dict] = {}
        self.objects: list[str] = []
        self.previous_pages: set[str] = set()  # every page of the previous build (to prune)
        self.valid = False
        self._records: dict[str, bytes] | None = None

    @classmethod
    def load(cls, out: Path, renderer: str) -> "BuildCache":
        """The cache if it was written by the same renderer; else an empty one."""
        cache = cls(out, renderer)
        try:
            data = jsonio.loads((cache.dir / "state.json").read_bytes())
        except (OSError, ValueError):
            return cache
        if not isinstance(data, dict) or data.get("v") != CACHE_VERSION:
            return cache
        cache.previous_pages = set(data.get("pages") or {})
        cache.objects = data.get("objects") or []
        if data.get("renderer") != renderer:
            return cache
        cache.pages = data.get("pages") or {}
        cache.runs = data.get("runs") or {}
        cache.experiments = data.get("experiments") or {}
        cache.valid = True
        return cache

    def records(self) -> dict[str, bytes]:
        """Run id -> the analysis payload (JSON bytes, parsed when an experiment is analysed
        again) of every run a previous build saw."""
        if self._records is None:
            self._records = {}
            if self.valid:
                try:
                    data = (self.dir / "records.jsonl").read_bytes()
                except OSError:
                    data = b""
                for line in data.splitlines():
                    self._record(line)
        return self._records

    def _record(self, line: bytes) -> None:
        if line.startswith(b'["') and line[66:68] == b'",' and line.endswith(b"]"):  # as ``save`` writes it
            self._records[line[2:66].decode("ascii", "replace")] = line[68:-1]
            return
        try:
            run_id, payload = jsonio.loads(line)
            self._records[str(run_id)] = fast_dumps(payload)
        except (ValueError, TypeError):
            pass

    def save(self, pages: Iterable[tuple[str, str]], runs: "Spill", experiments: dict[str, dict],
             objects: Iterable[str], new_records: "_Second") -> None:
        """Write the cache; ``pages``: (path, key) of every page, in path order (each once);
        ``runs``: every run's cache entry (``compact_dumps`` bytes) by run id;
        ``new_records``: this build's analysis payloads (JSON bytes) by run id (``runs.second``)."""
        # line by line, in run id order: joined, a 20,000-run build held them twice at once
        lines = (b'["' + k.encode("ascii") + b'",' + new_records[k] + b"]\n" for k in sorted(new_records))
        path = self.dir / "records.jsonl"
        if self.valid and path.is_file():
            with open(path, "ab") as f:
                f.writelines(lines)
        else:
            write_atomic(path, lines)
        write_atomic(self.dir / "state.json", self._state(pages, runs, experiments, objects))

    def _state(self, pages: Iterable[tuple[str, str]], runs: "Spill", experiments: dict, objects: Iterable[str]) -> Iterator[bytes]:
        """``state.json``'s bytes (sorted-key JSON, as ``fast_dumps`` of the whole object would
        give) in pieces: the run summaries one by one, never the whole text at once."""
        # (The blob list and the pages, one per run or blob, are written in slices too: each
        # dumped whole, and then concatenated, was about 25 MB at 20,000 runs, the build's peak.)
        yield b'{"experiments":' + fast_dumps(experiments) + b',"objects":['
        objects, i = iter(objects), 0
        while chunk := list(itertools.islice(objects, _SLICE)):
            yield (b"," if i else b"") + fast_dumps(chunk)[1:-1]
            i += 1
        yield b'],"pages":{'
        pages, i = iter(pages), 0
        while chunk := dict(itertools.islice(pages, _SLICE)):
            yield (b"," if i else b"") + fast_dumps(chunk)[1:-1]
            i += 1
        yield b'},"renderer":' + fast_dumps(self.renderer) + b',"runs":{'
        for i, run_id in enumerate(sorted(runs)):
            yield (b"," if i else b"") + fast_dumps(run_id) + b":" + fast_dumps(jsonio.loads(runs[run_id]))
        yield b'},"v":' + fast_dumps(CACHE_VERSION) + b"}"


class Spill:
    """Run id -> bytes, kept in a temporary file rather than in memory: the build's run
    summaries (about 1.6 KB, read by the few pages that list runs) and, as a run's second
    value (``put``, read through ``second``), its analysis payload (about 1.3 KB a run, read
    once more when the experiment is analysed and once when the cache is saved). Held,
    20,000 runs' of them cost about 90 MB from the run pages to the end of the build. What
    is held per run is its id and one int (offset and both lengths): one index for both, as
    a second index of the same run ids was some 100 bytes a run."""

    def __init__(self):
        self._file = tempfile.TemporaryFile()
        self._where: dict[str, int] = {}  # run id -> offset << 64 | length << 32 | second's length + 1 (0: none)
        self._end = 0
        self.second = _Second(self)

    def put(self, run_id: str, payload: bytes, second: bytes | None = None) -> None:
        """Keep ``payload`` (and ``second``, or none) for ``run_id``; a later put wins."""
        data = payload if second is None else payload + second
        self._file.seek(self._end)
        self._file.write(data)
        self._where[run_id] = self._end << 64 | len(payload) << 32 | (0 if second is None else len(second) + 1)
        self._end += len(data)

    def __setitem__(self, run_id: str, payload: bytes) -> None:
        self.put(run_id, payload)

    def __getitem__(self, run_id: str) -> bytes:
        where = self._where[run_id]
        self._file.seek(where >> 64)
        return self._file.read(where >> 32 & 0xFFFFFFFF)

    def _second(self, run_id: str) -> bytes | None:
        where = self._where.get(run_id, 0)
        if not where & 0xFFFFFFFF:
            return None
        self._file.seek((where >> 64) + (where >> 32 & 0xFFFFFFFF))
        return self._file.read((where & 0xFFFFFFFF) - 1)

    def __contains__(self, run_id) -> bool:
        return run_id in self._where

    def __iter__(self) -> Iterator[str]:
        return iter(self._where)

    def __len__(self) -> int:
        return len(self._where)

    def close(self) -> None:
        self._file.close()


class _Second:
    """A ``Spill``'s second values, by run id (only the runs that have one)."""

    def __init__(self, spill: Spill):
        self._spill = spill

    def __contains__(self, run_id) -> bool:
        return bool(self._spill._where.get(run_id, 0) & 0xFFFFFFFF)

    def __getitem__(self, run_id: str) -> bytes:
        got = self._spill._second(run_id)
        if got is None:
            raise KeyError(run_id)
        return got

    def __iter__(self) -> Iterator[str]:
        return (k for k, where in self._spill._where.items() if where & 0xFFFFFFFF)


class PageWriter:
    """Renders templates into the output folder, skipping pages whose inputs did not change.

    ``pages``: each page's key by its path, but for the run pages (``record_run``), kept as
    their run ids alone (a run page's path is ``run_url`` of its id, its key the id): as
    entries of ``pages`` they were some 180 bytes a run. ``items()`` gives them all."""

    def __init__(self, out: Path, env, scrub, old_pages: dict[str, str], common: dict):
        self.out, self.env, self.scrub = out, env, scrub
        self._base = str(out) + os.sep  # string paths: pathlib costs ~10 us a page at 10,000 pages
        self.old = old_pages
        self.pages: dict[str, str] = {}
        self._run_ids: list[str] = []
        self.common = common
        self.written = self.skipped = 0

    def unchanged(self, rel: str, key: str) -> bool:
        """True (and the page kept) when ``rel`` was built from the same ``key`` and exists."""
        if self.old.get(rel) == key and os.path.isfile(self._base + rel):
            self.pages[rel] = key
            self.skipped += 1
            return True
        return False

    def keep(self, rel: str) -> None:
        """Keep a page of the previous build as it is (its inputs are known unchanged)."""
        if rel in self.old and os.path.isfile(self._base + rel):
            self.pages[rel] = self.old[rel]
            self.skipped += 1

    def render(self, rel: str, template: str, key: str | None = None, **context) -> None:
        """Render ``template`` to ``rel``. With ``key``, skip when the inputs are unchanged;
        without, the key is the digest of the output and an identical page is not rewritten."""
        if key is not None and self.unchanged(rel, key):
            return
        html = self.env.get_template(template).render(root="../" * rel.count("/"), **self.common, **context)
        data = self.scrub(html).encode("utf-8")
        digest = key or hashlib.sha256(data).hexdigest()
        if key is None and self.unchanged(rel, digest):
            return
        write_atomic(self.out / rel, data)
        self.pages[rel] = digest
        self.written += 1

    def record(self, rel: str, key: str, written: bool) -> None:
        """Account for a page written elsewhere (a worker process)."""
        self.pages[rel] = key
        if written:
            self.written += 1
        else:
            self.skipped += 1

    def record_run(self, run_id: str, written: bool) -> None:
        """Account for the replay page of run ``run_id`` (``run_url``; its key is the id),
        written by a worker process or kept; each run once."""
        self._run_ids.append(run_id)
        if written:
            self.written += 1
        else:
            self.skipped += 1

    def items(self) -> Iterator[tuple[str, str]]:
        """Every page of this build as (path, key), in path order (one pass at a time)."""
        # A run id is 64 hex digits (``Store.read_run`` checks it): run_url's order is the ids'.
        odd = any(len(r) != 64 for r in self._run_ids)
        self._run_ids.sort(key=run_url if odd else None)
        runs = ((run_url(r), r) for r in self._run_ids)
        return heapq.merge(sorted(self.pages.items()), runs)
