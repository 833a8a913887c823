"""Export one experiment's evidence as a reproducible bundle (docs/FORMAT.md "Bundles").

A bundle is what an auditor receives: the sealed runs, every blob they reference, the
task versions, catalogs and spec they used, the experiment journals, the ledgers and the
summary as claimed, listed with their digests in ``manifest.json``. The pipeline reads
top to bottom: collect the files from the store (verifying as it reads), compute the
claimed summary with the same pure analysis the verifier re-runs, write the manifest,
pack a deterministic zip. Exporting twice gives identical bytes on one machine; the
manifest digest (the bundle's identity) is identical on any machine.

An exploratory journal (the studio's) is exported the same way in its own form: its runs,
ledgers (every session's and every day's), tasks, catalogs and objects, labelled
``exploratory`` in the manifest, with no spec and no summary, because it claims no
hypothesis and no decision (docs/FORMAT.md "Bundles", exploratory form).
"""

from __future__ import annotations

import hashlib
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator

from ..formats import jsonio
from ..analysis import summarise
from ..analysis.summary import gc_paused
from ..errors import IntegrityError, InputError, UsageError
from ..paths import make_output_dir, refuse_evidence_overlap
from ..analysis.report import ledger_stream, summary_bytes
from ..evidence.store import Store
from ..verify.manifest import BUNDLE_FORMAT, BUNDLE_VERSION, MANIFEST
from ._collect import Contents, Entry, collect, collect_exploratory, journal_is_exploratory
from ._zipwrite import write_zip

__all__ = ["export_bundle", "ExportReport", "SUMMARY"]

SUMMARY = "summary.json"
_CHUNK = 1 << 20


@dataclass(frozen=True)
class ExportReport:
    path: Path
    manifest_digest: str
    files: int
    bytes: int


def export_bundle(runs_dir: Path | str, experiment_id: str, out_path: Path | str, *,
                  include_site: Path | str | None = None,
                  note: Callable[[str], None] | None = None) -> ExportReport:
    """Write the bundle of ``experiment_id`` from ``runs_dir`` to ``out_path``.

    ``experiment_id`` may name an exploratory journal (``studio-<label>``): then the bundle
    is its exploratory form. Waits while another process runs the experiment's grid
    (``note`` is told so); raises UsageError while the studio of that journal serves.
    Raises InputError (missing runs directory, journal, run or blob; unwritable output),
    IntegrityError (damaged evidence in the runs directory), and whatever the analysis
    raises for experiment data it cannot summarise.
    """
    store = Store.existing(runs_dir)
    refuse_evidence_overlap(Path(out_path).parent, "bundle", evidence=(store.root,), may_contain=True)
    make_output_dir(Path(out_path).parent, "bundle")
    # While a grid of this experiment runs, its journal, ledger and runs are mid-story (a
    # bundle of them would not verify): wait for it, and hold it off while reading.
    site = Path(include_site) if include_site else None
    _refuse_serving_studio(store, experiment_id)
    # (The collector is paused: everything held is acyclic, and scanning the condensed runs
    # on every generation-2 collection would cost seconds; see ``analysis.gc_paused``.)
    with store.experiment_quiet(experiment_id, note), gc_paused():
        exploratory = journal_is_exploratory(store, experiment_id)
        reader = Store(store.root, fsync=store.fsync)  # not the lock's: ``Contents.analysed`` drops it
        contents = (collect_exploratory if exploratory else collect)(reader, experiment_id, site)
        del reader
        if not exploratory:  # an exploratory journal claims no summary
            contents.add_bytes(SUMMARY, claimed_summary(contents))
        contents.analysed()  # (the exploratory form's: its journal)
    with tempfile.TemporaryFile() as manifest, gc_paused():  # on disk: it lists every file of the bundle
        digest, size = write_manifest(manifest, experiment_id, contents, exploratory=exploratory)
        try:
            zsize = write_zip(Path(out_path), _zip_entries(manifest, size, contents))
        except OSError as e:
            raise InputError(f"{out_path}: cannot write the bundle ({e.strerror or e})") from None
    return ExportReport(Path(out_path), digest, contents.count() + 1, zsize)


def _refuse_serving_studio(store: Store, journal_id: str) -> None:
    """A studio serves until it is stopped, so waiting for its lock (as for a grid) would wait
    for ever: say so at once. Raises UsageError."""
    if journal_is_exploratory(store, journal_id) and store.experiment_live(journal_id):
        raise UsageError(f"{store.experiment_lock_path(journal_id)}: the studio of {journal_id} is serving; its "
                         "runs in flight would not verify. Stop it (SIGTERM), export, then start it again")


def claimed_summary(contents: Contents) -> bytes:
    """``summary.json`` bytes: the analysis of exactly the runs, journal and ledgers being
    bundled, built the way the verifier builds it from the bundle (the experiment's runs,
    the ledgers its grid and runs name), so an honest export verifies by construction.
    The analysis input is dropped from ``contents`` once ``ExperimentData`` is built."""
    fold = contents.fold
    paths = [contents.store.root / "ledgers" / f"{lid}.jsonl" for lid in fold.ledger_ids(r for _, r in contents.journal)
             if f"ledgers/{lid}.jsonl" in contents.files]
    data = fold.data(contents.journal, contents.store.get_blob, ledgers=lambda: [ledger_stream(p) for p in paths])
    del fold
    contents.analysed()  # the condensed runs (their call keys and attempt ids) are in ``data`` now, as views
    return summary_bytes(summarise(data))  # as `benchclaw report --json` writes it


def write_manifest(fh, experiment: str, contents: Contents, *, exploratory: bool = False) -> tuple[str, int]:
    """Write ``manifest.json`` (FORMAT.md "Bundles": canonical JSON, rows sorted by path,
    ``"exploratory": true`` only for an exploratory journal's bundle) to ``fh`` row by row;
    returns its digest and size."""
    h, size = hashlib.sha256(), 0

    def put(data: bytes) -> None:
        nonlocal size
        h.update(data)
        fh.write(data)
        size += len(data)

    put(b'{"experiments":' + jsonio.dumps([experiment]) + (b',"exploratory":true' if exploratory else b"")
        + b',"files":[')
    for i, (path, e) in enumerate(contents.entries()):
        put((b"," if i else b"") + jsonio.dumps({"digest": e.digest, "path": path, "size": e.size}))
    put(b'],"format":' + jsonio.dumps(BUNDLE_FORMAT) + b',"v":' + jsonio.dumps(BUNDLE_VERSION) + b"}")
    return "sha256:" + h.hexdigest(), size


def _zip_entries(manifest, size: int, contents: Contents) -> Iterator[tuple[str, int, Iterator[bytes]]]:
    manifest.seek(0)
    yield MANIFEST, size, iter(lambda: manifest.read(_CHUNK), b"")
    for path, e in contents.entries():
        yield path, e.size, _chunks(e)


def _chunks(e: Entry) -> Iterator[bytes]:
    """An entry's bytes, re-hashed as they are read: a file changed since it was listed
    raises IntegrityError naming it (the bundle is then not written)."""
    if isinstance(e.source, bytes):
        yield e.source
        return
    h, left = hashlib.sha256(), e.size
    try:
        with open(e.source, "rb") as f:
            f.seek(e.offset)
            while left and (chunk := f.read(min(_CHUNK, left))):
                left -= len(chunk)
                h.update(chunk)
                yield chunk
    except FileNotFoundError:
        raise InputError(f"{e.source}: {e.digest} is missing") from None
    if left or "sha256:" + h.hexdigest() != e.digest:
        raise IntegrityError(f"{e.source}: bytes do not match digest {e.digest}")
