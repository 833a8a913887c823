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

The replay is written here rather than imported: ``benchclaw.ledger`` holds the writer
side (file locks, the store), which the verifier must not import.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from decimal import Decimal

from ..errors import BenchClawError
from ..money import Prices, Usage, call_cost, cost_upper_bound, fmt_usd, parse_usd
from ..records import Record
from ._context import Bundle, RunData
from ._errors import VerificationError
from ._report import Section
from ._journal import journal_of
from ._shape import LEDGER, check_body
from .experiment import chain_records

__all__ = ["verify_ledgers", "LedgerReplay"]

_PREFIX = "ledgers/"


@dataclass
class LedgerReplay:
    name: str
    limits: dict | None = None
    carried_usd: Decimal = Decimal(0)
    carried_tokens: int = 0
    carried_from: list = field(default_factory=list)
    open: dict = field(default_factory=dict)        # reservation id -> reserve body
    reserves: dict = field(default_factory=dict)    # (attempt, key) -> (line, reserve body)
    settles: dict = field(default_factory=dict)     # reservation id -> (line, settle body)
    refusals: list = field(default_factory=list)    # refuse bodies
    settled: list = field(default_factory=lambda: [0, 0, Decimal(0)])   # calls, tokens, usd
    unknown: list = field(default_factory=lambda: [0, 0, Decimal(0)])

    @property
    def open_tokens(self) -> int:
        return sum(b["tokens"] for b in self.open.values())

    @property
    def open_usd(self) -> Decimal:
        return sum((Decimal(b["usd"]) for b in self.open.values()), Decimal(0))

    def spent(self) -> tuple[Decimal, int]:
        usd = self.carried_usd + self.settled[2] + self.unknown[2] + self.open_usd
        return usd, self.carried_tokens + self.settled[1] + self.unknown[1] + self.open_tokens

    def totals(self) -> dict:
        usd, tokens = self.spent()
        def part(p):
            return {"calls": p[0], "tokens": p[1], "usd": fmt_usd(p[2])}
        return {"reserved": {"calls": len(self.open), "tokens": self.open_tokens, "usd": fmt_usd(self.open_usd)},
                "settled": part(self.settled), "unknown": part(self.unknown), "refused": len(self.refusals),
                "spent": {"usd": fmt_usd(usd), "tokens": tokens}}


def verify_ledgers(b: Bundle, sec: Section) -> None:
    replays: dict[str, LedgerReplay] = {}
    for name in sorted(n for n in b.view.names if n.startswith(_PREFIX)):
        lid = name[len(_PREFIX):].removesuffix(".jsonl")
        if sec.attempt(_replay_into, b, name, lid, replays):
            sec.count("ledgers")
    for lid, rep in replays.items():
        sec.attempt(_check_carried, rep, replays)
    sec.attempt(_named_ledgers_present, b, replays)
    tied = _runs_by_attempt(b, replays, sec)
    for rep in replays.values():
        sec.attempt(_no_orphans, rep, tied.get(rep.name, {}))
    b.ledgers = replays


def _replay_into(b: Bundle, name: str, lid: str, replays: dict) -> None:
    records = chain_records(b.files, name)
    b.memo[("chain", name)] = records
    rep = LedgerReplay(lid)
    for i, rec in enumerate(records, 1):
        check_body(rec.kind, rec.body, LEDGER, name, i)
        _apply(rep, rec, name, i)
    replays[lid] = rep


def _int(v, name: str, line: int, what: str) -> int:
    if type(v) is not int or v < 0:
        raise VerificationError(name, f"{what} is not a non-negative integer: {v!r}", line)
    return v


def _usd(v, name: str, line: int, what: str) -> Decimal:
    try:
        return parse_usd(v, what)
    except BenchClawError as e:
        raise VerificationError(name, str(e), line) from None


