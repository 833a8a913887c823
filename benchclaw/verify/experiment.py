"""Build the analysis input (``ExperimentData``) from a bundle's files, purely.

Export computes the claimed ``summary.json`` with this function over the very files it is
about to pack, and the verifier recomputes it with the same function over the files it
read from the zip: one code path, so an honest bundle verifies by construction and a
difference can only come from the bytes.

- journal: every ``journals/<experiment>/<writer>.jsonl``, each chain verified, merged in
  reader order (``at``, writer, ``seq``; FORMAT.md §7);
- spec: the blob of the last registered ``spec_digest`` (``prereg`` or ``deviation``),
  read with ``analysis.inputs.spec_from_bytes`` as ``benchclaw.report`` does
  (``benchclaw.experiments.spec`` imports the store, so the verifier cannot use it);
- runs: every run log whose ``run.start.policy.experiment`` is the experiment;
- tasks with lures: from the task blobs the runs reference (``analysis.lured_tasks``).
"""

from __future__ import annotations

from typing import Mapping

from ..analysis import ExperimentData, lured_tasks, summarise
from ..analysis.inputs import registered_digest, spec_from_bytes
from ..errors import BenchClawError
from ..records import Record, split_lines, verify_chain
from ._errors import VerificationError
from .manifest import RUN_PATH, object_path

__all__ = ["experiment_data_from_files", "summarise", "journal_records", "registrations",
           "chain_records"]


def chain_records(files: Mapping[str, bytes], name: str) -> list[Record]:
    """Every record of a chained JSONL entry. Raises VerificationError naming the line."""
    lines, torn = split_lines(files[name])
    if torn:
        raise VerificationError(name, "torn last line (no newline)", len(lines) + 1)
    try:
        return verify_chain(lines, name)
    except BenchClawError as e:
        from ._runs import from_error

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


def _spec(files: Mapping[str, bytes], digest: str | None) -> dict:
    if digest is None:
        return {}
    name = object_path(digest)
    if name not in files:
        raise VerificationError(name, f"the registered spec {digest} is missing from the bundle")
    try:
        return spec_from_bytes(files[name], name)
    except BenchClawError as e:
        raise VerificationError(name, str(e).removeprefix(f"{name}: ")) from None


def _runs(files: Mapping[str, bytes], experiment: str) -> dict[str, tuple[Record, ...]]:
    runs = {}
    for name in sorted(files):
        m = RUN_PATH.match(name)
        if not m:
            continue
        records = chain_records(files, name)
        policy = records[0].body.get("policy") if records else None
        if isinstance(policy, dict) and policy.get("experiment") == experiment:
            runs[m.group(2)] = tuple(records)
    return runs


def experiment_data_from_files(files: Mapping[str, bytes], experiment: str) -> ExperimentData:
    """The analysis input of ``experiment`` from bundle files (path -> bytes).
    Raises VerificationError naming the entry when a journal, run or spec cannot be read."""
    journal = journal_records(files, experiment)
    digest = registered_digest([rec for _, _, rec in journal])
    runs = _runs(files, experiment)

    def get_blob(d: str) -> bytes:
        return files[object_path(d)]

    starts = [recs[0].body for recs in runs.values()]
    return ExperimentData(experiment=experiment, spec=_spec(files, digest), spec_digest=digest,
                          journal=tuple(rec for _, _, rec in journal), runs=runs,
                          tasks_with_lures=lured_tasks(starts, get_blob))
