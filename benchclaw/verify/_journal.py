"""Steps 7 and 8, from the experiment journal: pre-registration, and nothing dropped.

7. Pre-registration (FORMAT.md §8): the experiment was registered (``prereg``) before
   anything else; every registered spec's bytes are in the bundle and ``experiments/<id>.toml``
   is the last one; each deviation names the digest it replaces; the first registration
   precedes every run (so every call); every run's ``spec_digest`` and every ``grid.start``'s
   was registered before it started. Times must be well formed and never go backwards
   inside one chained file, so a moved timestamp cannot hide behind a re-chained file.
8. Completeness: every journal ``run`` record names a run the bundle holds, with the same
   cell, tier, policy, status, pass claims and cost; every sealed run of the experiment is
   named by the journal; every ``trial`` is recomputed with ``benchclaw.formats.policies.outcome``
   over its runs; and every planned unit of every ``grid.start`` (each cell x tier when
   every tier runs, each cell x live policy) has a run or trial, or a later ``stop`` that
   lists its cell as left. Every ``correction`` names this experiment, says what was
   claimed, what was wrong, why and what replaces it, and comes after the journal's first
   ``run`` record and after the ``run`` record of every run it names (a correction
   corrects a published result; it cannot precede it).
"""

from __future__ import annotations

import re
from decimal import Decimal
from operator import itemgetter
from typing import NamedTuple

from ..errors import BenchClawError
from ..formats.money import fmt_usd, parse_usd
from ..formats.policies import Attempt, PolicyError, next_batch, outcome
from ..formats.records import Record
from ._errors import VerificationError
from ._index import Index, Run, held_records
from ._report import Section, outcome_of, raised
from ._simusage import pinned_profiles
from ._stops import check_ledgers_after_registration, check_ledgers_closed, check_stop, ledger_chain, stop_notes
from .experiment import registration_digest
from .layout import spec_entry
from .manifest import object_path

__all__ = ["verify_prereg", "verify_completeness", "journal_of"]

_AT = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{6}Z$")


def journal_of(ix: Index, exp: str) -> list:
    """The experiment's journal (entry, line, record), chains verified and every body's
    shape checked by the reading stage. Raises the same VerificationError to every step
    that needs it."""
    got = ix.journals.get(exp)
    if got is None:
        raise VerificationError(f"journals/{exp}/", f"{exp} is not an experiment of the manifest")
    if isinstance(got, VerificationError):
        raise got
    return got


# ----------------------------------------------------------------------- 7. pre-registration

def verify_prereg(ix: Index, runs, sec: Section) -> None:
    specs: dict = {}  # registered spec digest -> parsed spec (None when unparsable)
    for exp in ix.manifest.experiments:
        journal = journal_of(ix, exp)
        sec.attempt(journal_times, journal)
        calls: dict[str, list] = {}  # run id -> its calls' params, read while its records are held
        mine = []  # the runs of ``exp``, found in the pass that reads their logs
        for run in runs.values():
            if run.policy.get("experiment") == exp:
                mine.append(run)
                sec.attempt(run_times, run)
                calls[run.run_id] = run_call_params(run)
        regs = sec.attempt(_registrations, ix, exp, journal) and _regs(journal)
        if not regs:
            continue
        records = [(name, line, rec) for name, line, rec in held_records(journal) if rec.kind in ("prereg", "deviation")]
        pinned = []  # each run's _run_pinned, taken in the pass that reads its first record for _run_registered
        for run in mine:
            if sec.attempt(_run_registered, run, regs):
                sec.count("runs after registration")
            pinned.append(outcome_of(_run_pinned, ix, run, records, specs, calls[run.run_id]))
        for name, line, rec in held_records(journal):
            if rec.kind == "grid.start":
                sec.attempt(_grid_registered, name, line, rec, regs)
                sec.attempt(_grid_as_registered, ix, journal, name, line, rec, records)
        sec.attempt(check_ledgers_after_registration, ix, journal, regs[0][0])
        for got in pinned:  # reported here, after the grid's, as if each run were checked now
            sec.attempt(raised, got)
        sec.attempt(_registered_digest, ix, exp, records[0])
        sec.count("registrations", len(regs))


def _check_at(at, name: str, line: int) -> None:
    if not isinstance(at, str) or not _AT.match(at):
        raise VerificationError(name, f"time {at!r} is not RFC 3339 UTC with microseconds", line)


