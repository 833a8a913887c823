"""Experiments on the site: the analysis's summary, plus what each policy did per cell.

The site never computes a metric of its own. The policy table, cost bounds and decisions
are ``benchclaw.analysis.summarise`` verbatim (the same object the report and the
verifier produce), over the one input the report uses (``report.experiment_input``: an
``ExperimentData``); the per-cell view ("what each policy did with these runs") comes from
the analysis's own trial functions over the same selection, so a cell page cannot
disagree with the experiment's table.

Speed: re-reading 10,000 run logs for every rebuild would cost seconds, so when a run's
page is rendered the builder also condenses the run, from its full records, into the
analysis's own ``CondensedRun`` (``run_payload``) and caches it by run id as JSON
(``analysis.fold.condensed_to_json``): a sealed run never changes. What is cached is the
analysis's type, not a pick of record fields, so no field the analysis reads can be
missing from it. A run the analysis cannot read is not cached: its records are read again
whenever its experiment is analysed, so the summary lists it with the analysis's own
message.
"""

from __future__ import annotations

import functools
import marshal
import tempfile
from decimal import Decimal
from typing import Callable, Iterator, Mapping

from ..formats import jsonio
from ..analysis import ExperimentData
from ..analysis.summary import summarise_cells
from ..analysis.inputs import registered_digest
from ..analysis.fold import CondensedRun, condense_run, condensed_from_json, condensed_to_json
from ..errors import FormatError
from ..formats.money import fmt_usd
from ..formats.records import Record
from ..evidence.store import SealedRun

__all__ = ["run_payload", "CachedRuns", "analyse", "CellSpool", "journal_facts"]


def run_payload(run: SealedRun) -> list | None:
    """What the cache keeps for the analysis of a run (None: read it again when needed)."""
    return condensed_to_json(condense_run(run.run_id, run.records))


class CachedRuns(Mapping):
    """Cached payloads (JSON bytes, or None) by run id, each fetched (``payload(run_id)``)
    and parsed into a ``CondensedRun`` only when asked for, so an experiment's runs are not
    all held twice (as payloads here and folded by the analysis). None for a run to read
    again: never cached, or an entry of another shape (a damaged cache costs a read, not a
    lie)."""

    def __init__(self, run_ids: list[str], payload: Callable[[str], bytes | None]):
        self._ids, self._payload = run_ids, payload

    def __getitem__(self, run_id: str) -> CondensedRun | None:
        payload = self._payload(run_id)
        try:
            row = None if payload is None else jsonio.loads(payload)
            return None if row is None else condensed_from_json(row)
        except (FormatError, ValueError):
            return None

    def __iter__(self) -> Iterator[str]:
        return iter(self._ids)

    def __len__(self) -> int:
        return len(self._ids)


def journal_facts(journal: tuple[Record, ...]) -> dict:
    """Registration, deviations, stops and live trials from the experiment's journal records
    (in reader order)."""
    prereg = next((r for r in journal if r.kind == "prereg"), None)
    latest = registered_digest(journal)
    return {
        "prereg": None if prereg is None else {"at": prereg.at, "digest": prereg.body.get("spec_digest"),
                                               "path": _basename(prereg.body.get("spec_path", ""))},
        "spec_digest": latest if isinstance(latest, str) else None,
        "invocations": [{"at": r.at, "kind": r.kind, **{k: r.body.get(k) for k in ("status", "runs", "rule", "detail")}}
                        for r in journal if r.kind in ("grid.start", "grid.end", "stop")],
    }


def _basename(path) -> str:
    """Only the file name: a spec path is recorded as given, maybe absolute on the machine
    that registered it, and no machine path may reach the site (or its cache)."""
    return str(path).replace("\\", "/").rstrip("/").rsplit("/", 1)[-1]


def analyse(data: ExperimentData) -> dict:
    """``{"summary": summary.json object, "cells": CellSpool}``: one pass of the analysis
    gives both the summary and, cell by cell, the trials behind its primary policy rows
    (``summarise_cells``), so a cell page cannot disagree with the experiment's table. Each
    cell's grid slot and trials are turned into plain objects as the analysis reaches it
    and spooled to a temporary file: held, a 20,000-run experiment's trials kept every
    run's view."""
    spool = CellSpool()
    summary = summarise_cells(data, spool.add)
    return {"summary": summary, "cells": spool}


class CellSpool:
    """(cell, {tier: run id}, [trial objects]) of every cell, in the analysis's order,
    written to a temporary file (``marshal``) and read back once, in that order."""

    def __init__(self):
        self._file = tempfile.TemporaryFile()
        self.count = 0

    def add(self, cell: str, slot: dict, trials: dict) -> None:
        marshal.dump((cell, {t: r.run_id for t, r in slot.items()},
                      [_trial_obj(name, mode, t) for (name, mode), t in trials.items()]), self._file)
        self.count += 1

    def __iter__(self) -> Iterator[tuple[str, dict, list[dict]]]:
        self._file.seek(0)
        for _ in range(self.count):
            yield marshal.load(self._file)


def _trial_obj(name: str, mode: str, trial) -> dict:
    out = trial.outcome
    return {"policy": name, "mode": mode, "complete": trial.complete, "passed": out.passed,
            "attempts": [{"tier": a.tier, "run": a.run_id, "batch": a.batch, "gate": a.gate_passed,
                          "passed": a.passed} for a in out.attempts],
            "taken": out.taken.run_id if out.taken else None,
            "taken_tier": out.taken.tier if out.taken else None,
            "cost_low": _usd(out.cost_low), "cost_high": _usd(out.cost_high), "elapsed_ms": out.elapsed_ms}


@functools.lru_cache(maxsize=4096)  # ~47,000 calls per 10,000-run experiment, few values
def _usd(d: Decimal) -> str:
    return fmt_usd(d)
