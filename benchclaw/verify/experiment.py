"""Build the analysis input (``ExperimentData``) from a bundle's files, purely.

Export computes the claimed ``summary.json`` with ``analysis.fold`` over the very runs it
is about to pack, and the verifier recomputes it with the same fold over the files it read
from the zip (each run condensed as soon as it is read, so one run's records are held at
a time). ``benchclaw.analysis.report`` folds a store's runs the same way, so an honest bundle
verifies by construction and a difference can only come from the bytes. What this module adds is reading the zip's
files: every ``journals/<experiment>/<writer>.jsonl`` (chains verified, merged in reader
order), every run log of the experiment, the ledgers the grid or runs name, and blobs by
digest. (The registered spec is read by the analysis itself, from its blob; the one spec
parser is the pure ``benchclaw.formats.spec``.)
"""

from __future__ import annotations

from typing import Callable, Mapping, Sequence

from ..analysis import ExperimentData, summarise
from ..analysis.fold import CondensedRun, ExperimentFold, in_experiment
from ..errors import BenchClawError
from ..formats.records import Record, split_lines, verify_chain
from ._errors import VerificationError, from_error
from .manifest import RUN_PATH, object_path

__all__ = ["experiment_data_from_files", "summarise", "journal_records", "registrations",
           "chain_records", "registration_digest", "PINNED"]

# The fields of a prereg (or deviation) body a registration digest covers (FORMAT.md §8).
PINNED = ("experiment", "spec_digest", "catalog", "tasks")


def registration_digest(body: dict) -> str:
    """``sha256:`` of the canonical JSON object of the pinned fields of a registration
    record (absent ones as null): what ``benchclaw prereg`` prints for an auditor to hold."""
    import hashlib

    from ..formats import jsonio

    pinned = {k: body.get(k) for k in PINNED}
    if "sim_profiles" in body:  # only where pinned, so registrations made before it keep their digest
        pinned["sim_profiles"] = body["sim_profiles"]
    return "sha256:" + hashlib.sha256(jsonio.dumps(pinned)).hexdigest()


def chain_records(files: Mapping[str, bytes], name: str) -> list[Record]:
    """Every record of a chained JSONL entry. Raises VerificationError naming the line."""
    lines, torn = split_lines(files[name])
    if torn:
        raise VerificationError(name, "torn last line (no newline)", len(lines) + 1)
    try:
        return verify_chain(lines, name)
    except BenchClawError as e:
        raise from_error(e, name) from None


def journal_records(files: Mapping[str, bytes], experiment: str) -> list[tuple[str, int, Record]]:
    """(entry name, 1-based line, record) of every journal record, merged in reader order.
    Raises VerificationError for a torn or broken journal."""
    prefix = f"journals/{experiment}/"
    out = []
    for name in sorted(n for n in files if n.startswith(prefix) and n.endswith(".jsonl")):
        writer = name[len(prefix):-len(".jsonl")]
        out.extend((name, writer, i, rec) for i, rec in enumerate(chain_records(files, name), 1))
    out.sort(key=lambda t: (t[3].at, t[1], t[3].seq))
    return [(name, line, rec) for name, _, line, rec in out]


def registrations(journal: list[tuple[str, int, Record]]) -> list[tuple[str, str]]:
    """(at, spec_digest) of every prereg and deviation, in journal order."""
    return [(rec.at, rec.body.get("spec_digest")) for _, _, rec in journal
            if rec.kind in ("prereg", "deviation") and isinstance(rec.body.get("spec_digest"), str)]


def experiment_data_from_files(files: Mapping[str, bytes], experiment: str, *,
                               chains: Callable[[str], Sequence[Record]] | None = None,
                               journal: Sequence[tuple[str, int, Record]] | None = None,
                               condensed: Callable[[str], tuple[Record, CondensedRun] | None] | None = None,
                               reserved: Callable[[str], dict | None] | None = None) -> ExperimentData:
    """The analysis input of ``experiment`` from bundle files (path -> bytes), built as
    export builds the claim (``analysis.fold``: each run condensed as soon as it is read,
    so one run's records are held at a time). Raises VerificationError naming the entry
    when a journal, run, ledger or the spec cannot be read. ``chains``: entry name ->
    records already verified from exactly these bytes (the verifier's reading stage), so
    they are not verified twice; by default each is parsed from ``files``. ``journal``: what
    ``journal_records`` gives, already read from these files (else it is read here); its
    ``run`` records may be left out (the analysis reads none: they are dropped here).
    ``condensed``: entry name -> (its first record, ``fold.condense_run`` of its records)
    already taken from exactly these bytes (None: not taken; the run is read here).
    ``reserved``: ledger entry name -> ``fold.ReservedKeys.result`` of its records, taken
    from exactly these bytes (None: not taken), so that a ledger none of whose
    reservations matters is not read again."""
    chain = chains or (lambda name: chain_records(files, name))
    prefix = f"journals/{experiment}/"
    journal = journal_records(files, experiment) if journal is None else journal
    # (a journal's ``run`` records left out, as export leaves them out: the analysis never
    # reads them, and a grid has one a run)
    entries = [(name[len(prefix):-len(".jsonl")], rec) for name, _, rec in journal if rec.kind != "run"]
    fold = ExperimentFold(experiment, spill=True)  # (its views in a temporary file, as export folds them)
    under = getattr(files, "names_under", None)  # (the verifier's: no other entry's name made)
    runs = under("runs/") if under is not None else [n for n in files if n.startswith("runs/")]
    for name in sorted(runs):  # run id order: runs/<aa>/<id>.jsonl
        # (the other entries filtered out before the sort: the verifier's names are made as they are read)
        m = RUN_PATH.match(name)
        got = condensed(name) if m and condensed is not None else None
        if got is not None:
            if in_experiment(got[:1], experiment):
                fold.add_condensed(m.group(2), got[1])
        elif m:
            fold.add(m.group(2), chain(name))
    names = [f"ledgers/{lid}.jsonl" for lid in fold.ledger_ids(rec for _, rec in entries)]
    ledgers = [chain(n) for n in names if n in files]
    taken = None if reserved is None else [reserved(n) for n in names if n in files]

    def get_blob(d: str) -> bytes:
        name = object_path(d)
        if name not in files:
            raise VerificationError(name, f"blob {d} is missing from the bundle")
        return files[name]

    try:
        return fold.data(entries, get_blob, ledgers=lambda: ledgers, reserved=taken)
    except BenchClawError as e:
        if isinstance(e, VerificationError):
            raise
        raise VerificationError("", f"experiment {experiment}: {e}") from None