def journal_times(journal: list) -> None:
    last: dict[str, str] = {}
    # file order; each record's time alone held (a ``Journal`` makes its run records again
    # as it is read: sorting them all would hold one a run at once)
    for name, line, at in sorted(((name, line, rec.at) for name, line, rec in journal), key=_FILE_ORDER):
        _check_at(at, name, line)
        if at < last.get(name, ""):
            raise VerificationError(name, f"time goes backwards ({at} after {last[name]})", line)
        last[name] = at


_FILE_ORDER = itemgetter(0, 1)


_CALL_KEYS = ("max_tokens", "temperature", "model", "seed")  # the params a registered spec sets


def run_call_params(run: Run) -> tuple:
    """``call_params`` of the run's calls: as the reading stage took it, else (it kept none)
    from its records, in the pass that checks the run's times (so step 7 parses a run at
    most once)."""
    got = run.log.call_params
    return got if got is not None else call_params(run.of_kind("call"))


def call_params(calls: list, most: int | None = None) -> tuple | None:
    """The calls (line, record) as ``_run_as_specified`` reads them: (line, its ``params``
    values of ``_CALL_KEYS``, None) for the first call of each distinct set of values, in
    line order (a later call with the same values has the same verdict); a call whose
    params cannot be read ends the list as (line, None, the exception), raised again where
    it is read. None when there are more than ``most`` (the reading stage keeps no more)."""
    out, seen = [], []
    for line, rec in calls:
        try:
            params = rec.body.get("params") or {}
            values = tuple(params.get(k) for k in _CALL_KEYS)
        except Exception as e:  # noqa: BLE001 - raised where the check reads this call, as before
            out.append((line, None, e))
            break
        if values not in seen or len(seen) > 64:  # a hostile run of all-distinct calls stays linear
            seen.append(values)
            out.append((line, values, None))
            if most is not None and len(out) > most:
                return None
    return tuple(out)


def times_in_order(records) -> bool:
    """Whether ``run_times`` passes: every time well formed, none before the one above it
    (a C-level test, the reading stage's while it holds the records)."""
    ats = [r.at for r in records]
    return all(type(a) is str for a in ats) and all(map(_AT.match, ats)) and ats == sorted(ats)


def run_times(run: Run) -> None:
    if run.log.times_ok:
        return
    prev = ""
    for i, rec in enumerate(run.records, 1):
        _check_at(rec.at, run.path, i)
        if rec.at < prev:
            raise VerificationError(run.path, f"time goes backwards ({rec.at} after {prev})", i)
        prev = rec.at


def _regs(journal: list) -> list[tuple[str, str, str, int]]:
    """(at, digest, entry, line) of prereg and deviation records, in journal order."""
    return [(rec.at, rec.body.get("spec_digest"), name, line) for name, line, rec in held_records(journal)
            if rec.kind in ("prereg", "deviation")]


def _registrations(ix: Index, exp: str, journal: list) -> None:
    regs = [(name, line, rec) for name, line, rec in held_records(journal) if rec.kind in ("prereg", "deviation")]
    if not regs or regs[0][2].kind != "prereg":
        raise VerificationError(f"journals/{exp}/", "the experiment was never registered (no prereg "
                                "record before its first deviation)")
    first = next((t for t in journal if t[2].kind not in ("prereg",)), None)
    if first is not None and first[2].at < regs[0][2].at:
        raise VerificationError(first[0], f"{first[2].kind} at {first[2].at} precedes the registration "
                                f"at {regs[0][2].at}", first[1])
    in_force = None
    for name, line, rec in regs:
        digest = rec.body.get("spec_digest")
        if rec.body.get("experiment") != exp:
            raise VerificationError(name, f"{rec.kind} names experiment {rec.body.get('experiment')!r}", line)
        if ix.digests.get(object_path(digest) if isinstance(digest, str) else "") != digest:
            raise VerificationError(name, f"registered spec {digest} is not in the bundle", line)
        if rec.kind == "deviation" and rec.body.get("previous_digest") != in_force:
            raise VerificationError(name, f"deviation replaces {rec.body.get('previous_digest')}, but "
                                    f"{in_force} was in force", line)
        in_force = digest
    spec = spec_entry(exp)
    if ix.digests.get(spec) != in_force:
        raise VerificationError(spec, f"hashes to {ix.digests.get(spec)}, the last registered spec is {in_force}")


