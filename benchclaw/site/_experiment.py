"""Experiments on the site: the analysis's summary, plus what each policy did per cell.

The site never computes a metric of its own. The policy table, cost bounds and decisions
are ``benchclaw.analysis.summarise`` verbatim (the same object the report and the
verifier produce); the per-cell view ("what each policy did with these runs") comes from
the analysis's own trial functions over the same selection, so a cell page cannot
disagree with the experiment's table.

Speed: ``summarise`` reads run records. Re-reading 10,000 run logs for every rebuild
would cost seconds, so when a run's page is rendered the builder also condenses the run,
from its full records, into the analysis's own ``RunView`` (``run_payload``) and caches it
by run id as JSON (``analysis.view_to_json``): a sealed run never changes, and loading
10,000 cached views costs a tenth of a second where parsing condensed records and
condensing them again cost half a second. A run whose records the analysis cannot read is
cached as its condensed records instead (``condense``), so the summary lists it as
unreadable with the analysis's own message.
"""

from __future__ import annotations

import functools
import tomllib
from decimal import Decimal

from ..records import GENESIS, Record
from ..store import SealedRun, Store

__all__ = ["condense", "expand", "run_payload", "analysis_inputs", "analyse", "load_spec",
           "journal_facts"]

_START_KEYS = ("task", "tier", "policy", "simulated")
_CALL_KEYS = ("outcome", "cost", "usage", "latency_ms", "stream")  # timing: the tier's provider health
_END_KEYS = ("status", "passed", "gate_passed", "elapsed_ms", "turns")


def condense(run: SealedRun) -> list:
    """``[[seq, at, kind, body], …]`` holding only what ``analysis.view_run`` reads."""
    out = []
    for rec in run.records:
        b = rec.body
        if rec.kind == "run.start":
            body = {k: b[k] for k in _START_KEYS if k in b}
        elif rec.kind == "call":
            body = {k: b[k] for k in _CALL_KEYS if k in b}
            if isinstance(b.get("error"), dict):
                body["error"] = {"kind": b["error"].get("kind")}
            elif "error" in b:
                body["error"] = b["error"]
        elif rec.kind == "action":
            body = {k: b[k] for k in ("permitted", "injection") if k in b}
        elif rec.kind == "run.end":
            body = {k: b[k] for k in _END_KEYS if k in b}
        else:
            continue
        out.append([rec.seq, rec.at, rec.kind, body])
    return out


def expand(condensed: list) -> tuple[Record, ...]:
    return tuple(Record(seq, GENESIS, at, kind, body) for seq, at, kind, body in condensed)


def run_payload(run: SealedRun) -> dict:
    """What the cache keeps for the analysis of a run: ``{"view": view_to_json(...)}``, or
    ``{"records": condense(run)}`` when ``view_run`` rejects the run."""
    from ..analysis import view_run, view_to_json
    from ..errors import FormatError

    if run.end.get("status") == "aborted":
        # An aborted run may hold a call cut off in flight, known only from the ledger's
        # reservation: its view is built at analysis time from the full records and the
        # ledgers, as `benchclaw report` does. Aborted runs are few.
        return {"aborted": True}
    try:
        return {"view": view_to_json(view_run(run.run_id, tuple(run.records)))}
    except FormatError:
        return {"records": condense(run)}


def analysis_inputs(payloads: dict[str, dict | None], read_run) -> tuple[dict, dict, dict]:
    """``(views, records, healed)`` from cached payloads by run id: cached views, records
    to view now, and fresh payloads for runs whose payload is missing or unreadable (read
    again with ``read_run(run_id) -> SealedRun``: a damaged cache heals instead of
    misreporting)."""
    from ..analysis import view_from_json
    from ..errors import FormatError

    views, records, healed = {}, {}, {}

    def load(run_id: str, payload: dict) -> None:
        if "view" in payload:
            views[run_id] = view_from_json(payload["view"])
        elif payload.get("aborted") is True:
            records[run_id] = tuple(read_run(run_id).records)
        else:
            records[run_id] = expand(payload["records"])

    for run_id, payload in payloads.items():
        try:
            load(run_id, payload)
        except (FormatError, KeyError, TypeError, ValueError):
            run = read_run(run_id)
            healed[run_id] = run_payload(run)
            records[run_id] = tuple(run.records)
    return views, records, healed


def journal_facts(store: Store, exp: str) -> dict:
    """Registration, deviations, stops and live trials from the experiment's journal.
    Raises IntegrityError/FormatError (naming the file) when a journal chain is broken."""
    entries = store.read_journal(exp)
    from ..analysis.inputs import registered_digest

    prereg = next((e for e in entries if e.kind == "prereg"), None)
    latest = registered_digest([e.record for e in entries])
    return {
        "records": tuple(e.record for e in entries),
        "prereg": None if prereg is None else {"at": prereg.record.at, "digest": prereg.body.get("spec_digest"),
                                               "path": _basename(prereg.body.get("spec_path", ""))},
        "spec_digest": latest if isinstance(latest, str) else None,
        "invocations": [{"at": e.record.at, "kind": e.kind, **{k: e.body.get(k) for k in ("status", "runs", "rule", "detail")}}
                        for e in entries if e.kind in ("grid.start", "grid.end", "stop")],
    }


def _basename(path) -> str:
    """Only the file name: a spec path is recorded as given, maybe absolute on the machine
    that registered it, and no machine path may reach the site (or its cache)."""
    return str(path).replace("\\", "/").rstrip("/").rsplit("/", 1)[-1]


def load_spec(store: Store, digest: str | None) -> tuple[dict, str | None]:
    """The registered spec parsed from its blob, and an error text when it cannot be read."""
    if not digest:
        return {}, "no registered spec in the journal"
    try:
        return tomllib.loads(store.get_blob(digest).decode("utf-8")), None
    except Exception as e:  # noqa: BLE001 - a bad spec is shown on the page, not fatal
        return {}, f"spec {digest}: {e}"


def analyse(exp: str, spec: dict, spec_digest: str | None, journal: tuple, runs: dict[str, tuple],
            lures, *, views: dict | None = None, ledgers: list | None = None) -> dict:
    """``{"summary": summary.json object, "cells": {cell: [policy trial, …]}, "grid",
    "cell_order"}`` (JSON-able). One pass of the analysis gives both the summary and the
    per-cell trials behind its primary policy rows (``summarise_with_trials``), so a cell
    page cannot disagree with the experiment's table. ``views``: cached ``RunView``s by
    run id, for runs not in ``runs``."""
    from ..analysis import ExperimentData, ledger_reservations, summarise_with_trials

    data = ExperimentData(exp, spec, spec_digest, journal, runs, lures, views=views or {},
                          reservations=ledger_reservations(ledgers or ()))
    summary, (sel, _tiers, trials) = summarise_with_trials(data)
    cells: dict[str, list] = {}
    for (name, mode), by_cell in trials.items():
        for cell, trial in by_cell.items():
            cells.setdefault(cell, []).append(_trial_obj(name, mode, trial))
    grid = {cell: {t: r.run_id for t, r in slot.items()} for cell, slot in sel.grid.items()}
    return {"summary": summary, "cells": cells, "grid": grid, "cell_order": list(sel.cells)}


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
    from ..money import fmt_usd

    return fmt_usd(d)