def _apply(rep: LedgerReplay, rec: Record, name: str, line: int) -> None:
    body = rec.body
    if rec.kind == "ledger.open":
        lim = body.get("limits")
        if not isinstance(lim, dict):
            raise VerificationError(name, "ledger.open has no limits", line)
        rep.limits = {"usd": _usd(lim.get("usd"), name, line, "limits.usd"),
                      "tokens": None if lim.get("tokens") is None else _int(lim["tokens"], name, line, "limits.tokens"),
                      "per_call_usd": None if lim.get("per_call_usd") is None else
                      _usd(lim["per_call_usd"], name, line, "limits.per_call_usd")}
        carried = body.get("carried") or {}
        rep.carried_usd = _usd(carried.get("usd", "0"), name, line, "carried.usd")
        rep.carried_tokens = _int(carried.get("tokens", 0), name, line, "carried.tokens")
        named = carried.get("ledgers") or []
        if not isinstance(named, list) or not all(isinstance(x, str) for x in named):
            raise VerificationError(name, "carried.ledgers is not a list of ledger ids", line)
        rep.carried_from = named
    elif rec.kind == "reserve":
        _reserve(rep, body, name, line)
    elif rec.kind == "settle":
        _settle(rep, body, name, line)
    elif rec.kind == "refuse":
        rep.refusals.append(body)
    elif rec.kind == "ledger.close":
        _close(rep, body, name, line)


def _reserve(rep: LedgerReplay, body: dict, name: str, line: int) -> None:
    tokens = _int(body.get("tokens"), name, line, "reserve tokens")
    usd = _usd(body.get("usd"), name, line, "reserve usd")
    lim = rep.limits
    if lim is None:
        raise VerificationError(name, "a reservation before ledger.open (no limits)", line)
    spent_usd, spent_tokens = rep.spent()
    if lim["per_call_usd"] is not None and usd > lim["per_call_usd"]:
        raise VerificationError(name, f"reservation of ${fmt_usd(usd)} passes the per-call stop "
                                f"${fmt_usd(lim['per_call_usd'])}", line)
    if spent_usd + usd > lim["usd"]:
        raise VerificationError(name, f"reservation takes worst-case spend to ${fmt_usd(spent_usd + usd)}, "
                                f"past the limit ${fmt_usd(lim['usd'])}", line)
    if lim["tokens"] is not None and spent_tokens + tokens > lim["tokens"]:
        raise VerificationError(name, f"reservation takes worst-case tokens to {spent_tokens + tokens}, "
                                f"past the limit {lim['tokens']}", line)
    rid = body.get("id")
    if not isinstance(rid, str) or rid in rep.open or rid in rep.settles:
        raise VerificationError(name, f"reservation id {rid!r} is not new", line)
    rep.open[rid] = {"tokens": tokens, "usd": fmt_usd(usd), "line": line, **body}
    rep.reserves[(body.get("attempt"), body.get("key"))] = (line, rep.open[rid])


def _settle(rep: LedgerReplay, body: dict, name: str, line: int) -> None:
    res = rep.open.pop(body.get("id"), None)
    if res is None:
        raise VerificationError(name, f"settles reservation {body.get('id')!r}, which is not open", line)
    rep.settles[body.get("id")] = (line, body)
    if body.get("known") is True:
        rep.settled[0] += 1
        rep.settled[1] += _int(body.get("tokens"), name, line, "settle tokens")
        rep.settled[2] += _usd(body.get("usd"), name, line, "settle usd")
    else:
        if body.get("tokens") != res["tokens"] or body.get("usd") != res["usd"]:
            raise VerificationError(name, "an unknown settlement does not repeat its reservation's bound "
                                    f"({res['tokens']} tokens, ${res['usd']})", line)
        rep.unknown[0] += 1
        rep.unknown[1] += res["tokens"]
        rep.unknown[2] += Decimal(res["usd"])


def _close(rep: LedgerReplay, body: dict, name: str, line: int) -> None:
    want = rep.totals()
    for key, value in want.items():
        if body.get(key) != value:
            raise VerificationError(name, f"ledger.close {key} {body.get(key)} differs from the "
                                    f"replayed {value}", line)


def _check_carried(rep: LedgerReplay, replays: dict) -> None:
    name = f"{_PREFIX}{rep.name}.jsonl"
    present = [replays[lid] for lid in rep.carried_from if lid in replays]
    if len(present) != len(rep.carried_from):
        return  # a ledger of another machine's shard: its spend cannot be recomputed here
    usd = sum((p.spent()[0] - p.carried_usd for p in present), Decimal(0))
    tokens = sum(p.spent()[1] - p.carried_tokens for p in present)
    if (usd, tokens) != (rep.carried_usd, rep.carried_tokens):
        raise VerificationError(name, f"carries ${fmt_usd(rep.carried_usd)} / {rep.carried_tokens} tokens, "
                                f"the ledgers it names spent ${fmt_usd(usd)} / {tokens}", 1)