def _run_registered(run: Run, regs: list) -> None:
    start_at = run.started_at
    if start_at <= regs[0][0]:
        raise VerificationError(run.path, f"run started at {start_at}, before the experiment was "
                                f"registered at {regs[0][0]}", 1)
    digest = run.policy.get("spec_digest")
    if not any(d == digest and at < start_at for at, d, _, _ in regs):
        raise VerificationError(run.path, f"spec digest {digest} was not registered before the run "
                                f"started at {start_at}", 1)


def registration_of(ix: Index, exp: str) -> str | None:
    """The registration digest of ``exp``'s first prereg record (None when unreadable)."""
    try:
        first = next((rec for _, _, rec in held_records(journal_of(ix, exp)) if rec.kind == "prereg"), None)
    except VerificationError:
        return None
    return registration_digest(first.body) if first is not None else None


def unshown_stops(ix: Index, exp: str) -> list[str]:
    """``stop_notes`` of ``exp``'s journal ([] when unreadable: a step reported that)."""
    try:
        return stop_notes(journal_of(ix, exp))
    except VerificationError:
        return []


def repinned(ix: Index, exp: str) -> list[str]:
    """A sentence per deviation that pins another catalog or other task versions than the
    registration before it: the registration digest covers only the first ``prereg``, so
    these changes are shown to the auditor here (and listed in summary.json's deviations)."""
    try:
        regs = [rec for _, _, rec in held_records(journal_of(ix, exp)) if rec.kind in ("prereg", "deviation")]
    except VerificationError:
        return []
    out = []
    for before, rec in zip(regs, regs[1:]):
        changed = [what for key, what in (("catalog", "the catalog (prices)"), ("tasks", "the task versions"),
                                          ("sim_profiles", "the simulator profiles"))
                   if rec.body.get(key) != before.body.get(key)]
        if changed:
            out.append(f"{exp}: the deviation at {rec.at} re-pins {' and '.join(changed)} "
                       f"(reason: {str(rec.body.get('reason'))[:120]!r}); the registration digest "
                       "you hold does not cover it")
    return out


def _registered_digest(ix: Index, exp: str, first: tuple) -> None:
    """``--registered``: the registration the auditor holds is this bundle's."""
    name, line, rec = first
    if ix.registered is None:
        return
    got = registration_digest(rec.body)
    if got not in ix.registered:
        raise VerificationError(name, f"the registration digest is {got}, not the one you hold "
                                f"({', '.join(sorted(ix.registered))}): spec, catalog or task versions differ "
                                "from what was registered", line)


def _run_pinned(ix: Index, run: Run, records: list, specs: dict, calls: list) -> None:
    """The run used the catalog and a task version its registration pinned (FORMAT.md §8)."""
    digest, start_at = run.policy.get("spec_digest"), run.started_at
    reg = None
    for name, line, rec in records:
        if rec.body.get("spec_digest") == digest and rec.at < start_at:
            reg = (name, line, rec.body)
    if reg is None:
        return  # _run_registered reports it
    name, line, body = reg
    _run_as_specified(ix, run, digest, specs, calls)
    if "catalog" in body and run.start.get("catalog") != body["catalog"]:
        raise VerificationError(run.path, f"ran with catalog {_short_ref(run.start.get('catalog'))}, the "
                                f"registration ({name}:{line}) pinned {_short_ref(body['catalog'])}", 1)
    pinned_profiles(run, name, line, body)
    task = run.start.get("task") or {}
    mine = {"id": task.get("id"), "version": task.get("version"), "digest": task.get("digest")}
    if "tasks" in body and (not isinstance(body["tasks"], list) or mine not in body["tasks"]):
        raise VerificationError(run.path, f"ran task {mine['id']} v{mine['version']} {mine['digest']}, "
                                f"which the registration ({name}:{line}) did not pin", 1)


