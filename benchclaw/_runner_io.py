"""What the grid runner plugs into: the backends it runs, and the bookkeeping around a run.

Why it is built this way:
- ``Backends`` names the five things a grid needs from the parts below it (tasks,
  catalog, agent profiles, providers, the agent loop). The defaults import them lazily;
  tests and benchmarks pass fakes, so the runner can be exercised without a model.
- ``TrackingStore`` and ``RunLedger`` let the runner know, for the run it started, which
  open run file the agent created and whether the agent reserved a call. That is what an
  interruption needs: seal exactly those files as ``aborted`` (never another process's),
  settle exactly those reservations as unknown, and tell a run that may have reached the
  model (a reservation was made) from one that never did.
"""

from __future__ import annotations

import asyncio
import contextvars
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any, Awaitable, Callable

from .errors import IntegrityError
from .ledger import Ledger, Reservation
from .store import RunWriter, Store

__all__ = ["Backends", "default_backends", "TrackingStore", "RunLedger", "RunSlot", "CURRENT_SLOT",
           "seal_cut_off"]


@dataclass
class Backends:
    """``tasks() -> list[Task]``; ``catalog(ref) -> Catalog``; ``profile(name) -> Profile``;
    ``provider(tier) -> Provider``; ``run_agent(**kw) -> AgentResult`` (async)."""

    tasks: Callable[[], list]
    catalog: Callable[[str], Any]
    profile: Callable[[str], Any]
    provider: Callable[[Any], Any]
    run_agent: Callable[..., Awaitable[Any]]


def default_backends(sim_options: Any = None) -> Backends:
    """The real parts: built-in tasks, shipped catalogs and profiles, ``make_provider``
    (with ``sim_options`` for ``sim`` tiers) and ``benchclaw.agent.run_agent``."""
    from .agent import load_profile, run_agent
    from .providers import make_provider
    from .providers.catalog import load_catalog
    from .tasks import find_tasks

    return Backends(tasks=find_tasks, catalog=load_catalog, profile=load_profile,
                    provider=lambda tier: make_provider(tier, sim_options=sim_options), run_agent=run_agent)


@dataclass
class RunSlot:
    """What the runner learns about one run while the agent runs it."""

    writer: RunWriter | None = None
    ledger: "RunLedger | None" = None


CURRENT_SLOT: contextvars.ContextVar[RunSlot | None] = contextvars.ContextVar("benchclaw_run_slot", default=None)


class TrackingStore(Store):
    """A Store that hands the runner the writer of each run it opens (per asyncio task)."""

    def open_run(self) -> RunWriter:
        writer = super().open_run()
        slot = CURRENT_SLOT.get()
        if slot is not None:
            slot.writer = writer
        return writer


@dataclass
class RunLedger:
    """The ledger as one run sees it: tags each reservation with the runner's attempt id
    (so a run cut off by a crash can be matched to its reservations) and remembers the
    ones not yet settled."""

    ledger: Ledger
    attempt: str
    halt: Callable[[], str | None] = lambda: None   # why the grid was interrupted, or None
    reserved: int = 0
    open: dict[str, Reservation] = field(default_factory=dict)

    @property
    def id(self) -> str:
        return self.ledger.id

    def reserve(self, *, run: str, key: str, tokens: int, usd: Decimal) -> Reservation:
        """As ``Ledger.reserve``; raises BudgetError when refused, and CancelledError once the
        grid is interrupted: every call reserves first, so no call starts after an interrupt."""
        why = self.halt()
        if why:
            raise asyncio.CancelledError(why)
        res = self.ledger.reserve(run=run, key=key, tokens=tokens, usd=usd, attempt=self.attempt)
        self.reserved += 1
        self.open[res.id] = res
        return res

    def settle(self, reservation: Reservation, *, tokens: int | None, usd: Decimal | None,
               reason: str | None = None) -> None:
        """As ``Ledger.settle``."""
        self.ledger.settle(reservation, tokens=tokens, usd=usd, reason=reason)
        self.open.pop(reservation.id, None)

    def settle_open(self, reason: str) -> None:
        """Settle every reservation still open as unknown (the call was cut off in flight)."""
        for res in list(self.open.values()):
            self.settle(res, tokens=None, usd=None, reason=reason)


def seal_cut_off(store: Store, writer: RunWriter | None, reason: str) -> str | None:
    """Seal a run the agent left open (or closed unsealed) as ``aborted``; returns its id,
    or None when it wrote nothing. A run the agent already sealed keeps its own end."""
    if writer is None:
        return None
    if writer.run_id is not None:
        return writer.run_id
    if not writer.records:
        writer.close_unsealed()
        writer.path.unlink(missing_ok=True)
        return None
    from ._store_check import run_totals

    try:
        writer.append("run.end", {"status": "aborted", "reason": reason, "interrupted": True,
                                  "turns": sum(1 for r in writer.records if r.kind == "action"),
                                  "gate_passed": False, "passed": False, "elapsed_ms": None,
                                  "injection_attempts": 0, "denials": 0, **run_totals(writer.records)})
        return writer.seal()
    except IntegrityError:  # closed unsealed: seal it the way crash recovery does
        from ._store_check import _recover_one

        done = _recover_one(store, writer.path)
        return done.run_id if done is not None else None
