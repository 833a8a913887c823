"""Step 5 of an exploratory bundle: the studio's session and day ledgers (``_exploratory``
has the form's other steps and the one hook).

Every ledger is replayed by step 5's own replay (``_ledgers``, over the shared fold
``benchclaw.formats.ledger``): no reservation could have passed its session's or its day's
limit. Then what only the studio's pairing shows: each ledger is one of the journal's, opened
with the budgets of the ``studio.open`` in force; every session reservation has its day
reservation (same ``run``, ``key`` and ``attempt``, the n-th with the n-th) with the same
bound and the same settlement, or none (the day refused it, or the studio died before
reserving it) and then is released at zero for a call the run never made; every call of
every run is reserved and settled in its session's ledger and in a day ledger at its bound
and its recorded cost (``_ledgers.check_call``); every reservation belongs to a run.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from dataclasses import dataclass

from ..formats import jsonio
from ..errors import BenchClawError
from ._costs import Costs
from ._errors import VerificationError
from ._exploratory import studio_budgets, budgets_in_force, studio_journal_id, ledger_opens
from ._index import Index, Run
from ._ledgers import PREFIX, LedgerReplay, Tie, check_call, ledger_records, named_ledgers_present, replay_into
from ._report import Section
from .exploratory import studio_ledger

__all__ = ["verify_ledgers"]


@dataclass
class _Res:
    """One reservation as written, and its settlement."""

    lid: str
    line: int
    body: dict
    settle: dict | None = None

    @property
    def triple(self) -> bytes:
        return _triple(self.body)

    def where(self) -> str:
        return f"{PREFIX}{self.lid}.jsonl"


def verify_ledgers(ix: Index, runs, costs: Costs, sec: Section) -> None:
    exp = studio_journal_id(ix)
    replays: dict[str, LedgerReplay] = {}
    for name in sorted(ix.names_under(PREFIX)):  # (no object entry's name made)
        lid = name[len(PREFIX):].removesuffix(".jsonl")
        if sec.attempt(_studio_ledger_name, exp, name, lid) and sec.attempt(replay_into, ix, name, lid, replays):
            sec.count("ledgers")
    for lid in replays:
        sec.attempt(_opened_as_configured, ix, exp, lid)
    sec.attempt(named_ledgers_present, ix, runs, replays)
    sessions, days, refused = _books(ix, exp, replays)
    released = set()
    for triple, mine in sessions.items():
        partners = days.get(triple, [])
        for i, res in enumerate(mine):
            if i < len(partners):
                sec.attempt(_paired, res, partners[i])
            elif sec.attempt(_released, runs, res, triple in refused):
                released.add((res.lid, res.line))
    for triple, theirs in days.items():
        for res in theirs[len(sessions.get(triple, [])):]:
            if sec.attempt(_released, runs, res, False, "no session ledger reserved it"):
                released.add((res.lid, res.line))
    day_reps = [replays[lid] for lid in sorted(replays) if studio_ledger(exp, lid)[0] == "day"]
    tie = Tie(costs)
    for run in runs.values():
        if sec.attempt(_tie_run, tie, exp, run, replays, day_reps):
            sec.count("calls tied", len(run.of_kind("call")))
    _orphans(runs, sessions, days, released, sec)


def _studio_ledger_name(exp: str, name: str, lid: str) -> None:
    if studio_ledger(exp, lid) is None:
        raise VerificationError(name, f"not a ledger of {exp}: an exploratory bundle holds only its "
                                f"session ({exp}-s-<16 hex>) and day ({exp}-day-<yyyymmdd>) ledgers")


def _opened_as_configured(ix: Index, exp: str, lid: str) -> None:
    """The ledger names the journal, carries nothing, and has the limits of the studio's
    budgets in force when it was opened (a raised limit would hide an overspend)."""
    name = f"{PREFIX}{lid}.jsonl"
    records = ledger_records(ix, name)
    if not records or records[0].kind != "ledger.open":
        raise VerificationError(name, "does not open with ledger.open", 1)
    first = records[0]
    body = first.body
    if (body.get("ledger"), body.get("experiment"), body.get("invocation")) != (lid, exp, lid):
        raise VerificationError(name, f"ledger.open names {body.get('ledger')!r} / {body.get('experiment')!r} / "
                                f"{body.get('invocation')!r}, not {lid!r} / {exp!r} / {lid!r}", 1)
    if body.get("carried") != {"usd": "0", "tokens": 0, "ledgers": []}:
        raise VerificationError(name, f"ledger.open carries {body.get('carried')}: a studio ledger carries nothing", 1)
    kind, which = studio_ledger(exp, lid)
    if kind == "day" and not _on_its_day(which, first.at):
        raise VerificationError(name, f"the day ledger of {which} was opened at {first.at}: a day's budget "
                                "opens on its own UTC day", 1)
    try:
        opened = budgets_in_force(ledger_opens(ix), first.at)
    except VerificationError:
        return  # the journal is unreadable: step 6 reports it
    if opened is None:
        return  # step 7 reports a ledger older than the journal
    budgets = studio_budgets(opened, f"journals/{exp}/", 0)
    want = budgets.session if kind == "session" else budgets.day
    if body.get("limits") != want:
        raise VerificationError(name, f"ledger.open limits {body.get('limits')}, the studio's budgets in force "
                                f"(studio.open at {opened.at}) say {want}", 1)


def _on_its_day(day: str, at: str) -> bool:
    """``at`` is on the UTC day ``yyyymmdd``, or in the first minute after it (the studio
    names the day's ledger a moment before it writes its first record)."""
    try:
        start = dt.datetime.strptime(day, "%Y%m%d")
        when = dt.datetime.strptime(at, "%Y-%m-%dT%H:%M:%S.%fZ")
    except ValueError:
        return False
    return start <= when < start + dt.timedelta(days=1, minutes=1)


def _books(ix: Index, exp: str, replays: dict) -> tuple[dict, dict, set]:
    """Reservations of the session ledgers and of the day ledgers by (run, key, attempt), in
    ledger order, and the triples a day ledger refused."""
    sessions: dict[tuple, list] = {}
    days: dict[tuple, list] = {}
    refused: set[tuple] = set()
    for lid in sorted(replays):
        is_day = studio_ledger(exp, lid)[0] == "day"
        mine: dict[str, _Res] = {}
        for i, rec in enumerate(ledger_records(ix, f"{PREFIX}{lid}.jsonl"), 1):
            if rec.kind == "reserve":
                res = mine[rec.body["id"]] = _Res(lid, i, rec.body)
                (days if is_day else sessions).setdefault(res.triple, []).append(res)
            elif rec.kind == "settle" and rec.body.get("id") in mine:
                mine[rec.body["id"]].settle = rec.body
            elif rec.kind == "refuse" and is_day:
                refused.add(_triple(rec.body))
    return sessions, days, refused


def _triple(body: dict) -> bytes:
    """(run, key, attempt) of a reserve or refuse body as one hashable value, whatever JSON
    values a crafted ledger puts there."""
    return jsonio.dumps([body.get("run"), body.get("key"), body.get("attempt")])


def _settled(res: _Res):
    s = res.settle
    return None if s is None else (s.get("known"), s.get("tokens"), s.get("usd"))


def _paired(session: _Res, day: _Res) -> None:
    key = session.body.get("key")
    if (session.body.get("tokens"), session.body.get("usd")) != (day.body.get("tokens"), day.body.get("usd")):
        raise VerificationError(session.where(), f"reservation of call {key} ({session.body.get('tokens')} tokens, "
                                f"${session.body.get('usd')}) differs from its day reservation in {day.where()}:"
                                f"{day.line} ({day.body.get('tokens')} tokens, ${day.body.get('usd')})", session.line)
    if _settled(session) != _settled(day):
        raise VerificationError(session.where(), f"call {key} is settled {_settled(session) or 'not at all'} here "
                                f"and {_settled(day) or 'not at all'} in {day.where()}:{day.line}: the two "
                                "ledgers of one call must agree", session.line)


def _released(runs, res: _Res, refused: bool, lone: str = "no day ledger reserved it") -> None:
    """A reservation without its partner was never made (the pair is made durable by one
    commit before the call): released at zero, and no run records the call."""
    why = "the day ledger refused it" if refused else lone
    if _settled(res) != (True, 0, "0"):
        raise VerificationError(res.where(), f"call {res.body.get('key')}: {why}, so the call was never made, "
                                f"but this reservation is settled {_settled(res) or 'not at all'}, not "
                                "released at zero", res.line)
    attempt, key = res.body.get("attempt"), res.body.get("key")
    for run in runs.values():
        if run.policy.get("attempt") == attempt and any(
                f"{r.body.get('turn')}.{r.body.get('attempt')}" == key for _, r in run.of_kind("call")):
            raise VerificationError(run.path, f"records call {key}, which {why} (so it was never made)")


def _tie_run(tie: Tie, exp: str, run: Run, replays: dict, day_reps: list) -> None:
    """Every call of the run is reserved and settled in its session's ledger and in a day
    ledger, at its bound and its recorded cost; a budget stop has its refusal."""
    attempt = run.policy.get("attempt")
    want = f"{exp}-s-{run.policy.get('session')}"
    if run.start.get("ledger") != want:
        raise VerificationError(run.path, f"run.start.ledger {run.start.get('ledger')!r}, its session's "
                                f"ledger is {want!r}", 1)
    session = replays.get(want)
    if session is None:
        return  # missing (reported by named_ledgers_present) or broken (reported by its replay)
    prices = tie.costs.prices_of(run)
    for line, rec in run.of_kind("call"):
        key = f"{rec.body.get('turn')}.{rec.body.get('attempt')}"
        day = next((r for r in day_reps if r.book.find(attempt, key) is not None), None)
        if day is None:
            raise VerificationError(run.path, f"call {key} has no reservation in any day ledger of {exp}", line)
        for rep in (session, day):
            try:
                check_call(tie, run, line, rec.body, _as_if_open(rep, attempt, key), attempt, prices)
            except VerificationError:
                raise
            except (BenchClawError, ArithmeticError, TypeError, ValueError) as e:
                raise VerificationError(run.path, f"call: cannot tie it to the ledger ({e})", line) from None
    if run.end.get("status") == "budget_stop" and not any(
            r.get("attempt") == attempt for rep in (session, *day_reps) for r in rep.refusals):
        raise VerificationError(run.path, f"ended budget_stop but neither {want} nor a day ledger records a "
                                "refusal for it", run.count)


RESTARTED = "studio restarted: the call was cut off"


def _as_if_open(rep: LedgerReplay, attempt, key: str) -> LedgerReplay:
    """``rep``, or, when a restart settled this call as cut off, ``rep`` without that
    settlement: a kill after the call was recorded but before it was settled leaves its
    reservations open, and the restart settles them at their upper bound (FORMAT.md "Studio
    journal"), which counts the call at no less than it cost. It is then tied as an open
    reservation is: at its bound (the replay checked that the settlement repeats it)."""
    n = rep.book.find(attempt, key)
    settled = rep.settlement(n) if n is not None else None
    if settled is None or settled.known is not False or settled.reason != RESTARTED:
        return rep
    return dataclasses.replace(rep, unsettled=n)


def _orphans(runs, sessions: dict, days: dict, released: set, sec: Section) -> None:
    """Every reservation belongs to a run in the bundle, and a call settled as known is one
    the run records (or a session reservation released at zero)."""
    calls = {run.policy.get("attempt"): {f"{r.body.get('turn')}.{r.body.get('attempt')}" for _, r in run.of_kind("call")}
             for run in runs.values()}
    for book in (sessions, days):
        for reservations in book.values():
            for res in reservations:
                attempt, key = res.body.get("attempt"), res.body.get("key")
                if attempt not in calls:
                    sec.fail(VerificationError(res.where(), f"reservation for attempt {attempt} (call {key}) but no "
                                               "run in the bundle carries that attempt", res.line))
                elif (res.settle or {}).get("known") is True and key not in calls[attempt] \
                        and (res.lid, res.line) not in released:
                    sec.fail(VerificationError(res.where(), f"settled a known call {key} that the run of attempt "
                                               f"{attempt} does not record", res.line))