def _grid_as_registered(ix: Index, journal: list, name: str, line: int, rec: Record, records: list) -> None:
    """A ``grid.start`` plans the registered grid: its cells are the registered spec's
    task versions (as pinned) x profiles x seeds, its tiers, live policies and all_tiers
    the spec's. A cell left out of the plan could otherwise be dropped unseen."""
    from pathlib import Path

    from ..formats.spec import parse_spec

    digest = rec.body.get("spec_digest")
    reg = None
    for _, _, r in records:
        if r.body.get("spec_digest") == digest and r.at <= rec.at:
            reg = r.body
    if reg is None or "tasks" not in reg or not ix.has(object_path(digest)):
        return  # unregistered (reported above) or a registration that pins no tasks
    try:
        spec = parse_spec(ix.read(object_path(digest)), Path(digest))
    except BenchClawError as e:
        raise VerificationError(object_path(digest), f"the registered spec does not parse: {e}") from None
    g = spec.grid
    if not isinstance(reg["tasks"], list) or not all(isinstance(t, dict) for t in reg["tasks"]):
        raise VerificationError(name, "the registration's tasks are not a list of {id, version, digest}", line)
    cells = sorted(f"{t.get('id')}@{t.get('version')}/{p}/{s}" for t in reg["tasks"]
                   for p in g.profiles for s in g.seeds)
    body = rec.body
    want = {"cells": cells, "tiers": list(g.tiers), "policies": list(spec.live), "all_tiers": g.all_tiers}
    got = {"cells": sorted(body.get("cells") or []), "tiers": body.get("tiers"),
           "policies": body.get("policies"), "all_tiers": body.get("all_tiers", g.all_tiers)}
    sharded = body.get("shard") is not None
    if sharded:  # a shard plans a slice of the registered cells, with a share of the budget
        extra = sorted(set(got["cells"]) - set(cells))
        if extra:
            raise VerificationError(name, f"grid.start (shard {body.get('shard')}) plans cells the "
                                    f"registered grid does not have ({extra!r:.120})", line)
        want.pop("cells")
    for key in want:
        if got[key] != want[key]:
            odd = sorted(set(want[key]) ^ set(got[key] or [])) if key == "cells" else got[key]
            raise VerificationError(name, f"grid.start {key} differ from the registered grid "
                                    f"({odd!r:.120})", line)
    if not sharded:
        _ledger_opened_as_registered(ix, journal, rec, spec)


def _ledger_opened_as_registered(ix: Index, journal: list, rec: Record, spec) -> None:
    """The invocation's ``ledger.open`` has the spec's budget as its limits, names its
    experiment and invocation, and carries every earlier invocation's ledger (a ledger left
    out of ``carried`` would let this one spend the budget again)."""
    from ..formats.ledger import Limits

    lid = rec.body.get("ledger")
    lname = f"ledgers/{lid}.jsonl"
    records = ledger_chain(ix, lid)
    if not records or records[0].kind != "ledger.open":
        return  # missing or malformed: step 5 reports it
    body, bud = records[0].body, spec.budget
    limits = Limits(bud.usd, bud.tokens, bud.per_call_usd).to_dict()
    if body.get("limits") != limits:
        raise VerificationError(lname, f"ledger.open limits {body.get('limits')}, the registered budget "
                                f"is {limits}", 1)
    if (body.get("experiment"), body.get("invocation")) != (spec.id, rec.body.get("invocation")):
        raise VerificationError(lname, f"ledger.open names {body.get('experiment')!r} / "
                                f"{body.get('invocation')!r}, not its grid.start's", 1)
    carried = (body.get("carried") or {}).get("ledgers") or []
    want = _earlier_ledgers(ix, spec.id, rec)
    if want is not None and carried != want:
        raise VerificationError(lname, f"ledger.open carries the ledgers {carried}, the earlier "
                                f"invocations opened {want}", 1)


def _earlier_ledgers(ix: Index, exp: str, rec: Record) -> list | None:
    try:
        journal = journal_of(ix, exp)
    except VerificationError:
        return None
    out = []
    for _, _, r in held_records(journal):
        if r is rec:
            return out
        if r.kind == "grid.start" and r.body.get("ledger"):
            out.append(r.body["ledger"])
    return None


def _spec(ix: Index, digest: str, specs: dict):
    """The registered spec of ``digest``, parsed once into ``specs`` (None when absent or
    unparsable: reported where the registration is checked)."""
    from pathlib import Path

    from ..formats.spec import parse_spec

    if digest not in specs:
        try:
            specs[digest] = parse_spec(ix.read(object_path(digest)), Path(digest))
        except (BenchClawError, VerificationError):
            specs[digest] = None
    return specs[digest]


