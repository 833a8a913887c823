"""The grid runner: execute (or resume) a registered experiment's grid, concurrently.

Why it is built this way:
- **asyncio, one process.** A run spends nearly all its time waiting for the model, so
  one event loop keeps ``--concurrency N`` runs in flight with no threads. ``N`` unit
  drivers pull units (grid runs, longest-expected first, then live trials: see
  ``experiments.grid.longest_first``) from one queue; each run takes a
  global slot and a per-tier slot (``settings.tier_concurrency``), so a speculative trial
  running two tiers at once cannot deadlock the pool.
- **Evidence first, resumable by construction.** The experiment's lock is held for the
  grid's life (one runner per experiment; other experiments and ``try`` may share the runs
  directory). Before anything, open runs left by a crash are sealed as ``aborted``
  (``recover_store``, which leaves runs whose writer is alive alone) and runs sealed without a journal
  record are adopted. What is done is then read from the journal (``experiments.grid.History``):
  finished units are skipped; a run that called the model counts as it stands (an aborted
  one is a failure), never silently redone; one that never called the model runs again.
- **Interruption is a normal ending.** SIGINT/SIGTERM cancel the drivers; each cut-off
  run is sealed ``aborted``, its reservations settled as unknown (upper bound), and the
  journal gets ``stop``/``grid.end`` records, so the ledger and journal stay consistent.
- **Stopping rules** (spec ``[[stopping]]``, plus ``budget`` when the ledger refuses a
  call) stop new work, let runs in flight finish, and record which rule fired.

Journal records are exactly FORMAT.md §8. Memory policy: see ``History.memory_start``.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import sys
import threading
import uuid
from collections import deque
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Any, Callable, TextIO

from .grid import (History, Shard, Unit, attempt_from_run, longest_first, make_cells, make_units,
                   resolve_tasks, run_length_prior, trial_id)
from .progress import Progress
from .executor import (Backends, LocalExecutor, RunDone, RunJob, RunParts, default_backends,
                       first_last)
from ..evidence.check import recover_store
from ..errors import BenchClawError
from . import Spec, require_registered
from .ledger import Ledger, Limits, new_ledger_id, read_ledger
from ..formats.money import fmt_usd
from ..formats.policies import next_batch, outcome
from ..evidence.store import Store, default_writer

__all__ = ["run_experiment", "run_experiment_sync", "GridResult", "GridInterrupted", "Backends",
           "default_backends"]


GIL_TURN_S = 0.0005


_gil_lock = threading.Lock()
_gil_grids = [0, 0.0]  # grids in short_gil_turns now, and the interval the first one found


@contextlib.contextmanager
def short_gil_turns(seconds: float = GIL_TURN_S):
    """Let threads take the GIL after ``seconds`` (instead of Python's 5 ms) while a grid
    runs, then restore the setting. The event loop holds the GIL whenever it runs Python;
    the group commit's threads need it for a moment at each step of a pass (wake, hand back
    each fsync, rename, tell the waiters), and at 5 ms per hand-over a commit the agent
    waits for took several intervals on a busy loop: the waits were most of a turn's
    harness time at 64 runs in flight.

    The setting is the process's, so grids that overlap in one process (two threads, each
    running a grid) share it: the first sets it, the last to end restores what the first
    found, whatever order they end in."""
    with _gil_lock:
        if _gil_grids[0] == 0:
            _gil_grids[1] = sys.getswitchinterval()
            sys.setswitchinterval(min(_gil_grids[1], seconds))
        _gil_grids[0] += 1
    try:
        yield
    finally:
        with _gil_lock:
            _gil_grids[0] -= 1
            if _gil_grids[0] == 0:
                sys.setswitchinterval(_gil_grids[1])


class GridInterrupted(BenchClawError):
    """The grid was interrupted (Ctrl-C / SIGTERM); everything done so far is sealed."""

    exit_code = 130


@dataclass
class GridResult:
    experiment: str
    invocation: str
    ledger: str
    status: str                    # complete | stopped | interrupted
    units: int                     # units this invocation set out to do
    skipped: int                   # units already done by earlier invocations
    runs: list[dict] = field(default_factory=list)     # journal `run` bodies of this invocation
    trials: list[dict] = field(default_factory=list)   # journal `trial` bodies of this invocation
    stop_rule: str | None = None
    stop_detail: str | None = None
    cells_left: list[str] = field(default_factory=list)
    spent_usd: Decimal = Decimal(0)

    def summary_lines(self) -> list[str]:
        passed = sum(1 for r in self.runs if r.get("passed"))
        lines = [f"{self.experiment}: {self.status}  invocation {self.invocation}",
                 f"  runs this invocation: {len(self.runs)} ({passed} passed every check); "
                 f"trials: {len(self.trials)}; skipped (already done): {self.skipped}",
                 f"  ledger {self.ledger}: worst-case spend ${fmt_usd(self.spent_usd)} "
                 f"(benchclaw ledger show {self.ledger})"]
        if self.stop_rule:
            lines.append(f"  stopped by rule {self.stop_rule}: {self.stop_detail}; "
                         f"{len(self.cells_left)} cell(s) left")
        return lines


async def run_experiment(store: Store, experiment: str, *, spec: Spec | None = None,
                         spec_path: Path | str | None = None, concurrency: int | None = None,
                         rerun: bool = False, stream: TextIO | None = None, backends: Backends | None = None,
                         sim_options: Any = None, handle_signals: bool = True,
                         progress_every: int | None = None, shard: Shard | None = None,
                         executor: Any = None) -> GridResult:
    """Run (or resume) a registered experiment's grid and return what this invocation did.

    Raises RegistrationError when the spec is unregistered or changed since registration,
    FormatError/ProviderConfigError for a grid that cannot run (unknown task, tier or
    price), and re-raises an unexpected error from a run after recording the stop.
    An interruption returns a result with ``status == "interrupted"``. ``shard`` runs only
    that slice of the grid, with its share of the budget (``benchclaw.experiments.grid.Shard``).
    ``executor`` makes the runs (default ``LocalExecutor``: in this event loop; see
    ``benchclaw.experiments.executor.Executor`` and ``benchclaw.experiments.ray_executor.RayExecutor``).
    """
    backends = (backends or default_backends(sim_options)).reading_tasks_once()
    if spec is None:
        spec = require_registered(store, experiment, spec_path, backends=backends)
    grid = _Grid(store, spec, backends, concurrency=concurrency,
                 rerun=rerun, stream=stream, progress_every=progress_every, shard=shard,
                 executor=executor or LocalExecutor())
    return await grid.run(handle_signals=handle_signals)


def run_experiment_sync(store: Store, experiment: str, **kw) -> GridResult:
    """``run_experiment`` in a fresh event loop. Raises GridInterrupted when interrupted."""
    result = asyncio.run(run_experiment(store, experiment, **kw))
    if result.status == "interrupted":
        raise GridInterrupted(f"{experiment}: {result.stop_detail}")
    return result


class _Grid:
    def __init__(self, store: Store, spec: Spec, backends: Backends, *, concurrency: int | None,
                 rerun: bool, stream: TextIO | None, progress_every: int | None, shard: Shard | None,
                 executor: Any):
        self.store = store
        self.shard, self.executor = shard, executor
        self.spec, self.backends, self.rerun, self.stream = spec, backends, rerun, stream
        self.concurrency = concurrency or spec.settings.concurrency
        self.progress_every = progress_every
        self.tiers = list(spec.grid.tiers)
        self.invocation = new_ledger_id(spec.id)
        self.stopping: tuple[str, str] | None = None
        self.interrupted: str | None = None
        self.errors: list[BaseException] = []
        self.result_runs: list[dict] = []
        self.result_trials: list[dict] = []
        self.provider_error_streak = 0

    # -- the story ---------------------------------------------------------------------
    async def run(self, *, handle_signals: bool) -> GridResult:
        with self.store.experiment_lock(self.spec.id), short_gil_turns():
            return await self._run(handle_signals)

    async def _run(self, handle_signals: bool) -> GridResult:
        recover_store(self.store)                             # 1. seal runs cut off by a crash
        self.history = History.load(self.store, self.spec.id)  # 2. what is done
        adopted = self._adopt_orphans()
        self._load_parts()                                    # 3. tasks, catalog, profiles, executor
        todo = self._units_to_do()                            # 4. what is left
        self._open_ledger()                                   # 5. the ledger, earlier spend carried
        try:
            await self.executor.start(self.ledger, self._interrupted)  # (Ray: the ledger authority)
            writer = default_writer() + self.shard.writer_suffix if self.shard else None
            self.journal = self.store.journal(self.spec.id, writer)
            self._journal_start(todo)                         # 6. grid.start, then adopted runs
            for body in adopted:
                self.journal.append("run", body)
            self.progress = Progress(len(todo), self.stream, label=f"{self.spec.id} ", every=self.progress_every)
            await self._execute(todo, handle_signals)         # 7. the drivers
        finally:
            await self.executor.close()
        return self._finish(todo)                             # 8. stop, grid.end, ledger.close

    # -- 1-2. history ------------------------------------------------------------------
    def _adopt_orphans(self) -> list[dict]:
        """Runs of this experiment sealed without a journal `run` record (a crash between
        sealing and journaling, or crash recovery): journal them now, as they stand."""
        out = []
        for run_id in self.store.run_ids():
            if run_id in self.history.recorded:
                continue
            start, end = first_last(self.store, run_id)
            pol = start.get("policy") or {}
            if not isinstance(pol, dict) or pol.get("experiment") != self.spec.id:
                continue
            called = bool(end.get("calls")) or pol.get("attempt") in self.history.reserved_attempts
            body = _run_body(pol, run_id, start.get("tier"), end, called)
            body["adopted_by"] = self.invocation
            self.history.add(body)
            out.append(body)
        return out

    # -- 3. parts ----------------------------------------------------------------------
    def _load_parts(self) -> None:
        spec, b = self.spec, self.backends
        self.tasks = resolve_tasks(spec.grid.tasks, b.tasks(), str(spec.path))
        self.catalog = b.catalog(spec.catalog_ref())
        for t in self.tiers:
            self.catalog.tier(t)
        if hasattr(self.catalog, "require_prices"):
            self.catalog.require_prices(self.tiers)
        self.profiles = {p: b.profile(p) for p in spec.grid.profiles}
        self.executor.prepare(RunParts(self.store, b, self.catalog, self.profiles, tuple(self.tiers), spec.settings))
        self.cells = make_cells(self.tasks, spec.grid.profiles, spec.grid.seeds)
        self.units = make_units(self.cells, self.tiers, spec.grid.all_tiers, spec.live)
        self.grid_units = len(self.units)
        if self.shard:
            self.cells = [c for c in self.cells if self.shard.owns(c, spec.live)]
            self.units = [u for u in self.units if self.shard.owns(u.cell, spec.live)]

    def _share_usd(self, usd: Decimal) -> Decimal:
        """A limit as this invocation sees it: the whole, or the shard's share."""
        return Shard.share_usd(usd, len(self.units), self.grid_units) if self.shard else usd

    def _share_tokens(self, tokens: int | None) -> int | None:
        return Shard.share_tokens(tokens, len(self.units), self.grid_units) if self.shard else tokens

    def _units_to_do(self) -> list[Unit]:
        h = self.history
        if self.rerun:
            return [u for u in self.units if h.needs_rerun(u) and not h.unit_done(u, True)]
        return [u for u in self.units if not h.unit_done(u, False)]

    # -- 5-6. ledger and grid.start ----------------------------------------------------
    def _open_ledger(self) -> None:
        carried_usd, carried_tokens = Decimal(0), 0
        mine = str(self.shard) if self.shard else None
        carried = [lid for lid in self.history.ledgers if mine is None or self.history.ledger_shards.get(lid) == mine]
        for lid in carried:
            try:
                st = read_ledger(self.store, lid, tolerate_torn=True)
            except BenchClawError:
                continue  # a ledger file not present here (another machine's shard)
            carried_usd += st.spent_usd - st.carried_usd
            carried_tokens += st.spent_tokens - st.carried_tokens
        b = self.spec.budget
        limits = Limits(self._share_usd(b.usd), self._share_tokens(b.tokens), b.per_call_usd)
        self.ledger = Ledger.create(self.store, self.invocation, limits,
                                    experiment=self.spec.id, invocation=self.invocation,
                                    carried_usd=carried_usd, carried_tokens=carried_tokens,
                                    carried_from=carried)

    def _journal_start(self, todo: list[Unit]) -> None:
        shard = {"shard": str(self.shard)} if self.shard else {}
        self.journal.append("grid.start", {**shard,
            "invocation": self.invocation, "spec_digest": self.spec.digest, "ledger": self.ledger.id,
            "cells": [c.id for c in self.cells], "tiers": self.tiers, "policies": list(self.spec.live),
            "all_tiers": self.spec.grid.all_tiers, "rerun": self.rerun, "units": len(self.units),
            "todo": len(todo), "concurrency": self.concurrency})

    # -- 7. execution ------------------------------------------------------------------
    async def _execute(self, todo: list[Unit], handle_signals: bool) -> None:
        # The catalog's ladder ranks tiers cheapest first; a catalog without one (a test
        # double) is ranked in the spec's tier order, a profile without actions as none.
        prior = run_length_prior(getattr(self.catalog, "ladder", None) or self.tiers,
                                 {n: len(getattr(p, "actions", ())) for n, p in self.profiles.items()})
        caps = self.spec.settings.tier_concurrency
        capped = [t for t in self.tiers if caps.get(t, self.concurrency) < self.concurrency]
        self.queue = deque(longest_first(todo, self.history, prior, capped=capped))
        self.slots = asyncio.Semaphore(self.concurrency)
        self.tier_slots = {t: asyncio.Semaphore(caps.get(t, self.concurrency)) for t in self.tiers}
        self.drivers = [asyncio.create_task(self._driver()) for _ in range(min(self.concurrency, len(todo)))]
        restore = self._install_signals() if handle_signals else (lambda: None)
        ticker = asyncio.create_task(self._tick()) if self.progress.tty else None
        try:
            await asyncio.gather(*self.drivers, return_exceptions=True)
        finally:
            restore()
            if ticker:
                ticker.cancel()
            self.progress.close()

    def interrupt(self, why: str) -> None:
        """Stop now: no new unit, run or call starts (``halted`` is checked by the drivers and
        by every run's ledger before each call, so a cancellation lost in a race with a
        finished call cannot let one through); every driver is cancelled; cut-off runs are
        sealed as aborted."""
        if self.interrupted:
            return
        self.interrupted = why
        for task in self.drivers:
            task.cancel()

    def halted(self) -> str | None:
        """Why no new work may start (an interrupt or a stopping rule), or None."""
        return self.interrupted or (self.stopping[1] if self.stopping else None)

    def _interrupted(self) -> str | None:
        return self.interrupted

    def _install_signals(self):
        if threading.current_thread() is not threading.main_thread():
            return lambda: None
        loop = asyncio.get_running_loop()
        sigs = (signal.SIGINT, signal.SIGTERM)
        for s in sigs:
            loop.add_signal_handler(s, self.interrupt, f"interrupted by {s.name}")

        def restore():
            for s in sigs:
                loop.remove_signal_handler(s)
        return restore

    async def _tick(self) -> None:
        while True:
            await asyncio.sleep(0.5)
            self.progress.update(spend=self.ledger.state().spent_usd)

    async def _driver(self) -> None:
        try:
            while self.queue and not self.halted():
                unit = self.queue.popleft()
                passed = await (self._grid_unit(unit) if unit.policy == "grid" else self._trial_unit(unit))
                # the spend as of the ledger's last append (no read of the file: ``_tick`` reads it)
                self.progress.update(done=1, passes=int(bool(passed)), spend=self.ledger.cached_state.spent_usd)
        except asyncio.CancelledError:
            raise
        except Exception as e:  # a bug or a config error: stop the grid, report after the cleanup
            self.errors.append(e)
            self._stop("error", f"{type(e).__name__}: {e}")

    async def _grid_unit(self, unit: Unit) -> bool:
        body = await self._one_run(unit, unit.tier, trial=None, step=0, batch=0,
                                   replaces=self.history.replaced(unit, self.rerun))
        return bool(body and body["passed"])

    async def _trial_unit(self, unit: Unit) -> bool:
        tid = trial_id(unit.policy, unit.cell.id, self.rerun)
        prior = [r for r in self.history.trial_runs(tid) if r.get("called_model")]
        memory = prior[0].get("memory_start") if prior else (
            self.history.memory_start(unit.cell.id) if unit.policy == "memory" else None)
        attempts = [attempt_from_run(r) for r in prior]
        batch_no = max((a.batch for a in attempts), default=-1) + 1
        while not self.halted():
            batch = next_batch(unit.policy, self.tiers, attempts, memory)
            if not batch:
                return self._journal_trial(unit, tid, attempts, memory)
            step0 = len(attempts)
            bodies = await asyncio.gather(*(
                self._one_run(unit, t, trial=tid, step=step0 + i, batch=batch_no, memory_start=memory,
                              replaces=self.history.replaced(unit, self.rerun, tier=t, trial=tid))
                for i, t in enumerate(batch)))
            counted = [b for b in bodies if b and b["called_model"]]
            attempts += [attempt_from_run(b) for b in counted]
            if len(counted) < len(batch):
                return False  # a run did not reach the model: the trial is left for a resume
            batch_no += 1
        return False

    def _journal_trial(self, unit: Unit, tid: str, attempts: list, memory: str | None) -> bool:
        out = outcome(unit.policy, self.tiers, attempts)
        body = {"invocation": self.invocation, "trial": tid, "policy": unit.policy, "cell": unit.cell.id,
                "runs": [a.run_id for a in attempts], "passed": out.passed,
                "tier": out.taken.tier if out.taken else None, "rerun": self.rerun, "memory_start": memory,
                "cost": {"low": fmt_usd(out.cost_low), "high": fmt_usd(out.cost_high)},
                "elapsed_ms": out.elapsed_ms}
        self.journal.append("trial", body, durable=False)  # rides on the next commit (see _record_run)
        self.history.trials[tid] = body
        self.result_trials.append(body)
        return out.passed

    async def _one_run(self, unit: Unit, tier: str, *, trial: str | None, step: int, batch: int,
                       replaces: str | None, memory_start: str | None = None) -> dict | None:
        """Run one attempt and journal it. An attempt of which nothing reached the runs
        directory (a remote worker lost before its ``run.start``: it never reserved, so it
        never called the model) is made once more under a new attempt id, so that a unit
        is left undone only with a run that shows why (FORMAT.md "A stop must follow from
        the evidence"); None when that happens twice or the grid halted."""
        for _ in range(2):
            body = await self._attempt(unit, tier, trial=trial, step=step, batch=batch, replaces=replaces,
                                       memory_start=memory_start)
            if body is not None or self.halted():
                return body
            self.progress.note(f"{unit.cell.id} {tier}: the worker was lost before the run started; "
                               "running it again")
        return None

    async def _attempt(self, unit: Unit, tier: str, *, trial: str | None, step: int, batch: int,
                       replaces: str | None, memory_start: str | None = None) -> dict | None:
        attempt = uuid.uuid4().hex
        ctx = {"experiment": self.spec.id, "cell": unit.cell.id, "policy": unit.policy, "trial": trial,
               "step": step, "batch": batch, "rerun": self.rerun, "replaces": replaces,
               "spec_digest": self.spec.digest, "invocation": self.invocation, "attempt": attempt,
               "memory_start": memory_start}
        job = RunJob(unit.cell, tier, ctx)
        async with self.slots, self.tier_slots[tier]:
            if self.halted():
                return None
            try:
                done = await self.executor.run(job)
            except BaseException as e:  # cancelled (interrupt) or a bug: keep the evidence
                self._cut_off(job, None if isinstance(e, asyncio.CancelledError)
                              else f"internal error: {type(e).__name__}")
                raise
        if done.run_id is None:  # nothing reached the runs directory (a worker lost early)
            return None
        self.progress.calls(tier, _run_speed(done.end))
        body = _journal_body(job, done)
        self._record_run(body)
        return body

    def _cut_off(self, job: RunJob, why: str | None) -> None:
        """A run cut off mid-way: the executor settles its reservations as unknown and seals
        it aborted; journal it as it stands."""
        why = why or self.interrupted or "cancelled"
        done = self.executor.cut_off(job, why)
        if done is not None and done.run_id is not None:
            # ``cut_off``: the run ended aborted, or (a remote worker) finished before the
            # cut reached it; either way the evidence of what stopped the grid
            self._record_run({**_journal_body(job, done), "cut_off": why})

    def _record_run(self, body: dict) -> None:
        # Not waited for (the event loop goes on): the next commit, which the next reservation
        # awaits, carries it; a ``run`` record lost in a crash is made again by adoption, and
        # its sealed run is durable already (sealing awaited that).
        self.journal.append("run", body, durable=False)
        self.history.add(body)
        self.result_runs.append(body)
        self._check_stopping(body)

    # -- stopping rules ----------------------------------------------------------------
    def _stop(self, rule: str, detail: str) -> None:
        if self.stopping is None:
            self.stopping = (rule, detail)

    def _check_stopping(self, body: dict) -> None:
        if body["status"] == "budget_stop":
            self._stop("budget", f"the ledger refused a call (run {body['run_id'][:12]})")
        self.provider_error_streak = self.provider_error_streak + 1 if body["status"] == "provider_error" else 0
        if not self.spec.stopping:
            return  # no rule to judge: the ledger need not be read
        st = self.ledger.state()  # every writer's records (a remote executor reserves too)
        for rule in self.spec.stopping:
            detail = STOP_CHECKS[rule.rule](self, st, rule.params)
            if detail is not None:
                self._stop(rule.rule, detail)

    # -- 8. the end --------------------------------------------------------------------
    def _finish(self, todo: list[Unit]) -> GridResult:
        left = [u for u in todo if not self.history.unit_done(u, self.rerun)]
        cells_left = sorted({u.cell.id for u in left})
        if self.interrupted:
            status, stop = "interrupted", ("interrupted", self.interrupted)
        elif self.stopping:
            status, stop = "stopped", self.stopping
        elif left:
            status, stop = "stopped", ("incomplete", f"{len(left)} unit(s) made no model call")
        else:
            status, stop = "complete", None
        self.ledger.settle_open(f"grid {status}")
        if stop:
            self.journal.append("stop", {"invocation": self.invocation, "rule": stop[0], "detail": stop[1],
                                         "cells_left": cells_left})
        self.journal.append("grid.end", {"invocation": self.invocation, "status": status,
                                         "runs": len(self.result_runs)})
        self.ledger.close(status)
        spent = self.ledger.state().spent_usd
        self.ledger.release()
        if self.errors:
            raise self.errors[0]
        return GridResult(self.spec.id, self.invocation, self.ledger.id, status, len(todo),
                          len(self.units) - len(todo) if not self.rerun else 0, self.result_runs,
                          self.result_trials, stop[0] if stop else None, stop[1] if stop else None,
                          cells_left, spent)


