"""Step 6, the summary: every table and decision of ``summary.json``, recomputed.

``benchclaw.analysis.summarise`` runs over ``ExperimentData`` built from the bundle's own
bytes (``experiment.experiment_data_from_files``, the function export used to write the
claim), and the result must equal the claimed ``summary.json`` value for value. Each
difference is reported with its JSON path (``primary.policies[2].pass_rate``), the claimed
and the recomputed value, up to a handful per bundle.
"""

from __future__ import annotations

from ..formats import jsonio
from typing import Mapping

from ..errors import BenchClawError
from ._errors import VerificationError
from ..analysis.fold import condense_run, condensed_from_packed, condensed_to_packed
from ._index import Index, LedgerLog, RunLog, held_records
from ._report import Section
from .experiment import chain_records, experiment_data_from_files, summarise

__all__ = ["verify_summary", "differences", "SUMMARY", "per_run"]

SUMMARY = "summary.json"
_MAX_DIFFS = 20


def differences(claimed, recomputed, path: str = "", out: list | None = None) -> list[tuple[str, object, object]]:
    """(JSON path, claimed, recomputed) of every leaf that differs, in document order."""
    out = [] if out is None else out
    if len(out) >= _MAX_DIFFS:
        return out
    if isinstance(claimed, dict) and isinstance(recomputed, dict):
        for key in sorted(set(claimed) | set(recomputed)):
            sub = f"{path}.{key}" if path else str(key)
            if key not in claimed or key not in recomputed:
                out.append((sub, claimed.get(key, "<absent>"), recomputed.get(key, "<absent>")))
            else:
                differences(claimed[key], recomputed[key], sub, out)
    elif isinstance(claimed, list) and isinstance(recomputed, list) and len(claimed) == len(recomputed):
        for i, (a, b) in enumerate(zip(claimed, recomputed)):
            differences(a, b, f"{path}[{i}]", out)
    elif claimed != recomputed or type(claimed) is not type(recomputed):
        out.append((path or "<root>", claimed, recomputed))
    return out


def _short(v) -> str:
    text = jsonio.dumps(v).decode("utf-8") if not isinstance(v, str) or v == "<absent>" else repr(v)
    return text if len(text) <= 120 else text[:117] + "..."


def _count(obj, sec: Section) -> None:
    for label in ("primary", "secondary"):
        part = obj.get(label) if isinstance(obj, dict) else None
        if isinstance(part, dict):
            sec.count("decisions", len(part.get("decisions") or []))
            sec.count("tables", sum(1 for v in part.values() if isinstance(v, (list, dict))))


def verify_summary(ix: Index, runs, sec: Section) -> None:
    if not ix.has(SUMMARY):
        raise VerificationError(SUMMARY, "missing: the bundle claims no summary to verify")
    claimed = ix.read_json(SUMMARY)
    experiments = ix.manifest.experiments
    for exp in experiments:
        mine = claimed if len(experiments) == 1 else (claimed.get(exp) if isinstance(claimed, dict) else None)
        sec.attempt(_compare, ix, exp, mine, sec)


def per_run(run_id: str, records) -> tuple | None:
    """Step 6's reading of one run, pure: ``condense_run`` of its records, packed as the
    fold keeps it (``condensed_to_packed``; None when the analysis cannot read the run:
    the step reads it itself and says why). The reading stage takes it of every run log
    (``_reading``, D), so the step neither parses nor packs a call."""
    return condensed_to_packed(condense_run(run_id, records))


def _condensed(ix: Index, name: str):
    """(first record, condensed run) the reading stage took of run log ``name``, or None."""
    row = ix.facts_of(name).condensed
    if row is None:
        return None
    first_of = getattr(ix.run_logs, "first_of", None)  # (``RunLogs``: without reading the rest of the log)
    return (ix.run_logs[name].first if first_of is None else first_of(name)), condensed_from_packed(row)


def _chain(ix: Index, files: "_Files", name: str):
    """The records of a run log or ledger the reading stage verified (a run log's parsed
    again, one at a time: the analysis condenses each at once), or the error reading gave."""
    log = ix.run_logs.get(name)
    if isinstance(log, RunLog):
        return log.records()
    recs = ix.ledgers.get(name)
    if isinstance(recs, LedgerLog):  # its records, streamed
        return recs
    return chain_records(files, name)  # raises the error the reading stage kept


class _Files(Mapping):
    """Every entry, as the analysis reads a bundle's files: what the index keeps whole, or
    (a run log or ledger not parsed, an unreadable entry) the error reading it gave."""

    def __init__(self, ix: Index):
        self._ix = ix

    def __getitem__(self, name: str) -> bytes:
        ix = self._ix
        if name not in ix.sizes:
            raise KeyError(name)
        for parsed in (ix.run_logs.get(name), ix.ledgers.get(name)):
            if isinstance(parsed, VerificationError):
                raise parsed
        return ix.read(name)

    def __contains__(self, name) -> bool:
        return name in self._ix.sizes

    def names_under(self, prefix: str) -> list[str]:
        """The entries whose name starts with ``prefix`` (``Index.names_under``)."""
        return self._ix.names_under(prefix)

    def __iter__(self):
        return iter(self._ix.names)

    def __len__(self) -> int:
        return len(self._ix.names)


def _compare(ix: Index, exp: str, claimed, sec: Section) -> None:
    files = _Files(ix)
    journal = ix.journals.get(exp)  # as the reading stage read it (its error: read again, to raise it)
    try:
        data = experiment_data_from_files(files, exp, chains=lambda name: _chain(ix, files, name),
                                          journal=None if journal is None or isinstance(journal, VerificationError)
                                          else held_records(journal),  # (not its ``run`` records: one a run)
                                          condensed=lambda name: _condensed(ix, name),
                                          reserved=lambda name: ix.ledger_facts_of(name).reserved)
        recomputed = jsonio.loads(jsonio.dumps(summarise(data)))  # the JSON value, as written
    except BenchClawError as e:
        raise VerificationError(SUMMARY, f"cannot recompute the summary of {exp}: {e}") from None
    except (TypeError, ValueError, KeyError, AttributeError, ArithmeticError) as e:
        # the analysis trusts field types that step 2 checks; a run failing there lands here
        raise VerificationError(SUMMARY, f"cannot recompute the summary of {exp}: the analysis "
                                f"rejected the evidence ({type(e).__name__}: {e})"[:400]) from None
    _count(recomputed, sec)
    if isinstance(claimed, dict) and (claimed.get("format"), claimed.get("v")) != (
            recomputed.get("format"), recomputed.get("v")):
        raise VerificationError(SUMMARY, f"summary format {claimed.get('format')!r} v{claimed.get('v')!r}; "
                                f"this verifier computes {recomputed.get('format')!r} v{recomputed.get('v')!r} "
                                "(verify with the BenchClaw version that exported the bundle)")
    for path, got, want in differences(claimed, recomputed):
        sec.fail(VerificationError(SUMMARY, f"{path}: claimed {_short(got)}, recomputed {_short(want)}"))