def _run_as_specified(ix: Index, run: Run, digest: str, specs: dict, calls: list) -> None:
    """The run ran what its spec says: its cell names its task, profile and seed, its tier,
    profile and seed are in the grid, its settings are the spec's, and every call was made
    with them (a lowered max_tokens would lower an unknown call's upper bound). ``calls``:
    ``call_params(run)``."""
    spec = _spec(ix, digest, specs) if isinstance(digest, str) else None
    if spec is None:
        return
    st, g = run.start, spec.grid
    task, profile = st.get("task") or {}, (st.get("profile") or {}).get("name")
    cell = f"{task.get('id')}@{task.get('version')}/{profile}/{st.get('seed')}"
    if run.policy.get("cell") != cell:
        raise VerificationError(run.path, f"policy.cell {run.policy.get('cell')!r}, the run ran {cell!r}", 1)
    if st.get("tier") not in g.tiers or profile not in g.profiles or st.get("seed") not in g.seeds:
        raise VerificationError(run.path, f"tier {st.get('tier')!r}, profile {profile!r} or seed "
                                f"{st.get('seed')!r} is not in the registered grid", 1)
    want = {"max_tokens": spec.settings.max_tokens, "temperature": fmt_usd(spec.settings.temperature),
            "retries": spec.settings.retries}
    if st.get("settings") != want:
        raise VerificationError(run.path, f"run.start.settings {st.get('settings')}, the registered spec "
                                f"says {want}", 1)
    call = {"max_tokens": want["max_tokens"], "temperature": want["temperature"], "model": st.get("model"),
            "seed": st.get("seed")}
    for line, values, error in calls:
        if error is not None:
            raise error
        params = dict(zip(_CALL_KEYS, values))
        odd = [k for k, v in call.items() if params.get(k) != v]
        if odd:
            raise VerificationError(run.path, f"call made with params.{odd[0]}={params.get(odd[0])!r}, "
                                    f"the run's is {call[odd[0]]!r}", line)


def _short_ref(ref) -> str:
    return f"{ref.get('name')} {ref.get('digest')}" if isinstance(ref, dict) else repr(ref)


def _grid_registered(name: str, line: int, rec: Record, regs: list) -> None:
    digest = rec.body.get("spec_digest")
    if not any(d == digest and at <= rec.at for at, d, _, _ in regs):
        raise VerificationError(name, f"grid.start under spec {digest}, not registered before it", line)


# ----------------------------------------------------------------------- 8. completeness

_SAME = (("cell", lambda r: r.policy.get("cell")),
         ("tier", lambda r: r.start.get("tier")),
         ("policy", lambda r: r.policy.get("policy")),
         ("trial", lambda r: r.policy.get("trial")),
         ("status", lambda r: r.end.get("status")),
         # the rest of the record is the run's policy context, as written at run.start
         ("step", lambda r: r.policy.get("step", 0)),
         ("batch", lambda r: r.policy.get("batch", 0)),
         ("rerun", lambda r: bool(r.policy.get("rerun"))),
         ("replaces", lambda r: r.policy.get("replaces")),
         ("attempt", lambda r: r.policy.get("attempt")),
         ("memory_start", lambda r: r.policy.get("memory_start")),
         ("elapsed_ms", lambda r: r.end.get("elapsed_ms") or 0))
_CLAIMS = (("passed", lambda r: bool(r.end.get("passed"))),
           ("gate_passed", lambda r: bool(r.end.get("gate_passed"))),
           ("cost", lambda r: _run_cost(r)))


def _run_cost(run: Run) -> dict:
    c = run.end.get("cost") or {}
    return {"known": bool(c.get("known", False)), "low": c.get("low", "0"), "high": c.get("high", "0")}


