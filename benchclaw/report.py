"""Build an experiment's report from a runs directory (the non-pure half of the analysis).

``benchclaw.analysis`` is pure over plain records so the offline verifier can run it on a
bundle; this module is the one place that reads a ``Store`` to build the same
``ExperimentData``: the journal (every writer, chains verified), the registered spec's
bytes from its blob, every sealed run of the experiment, and the task lures from the task
blobs those runs stored. Writing the outputs (summary.json, Markdown) is here too, so the
CLI stays glue.
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterator

from . import jsonio
from .analysis import ExperimentData, render_markdown, summarise
from .analysis.inputs import experiment_data
from .errors import FormatError, InputError, RegistrationError
from .records import GENESIS, Record, line_hash, parse_line
from .store import ChainFile, Store, safe_name

__all__ = ["load_experiment", "build_summary", "write_summary", "write_markdown",
           "summary_bytes", "build_comparison", "ledger_records", "ledger_stream"]


def load_experiment(store: Store, experiment: str, *,
                    tasks_with_lures: frozenset[str] | None = None) -> ExperimentData:
    """Everything the analysis of ``experiment`` reads from ``store``.

    Raises RegistrationError when the experiment has no journal or no registered spec,
    IntegrityError/FormatError (naming the file and line) for damaged evidence, and
    InputError when the registered spec's blob is missing."""
    entries = [(e.writer, e.record) for e in store.read_journal(experiment)]
    if not any(rec.kind == "prereg" for _, rec in entries):
        raise RegistrationError(f"experiment {experiment}: not registered in {store.root} "
                                f"(register it first: benchclaw prereg experiments/{experiment}.toml)")
    runs = {}
    for run in store.iter_runs():
        policy = run.start.get("policy")
        if isinstance(policy, dict) and policy.get("experiment") == experiment:
            runs[run.run_id] = run.records
    return experiment_data(experiment, entries, runs, store.get_blob,
                           ledgers=ledger_records(store, [rec for _, rec in entries], runs),
                           tasks_with_lures=tasks_with_lures)


def ledger_records(store: Store, journal: list, runs: dict) -> list[Iterator[Record]]:
    """The records of every ledger the journal records or the runs' records name (chains
    verified): what the analysis needs to count calls cut off in flight.

    Each ledger is a stream, read when it is iterated, one line at a time: a grid's ledger
    holds two records per model call, and the analysis only folds them into reservations
    (``ledger_reservations``), so holding them all cost ~17 KB a run (34 MB of a 2,000-run
    site build's 100 MB peak). Iterate each stream once."""
    ids = {rec.body.get("ledger") for rec in journal if rec.kind == "grid.start"}
    ids |= {recs[0].body.get("ledger") for recs in runs.values() if recs}
    out = []
    for lid in sorted(i for i in ids if isinstance(i, str)):
        path = store.root / "ledgers" / f"{safe_name(lid, 'ledger id')}.jsonl"
        if path.is_file():
            out.append(ledger_stream(path))
    return out


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
    from .analysis import compare, experiment_facts

    items = []
    for exp in experiments:
        data = load_experiment(store, exp)
        times = [recs[0].at for recs in data.runs.values() if recs]
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
