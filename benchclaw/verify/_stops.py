"""Stops and ledgers justified by the evidence (steps 7 and 8; FORMAT.md "Stops").

A ``stop`` record is a claim that the grid had to end with work left; it is how a dropped
unit could be excused. So each must follow from the evidence of its invocation:

- ``spend`` / ``tokens``: the invocation's ledger, replayed, reached the threshold of the
  spec in force (the ``grid.start``'s ``spec_digest``) at some record: worst-case spend (or
  tokens) at or past the rule's ``usd`` (``tokens``);
- ``provider_errors``: the invocation's ``run`` records, in journal order, hold that many
  consecutive ``provider_error`` runs;
- ``budget``: a run of the invocation ended ``budget_stop`` (step 5 ties it to a refusal);
- ``interrupted``: the invocation's ``grid.end`` says ``interrupted`` and the evidence shows
  a run cut off (a run of the invocation ended ``aborted`` or is journaled with ``cut_off``)
  or the invocation made no run;
- ``error``: the invocation's ``grid.end`` says ``stopped``; when it made runs and none was
  cut off (an error outside any run, such as a full disk, leaves none), a NOTE says the
  stop is not shown by the evidence;
- ``incomplete``: the invocation's ``grid.end`` says ``stopped`` and every ``cells_left`` cell
  has a run of the invocation that never called the model (why its unit is not done);
- no other rule exists;
- every ``cells_left`` cell is a cell of the invocation's ``grid.start``.

Ledgers: every record of an experiment's ledger is later than the experiment's
registration (a budget opened before the hypothesis was fixed is spending before
registration), and an invocation that ended (``grid.end``) has a closed ledger whose
``ledger.close`` status is the ``grid.end`` status.
"""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path

from ..errors import BenchClawError
from ..formats.ledger import LedgerState, apply_record
from ..formats.spec import parse_spec
from ._errors import VerificationError
from ._index import Index, held_records
from .manifest import object_path

__all__ = ["check_stop", "stop_notes", "check_ledgers_after_registration", "check_ledgers_closed", "ledger_chain"]


def ledger_chain(ix: Index, lid) -> tuple | None:
    """The chained records of ledger ``lid`` (None when it is missing or broken: step 5
    reports that)."""
    recs = ix.ledgers.get(f"ledgers/{lid}.jsonl") if isinstance(lid, str) else None
    return None if recs is None or isinstance(recs, VerificationError) else recs


def _ledger_records(ix: Index, lid) -> tuple[str, tuple] | None:
    recs = ledger_chain(ix, lid)
    return (f"ledgers/{lid}.jsonl", recs) if recs is not None else None


def _peak(b: Index, lid) -> tuple[Decimal, int] | None:
    """The highest worst-case spend (usd, tokens) the ledger ever showed, or None."""
    got = _ledger_records(b, lid)
    if got is None:
        return None
    name, recs = got
    st, usd, tokens = LedgerState(ledger=lid), Decimal(0), 0
    for rec in recs:
        try:
            apply_record(st, rec, name)
        except BenchClawError:
            return None  # step 5 reports the broken ledger
        usd, tokens = max(usd, st.spent_usd), max(tokens, st.spent_tokens)
    return usd, tokens


def _grid_start(journal: list, invocation) -> tuple | None:
    for name, line, rec in held_records(journal):
        if rec.kind == "grid.start" and rec.body.get("invocation") == invocation:
            return name, line, rec
    return None


def _rules(b: Index, digest) -> dict:
    if not isinstance(digest, str) or not b.has(object_path(digest)):
        return {}
    try:
        spec = parse_spec(b.read(object_path(digest)), Path(digest))
    except BenchClawError:
        return {}
    return {r.rule: r.params for r in spec.stopping}


def check_stop(b: Index, journal: list, name: str, line: int, rec) -> None:
    body = rec.body
    inv, rule = body.get("invocation"), body.get("rule")
    start = _grid_start(journal, inv)
    if start is None:
        raise VerificationError(name, f"stop of invocation {inv!r}, which has no grid.start", line)
    grid = start[2].body
    cells = set(grid.get("cells") or [])
    left = body.get("cells_left") or []
    odd = [c for c in left if not isinstance(c, str) or c not in cells] if isinstance(left, list) else [left]
    if odd:
        raise VerificationError(name, f"stop lists cell {odd[0]!r}, not a cell of its grid", line)
    why = _JUSTIFY.get(rule) if isinstance(rule, str) else None
    if why is None:
        raise VerificationError(name, f"stop rule {rule!r} is not one FORMAT.md defines", line)
    missing = why(b, journal, grid, inv, rec)
    if missing:
        raise VerificationError(name, f"stop '{rule}' does not follow from the evidence: {missing}", line)


def _spend(b: Index, journal, grid, inv, rec) -> str | None:
    return _threshold(b, grid, "spend", "usd", 0)


def _tokens(b: Index, journal, grid, inv, rec) -> str | None:
    return _threshold(b, grid, "tokens", "tokens", 1)


def _threshold(b: Index, grid: dict, rule: str, key: str, index: int) -> str | None:
    params = _rules(b, grid.get("spec_digest")).get(rule)
    if params is None:
        return f"the spec in force ({grid.get('spec_digest')}) has no '{rule}' rule"
    peak = _peak(b, grid.get("ledger"))
    if peak is None:
        return f"ledger {grid.get('ledger')!r} is not in the bundle to show the {key}"
    if peak[index] < params[key]:
        shown = f"${peak[0]}" if index == 0 else str(peak[1])
        limit = f"${params[key]}" if index == 0 else str(params[key])
        return f"ledger {grid.get('ledger')} shows at most {shown} worst case, the threshold is {limit}"
    return None