def _named_ledgers_present(b: Bundle, replays: dict) -> None:
    names = set()
    for exp in b.manifest.experiments:
        for _, _, rec in journal_of(b, exp):
            if rec.kind == "grid.start" and rec.body.get("ledger") is not None:
                names.add(rec.body["ledger"])
    for run in b.runs.values():
        if run.start.get("ledger") is not None:
            names.add(run.start["ledger"])
    missing = sorted(str(n) for n in names if n not in replays)
    if missing:
        raise VerificationError(f"{_PREFIX}{missing[0]}.jsonl", "named by the evidence but missing "
                                f"from the bundle ({len(missing)} ledger(s) missing)")


def _runs_by_attempt(b: Bundle, replays: dict, sec: Section) -> dict:
    tied: dict[str, dict] = {}
    for run in b.runs.values():
        lid = run.start.get("ledger")
        if lid is None or lid not in replays:
            continue
        attempt = run.policy.get("attempt")
        tied.setdefault(lid, {})[attempt] = run
        if sec.attempt(_check_run_calls, b, run, replays[lid], attempt):
            sec.count("calls tied", len(run.of_kind("call")))
    return tied


def _check_run_calls(b: Bundle, run: RunData, rep: LedgerReplay, attempt) -> None:
    from ._costs import catalog_prices

    prices = catalog_prices(b, run)
    for line, rec in run.of_kind("call"):
        try:
            _check_call(run, line, rec.body, rep, attempt, prices)
        except (BenchClawError, ArithmeticError, TypeError, ValueError) as e:
            if isinstance(e, VerificationError):
                raise
            raise VerificationError(run.path, f"call: cannot tie it to the ledger ({e})", line) from None
    if run.end.get("status") == "budget_stop" and not any(r.get("attempt") == attempt for r in rep.refusals):
        raise VerificationError(run.path, f"ended budget_stop but {rep.name} records no refusal for it",
                                len(run.records))


def _check_call(run: RunData, line: int, body: dict, rep: LedgerReplay, attempt, prices: Prices) -> None:
    key = f"{body.get('turn')}.{body.get('attempt')}"
    found = rep.reserves.get((attempt, key))
    if found is None:
        raise VerificationError(run.path, f"call {key} has no reservation in ledger {rep.name}", line)
    _, res = found
    estimate, max_tokens = body.get("prompt_estimate"), (body.get("params") or {}).get("max_tokens")
    bound = fmt_usd(cost_upper_bound(estimate, max_tokens, prices))
    if res["tokens"] != estimate + max_tokens or res["usd"] != bound:
        raise VerificationError(run.path, f"call {key}: its reservation ({res['tokens']} tokens, ${res['usd']}) "
                                f"is not its bound ({estimate + max_tokens} tokens, ${bound})", line)
    settled = rep.settles.get(res["id"])
    usage = Usage.from_dict(body["usage"]) if isinstance(body.get("usage"), dict) else None
    if settled is None:
        return  # still open: counted at its bound
    s = settled[1]
    if usage is None:
        if s.get("known") is not False:
            raise VerificationError(run.path, f"call {key} reported no usage but ledger {rep.name} settled "
                                    "it as known", line)
        return
    want = (True, usage.total, fmt_usd(call_cost(usage, prices)))
    if (s.get("known"), s.get("tokens"), s.get("usd")) != want:
        raise VerificationError(run.path, f"call {key}: ledger {rep.name} settled {s.get('tokens')} tokens "
                                f"${s.get('usd')}, the call's usage gives {want[1]} tokens ${want[2]}", line)


def _no_orphans(rep: LedgerReplay, runs: dict) -> None:
    name = f"{_PREFIX}{rep.name}.jsonl"
    calls = {a: {f"{r.body.get('turn')}.{r.body.get('attempt')}" for _, r in run.of_kind("call")}
             for a, run in runs.items()}
    for (attempt, key), (line, res) in sorted(rep.reserves.items(), key=lambda kv: kv[1][0]):
        run = runs.get(attempt)
        if run is None:
            raise VerificationError(name, f"reservation for attempt {attempt} (call {key}) but no run in the "
                                    "bundle carries that attempt", line)
        settled = rep.settles.get(res["id"])
        called = key in calls[attempt]
        if settled and settled[1].get("known") is True and not called:
            raise VerificationError(name, f"settled a known call {key} of {run.run_id[:12]} that the run "
                                    "does not record", settled[0])
