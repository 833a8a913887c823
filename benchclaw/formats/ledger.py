"""Replaying a ledger (FORMAT.md "Ledgers"): the fold from ledger records to spend.

Worst-case spend = carried + settled + unknown (at the reservation's upper bound) + open
reservations. This is the one definition of that arithmetic and of the rule that refuses
a reservation: the writer (``benchclaw.experiments.ledger``, which folds in every writer's records
under its lock) and the offline verifier (which replays a bundle's ledger and checks that
no reservation could have passed a limit) both call it. It is pure (standard library,
``records``, ``money``) because the verifier must not import the writer side (file locks,
the store).

Each record kind has one apply function in ``APPLY``; unknown kinds are kept, never
rejected (FORMAT.md §2). Money is ``Decimal`` throughout.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from decimal import Decimal
from typing import Callable, Iterable, Mapping

from ..errors import FormatError, IntegrityError
from .money import fmt_usd, parse_usd
from .records import Record

__all__ = ["Limits", "LedgerState", "APPLY", "apply_record", "replay", "refusal", "totals",
           "LEDGER_KINDS"]

LEDGER_KINDS = ("ledger.open", "reserve", "settle", "refuse", "ledger.close")
# A settle ``reason`` starting so: the provider reported usage that was not taken as the
# bill (FORMAT.md §6, plausibility); the rest lists the doubts.
DOUBTED_PREFIX = "usage doubted: "


@dataclass(frozen=True)
class Limits:
    """What a benchmark may spend. ``usd`` is required (fail closed); ``tokens`` and
    ``per_call_usd`` are ``None`` when not limited."""

    usd: Decimal
    tokens: int | None = None
    per_call_usd: Decimal | None = None

    def to_dict(self) -> dict:
        return {"usd": fmt_usd(self.usd), "tokens": self.tokens,
                "per_call_usd": None if self.per_call_usd is None else fmt_usd(self.per_call_usd)}

    @classmethod
    def from_dict(cls, d: Mapping, where: str) -> "Limits":
        """Raises FormatError naming ``where``."""
        if not isinstance(d, Mapping):
            raise FormatError(f"{where}: limits must be an object")
        tokens = d.get("tokens")
        if tokens is not None and (type(tokens) is not int or tokens < 0):
            raise FormatError(f"{where}.tokens: expected a non-negative int or null")
        per_call = d.get("per_call_usd")
        return cls(parse_usd(d.get("usd"), f"{where}.usd"), tokens,
                   None if per_call is None else parse_usd(per_call, f"{where}.per_call_usd"))


@dataclass
class _Open:
    tokens: int
    usd: Decimal


@dataclass
class LedgerState:
    """The ledger replayed. Worst-case spend = carried + settled + unknown + open."""

    ledger: str = ""
    experiment: str | None = None
    invocation: str | None = None
    limits: Limits | None = None
    carried_usd: Decimal = Decimal(0)
    carried_tokens: int = 0
    carried_from: object = None  # ledger.open carried.ledgers, as written (not interpreted here)
    open: dict[str, _Open] = field(default_factory=dict)
    settled_calls: int = 0
    settled_tokens: int = 0
    settled_usd: Decimal = Decimal(0)
    unknown_calls: int = 0
    unknown_tokens: int = 0
    unknown_usd: Decimal = Decimal(0)
    refused: int = 0
    closed: bool = False
    doubted_calls: int = 0    # settled at the bound because the reported usage was doubted
    over_bound_calls: int = 0  # ... of them, usage above the reservation (an over-report)

    @property
    def open_tokens(self) -> int:
        return sum(o.tokens for o in self.open.values())

    @property
    def open_usd(self) -> Decimal:
        return sum((o.usd for o in self.open.values()), Decimal(0))

    @property
    def spent_usd(self) -> Decimal:
        """Worst-case spend: what has been or may have been spent."""
        return self.carried_usd + self.settled_usd + self.unknown_usd + self.open_usd

    @property
    def spent_tokens(self) -> int:
        return self.carried_tokens + self.settled_tokens + self.unknown_tokens + self.open_tokens

    @property
    def remaining_usd(self) -> Decimal | None:
        return None if self.limits is None else self.limits.usd - self.spent_usd

    @property
    def remaining_tokens(self) -> int | None:
        if self.limits is None or self.limits.tokens is None:
            return None
        return self.limits.tokens - self.spent_tokens

    def summary(self) -> dict:
        """A JSON-ready snapshot (decimal strings, ints): what ``ledger show --json`` prints."""
        rem_usd = self.remaining_usd
        return {
            "ledger": self.ledger, "experiment": self.experiment, "invocation": self.invocation,
            "limits": None if self.limits is None else self.limits.to_dict(),
            "carried": {"usd": fmt_usd(self.carried_usd), "tokens": self.carried_tokens},
            "reserved": {"calls": len(self.open), "tokens": self.open_tokens, "usd": fmt_usd(self.open_usd)},
            "settled": {"calls": self.settled_calls, "tokens": self.settled_tokens,
                        "usd": fmt_usd(self.settled_usd)},
            "unknown": {"calls": self.unknown_calls, "tokens": self.unknown_tokens,
                        "usd": fmt_usd(self.unknown_usd)},
            "refused": self.refused,
            "spent": {"usd": fmt_usd(self.spent_usd), "tokens": self.spent_tokens},
            "remaining": {"usd": None if rem_usd is None else fmt_usd(rem_usd),
                          "tokens": self.remaining_tokens},
            "closed": self.closed,
            **({"doubted": {"calls": self.doubted_calls, "over_bound": self.over_bound_calls}}
               if self.doubted_calls else {}),
        }


# ------------------------------------------------------------------------ replay (one registry)

def _apply_open(st: LedgerState, b: dict, where: str) -> None:
    st.ledger, st.experiment, st.invocation = b.get("ledger", ""), b.get("experiment"), b.get("invocation")
    st.limits = Limits.from_dict(b.get("limits"), f"{where}.limits")
    carried = b.get("carried") or {}
    st.carried_usd = parse_usd(carried.get("usd", "0"), f"{where}.carried.usd")
    st.carried_tokens = _int(carried.get("tokens", 0), f"{where}.carried.tokens")
    st.carried_from = carried.get("ledgers")


def _apply_reserve(st: LedgerState, b: dict, where: str) -> None:
    st.open[str(b.get("id"))] = _Open(_int(b.get("tokens"), f"{where}.tokens"),
                                      parse_usd(b.get("usd"), f"{where}.usd"))


def _apply_settle(st: LedgerState, b: dict, where: str) -> None:
    res = st.open.pop(str(b.get("id")), None)
    if res is None:
        raise IntegrityError(f"{where}: settles reservation {b.get('id')!r}, which is not open")
    if b.get("known"):
        st.settled_calls += 1
        st.settled_tokens += _int(b.get("tokens"), f"{where}.tokens")
        st.settled_usd += parse_usd(b.get("usd"), f"{where}.usd")
    else:  # no usage (or usage doubted): spent at the reservation's upper bound
        st.unknown_calls += 1
        st.unknown_tokens += res.tokens
        st.unknown_usd += res.usd
    reason = b.get("reason")
    if isinstance(reason, str) and reason.startswith(DOUBTED_PREFIX):
        st.doubted_calls += 1
        st.over_bound_calls += "over_bound" in reason


def _apply_refuse(st: LedgerState, b: dict, where: str) -> None:
    st.refused += 1


def _apply_close(st: LedgerState, b: dict, where: str) -> None:
    st.closed = True


APPLY: dict[str, Callable[[LedgerState, dict, str], None]] = {
    "ledger.open": _apply_open, "reserve": _apply_reserve, "settle": _apply_settle,
    "refuse": _apply_refuse, "ledger.close": _apply_close,
}


def _int(v, where: str) -> int:
    if type(v) is not int or v < 0:
        raise FormatError(f"{where}: expected a non-negative int, got {v!r}")
    return v


def apply_record(st: LedgerState, rec: Record, where: str) -> None:
    """Fold one record into ``st``. Raises FormatError/IntegrityError naming
    ``where:<line>`` (a malformed amount, a settlement of a reservation that is not open)."""
    fn = APPLY.get(rec.kind)
    if fn is not None:  # unknown kinds are kept, never rejected (FORMAT.md §2)
        fn(st, rec.body, f"{where}:{rec.seq + 1}")


def replay(records: Iterable[Record], where: str, ledger: str = "") -> LedgerState:
    """The state after every record (chain already verified). Raises like ``apply_record``."""
    st = LedgerState(ledger=ledger)
    for rec in records:
        apply_record(st, rec, where)
    return st


def refusal(st: LedgerState, tokens: int, usd: Decimal) -> tuple[str, str] | None:
    """Why a reservation of ``tokens``/``usd`` must be refused now: ``(limit, detail)`` with
    limit ``per_call_usd``, ``usd`` or ``tokens``; None when it fits every limit."""
    lim = st.limits
    if lim is None:
        return "usd", "the ledger has no limits (no ledger.open record): refusing every call"
    if lim.per_call_usd is not None and usd > lim.per_call_usd:
        return "per_call_usd", (f"this call could cost up to ${fmt_usd(usd)}, above the per-call stop "
                                f"of ${fmt_usd(lim.per_call_usd)}")
    if st.spent_usd + usd > lim.usd:
        return "usd", (f"worst-case spend would reach ${fmt_usd(st.spent_usd + usd)}, above the "
                       f"limit of ${fmt_usd(lim.usd)}")
    if lim.tokens is not None and st.spent_tokens + tokens > lim.tokens:
        return "tokens", (f"worst-case tokens would reach {st.spent_tokens + tokens}, above the "
                          f"limit of {lim.tokens}")
    return None


def totals(st: LedgerState) -> dict:
    """The totals a ``ledger.close`` record carries (reserved, settled, unknown, refused, spent)."""
    s = st.summary()
    return {k: s[k] for k in ("reserved", "settled", "unknown", "refused", "spent")}
