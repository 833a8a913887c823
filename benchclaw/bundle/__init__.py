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

from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from .. import jsonio
from ..errors import InputError, UsageError
from ..paths import make_output_dir, refuse_evidence_overlap
from ..store import Store
from ..verify.manifest import build_manifest
from ._collect import collect, collect_exploratory, journal_is_exploratory
from ._zipwrite import write_zip

__all__ = ["export_bundle", "ExportReport", "SUMMARY"]

SUMMARY = "summary.json"


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
    with store.experiment_quiet(experiment_id, note):
        exploratory = journal_is_exploratory(store, experiment_id)
        files = (collect_exploratory if exploratory else collect)(store, experiment_id, site)
    if not exploratory:
        files[SUMMARY] = claimed_summary(files, experiment_id)
    manifest = build_manifest([experiment_id], files, exploratory=exploratory)
    try:
        size = write_zip(Path(out_path), manifest.to_bytes(), files)
    except OSError as e:
        raise InputError(f"{out_path}: cannot write the bundle ({e.strerror or e})") from None
    return ExportReport(Path(out_path), manifest.digest, len(files) + 1, size)


def _refuse_serving_studio(store: Store, journal_id: str) -> None:
    """A studio serves until it is stopped, so waiting for its lock (as for a grid) would wait
    for ever: say so at once. Raises UsageError."""
    if journal_is_exploratory(store, journal_id) and store.experiment_live(journal_id):
        raise UsageError(f"{store.experiment_lock_path(journal_id)}: the studio of {journal_id} is serving; its "
                         "runs in flight would not verify. Stop it (SIGTERM), export, then start it again")


def claimed_summary(files: dict[str, bytes], experiment_id: str) -> bytes:
    """``summary.json`` bytes: the analysis of exactly the files being bundled, built the way
    the verifier builds it, so an honest export verifies by construction."""
    from ..verify.experiment import experiment_data_from_files, summarise

    data = experiment_data_from_files(files, experiment_id)
    return jsonio.dumps(summarise(data)) + b"\n"  # as `benchclaw report --json` writes it
