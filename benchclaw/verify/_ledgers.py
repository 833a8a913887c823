"""Step 5, the ledgers: replayed, no limit passed, and settled spend equals the recorded calls.

Each ``ledgers/<id>.jsonl`` is replayed as FORMAT.md "Ledgers" specifies (worst-case
spend = carried + settled + unknown at its upper bound + open reservations), checking at
every ``reserve`` that it could not have passed a limit, that every ``settle`` names an
open reservation (an unknown one repeating its bound), that ``ledger.close`` totals are
the replayed ones, and that ``carried`` spend is what the earlier ledgers it names spent.
Then the ledger is tied to the runs: every ``call`` of a run that names the ledger has
its reservation (same attempt id and ``turn.attempt`` key) with the recomputed bound, and
its settlement carries exactly the call's usage and cost; a known settlement without a
call, or a reservation under an attempt no run in the bundle carries, is evidence dropped.

The arithmetic is ``benchclaw.formats.ledger``, the very fold the ledger writer uses (and its
refusal rule decides whether a reservation could have passed a limit); this step adds
what a writer cannot see: ids reused, unknown settlements that do not repeat their bound,
close totals, carried spend, and the tie to the runs. A call's cost and its run's prices
are the ones step 4 confirmed (``Costs``); its bound is recomputed from those prices.
"""

from __future__ import annotations

import marshal
from dataclasses import dataclass, field
from decimal import Decimal

from ..errors import BenchClawError
from ..formats.ledger import LedgerState, apply_record, refusal, totals
from ..formats.money import CostBounds, Prices, Usage, call_cost, fmt_usd, parse_usd
from ._costs import Confirmed, Costs, upper_bound
from ._errors import VerificationError, from_error
from ._index import Index, Run
from ._journal import journal_of
from ._report import Section
from ._shape import LEDGER, check_body

__all__ = ["verify_ledgers", "LedgerReplay", "Tie"]

_PREFIX = "ledgers/"
PREFIX = _PREFIX  # the entries step 5 reads


@dataclass
class Tie:
    """What tying a run's calls to a ledger reads: step 4's confirmed costs, and this step's
    pure recomputations (a bound, once per prices and counts)."""

    costs: Costs
    cache: dict = field(default_factory=dict)


@dataclass
class LedgerReplay:
    """One ledger replayed: the shared fold's ``state`` plus the indexes the tie to the runs needs."""

    name: str
    state: LedgerState = field(default_factory=LedgerState)
    carried_from: list = field(default_factory=list)
    open: dict = field(default_factory=dict)        # reservation id -> reserve body (+ line)
    reserves: dict = field(default_factory=dict)    # (attempt, key) -> reserve fields kept (and its line)
    settles: dict = field(default_factory=dict)     # reservation id -> settle fields kept (and its line)
    refusals: list = field(default_factory=list)    # refuse bodies
    strings: dict = field(default_factory=dict, repr=False)  # _once

    def spent(self) -> tuple[Decimal, int]:
        return self.state.spent_usd, self.state.spent_tokens


def verify_ledgers(ix: Index, runs, costs: Costs, sec: Section) -> None:
    replays: dict[str, LedgerReplay] = {}
    for name in sorted(n for n in ix.names if n.startswith(_PREFIX)):
        lid = name[len(_PREFIX):].removesuffix(".jsonl")
        if sec.attempt(replay_into, ix, name, lid, replays):
            sec.count("ledgers")
    for lid, rep in replays.items():
        sec.attempt(_check_carried, rep, replays)
    sec.attempt(named_ledgers_present, ix, runs, replays)
    tied, keys = _runs_by_attempt(Tie(costs), runs, replays, sec)
    for rep in replays.values():
        sec.attempt(_no_orphans, rep, tied.get(rep.name, {}), keys.get(rep.name, {}))


def ledger_records(ix: Index, name: str) -> tuple:
    """The chained records of ledger entry ``name``. Raises its chain's VerificationError,
    or one saying it could not be read."""
    got = ix.ledgers.get(name)
    if got is None:
        raise ix.unread.get(name) or VerificationError(name, f"{name} is missing from the bundle")
    if isinstance(got, VerificationError):
        raise got
    return got


def replay_into(ix: Index, name: str, lid: str, replays: dict) -> None:
    records = ledger_records(ix, name)
    rep = LedgerReplay(lid, LedgerState(ledger=lid))
    for i, rec in enumerate(records, 1):
        check_body(rec.kind, rec.body, LEDGER, name, i)
        _CHECK.get(rec.kind, _no_check)(rep, rec.body, name, i)
        try:
            apply_record(rep.state, rec, name)
        except BenchClawError as e:
            raise from_error(e, name) from None
        _INDEX.get(rec.kind, _no_check)(rep, rec.body, name, i)
    replays[lid] = rep