def verify_completeness(ix: Index, runs, sec: Section) -> None:
    for exp in ix.manifest.experiments:
        journal = journal_of(ix, exp)
        named: set[str] = set()  # (the ids alone: a run record's body is a kilobyte, one a run)
        reserved = _Reserved(ix, journal)
        for name, line, rec in journal:
            if rec.kind == "run":
                sec.attempt(_named_run, runs, name, line, rec.body, named, reserved)
        for run in runs.values():  # (the runs of ``exp``: the named ones need not be read to know)
            if run.run_id not in named and run.policy.get("experiment") == exp:
                sec.fail(VerificationError(run.path, f"a sealed run of {exp} that the journal does not name"))
        for name, line, rec in held_records(journal):
            if rec.kind == "trial":
                sec.attempt(_trial, runs, name, line, rec.body, _tiers_of(journal, rec.body))
        sec.attempt(_planned, journal)
        for name, line, rec in held_records(journal):
            if rec.kind == "stop" and sec.attempt(check_stop, ix, journal, name, line, rec):
                sec.count("stops justified")
        sec.attempt(check_ledgers_closed, ix, journal)
        sec.count("runs named", len(named))
        for name, line, rec in held_records(journal):
            if rec.kind == "correction" and sec.attempt(_correction, exp, name, line, rec, journal):
                sec.count("corrections")


class _Reserved:
    """``_reserved_attempts``, read on first use: only a run that records no call asks (a
    grid's ledger, read for it, is two records a call)."""

    def __init__(self, ix: Index, journal: list):
        self._of, self._got = (ix, journal), None

    def __contains__(self, attempt) -> bool:
        if self._got is None:
            self._got = _reserved_attempts(*self._of)
        return attempt in self._got


def _reserved_attempts(ix: Index, journal: list) -> set:
    """The attempts any ledger of the experiment's invocations reserved a call for."""
    out: set = set()
    for _, _, rec in held_records(journal):
        if rec.kind == "grid.start":
            for r in ledger_chain(ix, rec.body.get("ledger")) or ():
                if r.kind == "reserve":
                    out.add(r.body.get("attempt"))
    return out


class _Held(NamedTuple):
    """What ``_SAME`` and ``_CLAIMS`` read of a run, read from it once."""

    policy: dict
    start: dict
    end: dict


def _named_run(runs, name: str, line: int, body: dict, named: set, reserved: "_Reserved") -> None:
    run_id = body.get("run_id")
    if not isinstance(run_id, str) or (run_id not in runs and run_id not in runs.rejected):
        raise VerificationError(name, f"names run {run_id}, which the bundle lacks", line)
    named.add(run_id)
    run = runs.get(run_id)
    if run is None:
        return  # present but broken: step 2 reported it
    held = _Held(run.policy, run.start, run.end)
    checks = _SAME + (_CLAIMS if "passed" in body else ())
    if "invocation" in held.policy:
        checks += (("invocation", lambda r: r.policy.get("invocation")),)
    for key, get in checks:
        if key in body and body.get(key) != get(held):
            raise VerificationError(name, f"run {run_id[:12]}: the journal says {key}={body.get(key)!r}, "
                                    f"the run says {get(held)!r}", line)
    if "called_model" not in body:
        return
    # called the model: it records a call, or a ledger reserved one for its attempt (a call
    # cut off in flight leaves no call record)
    called = bool(held.end.get("calls")) or held.policy.get("attempt") in reserved
    if body["called_model"] is not called:
        raise VerificationError(name, f"run {run_id[:12]}: the journal says called_model={body['called_model']!r}, "
                                f"the evidence says {called!r} (calls recorded or reserved for its attempt)", line)


def _tiers_of(journal: list, trial: dict) -> list:
    for _, _, rec in held_records(journal):
        if rec.kind == "grid.start" and rec.body.get("invocation") == trial.get("invocation"):
            return list(rec.body.get("tiers") or [])
    return []


