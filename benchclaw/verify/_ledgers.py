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

The replay of a ledger is the fold ``Replaying`` of its records, which the reading stage
feeds as it reads the ledger (``ledger_fold``) and keeps when every record held
(``_index.LedgerFacts``); a ledger without one is replayed here, and its fault reported.
"""

from __future__ import annotations

import marshal
from array import array
from dataclasses import dataclass, field
from decimal import Decimal
from typing import NamedTuple

from ..errors import BenchClawError
from ..formats.ledger import LedgerState, apply_record, refusal, totals
from ..formats.money import CostBounds, Prices, Usage, call_cost, fmt_usd, parse_usd
from ._costs import Confirmed, Costs, upper_bound
from ._errors import UnreadableBundle, VerificationError, from_error
from ._index import Index, Run
from ._journal import journal_of
from ._report import Section, outcome_of, raised
from ._shape import LEDGER, check_body

__all__ = ["verify_ledgers", "LedgerReplay", "Tie", "Book"]

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
    """One ledger replayed: the shared fold's ``state`` plus what the tie to the runs reads
    (``book``). ``unsettled``: a reservation whose settlement the tie reads as absent
    (``_exploratory_ledgers``' restarted calls), else -1."""

    name: str
    state: LedgerState = field(default_factory=LedgerState)
    carried_from: list = field(default_factory=list)
    book: "Book" = field(default_factory=lambda: Book())
    refusals: list = field(default_factory=list)    # refuse bodies
    unsettled: int = -1

    def spent(self) -> tuple[Decimal, int]:
        return self.state.spent_usd, self.state.spent_tokens

    def settlement(self, n: int) -> "Settled | None":
        """Reservation ``n``'s settlement (None: still open)."""
        return None if n == self.unsettled else self.book.settlement(n)


def verify_ledgers(ix: Index, runs, costs: Costs, sec: Section) -> None:
    replays: dict[str, LedgerReplay] = {}
    for name in sorted(ix.names_under(_PREFIX)):  # (no object entry's name made)
        lid = name[len(_PREFIX):].removesuffix(".jsonl")
        if sec.attempt(replay_into, ix, name, lid, replays):
            sec.count("ledgers")
    for lid, rep in replays.items():
        sec.attempt(_check_carried, rep, replays)
    tied, keys, named, ties = _runs_by_attempt(Tie(costs), runs, replays)
    sec.attempt(named_ledgers_present, ix, runs, replays, named)
    for got in ties:  # each run's tie, reported after the ledgers named, where it always was
        if type(got) is int:
            sec.count("calls tied", got)
        elif type(got) is tuple:
            raise got[0]  # raised outside the checks: it ends the step, as it did there
        else:
            sec.attempt(raised, got)
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
    """Replay ledger entry ``name`` into ``replays[lid]``: the reading stage's replay when it
    took one as it streamed the ledger (``ledger_fold``: it held), else replayed here.
    Raises the VerificationError of the first record that does not hold."""
    records = ledger_records(ix, name)
    taken = ix.ledger_facts_of(name).replay
    if taken is not None:
        replays[lid] = taken
        return
    fold = Replaying(name, lid)
    for rec in records:
        if not fold.add(rec):
            break
    replays[lid] = fold.result(records)


class Replaying:
    """``replay_into``'s fold, fed one record at a time: the step feeds it a ledger's
    records, the reading stage the same records as it streams them (``ledger_fold``)."""

    __slots__ = ("name", "rep", "line", "err")

    def __init__(self, name: str, lid: str):
        self.name, self.rep, self.line, self.err = name, LedgerReplay(lid, LedgerState(ledger=lid)), 0, None

    def add(self, rec) -> bool:
        """Fold the next record; False once one did not hold (its error kept for ``result``)."""
        if self.err is not None:
            return False
        self.line += 1
        rep, name, line = self.rep, self.name, self.line
        try:
            check_body(rec.kind, rec.body, LEDGER, name, line)
            _CHECK.get(rec.kind, _no_check)(rep, rec.body, name, line)
            try:
                apply_record(rep.state, rec, name)
            except BenchClawError as e:
                raise from_error(e, name) from None
            _INDEX.get(rec.kind, _no_check)(rep, rec.body, name, line)
        except VerificationError as e:
            if isinstance(e, UnreadableBundle):
                raise
            self.err = e
            return False
        return True

    def result(self, records) -> LedgerReplay:
        """The replay, once every record is added. Raises the VerificationError of the
        first record that did not hold; ``records``: the ledger's again, read only when
        two reservation ids' hashes are equal (None: reading them is not possible, and
        this raises ``LookupError`` then)."""
        rep, err = self.rep, self.err
        reused = rep.book.first_reused(records)  # the check a reservation's id is new, made here
        if reused is not None and (err is None or reused[0] < self.line):
            raise VerificationError(self.name, f"reservation id {reused[1]!r} is not new", reused[0])
        if err is not None:
            raise err
        return rep


def ledger_fold(name: str) -> "Replaying":
    """Step 5's replay of ledger entry ``name``, for the reading stage to feed as it streams
    the ledger; its ``result(None)`` is the replay when every record held (``_index.LedgerFacts``)."""
    return Replaying(name, name[len(_PREFIX):].removesuffix(".jsonl"))


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
    if not isinstance(rid, str) or rid in rep.book.open:  # (an id settled before: Book.first_reused)
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
    n = rep.book.open.get(body.get("id"))
    if n is None:
        raise VerificationError(name, f"settles reservation {body.get('id')!r}, which is not open", line)
    if body.get("known") is True:
        return
    res = rep.book.reservation(n)
    if body.get("tokens") != res.tokens or body.get("usd") != res.usd:
        raise VerificationError(name, "an unknown settlement does not repeat its reservation's bound "
                                f"({res.tokens} tokens, ${res.usd})", line)


def _close_check(rep: LedgerReplay, body: dict, name: str, line: int) -> None:
    for key, value in totals(rep.state).items():
        if body.get(key) != value:
            raise VerificationError(name, f"ledger.close {key} {body.get(key)} differs from the "
                                    f"replayed {value}", line)


_CHECK = {"ledger.open": _open_check, "reserve": _reserve_check, "settle": _settle_check,
          "ledger.close": _close_check}


class Reserved(NamedTuple):
    """What the tie to the runs reads of a reservation: its line, tokens and usd as written."""

    line: int
    tokens: object
    usd: object


class Settled(NamedTuple):
    """What the tie to the runs reads of a settlement, as written."""

    line: int
    known: object
    tokens: object
    usd: object
    reason: object


class Book:
    """One ledger's reservations and their settlements, as the tie to the runs reads them.
    Reservation ``n`` (the n-th in the ledger, from 0) is found by its (attempt, key) and
    read as ``Reserved`` and ``Settled``; each is kept ``marshal``led in one byte array,
    the attempt and key as numbers into a table of each, the rest in arrays: a grid's
    ledger has 120,000 reservations at 20,000 runs, and a dict entry, a key tuple, an id
    string and an object a record were 400 bytes each.

    A reservation's id is held only while it is open (``open``); that no id is reused is
    ``first_reused``'s check, once the ledger is read, on the ids' hashes."""

    def __init__(self):
        self.open: dict[str, int] = {}        # an open reservation's id -> n
        self._res, self._res_at = bytearray(), array("Q")  # Reserved of n at _res_at[n]
        self._set, self._set_at = bytearray(), array("Q")  # Settled k at _set_at[k]
        self._settled = array("i")            # n -> k (-1: open)
        self._aid, self._kid = array("I"), array("I")  # n -> its attempt's and key's number
        self._prev = array("i")               # n -> the reservation before it of its attempt (-1: none)
        self._latest = array("i")             # attempt number -> its latest reservation
        self._attempts: dict = {}             # attempt -> number (and back in _attempt_of)
        self._attempt_of: list = []
        self._keys: dict = {}
        self._key_of: list = []
        self._id_hash = array("q")            # n -> hash of its id

    def __len__(self) -> int:
        return len(self._res_at)

    def reserve(self, body: dict, line: int) -> None:
        n = len(self._res_at)
        self._res_at.append(len(self._res))
        self._res += marshal.dumps((line, body.get("tokens"), body.get("usd")))
        self._settled.append(-1)
        aid = _number(self._attempts, self._attempt_of, body.get("attempt"))
        if aid == len(self._latest):
            self._latest.append(-1)
        self._aid.append(aid)
        self._kid.append(_number(self._keys, self._key_of, body.get("key")))
        self._prev.append(self._latest[aid])
        self._latest[aid] = n
        rid = body["id"]
        self._id_hash.append(hash(rid))
        self.open[rid] = n

    def settle(self, body: dict, line: int) -> None:
        n = self.open.pop(body["id"])
        self._settled[n] = len(self._set_at)
        self._set_at.append(len(self._set))
        self._set += marshal.dumps((line, body.get("known"), body.get("tokens"), body.get("usd"),
                                    body.get("reason")))

    def find(self, attempt, key) -> int | None:
        """The reservation of ``attempt`` and call ``key`` (the latest, if there are two)."""
        aid, kid = self._attempts.get(attempt), self._keys.get(key)
        if aid is None or kid is None:
            return None
        n, kids, prev = self._latest[aid], self._kid, self._prev
        while n >= 0 and kids[n] != kid:
            n = prev[n]
        return None if n < 0 else n

    def of_attempt(self, attempt) -> dict:
        """key -> ``find(attempt, key)``, of every key ``attempt`` reserved: one walk of its
        reservations (``find`` for each of a run's calls walks them once a call)."""
        aid = self._attempts.get(attempt)
        out: dict = {}
        if aid is None:
            return out
        n, kids, prev, keys = self._latest[aid], self._kid, self._prev, self._key_of
        while n >= 0:
            out.setdefault(keys[kids[n]], n)
            n = prev[n]
        return out

    def reservation(self, n: int) -> Reserved:
        at = self._res_at
        return Reserved(*marshal.loads(self._res[at[n]:at[n + 1] if n + 1 < len(at) else len(self._res)]))

    def settlement(self, n: int) -> Settled | None:
        k = self._settled[n]
        if k < 0:
            return None
        at = self._set_at
        return Settled(*marshal.loads(self._set[at[k]:at[k + 1] if k + 1 < len(at) else len(self._set)]))

    def keyed(self):
        """(n, attempt, key) of each reservation ``find`` finds, in ledger order (each
        attempt's reservations walked once, latest first: the first of each key is found)."""
        found, kids, prev = bytearray(len(self._aid)), self._kid, self._prev
        for n in self._latest:
            seen = set()
            while n >= 0:
                if kids[n] not in seen:
                    seen.add(kids[n])
                    found[n] = 1
                n = prev[n]
        attempts, keys = self._attempt_of, self._key_of
        for n, (aid, kid) in enumerate(zip(self._aid, kids)):
            if found[n]:
                yield n, attempts[aid], keys[kid]

    def first_reused(self, records) -> tuple[int, str] | None:
        """(line, id) of the first reservation whose id an earlier one had, or None.
        Ids whose hashes differ differ; only when two hashes are equal are the ids read
        again from ``records`` (the ledger's, in order) to tell (None: LookupError then)."""
        buckets: list = [array("q") for _ in range(256)]
        for h in self._id_hash:
            buckets[h & 255].append(h)
        twice = set()
        for b in buckets:
            if len(set(b)) != len(b):
                seen = set()
                twice.update(h for h in b if h in seen or seen.add(h))
        if not twice:
            return None
        if records is None:
            raise LookupError("two reservation ids hash alike: the records are needed to tell them apart")
        wanted = {n for n, h in enumerate(self._id_hash) if h in twice}
        ids, n = {}, 0
        for rec in records:
            if n == len(self._id_hash):
                break
            if rec.kind == "reserve":
                if n in wanted:
                    rid = rec.body["id"]
                    if rid in ids:
                        return self.reservation(n).line, rid
                    ids[rid] = n
                n += 1
        return None


def _number(numbers: dict, values: list, value) -> int:
    """``value``'s number in the table ``numbers`` (values: the table read back), given on first sight."""
    got = numbers.get(value)
    if got is None:
        got = numbers[value] = len(values)
        values.append(value)
    return got


def _index_reserve(rep: LedgerReplay, body: dict, name: str, line: int) -> None:
    rep.book.reserve(body, line)


def _index_settle(rep: LedgerReplay, body: dict, name: str, line: int) -> None:
    rep.book.settle(body, line)


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


def named_ledgers_present(ix: Index, runs, replays: dict, named: set | None = None) -> None:
    """Every ledger a ``grid.start`` or a run names is in ``replays``. ``named``: the
    ledgers the runs name, when the caller read them (else they are read here)."""
    names = set()
    for exp in ix.manifest.experiments:
        for _, _, rec in journal_of(ix, exp):
            if rec.kind == "grid.start" and rec.body.get("ledger") is not None:
                names.add(rec.body["ledger"])
    names.update(_named_by_runs(runs.values()) if named is None else named)
    missing = sorted(str(n) for n in names if n not in replays)
    if missing:
        raise VerificationError(f"{_PREFIX}{missing[0]}.jsonl", "named by the evidence but missing "
                                f"from the bundle ({len(missing)} ledger(s) missing)")


def _named_by_runs(runs) -> set:
    """The ledgers ``runs`` name (their ``run.start.ledger``)."""
    return {run.start["ledger"] for run in runs if run.start.get("ledger") is not None}


def _runs_by_attempt(tie: Tie, runs, replays: dict) -> tuple[dict, dict, set, list]:
    """The runs naming each ledger, by attempt, with the keys of their calls, the ledgers
    the runs name (``named_ledgers_present``), and each run's ``_check_run_calls``: the
    number of calls it tied when it held, else its ``outcome_of``, for the caller to report
    after that check, where it always was; taken in one pass (a run's records are parsed
    again each time a step reads another run's). An exception outside those checks ends
    the list, as (itself,)."""
    tied: dict[str, dict] = {}
    keys: dict[str, dict] = {}
    named: set = set()
    ties: list = []
    once: dict[str, str] = {}  # a call key ("0.1") recurs in every run: held once
    runs = iter(runs.values())
    for run in runs:
        lid = run.start.get("ledger")
        if lid is not None:
            named.add(lid)
        try:
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
            got = outcome_of(_check_run_calls, tie, run, replays[lid], attempt, confirmed)
            ties.append(len(calls) if got is None else got)
        except UnreadableBundle:
            raise
        except Exception as e:  # noqa: BLE001 - raised where it was, after named_ledgers_present
            ties.append((e.with_traceback(None),))
            named.update(_named_by_runs(runs))  # the rest, as named_ledgers_present read them
            break
    return tied, keys, named, ties


def _check_run_calls(tie: Tie, run: Run, rep: LedgerReplay, attempt, confirmed) -> None:
    prices = tie.costs.prices_of(run)
    calls = list(run.of_kind("call") if confirmed is None else ((c.line, c) for c in confirmed))
    # A run cut off (sealed aborted) between its last call's record and that call's
    # settlement, which follows the next reservation (FORMAT.md "Ledgers"), has it settled
    # as cut off: at its bound, as unknown.
    cut = calls[-1][0] if calls and run.end.get("status") == "aborted" else None
    found = rep.book.of_attempt(attempt) if calls else {}  # the reservation of each of its keys
    for line, rec in calls:
        try:
            if confirmed is None:
                check_call(tie, run, line, rec.body, rep, attempt, prices, cut=line == cut, found=found)
            else:
                _tie(tie, run, rec, rep, attempt, prices, cut=line == cut, found=found)
        except (BenchClawError, ArithmeticError, TypeError, ValueError) as e:
            if isinstance(e, VerificationError):
                raise
            raise VerificationError(run.path, f"call: cannot tie it to the ledger ({e})", line) from None
    if run.end.get("status") == "budget_stop" and not any(r.get("attempt") == attempt for r in rep.refusals):
        raise VerificationError(run.path, f"ended budget_stop but {rep.name} records no refusal for it",
                                run.count)


def check_call(tie: Tie, run: Run, line: int, body: dict, rep: LedgerReplay, attempt,
               prices: Prices, *, cut: bool = False, found: dict | None = None) -> None:
    """``found``: ``rep.book.of_attempt(attempt)``, when the caller has it."""
    key = f"{body.get('turn')}.{body.get('attempt')}"
    estimate, max_tokens = body.get("prompt_estimate"), (body.get("params") or {}).get("max_tokens")
    n = _reserved(tie, run, line, key, estimate, max_tokens, rep, attempt, prices, found)
    settled = rep.settlement(n)
    usage = Usage.from_dict(body["usage"]) if isinstance(body.get("usage"), dict) else None
    if settled is None:
        return  # still open: counted at its bound
    done = tie.costs.cost_of(run.run_id, line)  # step 4 recomputed it from this usage and these prices
    if done is None and usage is not None:
        done = CostBounds(True, call_cost(usage, prices), call_cost(usage, prices))
    _settled(run, line, key, rep, settled, done, usage.total if usage is not None else 0, cut)


def _tie(tie: Tie, run: Run, call: Confirmed, rep: LedgerReplay, attempt, prices: Prices, *,
         cut: bool = False, found: dict | None = None) -> None:
    """``check_call`` of a call step 4 confirmed, from what it confirmed."""
    n = _reserved(tie, run, call.line, call.key, call.estimate, call.max_tokens, rep, attempt, prices, found)
    settled = rep.settlement(n)
    if settled is not None:
        _settled(run, call.line, call.key, rep, settled, call.cost, call.tokens or 0, cut)


def _reserved(tie: Tie, run: Run, line: int, key: str, estimate, max_tokens, rep: LedgerReplay, attempt,
              prices: Prices, found: dict | None = None) -> int:
    """The call's reservation (its number in ``rep.book``; ``found``: ``of_attempt``'s
    answer, else it is looked up), which must be its bound."""
    n = rep.book.find(attempt, key) if found is None else found.get(key)
    if n is None:
        raise VerificationError(run.path, f"call {key} has no reservation in ledger {rep.name}", line)
    res = rep.book.reservation(n)
    bound = upper_bound(tie.cache, prices, estimate, max_tokens)
    if res.tokens != estimate + max_tokens or res.usd != bound:
        raise VerificationError(run.path, f"call {key}: its reservation ({res.tokens} tokens, ${res.usd}) "
                                f"is not its bound ({estimate + max_tokens} tokens, ${bound})", line)
    return n


def _settled(run: Run, line: int, key: str, rep: LedgerReplay, s: Settled, done: CostBounds | None,
             tokens: int, cut: bool = False) -> None:
    """The settlement of a call whose cost is ``done`` (None: unknown) and usage ``tokens``;
    ``cut``: the last call of a run cut off, which may be settled as unknown (at its bound,
    which ``_reserved`` checked) when the cut came before its settlement."""
    if cut and s.known is False:
        return
    if done is None or not done.known:  # no usage, or doubted usage (FORMAT.md §6): at the bound
        if s.known is not False:
            raise VerificationError(run.path, f"call {key}: its cost is a bound but ledger {rep.name} settled "
                                    "it as known", line)
        return
    want = (True, tokens, fmt_usd(done.low))  # no usage: a known zero
    if (s.known, s.tokens, s.usd) != want:
        raise VerificationError(run.path, f"call {key}: ledger {rep.name} settled {s.tokens} tokens "
                                f"${s.usd}, the call's usage gives {want[1]} tokens ${want[2]}", line)


def _no_orphans(rep: LedgerReplay, runs: dict, calls: dict) -> None:
    """``calls``: attempt -> the keys of its run's calls (``_runs_by_attempt``)."""
    name = f"{_PREFIX}{rep.name}.jsonl"
    for n, attempt, key in rep.book.keyed():
        run = runs.get(attempt)
        if run is None:
            raise VerificationError(name, f"reservation for attempt {attempt} (call {key}) but no run in the "
                                    "bundle carries that attempt", rep.book.reservation(n).line)
        if key in calls[attempt]:
            continue
        settled = rep.settlement(n)
        if settled and settled.known is True:
            raise VerificationError(name, f"settled a known call {key} of {run.run_id[:12]} that the run "
                                    "does not record", settled.line)