def _no_check(rep: LedgerReplay, body: dict, name: str, line: int) -> None:
    return None


def _open_check(rep: LedgerReplay, body: dict, name: str, line: int) -> None:
    if not isinstance(body.get("limits"), dict):
        raise VerificationError(name, "ledger.open has no limits", line)
    named = (body.get("carried") or {}).get("ledgers") or []
    if not isinstance(named, list) or not all(isinstance(x, str) for x in named):
        raise VerificationError(name, "carried.ledgers is not a list of ledger ids", line)
    rep.carried_from = named


def _reserve_check(rep: LedgerReplay, body: dict, name: str, line: int) -> None:
    """Before the fold: the reservation could not have passed a limit (the writer's rule)."""
    tokens = body.get("tokens")
    if type(tokens) is not int or tokens < 0:
        raise VerificationError(name, f"reserve tokens is not a non-negative integer: {tokens!r}", line)
    try:
        usd = parse_usd(body.get("usd"), "reserve usd")
    except BenchClawError as e:
        raise VerificationError(name, str(e), line) from None
    st = rep.state
    if st.limits is None:
        raise VerificationError(name, "a reservation before ledger.open (no limits)", line)
    why = refusal(st, tokens, usd)
    if why is not None:
        raise VerificationError(name, _REFUSED[why[0]](st, tokens, usd), line)
    rid = body.get("id")
    if not isinstance(rid, str) or rid in rep.open or rid in rep.settles:
        raise VerificationError(name, f"reservation id {rid!r} is not new", line)


_REFUSED = {
    "per_call_usd": lambda st, tokens, usd: (f"reservation of ${fmt_usd(usd)} passes the per-call stop "
                                             f"${fmt_usd(st.limits.per_call_usd)}"),
    "usd": lambda st, tokens, usd: (f"reservation takes worst-case spend to ${fmt_usd(st.spent_usd + usd)}, "
                                    f"past the limit ${fmt_usd(st.limits.usd)}"),
    "tokens": lambda st, tokens, usd: (f"reservation takes worst-case tokens to {st.spent_tokens + tokens}, "
                                       f"past the limit {st.limits.tokens}"),
}


def _settle_check(rep: LedgerReplay, body: dict, name: str, line: int) -> None:
    res = rep.open.get(body.get("id"))
    if res is None:
        raise VerificationError(name, f"settles reservation {body.get('id')!r}, which is not open", line)
    if body.get("known") is not True and (body.get("tokens") != res["tokens"] or body.get("usd") != res["usd"]):
        raise VerificationError(name, "an unknown settlement does not repeat its reservation's bound "
                                f"({res['tokens']} tokens, ${res['usd']})", line)


def _close_check(rep: LedgerReplay, body: dict, name: str, line: int) -> None:
    for key, value in totals(rep.state).items():
        if body.get(key) != value:
            raise VerificationError(name, f"ledger.close {key} {body.get(key)} differs from the "
                                    f"replayed {value}", line)


_CHECK = {"ledger.open": _open_check, "reserve": _reserve_check, "settle": _settle_check,
          "ledger.close": _close_check}


# What the tie to the runs reads of a reservation and of a settlement: only these fields
# are held (a grid's ledger has two records a call, each body six or more strings).
_RESERVE_KEPT = ("id", "tokens", "usd")
_SETTLE_KEPT = ("known", "tokens", "usd", "reason")


class Kept(bytes):
    """The fields of a reserve or settle body the tie to the runs reads (and its ``line``),
    read as the body is (``res["usd"]``, ``s.get("reason")``), kept ``marshal``led: a
    grid's ledger holds 230,000 of them at 20,000 runs, and as objects (a slot each, an int
    and a string per field) they were three times the bytes."""

    __slots__ = ()

    def __new__(cls, body: dict, keys: tuple, line: int | None = None):
        if keys not in _LAYOUTS:
            _LAYOUTS.append(keys)
        layout = _LAYOUTS.index(keys)
        held = [k for k in keys if k in body]
        mask = (1 << len(keys)) - 1 if len(held) == len(keys) else sum(1 << keys.index(k) for k in held)
        return super().__new__(cls, marshal.dumps((layout, mask, line, *map(body.__getitem__, held))))

    def fields(self) -> dict:
        layout, mask, line, *values = marshal.loads(self)
        names = _NAMES.get((layout, mask))
        if names is None:
            names = _NAMES[(layout, mask)] = tuple(k for i, k in enumerate(_LAYOUTS[layout]) if mask >> i & 1)
        got = dict(zip(names, values))
        if line is not None:
            got["line"] = line
        return got

    def __getitem__(self, key: str):  # never bytes' own indexing
        return self.fields()[key]

    def get(self, key: str, default=None):
        return self.fields().get(key, default)

    @property
    def line(self) -> int:
        return marshal.loads(self)[2]


