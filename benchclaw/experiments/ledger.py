"""The token/USD ledger of one benchmark invocation: reserve before every call, settle after.

Why it is built this way (FORMAT.md "Ledgers"):

- **Fail closed.** Before a provider call the agent reserves the call's worst case
  (prompt estimate + ``max_tokens`` and what that could cost). A reservation that would
  take the worst-case spend past a limit is refused with ``BudgetError`` *before* the call
  is made. After the call the reservation is settled with the usage the provider reported;
  a call with no usage (timeout, abort, crash) stays spent at its upper bound, marked
  unknown. So the worst-case spend never passes the limit, whatever the provider does.
- **Durable.** Every reservation, settlement and refusal is one hash-chained record
  appended by the one chain writer (``benchclaw.evidence.store.ChainFile``: its append, refresh
  and durability rules), fsynced before its call is made: before ``reserve`` returns, or,
  for a caller on an event loop (``durable=False``), by the group commit it awaits then. After a crash the
  file is replayed: a reservation never settled counts as spent at its upper bound, which
  is the same arithmetic as a call still in flight. There is no separate state to lose.
- **Concurrent writers.** The check and the append happen under the chain file's lock
  (an ``flock`` on the ledger's lock file plus a thread mutex), after folding in whatever
  other writers appended (``ChainFile.append_with``), so threads and processes sharing a
  ledger can never jointly pass a limit.

The replay arithmetic and the refusal rule are the pure ``benchclaw.formats.ledger`` (the
offline verifier replays bundles with it); ``Limits`` and ``LedgerState`` live there and are
re-exported here.

Trade-off: one commit per reservation (a settlement rides on the next commit: losing one
in a crash only leaves its reservation counted at the upper bound, the safe side). Model
calls take hundreds of milliseconds; a group commit takes a fraction of one, shared by
every run in flight.
"""

from __future__ import annotations

import os
import uuid
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Callable

from ..errors import BudgetError, InputError, IntegrityError
from ..formats.ledger import LEDGER_KINDS, LedgerState, Limits
from ..formats.ledger import apply_record as _apply
from ..formats.ledger import refusal as _refusal
from ..formats.ledger import totals as _totals
from ..formats.money import fmt_usd
from ..formats.records import Record, split_lines, utc_now, verify_chain
from ..evidence.store import ChainFile, Store, safe_name, shared_lock

__all__ = ["Ledger", "Limits", "Reservation", "LedgerState", "ledger_path", "new_ledger_id",
           "read_ledger", "LEDGER_KINDS"]


@dataclass(frozen=True)
class Reservation:
    """One reserved call. ``id`` is what ``settle`` names."""

    id: str
    run: str
    key: str
    tokens: int
    usd: Decimal
    attempt: str | None = None


# ------------------------------------------------------------------------ the ledger file

def ledger_path(store: Store, ledger_id: str) -> Path:
    return store.root / "ledgers" / f"{safe_name(ledger_id, 'ledger id')}.jsonl"


def new_ledger_id(experiment: str) -> str:
    """``<experiment>-<UTC yyyymmddThhmmssZ>-<4 hex>``: unique per invocation, sortable."""
    stamp = utc_now()[:19].replace("-", "").replace(":", "") + "Z"
    return f"{experiment}-{stamp}-{uuid.uuid4().hex[:4]}"


