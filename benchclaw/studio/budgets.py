"""The studio's money: one durable ledger per session and one per UTC day for the studio.

Why it is built this way: every call of a studio run is reserved in *both* ledgers before
it is made, with the very ``benchclaw.experiments.ledger.Ledger`` benchmarks use, so the guarantees
are the ledger's (fail closed, fsynced before the call, replayed after a crash, open
reservations counted at their upper bound). ``CallBudget`` is the agent's ``ledger``
argument for one run and does the pairing:

1. reserve in the session's ledger (a visitor running out is the common refusal, and it
   then never touches the shared day ledger);
2. reserve in the day ledger; if that refuses, release the session reservation by
   settling it at zero (the call was never made);
3. settle both with the usage the provider reported (or as unknown, at the upper bound).

The call is made only after both reservations are on disk, so a crash can leave the pair
half done; on start-up ``recover`` settles each reservation a killed process left open by
looking at its partner in the other ledger (same ``run``, ``key`` and ``attempt``):

- a session reservation whose day partner was never written (crash between 1 and 2, or
  between the day's refusal and the release), or a day reservation whose session partner
  a power cut lost before the commit: the call provably never started, settled known at 0;
- an open reservation whose partner is settled with known usage (crash between the two
  settles of 3): settled with the same usage;
- otherwise (both open, or the partner unknown): settled unknown, at the upper bound.

So after every restart the sum of the sessions' spend equals the day's spend, and each
figure is the spend as reported or its upper bound where the call may have been made.

Both reservations are written without waiting; the group commit the agent awaits before
the call makes the pair durable at once, so the studio's event loop never blocks on an
fsync. The price: a power cut before that commit can keep one reservation of a pair and
lose the other (a kill cannot: what was written survives it). No call was made then, and
the restart releases the survivor at zero in either ledger.
"""

from __future__ import annotations

import datetime as _dt
import threading
from dataclasses import dataclass
from decimal import Decimal
from typing import Callable

from ..errors import BudgetError
from ..experiments.ledger import Ledger, Limits, Reservation, ledger_path, read_ledger
from ..formats.ledger import LedgerState
from ..formats.money import parse_usd
from ..formats.records import split_lines, verify_chain
from ..evidence.store import Store
from .config import Budgets

__all__ = ["StudioBudgets", "CallBudget", "PairedReservation", "Standing"]


@dataclass(frozen=True)
class PairedReservation:
    session: Reservation
    day: Reservation


class Remaining:
    """What is left of a USD and a token limit, for any value with ``spent_usd``,
    ``limit_usd``, ``spent_tokens`` and ``limit_tokens`` fields."""

    @property
    def remaining_usd(self) -> Decimal:
        return max(self.limit_usd - self.spent_usd, Decimal(0))

    @property
    def remaining_tokens(self) -> int:
        return max(self.limit_tokens - self.spent_tokens, 0)


@dataclass(frozen=True)
class Standing(Remaining):
    """What a session (or the studio today) has left, for pages and refusals."""

    spent_usd: Decimal
    limit_usd: Decimal
    spent_tokens: int
    limit_tokens: int
    refused: int

    @property
    def exhausted(self) -> bool:
        """Out of money or tokens, or a call was already refused (fail closed: a refused
        ledger takes no new run, even if a smaller call might still fit)."""
        return self.refused > 0 or self.remaining_usd <= 0 or self.remaining_tokens <= 0


def _standing(st: LedgerState | None, usd: Decimal, tokens: int) -> Standing:
    if st is None:
        return Standing(Decimal(0), usd, 0, tokens, 0)
    return Standing(st.spent_usd, usd, st.spent_tokens, tokens, st.refused)