_LAYOUTS: list[tuple] = [_RESERVE_KEPT, _SETTLE_KEPT]  # Kept's field names, by the index it keeps
_NAMES: dict[tuple, tuple] = {}  # (layout, mask) -> the names of the fields a Kept holds


def _index_reserve(rep: LedgerReplay, body: dict, name: str, line: int) -> None:
    res = Kept(body, _RESERVE_KEPT, line)  # tokens and usd as written
    rep.open[body["id"]] = res
    rep.reserves[(_once(rep, body.get("attempt")), _once(rep, body.get("key")))] = res


def _index_settle(rep: LedgerReplay, body: dict, name: str, line: int) -> None:
    rid = body.get("id")
    rep.open.pop(rid)
    rep.settles[rid] = Kept(body, _SETTLE_KEPT, line)


def _once(rep: LedgerReplay, value):
    """``value``, held once per ledger (an attempt id and a call key recur in every call)."""
    return rep.strings.setdefault(value, value) if type(value) is str else value


def _index_refuse(rep: LedgerReplay, body: dict, name: str, line: int) -> None:
    rep.refusals.append(body)


_INDEX = {"reserve": _index_reserve, "settle": _index_settle, "refuse": _index_refuse}


def _check_carried(rep: LedgerReplay, replays: dict) -> None:
    name = f"{_PREFIX}{rep.name}.jsonl"
    present = [replays[lid] for lid in rep.carried_from if lid in replays]
    if len(present) != len(rep.carried_from):
        return  # a ledger of another machine's shard: its spend cannot be recomputed here
    usd = sum((p.state.spent_usd - p.state.carried_usd for p in present), Decimal(0))
    tokens = sum(p.state.spent_tokens - p.state.carried_tokens for p in present)
    st = rep.state
    if (usd, tokens) != (st.carried_usd, st.carried_tokens):
        raise VerificationError(name, f"carries ${fmt_usd(st.carried_usd)} / {st.carried_tokens} tokens, "
                                f"the ledgers it names spent ${fmt_usd(usd)} / {tokens}", 1)


def named_ledgers_present(ix: Index, runs, replays: dict) -> None:
    names = set()
    for exp in ix.manifest.experiments:
        for _, _, rec in journal_of(ix, exp):
            if rec.kind == "grid.start" and rec.body.get("ledger") is not None:
                names.add(rec.body["ledger"])
    for run in runs.values():
        if run.start.get("ledger") is not None:
            names.add(run.start["ledger"])
    missing = sorted(str(n) for n in names if n not in replays)
    if missing:
        raise VerificationError(f"{_PREFIX}{missing[0]}.jsonl", "named by the evidence but missing "
                                f"from the bundle ({len(missing)} ledger(s) missing)")


def _runs_by_attempt(tie: Tie, runs, replays: dict, sec: Section) -> tuple[dict, dict]:
    """The runs naming each ledger, by attempt, with the keys of their calls (taken in the
    same pass: a run's records are parsed again each time a step reads another run's)."""
    tied: dict[str, dict] = {}
    keys: dict[str, dict] = {}
    once: dict[str, str] = {}  # a call key ("0.1") recurs in every run: held once
    for run in runs.values():
        lid = run.start.get("ledger")
        if lid is None or lid not in replays:
            continue
        attempt = run.policy.get("attempt")
        tied.setdefault(lid, {})[attempt] = run
        confirmed = tie.costs.confirmed(run.run_id)  # else the calls are read from the records
        calls = run.of_kind("call") if confirmed is None else confirmed
        mine = ((f"{r.body.get('turn')}.{r.body.get('attempt')}" for _, r in calls) if confirmed is None
                else (c.key for c in confirmed))
        mine = tuple({once.setdefault(k, k): None for k in mine})
        keys.setdefault(lid, {})[attempt] = mine if len(mine) <= 16 else frozenset(mine)  # a few: a tuple
        if sec.attempt(_check_run_calls, tie, run, replays[lid], attempt, confirmed):
            sec.count("calls tied", len(calls))
    return tied, keys


def _check_run_calls(tie: Tie, run: Run, rep: LedgerReplay, attempt, confirmed) -> None:
    prices = tie.costs.prices_of(run)
    calls = list(run.of_kind("call") if confirmed is None else ((c.line, c) for c in confirmed))
    # A run cut off (sealed aborted) between its last call's record and that call's
    # settlement, which follows the next reservation (FORMAT.md "Ledgers"), has it settled
    # as cut off: at its bound, as unknown.
    cut = calls[-1][0] if calls and run.end.get("status") == "aborted" else None
    for line, rec in calls:
        try:
            if confirmed is None:
                check_call(tie, run, line, rec.body, rep, attempt, prices, cut=line == cut)
            else:
                _tie(tie, run, rec, rep, attempt, prices, cut=line == cut)
        except (BenchClawError, ArithmeticError, TypeError, ValueError) as e:
            if isinstance(e, VerificationError):
                raise
            raise VerificationError(run.path, f"call: cannot tie it to the ledger ({e})", line) from None
    if run.end.get("status") == "budget_stop" and not any(r.get("attempt") == attempt for r in rep.refusals):
        raise VerificationError(run.path, f"ended budget_stop but {rep.name} records no refusal for it",
                                run.count)


