"""What the grid runner plugs into: the backends it runs, the executor that runs them, and
the bookkeeping around a run.

Why it is built this way:
- **The runner plans, an executor runs.** The runner decides which runs to make (units,
  policies, resume, stopping rules, the journal); an executor makes one agent run at a
  time on request (``RunJob`` -> ``RunDone``) and, when a run is cut off, seals what it
  wrote and settles its reservations (``cut_off``). ``LocalExecutor`` runs the agent in
  this event loop; ``benchclaw.experiments.ray_executor.RayExecutor`` runs it on a Ray cluster. Both
  leave the same files in the runs directory.
- ``Backends`` names the five things a grid needs from the parts below it (tasks,
  catalog, agent profiles, providers, the agent loop). The defaults import them lazily;
  tests and benchmarks pass fakes, so the runner can be exercised without a model.
- ``run_agent(on_open=...)`` and ``RunLedger`` let the runner know, for the run it started,
  which open run file the agent created and whether the agent reserved a call (both
  passed to the agent explicitly, kept in the run's ``RunSlot``). That is what an
  interruption needs: seal exactly those files as ``aborted`` (never another process's),
  settle exactly those reservations as unknown, and tell a run that may have reached the
  model (a reservation was made) from one that never did.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field, replace
from decimal import Decimal
from typing import Any, Awaitable, Callable

from ..errors import IntegrityError
from .ledger import Ledger, Reservation
from ..formats.money import fmt_usd
from ..formats.records import parse_line
from ..evidence.check import recover_one, run_totals
from ..evidence.store import RunWriter, Store

__all__ = ["Backends", "default_backends", "RunLedger", "RunSlot",
           "seal_cut_off", "RunParts", "RunJob", "RunDone", "Executor", "LocalExecutor", "agent_kwargs",
           "first_last"]


@dataclass
class Backends:
    """``tasks() -> list[Task]``; ``catalog(ref) -> Catalog``; ``profile(name) -> Profile``;
    ``provider(tier) -> Provider``; ``run_agent(**kw) -> AgentResult`` (async)."""

    tasks: Callable[[], list]
    catalog: Callable[[str], Any]
    profile: Callable[[str], Any]
    provider: Callable[[Any], Any]
    run_agent: Callable[..., Awaitable[Any]]

    def reading_tasks_once(self) -> "Backends":
        """These parts with ``tasks`` read on first use and then kept: what one invocation
        of a grid uses, so its registration check (``prereg.pins``) and its grid hold the
        very same task versions, and the task folders are parsed once, not twice."""
        return replace(self, tasks=_ReadOnce(self.tasks))


class _ReadOnce:
    """``read()`` on the first call, the same list after; pickled without what it read (a
    remote worker that asked would read again)."""

    def __init__(self, read: Callable[[], list]):
        self.read, self.got = read, None

    def __call__(self) -> list:
        if self.got is None:
            self.got = self.read()
        return self.got

    def __getstate__(self) -> dict:
        return {"read": self.read, "got": None}


def default_backends(sim_options: Any = None) -> Backends:
    """The real parts: built-in tasks, shipped catalogs and profiles, ``make_provider``
    (with ``sim_options`` for ``sim`` tiers) and ``benchclaw.agent.run_agent``."""
    from ..agent import load_profile, run_agent
    from ..providers import make_provider
    from ..providers.catalog import load_catalog
    from ..checks.tasks import find_tasks

    return Backends(tasks=find_tasks, catalog=load_catalog, profile=load_profile,
                    provider=lambda tier: make_provider(tier, sim_options=sim_options), run_agent=run_agent)


@dataclass
class RunSlot:
    """What the runner learns about one run while the agent runs it: the writer (handed
    over through ``run_agent(on_open=slot.opened)``) and the run's ledger."""

    writer: RunWriter | None = None
    ledger: "RunLedger | None" = None

    def opened(self, writer: RunWriter) -> None:
        self.writer = writer


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
        grid is interrupted: every call reserves first, so no call starts after an interrupt.
        Written, not waited for: ``run_agent`` awaits ``Store.commit`` between a reservation
        and its call, so the event loop never blocks on the fsync (FORMAT.md "Durability")."""
        why = self.halt()
        if why:
            raise asyncio.CancelledError(why)
        res = self.ledger.reserve(run=run, key=key, tokens=tokens, usd=usd, attempt=self.attempt, durable=False)
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
    try:
        writer.append("run.end", {"status": "aborted", "reason": reason, "interrupted": True,
                                  "turns": sum(1 for r in writer.records if r.kind == "action"),
                                  "gate_passed": False, "passed": False, "elapsed_ms": None,
                                  "injection_attempts": 0, "denials": 0, **run_totals(writer.records)})
        return writer.seal()
    except IntegrityError:  # closed unsealed: seal it the way crash recovery does
        done = recover_one(store, writer.path)
        return done.run_id if done is not None else None


# ------------------------------------------------------------------------------ executors

@dataclass(frozen=True)
class RunParts:
    """What every run of a grid shares: an executor gets it once, before the first run."""

    store: Store
    backends: Backends
    catalog: Any
    profiles: dict
    tiers: tuple
    settings: Any          # the spec's ``Settings``


@dataclass(frozen=True)
class RunJob:
    """One agent run: ``cell`` at ``tier``; ``policy_context`` becomes ``run.start.policy``
    and its ``attempt`` tags the run's reservations."""

    cell: Any              # benchclaw.experiments.grid.Cell
    tier: str
    policy_context: dict

    @property
    def attempt(self) -> str:
        return self.policy_context["attempt"]