def _trial(runs, name: str, line: int, body: dict, tiers: list) -> None:
    attempts = []
    for run_id in body.get("runs") or []:
        run = runs.get(run_id)
        if run is None:
            raise VerificationError(name, f"trial {body.get('trial')} names run {run_id}, which the "
                                    "bundle lacks (or which failed step 2)", line)
        cost = _run_cost(run)
        try:
            low, high = parse_usd(cost["low"], "cost.low"), parse_usd(cost["high"], "cost.high")
        except BenchClawError as e:
            raise VerificationError(run.path, f"run.end {e}", run.count) from None
        attempts.append(Attempt(run.start.get("tier"), bool(run.end.get("gate_passed")),
                                bool(run.end.get("passed")), low, high,
                                int(run.end.get("elapsed_ms") or 0), run_id,
                                int(run.policy.get("batch") or 0)))
    try:
        policy_sequence(body, tiers, attempts)
        out = outcome(str(body.get("policy")), tiers, attempts)
    except PolicyError as e:
        raise VerificationError(name, f"trial {body.get('trial')}: {e}", line) from None
    listed = set(body.get("runs") or [])
    for run in runs.values():
        if (run.policy.get("trial") == body.get("trial") and run.run_id not in listed
                and run.of_kind("call")):
            raise VerificationError(name, f"trial {body.get('trial')} leaves out run {run.run_id[:12]}, "
                                    "which called the model for it", line)
    want = {"passed": out.passed, "tier": out.taken.tier if out.taken else None}
    if "cost" in body:
        want["cost"] = {"low": _fmt(out.cost_low), "high": _fmt(out.cost_high)}
    if "elapsed_ms" in body:
        want["elapsed_ms"] = out.elapsed_ms
    for key, value in want.items():
        if body.get(key) != value:
            raise VerificationError(name, f"trial {body.get('trial')}: recorded {key}={body.get(key)!r}, "
                                    f"recomputed from its runs {value!r}", line)


def policy_sequence(body: dict, tiers: list, attempts: list) -> None:
    """The trial's runs, batch by batch, are exactly what its policy asked for, and the
    policy asks for nothing more (FORMAT.md "Summary", policies). Raises PolicyError."""
    policy, memory = str(body.get("policy")), body.get("memory_start")
    done: list = []
    batches: dict[int, list] = {}
    for a in attempts:
        batches.setdefault(a.batch, []).append(a)
    for no in sorted(batches):
        want = next_batch(policy, tiers, done, memory)
        got = [a.tier for a in batches[no]]
        if got != want:
            raise PolicyError(f"batch {no} ran {got}, the policy asks for {want} after {len(done)} attempt(s)")
        done.extend(batches[no])
    more = next_batch(policy, tiers, done, memory)
    if more:
        raise PolicyError(f"recorded as complete, but the policy still asks for {more}")


def _fmt(d: Decimal) -> str:
    return fmt_usd(d)


def _planned(journal: list) -> None:
    done_grid = {(r.body.get("cell"), r.body.get("tier")) for _, _, r in journal
                 if r.kind == "run" and r.body.get("policy") == "grid"}
    held = held_records(journal)
    done_live = {(r.body.get("cell"), r.body.get("policy")) for _, _, r in held if r.kind == "trial"}
    for name, line, rec in held:
        if rec.kind != "grid.start":
            continue
        left = {c for _, _, s in held if s.kind == "stop" and s.at >= rec.at
                for c in (s.body.get("cells_left") or [])}
        body = rec.body
        for cell in body.get("cells") or []:
            if cell in left:
                continue
            if body.get("all_tiers", True):
                for tier in body.get("tiers") or []:
                    if (cell, tier) not in done_grid:
                        raise VerificationError(name, f"planned cell {cell} tier {tier} has no run and no "
                                                "recorded stop", line)
            for pol in body.get("policies") or []:
                if (cell, pol) not in done_live:
                    raise VerificationError(name, f"planned cell {cell} policy {pol} has no trial and no "
                                            "recorded stop", line)


def _correction(exp: str, name: str, line: int, rec: Record, journal: list) -> None:
    """A correction's fields and its place in the journal (FORMAT.md §8, ``correction``)."""
    body = rec.body
    if body["experiment"] != exp:
        raise VerificationError(name, f"correction names experiment {body['experiment']!r}", line)
    for key in ("claim", "wrong", "why", "corrected"):
        if not body[key].strip():
            raise VerificationError(name, f"correction has an empty {key!r}", line)
    runs_at = {r.body.get("run_id"): r.at for _, _, r in journal if r.kind == "run"}
    if not runs_at or min(runs_at.values()) > rec.at:
        raise VerificationError(name, f"correction at {rec.at} precedes every run of {exp}: there "
                                "was no result to correct", line)
    for run_id in body.get("runs") or []:
        if run_id not in runs_at:
            raise VerificationError(name, f"correction names run {run_id}, which the journal does not", line)
        if runs_at[run_id] > rec.at:
            raise VerificationError(name, f"correction at {rec.at} precedes the run {run_id[:12]} it names "
                                    f"(journaled at {runs_at[run_id]})", line)