def check_call(tie: Tie, run: Run, line: int, body: dict, rep: LedgerReplay, attempt,
               prices: Prices, *, cut: bool = False) -> None:
    key = f"{body.get('turn')}.{body.get('attempt')}"
    estimate, max_tokens = body.get("prompt_estimate"), (body.get("params") or {}).get("max_tokens")
    res = _reserved(tie, run, line, key, estimate, max_tokens, rep, attempt, prices)
    settled = rep.settles.get(res["id"])
    usage = Usage.from_dict(body["usage"]) if isinstance(body.get("usage"), dict) else None
    if settled is None:
        return  # still open: counted at its bound
    done = tie.costs.cost_of(run.run_id, line)  # step 4 recomputed it from this usage and these prices
    if done is None and usage is not None:
        done = CostBounds(True, call_cost(usage, prices), call_cost(usage, prices))
    _settled(run, line, key, rep, settled, done, usage.total if usage is not None else 0, cut)


def _tie(tie: Tie, run: Run, call: Confirmed, rep: LedgerReplay, attempt, prices: Prices, *,
         cut: bool = False) -> None:
    """``check_call`` of a call step 4 confirmed, from what it confirmed."""
    res = _reserved(tie, run, call.line, call.key, call.estimate, call.max_tokens, rep, attempt, prices)
    settled = rep.settles.get(res["id"])
    if settled is not None:
        _settled(run, call.line, call.key, rep, settled, call.cost, call.tokens or 0, cut)


def _reserved(tie: Tie, run: Run, line: int, key: str, estimate, max_tokens, rep: LedgerReplay, attempt,
              prices: Prices) -> Kept:
    """The call's reservation, which must be its bound."""
    found = rep.reserves.get((attempt, key))
    if found is None:
        raise VerificationError(run.path, f"call {key} has no reservation in ledger {rep.name}", line)
    res = found.fields()
    bound = upper_bound(tie.cache, prices, estimate, max_tokens)
    if res["tokens"] != estimate + max_tokens or res["usd"] != bound:
        raise VerificationError(run.path, f"call {key}: its reservation ({res['tokens']} tokens, ${res['usd']}) "
                                f"is not its bound ({estimate + max_tokens} tokens, ${bound})", line)
    return found


def _settled(run: Run, line: int, key: str, rep: LedgerReplay, s: Kept, done: CostBounds | None,
             tokens: int, cut: bool = False) -> None:
    """The settlement of a call whose cost is ``done`` (None: unknown) and usage ``tokens``;
    ``cut``: the last call of a run cut off, which may be settled as unknown (at its bound,
    which ``_reserved`` checked) when the cut came before its settlement."""
    s = s.fields()
    if cut and s.get("known") is False:
        return
    if done is None or not done.known:  # no usage, or doubted usage (FORMAT.md §6): at the bound
        if s.get("known") is not False:
            raise VerificationError(run.path, f"call {key}: its cost is a bound but ledger {rep.name} settled "
                                    "it as known", line)
        return
    want = (True, tokens, fmt_usd(done.low))  # no usage: a known zero
    if (s.get("known"), s.get("tokens"), s.get("usd")) != want:
        raise VerificationError(run.path, f"call {key}: ledger {rep.name} settled {s.get('tokens')} tokens "
                                f"${s.get('usd')}, the call's usage gives {want[1]} tokens ${want[2]}", line)


def _no_orphans(rep: LedgerReplay, runs: dict, calls: dict) -> None:
    """``calls``: attempt -> the keys of its run's calls (``_runs_by_attempt``)."""
    name = f"{_PREFIX}{rep.name}.jsonl"
    reserves = rep.reserves
    for attempt, key in sorted(reserves, key=lambda k: reserves[k].line):  # the keys: no pair built for each
        res = reserves[(attempt, key)].fields()
        line = res["line"]
        run = runs.get(attempt)
        if run is None:
            raise VerificationError(name, f"reservation for attempt {attempt} (call {key}) but no run in the "
                                    "bundle carries that attempt", line)
        settled = rep.settles.get(res["id"])
        called = key in calls[attempt]
        if settled and settled.get("known") is True and not called:
            raise VerificationError(name, f"settled a known call {key} of {run.run_id[:12]} that the run "
                                    "does not record", settled.line)