class Ledger(ChainFile):
    """One benchmark invocation's ledger, ``runs/ledgers/<id>.jsonl``.

    ``reserve``/``settle`` are the interface the agent calls (docs/INTERNALS.md). The
    replayed state is kept current under the lock, so every check sees every writer.
    """

    def __init__(self, path: Path, *, fsync: bool = True):
        super().__init__(path, fsync=fsync)
        self.id = path.stem
        self._state = LedgerState(ledger=self.id)
        self._mine: dict[str, Reservation] = {}

    def _fold(self, rec: Record) -> None:
        _apply(self._state, rec, self._name)

    # -- construction ------------------------------------------------------------------
    @classmethod
    def create(cls, store: Store, ledger_id: str, limits: Limits, *, experiment: str | None = None,
               invocation: str | None = None, carried_usd: Decimal = Decimal(0),
               carried_tokens: int = 0, carried_from: list[str] | None = None) -> "Ledger":
        """Start a new ledger. ``carried_*`` is spend of earlier invocations that counts
        against these limits (a resumed experiment). Raises InputError if it exists."""
        path = ledger_path(store, ledger_id)
        if path.exists():
            raise InputError(f"{path}: ledger {ledger_id} already exists")
        store.ensure()
        led = cls(path, fsync=store.fsync)
        led._append_locked("ledger.open", lambda st: {
            "ledger": ledger_id, "experiment": experiment, "invocation": invocation,
            "limits": limits.to_dict(),
            "carried": {"usd": fmt_usd(carried_usd), "tokens": carried_tokens,
                        "ledgers": list(carried_from or [])}})
        return led

    @classmethod
    def open(cls, store: Store, ledger_id: str) -> "Ledger":
        """An existing ledger, replayed (open reservations count as spent). Raises
        InputError when missing, IntegrityError/FormatError naming the line when damaged."""
        path = ledger_path(store, ledger_id)
        if not path.is_file():
            raise InputError(f"{path}: no ledger {ledger_id}")
        led = cls(path, fsync=store.fsync)
        with led.locked():
            led._refresh()
        return led

    # -- the agent's interface ---------------------------------------------------------
    def reserve(self, *, run: str, key: str, tokens: int, usd: Decimal,
                attempt: str | None = None, durable: bool = True) -> Reservation:
        """Reserve one call's worst case. Durable when it returns; with ``durable=False`` it
        is written, and the caller awaits ``Store.commit`` before making the call (the agent
        does: FORMAT.md "Durability").

        Raises BudgetError (naming the limit) when ``usd`` passes the per-call stop or the
        worst-case spend would pass the USD or token limit; the refusal is recorded.
        """
        if type(tokens) is not int or tokens < 0 or not isinstance(usd, Decimal) or usd < 0:
            raise ValueError(f"reserve: tokens must be a non-negative int and usd a Decimal, "
                             f"got {tokens!r}, {usd!r}")
        rid = os.urandom(8).hex()  # 16 hex digits, as uuid4().hex[:16] gave, without making a UUID
        refusal: list[str] = []

        def body(st: LedgerState) -> tuple[str, dict]:
            why = _refusal(st, tokens, usd)
            base = {"run": run, "key": key, "attempt": attempt, "tokens": tokens, "usd": fmt_usd(usd)}
            if why:
                refusal.append(why[1])
                return "refuse", {**base, "limit": why[0], "detail": why[1]}
            return "reserve", {"id": rid, **base}

        self._append_locked(None, body, durable=durable)
        if refusal:
            raise BudgetError(f"ledger {self.id}: call refused: {refusal[0]}")
        res = Reservation(rid, run, key, tokens, usd, attempt)
        self._mine[rid] = res
        return res

    def settle(self, reservation: Reservation, *, tokens: int | None, usd: Decimal | None,
               reason: str | None = None) -> None:
        """Settle with the provider's usage; ``None`` = no usage reported: the reservation
        stays spent at its upper bound, marked unknown. Raises IntegrityError when the
        reservation is not open."""
        known = tokens is not None and usd is not None
        body = {"id": reservation.id, "known": known,
                "tokens": tokens if known else reservation.tokens,
                "usd": fmt_usd(usd) if known else fmt_usd(reservation.usd), "reason": reason}

        def make(st: LedgerState) -> tuple[str, dict]:
            if reservation.id not in st.open:
                raise IntegrityError(f"ledger {self.id}: reservation {reservation.id} is not open")
            return "settle", body

        # Not waited for here: the next reservation's commit carries it to disk, and a settle
        # lost in a crash leaves its reservation counted at the upper bound (the safe side).
        self._append_locked(None, make, durable=False)
        self._mine.pop(reservation.id, None)

    # -- the runner's interface --------------------------------------------------------
    def settle_open(self, reason: str) -> int:
        """Settle every reservation this object made and never settled as unknown (used on
        interrupt). Returns how many."""
        n = 0
        for res in list(self._mine.values()):
            self.settle(res, tokens=None, usd=None, reason=reason)
            n += 1
        return n

    def close(self, status: str) -> None:
        """Append ``ledger.close`` with the totals; the ledger stays readable."""
        self._append_locked("ledger.close", lambda st: {"status": status, **_totals(st)})

    def state(self) -> LedgerState:
        """The current replayed state, including other writers' records."""
        with self.locked():
            self._refresh()
        return self._state

    @property
    def cached_state(self) -> LedgerState:
        """The state as of this writer's last append (no I/O; for progress displays)."""
        return self._state

    # -- appending (the one chain writer, ``ChainFile``) ----------------------------------
    def _append_locked(self, kind: str | None, make: Callable[[LedgerState], object], *,
                       durable: bool = True) -> Record:
        """Append the record ``make(state)`` returns (``(kind, body)`` when ``kind`` is None),
        deciding on the state with every writer's records folded in."""
        def made() -> tuple[str, dict]:
            out = make(self._state)
            return out if kind is None else (kind, out)  # type: ignore[return-value]

        return self.append_with(made, durable=durable)

    def release(self) -> None:
        """Close the file descriptors (the ledger stays usable; they reopen on demand)."""
        with self._mutex:
            super().release()


def read_ledger(store: Store, ledger_id: str, *, tolerate_torn: bool = False) -> LedgerState:
    """Replay a ledger from disk without writing anything. Raises InputError when missing,
    IntegrityError/FormatError naming the line when the chain or a record is bad.

    ``tolerate_torn`` ignores a torn last line (power lost mid-append). That is safe for
    totals: a torn ``reserve`` was never acknowledged, so its call was never made, and a
    torn ``settle`` leaves its reservation open, counted at the upper bound."""
    path = ledger_path(store, ledger_id)
    if not path.is_file():
        raise InputError(f"{path}: no ledger {ledger_id}")
    with shared_lock(path.with_name(path.name + ".lock")):
        data = path.read_bytes()
    lines, torn = split_lines(data)
    if torn and not tolerate_torn:
        raise IntegrityError(f"{path}:{len(lines) + 1}: torn last line (no newline)")
    st = LedgerState(ledger=ledger_id)
    for rec in verify_chain(lines, str(path)):
        _apply(st, rec, str(path))
    return st
