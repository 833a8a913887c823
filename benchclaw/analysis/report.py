"""Build an experiment's report from a runs directory (the non-pure half of the analysis).

``benchclaw.analysis`` is pure over plain records so the offline verifier can run it on a
bundle; this module is the one place that reads a ``Store`` to build the same
``ExperimentData``: the journal (every writer, chains verified), the registered spec's
bytes from its blob, every sealed run of the experiment, and the task lures from the task
blobs those runs stored. Writing the outputs (summary.json, Markdown) is here too, so the
CLI stays glue.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator, Mapping

from ..formats import jsonio
from . import ExperimentData, render_markdown, summarise
from .fold import CondensedRun, ExperimentFold
from .inputs import registered_digest
from ..errors import FormatError, InputError, RegistrationError
from ..formats.records import GENESIS, Record, line_hash, parse_line
from ..evidence.store import ChainFile, Store, safe_name

__all__ = ["load_experiment", "build_summary", "write_summary", "write_markdown",
           "summary_bytes", "build_comparison", "ledger_stream", "ExperimentInput", "experiment_input",
           "analysed_journal"]


def load_experiment(store: Store, experiment: str, *,
                    tasks_with_lures: frozenset[str] | None = None) -> ExperimentData:
    """Everything the analysis of ``experiment`` reads from ``store``.

    Runs are read one at a time and condensed at once (``analysis.fold``), so memory
    holds one run's records at a time, not the experiment's. Raises RegistrationError
    when the experiment has no journal or no registered spec, IntegrityError/FormatError
    (naming the file and line) for damaged evidence, and InputError when the registered
    spec's blob is missing."""
    entries = [(e.writer, e.record) for e in store.read_journal(experiment)]
    if not any(rec.kind == "prereg" for _, rec in entries):
        raise RegistrationError(f"experiment {experiment}: not registered in {store.root} "
                                f"(register it first: benchclaw prereg experiments/{experiment}.toml)")
    fold = _fold(store, experiment, None)
    return fold.data(entries, store.get_blob, ledgers=_ledgers(store, fold, entries),
                     tasks_with_lures=tasks_with_lures)


@dataclass(frozen=True)
class ExperimentInput:
    """One experiment as the site receives it: the analysis input (``data``; its spec is
    ``{}`` when the registered one cannot be read) and why not (``spec_error``), so a
    site still shows an experiment whose journal or spec is missing or odd."""

    data: ExperimentData
    spec_error: str | None


def experiment_input(store: Store, experiment: str, known: Mapping[str, CondensedRun | None]) -> ExperimentInput:
    """``load_experiment`` for a builder that keeps condensed runs between builds.

    ``known``: every run of the experiment by id, with its cached ``CondensedRun`` or None
    (then it is read from the store). Raises IntegrityError/FormatError (naming the file)
    for a damaged journal, ledger or run log."""
    entries = analysed_journal(store, experiment)
    digest = registered_digest([rec for _, rec in entries])
    spec, spec_error = _spec(store, digest)
    fold = _fold(store, experiment, known, spill=True)  # (the site: views read back cell by cell)
    data = fold.data(entries, store.get_blob, ledgers=_ledgers(store, fold, entries), spec=spec)
    return ExperimentInput(data, spec_error)


def analysed_journal(store: Store, experiment: str) -> list[tuple[str, Record]]:
    """(writer, record) of every journal record the analysis and the site read, in reader
    order (at, writer, seq; FORMAT.md §7), each writer's chain verified as it streams. A
    grid's ``run`` records (one per run, read by neither) are left out: held, they were
    the largest part of a 20,000-run build's memory after the runs themselves."""
    entries = []
    for path in store.journal_paths(experiment):
        entries.extend((path.stem, rec) for rec in ledger_stream(path) if rec.kind != "run")
    entries.sort(key=lambda e: (e[1].at, e[0], e[1].seq))
    return entries


def _spec(store: Store, digest: str | None) -> tuple[dict, str | None]:
    if not digest:
        return {}, "no registered spec in the journal"
    try:
        return tomllib.loads(store.get_blob(digest).decode("utf-8")), None
    except Exception as e:  # noqa: BLE001 - a bad spec is reported, not fatal
        return {}, f"spec {digest}: {e}"


def _fold(store: Store, experiment: str, known: Mapping[str, CondensedRun | None] | None, *,
          spill: bool = False) -> ExperimentFold:
    fold = ExperimentFold(experiment, spill=spill)
    if known is None:
        for run in store.iter_runs():
            fold.add(run.run_id, run.records)
        return fold
    for run_id in sorted(known):
        cached = known[run_id]
        if cached is not None:
            fold.add_condensed(run_id, cached)
        else:
            fold.add(run_id, store.read_run(run_id).records)
    return fold


def _ledgers(store: Store, fold: ExperimentFold, entries: list) -> Callable[[], list[Iterator[Record]]]:
    """Opens the records of every ledger the journal's grids or the runs name (chains
    verified as they are read): what the analysis needs to count calls cut off in flight."""
    paths = [store.root / "ledgers" / f"{safe_name(lid, 'ledger id')}.jsonl"
             for lid in fold.ledger_ids(rec for _, rec in entries)]
    return lambda: [ledger_stream(p) for p in paths if p.is_file()]


def ledger_stream(path: Path) -> Iterator[Record]:
    """A chain file's records, verified as they are read. On any defect (a torn line, a
    bad line, a broken link) the whole file is read again by ``ChainFile.read``, which
    raises the error naming the line (or, when a writer was appending meanwhile, returns
    the records the stream has not yielded yet)."""
    prev, i = GENESIS, 0
    with open(path, "rb") as f:
        for raw in f:
            line = raw[:-1]
            if not raw.endswith(b"\n"):
                break
            try:
                rec = parse_line(line, f"{path}:{i + 1}")
            except FormatError:
                break
            if rec.seq != i or rec.prev != prev:
                break
            prev, i = line_hash(line), i + 1
            yield rec
        else:
            return
    yield from ChainFile(path).read()[i:]


def build_summary(store: Store, experiment: str) -> dict:
    """The summary.json object of ``experiment`` (raises as ``load_experiment``)."""
    return summarise(load_experiment(store, experiment))


def build_comparison(store: Store, experiments: list[str], policies: list[str] | None = None) -> dict:
    """The comparison object of ``experiments`` in the order given (``analysis.compare``
    over each one's summary and facts). Raises as ``load_experiment`` for each."""
    from . import compare, experiment_facts

    items = []
    for exp in experiments:
        data = load_experiment(store, exp)
        times = [v.at for v in data.views.values()] + [recs[0].at for recs in data.runs.values() if recs]
        items.append((summarise(data), experiment_facts(data.spec, data.journal, times)))
    return compare(items, policies)


def summary_bytes(summary: dict) -> bytes:
    """summary.json's bytes: canonical JSON and a newline."""
    return jsonio.dumps(summary) + b"\n"


def _write(path: Path, data: bytes) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    except OSError as e:
        raise InputError(f"{path}: cannot write ({e.strerror})") from None


def write_summary(summary: dict, path: Path) -> None:
    """Write summary.json. Raises InputError naming the path when it cannot be written."""
    _write(path, summary_bytes(summary))


def write_markdown(summary: dict, path: Path) -> None:
    """Write the Markdown tables. Raises InputError naming the path when it cannot."""
    _write(path, render_markdown(summary).encode("utf-8"))