# ------------------------------------------------------------------------ stopping rules
# One entry per rule of formats.spec.STOP_RULES: ``(grid, ledger state, params) -> why the
# grid stops now, or None``.

def _spend_reached(g: _Grid, st, p: dict) -> str | None:
    limit = g._share_usd(p["usd"])
    return f"worst-case spend ${fmt_usd(st.spent_usd)} reached ${fmt_usd(limit)}" if st.spent_usd >= limit else None


def _tokens_reached(g: _Grid, st, p: dict) -> str | None:
    limit = g._share_tokens(p["tokens"])
    return f"worst-case tokens {st.spent_tokens} reached {limit}" if st.spent_tokens >= limit else None


def _provider_errors(g: _Grid, st, p: dict) -> str | None:
    n = g.provider_error_streak
    return f"{n} consecutive provider_error runs" if n >= p["consecutive"] else None


STOP_CHECKS: dict[str, Callable[[_Grid, Any, dict], str | None]] = {
    "spend": _spend_reached, "tokens": _tokens_reached, "provider_errors": _provider_errors}


# ------------------------------------------------------------------------------ helpers

def _run_body(pol: dict, run_id: str, tier: str | None, end: dict, called: bool) -> dict:
    """The journal ``run`` record (FORMAT.md §8) from the policy context and the run's end."""
    cost = end.get("cost") or {}
    return {"invocation": pol.get("invocation"), "run_id": run_id, "cell": pol.get("cell"), "tier": tier,
            "policy": pol.get("policy"), "trial": pol.get("trial"), "step": pol.get("step", 0),
            "batch": pol.get("batch", 0), "status": end.get("status", "aborted"), "called_model": called,
            "rerun": bool(pol.get("rerun")), "replaces": pol.get("replaces"),
            "gate_passed": bool(end.get("gate_passed")), "passed": bool(end.get("passed")),
            "cost": {"known": bool(cost.get("known", False)), "low": cost.get("low", "0"),
                     "high": cost.get("high", "0")},
            "elapsed_ms": end.get("elapsed_ms") or 0, "attempt": pol.get("attempt"),
            "memory_start": pol.get("memory_start")}


def _journal_body(job: RunJob, done: RunDone) -> dict:
    # The journal claims what the sealed run says (the verifier compares them). A call cut
    # off in flight has no call record; its cost is the ledger's: the reservation, settled
    # unknown at its upper bound, which the analysis adds to the run as a cut-off call.
    return _run_body(job.policy_context, done.run_id, job.tier, done.end, bool(done.end.get("calls") or done.reserved))


def _run_speed(end: dict) -> list[tuple[int, int]]:
    """``(completion tokens, elapsed ms)`` of a finished run, from its ``run.end`` (what every
    executor hands back), for the progress line's tokens per second."""
    usage, ms = end.get("usage"), end.get("elapsed_ms")
    tokens = usage.get("completion") if isinstance(usage, dict) else None
    if type(tokens) is not int or type(ms) is not int or tokens <= 0 or ms <= 0:
        return []
    return [(tokens, ms)]