@dataclass(frozen=True)
class RunDone:
    """What an executor hands back: the sealed run (None when nothing was written), its
    ``run.end`` body and how many reservations it made. A call cut off in flight has no
    ``call`` record: its upper bound lives in the ledger (settled unknown), not here."""

    run_id: str | None
    end: dict
    reserved: int


class Executor:
    """The interface (a base for documentation; executors implement every method).

    ``prepare(parts)`` before the ledger exists (may raise a configuration error);
    ``await start(ledger, halt)`` (``halt()`` says why the grid was interrupted, or None:
    a run's ledger refuses every reservation once it answers); ``await run(job) -> RunDone``; ``cut_off(job, why) -> RunDone |
    None`` after ``run`` raised or was cancelled (seal the run aborted, settle its open
    reservations as unknown); ``await close()``.
    """

    name = "executor"


def agent_kwargs(parts: RunParts, job: RunJob) -> dict:
    """``run_agent``'s arguments but ``store``, ``provider`` and ``ledger``."""
    s = parts.settings
    return dict(task=job.cell.task, tier=parts.catalog.tier(job.tier), catalog=parts.catalog,
                profile=parts.profiles[job.cell.profile], seed=job.cell.seed,
                limits={"turns": s.turns, "seconds": s.seconds, "output_bytes": s.output_bytes},
                policy_context=job.policy_context, max_tokens=s.max_tokens, temperature=s.temperature,
                retries=s.retries)


class LocalExecutor(Executor):
    """Runs the agent in the runner's event loop: one provider per tier, shared."""

    name = "local"

    def prepare(self, parts: RunParts) -> None:
        self.parts = parts
        self.providers = {t: parts.backends.provider(parts.catalog.tier(t)) for t in parts.tiers}
        self.slots: dict[str, RunSlot] = {}

    async def start(self, ledger: Ledger, halt: Callable[[], str | None] = lambda: None) -> None:
        self.ledger, self.halt = ledger, halt

    async def run(self, job: RunJob) -> RunDone:
        slot = self.slots[job.attempt] = RunSlot(ledger=RunLedger(self.ledger, job.attempt, halt=self.halt))
        result = await self.parts.backends.run_agent(store=self.parts.store, provider=self.providers[job.tier],
                                                     ledger=slot.ledger, on_open=slot.opened,
                                                     **agent_kwargs(self.parts, job))
        del self.slots[job.attempt]
        end = _written_end(slot) or _result_end(result)
        return RunDone(result.run_id, end, slot.ledger.reserved)

    def cut_off(self, job: RunJob, why: str) -> RunDone | None:
        slot = self.slots.pop(job.attempt, None)
        if slot is None:
            return None
        slot.ledger.settle_open(why)
        run_id = seal_cut_off(self.parts.store, slot.writer, why)
        if run_id is None:
            return None
        _, end = first_last(self.parts.store, run_id)
        return RunDone(run_id, end, slot.ledger.reserved)

    async def close(self) -> None:
        for p in self.providers.values():
            if hasattr(p, "aclose"):
                await p.aclose()


def _written_end(slot: RunSlot) -> dict | None:
    """The ``run.end`` body the agent wrote, when the runner saw its writer."""
    w = slot.writer
    if w is not None and w.records and w.records[-1].kind == "run.end":
        return w.records[-1].body
    return None


def _result_end(result) -> dict:
    """An AgentResult in the shape of a ``run.end`` body (the parts the journal keeps)."""
    low, high = fmt_usd(result.cost_low), fmt_usd(result.cost_high)
    return {"status": result.status, "gate_passed": result.gate_passed, "passed": result.passed,
            "cost": {"known": low == high, "low": low, "high": high}, "elapsed_ms": result.elapsed_ms,
            "calls": getattr(result, "calls", 0)}


def first_last(store: Store, run_id: str) -> tuple[dict, dict]:
    """``run.start`` and ``run.end`` bodies of a sealed run (only its first and last lines)."""
    path = store.run_path(run_id)
    lines = path.read_bytes().split(b"\n")
    lines = [ln for ln in lines if ln]
    first = parse_line(lines[0], f"{path}:1")
    last = parse_line(lines[-1], f"{path}:{len(lines)}")
    return (first.body if first.kind == "run.start" else {}), (last.body if last.kind == "run.end" else {})