def _errors(b: Index, journal, grid, inv, rec) -> str | None:
    params = _rules(b, grid.get("spec_digest")).get("provider_errors")
    if params is None:
        return "the spec in force has no 'provider_errors' rule"
    streak = best = 0
    for _, _, r in journal:
        if r.kind == "run" and r.body.get("invocation") == inv and r.at <= rec.at:
            streak = streak + 1 if r.body.get("status") == "provider_error" else 0
            best = max(best, streak)
    if best < params["consecutive"]:
        return f"the invocation's runs hold at most {best} consecutive provider_error runs, the rule needs {params['consecutive']}"
    return None


def _budget(b: Index, journal, grid, inv, rec) -> str | None:
    if not any(r.kind == "run" and r.body.get("invocation") == inv and r.body.get("status") == "budget_stop"
               for _, _, r in journal):
        return "no run of the invocation ended budget_stop"
    return None


def _interrupted(b: Index, journal, grid, inv, rec) -> str | None:
    if (odd := _ended(journal, inv, "interrupted")) is not None:
        return odd
    runs = [r.body for _, _, r in journal if r.kind == "run" and r.body.get("invocation") == inv]
    if runs and not any(_cut(r) for r in runs):
        return "no run of the invocation was cut off (none ended aborted or is journaled cut_off)"
    return None


def _cut(run: dict) -> bool:
    """A run the runner cut off: sealed aborted, or journaled with ``cut_off`` (a remote run
    that finished before the cut reached it)."""
    return run.get("status") == "aborted" or (isinstance(run.get("cut_off"), str) and bool(run["cut_off"]))


def _runs_of(journal, inv, rec) -> list[dict]:
    """The ``run`` bodies of invocation ``inv`` journaled before its stop ``rec``."""
    return [r.body for _, _, r in journal
            if r.kind == "run" and r.body.get("invocation") == inv and r.at <= rec.at]


def _ended(journal, inv, status: str) -> str | None:
    ends = [r.body.get("status") for _, _, r in held_records(journal) if r.kind == "grid.end" and r.body.get("invocation") == inv]
    return f"the invocation's grid.end says {ends[0]!r}" if ends and ends[0] != status else None


def _error(b: Index, journal, grid, inv, rec) -> str | None:
    # A run the error cut off shows it; an error outside any run (a full disk when a run file
    # is made) leaves nothing to show, so an unshown one is named on a NOTE (stop_notes).
    return _ended(journal, inv, "stopped")


def stop_notes(journal: list) -> list[str]:
    """What the auditor must read about stops no evidence shows: an ``error`` stop of an
    invocation that made runs, none of them cut off."""
    notes = []
    for name, line, rec in held_records(journal):
        if rec.kind == "stop" and rec.body.get("rule") == "error":
            inv = rec.body.get("invocation")
            runs = _runs_of(journal, inv, rec)
            if runs and not any(_cut(r) for r in runs):
                left = rec.body.get("cells_left")
                notes.append(f"{name}:{line}: stop 'error' of {inv} ({len(left) if isinstance(left, list) else 0} "
                             "cells left) is not shown by the evidence: no run of the invocation was cut off. "
                             "An error outside any run (a full disk) leaves none, so this cannot be told from a "
                             "stop made up to excuse runs left out")
    return notes


def _incomplete(b: Index, journal, grid, inv, rec) -> str | None:
    if (odd := _ended(journal, inv, "stopped")) is not None:
        return odd
    short = {r.get("cell") for r in _runs_of(journal, inv, rec) if r.get("called_model") is False}
    left = rec.body.get("cells_left") or []
    if not left:
        return "it names no cell left"
    lacking = [c for c in left if c not in short]
    if lacking:
        return f"cell {lacking[0]!r} has no run of the invocation that stopped short of the model"
    return None


_JUSTIFY = {"spend": _spend, "tokens": _tokens, "provider_errors": _errors, "budget": _budget,
            "interrupted": _interrupted, "error": _error, "incomplete": _incomplete}


def check_ledgers_after_registration(b: Index, journal: list, registered_at: str) -> None:
    for name, line, rec in held_records(journal):
        if rec.kind != "grid.start":
            continue
        got = _ledger_records(b, rec.body.get("ledger"))
        if got is None:
            continue
        lname, recs = got
        if getattr(recs, "earliest", None) is not None and recs.earliest > registered_at:
            continue  # every record after it (the reading stage took the least ``at``): not read again
        for i, r in enumerate(recs, 1):
            if r.at <= registered_at:
                raise VerificationError(lname, f"{r.kind} at {r.at} precedes the registration at "
                                        f"{registered_at}", i)


def check_ledgers_closed(b: Index, journal: list) -> None:
    for name, line, rec in held_records(journal):
        if rec.kind != "grid.end":
            continue
        start = _grid_start(journal, rec.body.get("invocation"))
        lid = start[2].body.get("ledger") if start else None
        got = _ledger_records(b, lid)
        if got is None:
            continue  # no ledger (None) or a missing one: step 5 reports it
        lname, recs = got
        last = recs[-1] if recs else None
        if last is None or last.kind != "ledger.close":
            raise VerificationError(lname, f"invocation {rec.body.get('invocation')} ended ({name}:{line}) "
                                    "but its ledger was never closed (no ledger.close)", len(recs))
        if last.body.get("status") != rec.body.get("status"):
            raise VerificationError(lname, f"ledger.close status {last.body.get('status')!r}, the "
                                    f"invocation's grid.end says {rec.body.get('status')!r}", len(recs))