class StudioBudgets:
    """The ledgers of one studio in one runs directory (``studio-<label>-s-<session>``
    and ``studio-<label>-day-<yyyymmdd>``). Thread-safe; the process holds the studio's
    lock (``locks/studio-<label>.lock``), so no other process writes these ledgers."""

    def __init__(self, store: Store, budgets: Budgets, label: str, *,
                 today: Callable[[], str] | None = None):
        self.store, self.budgets, self.label = store, budgets, label
        self._today = today or (lambda: _dt.datetime.now(_dt.timezone.utc).strftime("%Y%m%d"))
        self._ledgers: dict[str, Ledger] = {}
        self._lock = threading.Lock()

    # -- ids ------------------------------------------------------------------------------
    def session_ledger_id(self, session: str) -> str:
        return f"studio-{self.label}-s-{session}"

    def day_ledger_id(self, day: str | None = None) -> str:
        return f"studio-{self.label}-day-{day or self._today()}"

    # -- ledgers --------------------------------------------------------------------------
    def _ledger(self, lid: str, limits: Limits) -> Ledger:
        with self._lock:
            led = self._ledgers.get(lid)
            if led is None:
                if ledger_path(self.store, lid).is_file():
                    led = Ledger.open(self.store, lid)
                else:
                    led = Ledger.create(self.store, lid, limits, experiment=f"studio-{self.label}",
                                        invocation=lid)
                self._ledgers[lid] = led
            return led

    def session_ledger(self, session: str) -> Ledger:
        b = self.budgets
        return self._ledger(self.session_ledger_id(session),
                            Limits(b.session_usd, b.session_tokens, b.per_call_usd))

    def day_ledger(self) -> Ledger:
        b = self.budgets
        return self._ledger(self.day_ledger_id(), Limits(b.day_usd, b.day_tokens, b.per_call_usd))

    def for_run(self, session: str, attempt: str | None = None) -> "CallBudget":
        """The ``ledger`` argument of ``run_agent`` for one run of ``session``; ``attempt``
        (the run's ``run.start.policy.attempt``) tags its reservations in both ledgers."""
        return CallBudget(self.session_ledger(session), self.day_ledger(), attempt)

    # -- standing (no ledger file is created just to look) ---------------------------------
    def _state(self, lid: str) -> LedgerState | None:
        with self._lock:
            led = self._ledgers.get(lid)
        if led is not None:
            return led.state()
        if not ledger_path(self.store, lid).is_file():
            return None
        return read_ledger(self.store, lid, tolerate_torn=True)

    def session_standing(self, session: str) -> Standing:
        b = self.budgets
        return _standing(self._state(self.session_ledger_id(session)), b.session_usd, b.session_tokens)

    def day_standing(self) -> Standing:
        b = self.budgets
        return _standing(self._state(self.day_ledger_id()), b.day_usd, b.day_tokens)

    # -- start-up -------------------------------------------------------------------------
    def recover(self) -> int:
        """Settle every reservation a killed studio left open in this studio's ledgers, pair
        by pair (module docstring: partner never reserved -> 0, partner settled -> the same
        usage, else unknown at the upper bound). Returns how many."""
        prefix = f"studio-{self.label}-"
        paths = sorted((self.store.root / "ledgers").glob(f"{prefix}*.jsonl"))
        books = {p.stem: _reservations(self.store, p.stem) for p in paths}
        sessions = {k: r for lid, rs in books.items() if lid.startswith(f"{prefix}s-")
                    for k, r in _by_pair(rs).items()}
        days = {k: r for lid, rs in books.items() if lid.startswith(f"{prefix}day-")
                for k, r in _by_pair(rs).items()}
        n = 0
        for lid, rs in books.items():
            is_session = lid.startswith(f"{prefix}s-")
            partners = days if is_session else sessions
            led = None
            for (pk, r) in _by_pair(rs).items():
                if r["settled"] is not None:
                    continue
                led = led or Ledger.open(self.store, lid)
                partner = partners.get(pk)
                rid = r["id"]
                res = Reservation(rid, r["run"], r["key"], r["tokens"], r["usd"], r["attempt"])
                if partner is None:  # the commit covering both never ended: the call was never made
                    led.settle(res, tokens=0, usd=Decimal(0), reason=_NEVER_MADE["session" if is_session else "day"])
                elif partner is not None and partner["settled"] is not None and partner["settled"][0]:
                    _, tokens, usd = partner["settled"]
                    led.settle(res, tokens=tokens, usd=usd,
                               reason="studio restarted: settled as its partner in the other ledger")
                else:
                    led.settle(res, tokens=None, usd=None, reason="studio restarted: the call was cut off")
                n += 1
            if led is not None:
                led.release()
        return n

    def close(self) -> None:
        with self._lock:
            for led in self._ledgers.values():
                led.release()


def _pair_key(r: dict) -> tuple:
    return (r["run"], r["key"], r["attempt"])


def _reservations(store: Store, ledger_id: str) -> dict[str, dict]:
    """Every reservation of a ledger as written, by id: run, key, attempt, upper bound and
    ``settled`` (None while open, else ``(known, tokens, usd)``). A torn last line is
    ignored as ``read_ledger`` does (a torn ``reserve`` was never acknowledged)."""
    path = ledger_path(store, ledger_id)
    lines, _torn = split_lines(path.read_bytes())
    out: dict[str, dict] = {}
    for rec in verify_chain(lines, str(path)):
        b = rec.body
        if rec.kind == "reserve":
            out[str(b["id"])] = {"id": str(b["id"]), "run": b.get("run"), "key": b.get("key"), "attempt": b.get("attempt"),
                                 "tokens": int(b["tokens"]), "usd": parse_usd(b["usd"], f"{path}.usd"),
                                 "settled": None}
        elif rec.kind == "settle" and str(b.get("id")) in out:
            out[str(b["id"])]["settled"] = (bool(b.get("known")), int(b["tokens"]),
                                            parse_usd(b["usd"], f"{path}.usd"))
    return out


def _by_pair(rs: dict[str, dict]) -> dict[tuple, dict]:
    """Reservations by (run, key, attempt, n): the n-th reservation of a call in one ledger
    pairs with the n-th in the other (a run reserves one call at a time, session first)."""
    seen: dict[tuple, int] = {}
    out = {}
    for r in rs.values():
        k = _pair_key(r)
        seen[k] = seen.get(k, -1) + 1
        out[k + (seen[k],)] = r
    return out


# Why a reservation whose partner is missing after a restart is released at zero. The pair
# is written without waiting and made durable by the one commit the agent awaits before
# the call, so a missing partner means that commit never ended (FORMAT.md "Studio").
_NEVER_MADE = {
    "session": "studio restarted: the day budget never reserved this call, so it was never made",
    "day": "studio restarted: the session budget's reservation of this call was lost before the call, "
           "so it was never made",
}


class CallBudget:
    """Both ledgers as one run sees them (the agent's ``reserve``/``settle`` interface).
    ``refused_by`` says which budget ended the run, when one did."""

    def __init__(self, session: Ledger, day: Ledger, attempt: str | None = None):
        self.session, self.day, self.attempt = session, day, attempt
        self.refused_by: str | None = None
        self.open: dict[str, PairedReservation] = {}

    @property
    def id(self) -> str:
        """The ledger named in ``run.start.ledger``: the session's."""
        return self.session.id

    def reserve(self, *, run: str, key: str, tokens: int, usd: Decimal) -> PairedReservation:
        """Reserve in the session's ledger, then the day's. Raises BudgetError naming the
        budget that refused; nothing stays reserved then.

        Written, not waited for (as the runner's ledger): ``run_agent`` awaits
        ``Store.commit`` between a reservation and its call, and that group commit covers
        both ledgers, so the studio's event loop never blocks on their fsyncs and both
        reservations are durable before the call (FORMAT.md "Durability"). A power cut
        before that commit can keep one of the pair without the other; no call was made
        then, and recovery settles the survivor at zero ("partner never reserved")."""
        try:
            s = self.session.reserve(run=run, key=key, tokens=tokens, usd=usd, attempt=self.attempt,
                                     durable=False)
        except BudgetError as e:
            self.refused_by = "session"
            raise BudgetError(f"this session's budget is spent ({e})") from None
        try:
            d = self.day.reserve(run=run, key=key, tokens=tokens, usd=usd, attempt=self.attempt, durable=False)
        except BudgetError as e:
            self.session.settle(s, tokens=0, usd=Decimal(0), reason="refused by the studio's day budget")
            self.refused_by = "day"
            raise BudgetError(f"the studio's budget for today is spent ({e})") from None
        pair = PairedReservation(s, d)
        self.open[s.id] = pair
        return pair

    def settle(self, reservation: PairedReservation, *, tokens: int | None, usd: Decimal | None,
               reason: str | None = None) -> None:
        self.session.settle(reservation.session, tokens=tokens, usd=usd, reason=reason)
        self.day.settle(reservation.day, tokens=tokens, usd=usd, reason=reason)
        self.open.pop(reservation.session.id, None)

    def settle_open(self, reason: str) -> None:
        """Settle what a cut-off run left open as unknown (upper bound)."""
        for pair in list(self.open.values()):
            self.settle(pair, tokens=None, usd=None, reason=reason)
