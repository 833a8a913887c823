"""The studio itself, without HTTP: load the allowed parts, start jobs, run them, keep books.

The story of a process, top to bottom:

1. ``open``: take the studio's lock (``locks/studio-<label>.lock``: one studio per label
   writes its journal and ledgers), seal runs whose writer died as ``aborted``
   (``Store.recover``, which leaves any live process's open runs alone), settle the ledgers' orphaned
   reservations pair by pair (``StudioBudgets.recover``), journal the runs and jobs a killed
   studio never finished, then append ``studio.open``.
2. ``start``: a visitor's request names ids; each is looked up in the allow-lists loaded at
   start-up (an unknown id is refused, nothing is resolved from the request). Concurrency,
   rate and budget are checked, ``studio.job`` is journaled, and the job runs as an asyncio
   task in this process.
3. ``_run_job``: the policy (``benchclaw.formats.policies.next_batch``, as a grid's live trials)
   names tiers; before each run ``studio.run.start`` is journaled (durable: it is what the
   per-session run budget counts), then ``run_agent`` runs with both ledgers
   (``CallBudget``) and a store that turns each appended record into a live event.
4. ``close``: cancel what runs (each cut-off run is sealed ``aborted`` by the agent), journal
   it, release the lock.

The studio journal (``journals/studio-<label>/``) holds no pre-registration: every record
says ``exploratory``, and no run of it carries an ``experiment`` in its policy context, so
no experiment's analysis or decisions ever read them (docs/FORMAT.md "Studio journal").
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
import uuid
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any

from ..evidence.check import recover_store
from ..errors import BenchClawError, UsageError
from ..formats.money import fmt_usd
from ..formats.policies import Attempt, next_batch, outcome, policy_names
from ..formats.records import Record
from ..evidence.store import Store
from .budgets import CallBudget, Remaining, StudioBudgets
from .config import StudioConfig
from .jobs import Job, record_event
from .sessions import RateLimiter

__all__ = ["Studio", "Refusal", "Choice", "SessionView"]

log = logging.getLogger("benchclaw.studio")
MAX_JOBS_KEPT = 5000


class Refusal(BenchClawError):
    """A start the studio will not do. ``reason`` is one of ``budget``, ``day_budget``,
    ``busy``, ``rate``, ``input``; ``status`` the HTTP status a page gets."""

    def __init__(self, reason: str, message: str, status: int):
        super().__init__(message)
        self.reason, self.status = reason, status


@dataclass(frozen=True)
class Choice:
    """What a visitor may pick: ids, in the operator's order."""

    tasks: tuple[tuple[str, str], ...]      # (id, title)
    policies: tuple[str, ...]
    profiles: tuple[str, ...]


@dataclass(frozen=True)
class SessionView(Remaining):
    spent_usd: Decimal
    limit_usd: Decimal
    spent_tokens: int
    limit_tokens: int
    runs_used: int
    runs_limit: int
    exhausted: bool
    day_exhausted: bool
    runs: tuple[dict, ...]      # newest first: studio.run bodies of this session

    @property
    def runs_left(self) -> int:
        return max(self.runs_limit - self.runs_used, 0)

    def to_event(self) -> dict:
        return {"remaining_usd": fmt_usd(self.remaining_usd), "spent_usd": fmt_usd(self.spent_usd),
                "remaining_tokens": self.remaining_tokens, "runs_left": self.runs_left,
                "exhausted": self.exhausted or self.day_exhausted}


class _ObservedStore(Store):
    """The store for one run: every run record, once on disk, goes to ``observer``."""

    def __init__(self, root: Path, observer, *, fsync: bool = True):
        super().__init__(root, fsync=fsync)
        self._observer = observer
        self.writer = None

    def open_run(self, *, on_append=None):
        self.writer = super().open_run(on_append=self._observer)
        return self.writer


class Studio:
    def __init__(self, config: StudioConfig, runs_dir: Path | str, *, sim_options: Any = None,
                 fsync: bool = True):
        self.config = config
        self.store = Store(runs_dir, fsync=fsync)
        self.journal_id = f"studio-{config.label}"
        self.budgets = StudioBudgets(self.store, config.budgets, config.label)
        self.jobs: dict[str, Job] = {}
        self._tasks: set[asyncio.Task] = set()
        self._session_runs: dict[str, list[dict]] = {}   # studio.run bodies, per session
        self._runs_started: dict[str, int] = {}           # studio.run.start count, per session
        self._memory: dict[tuple[str, str, str], str] = {}
        self._rate = RateLimiter(config.starts_per_minute)
        self._global_rate = RateLimiter(config.global_starts_per_minute)
        self._lock_cm = None
        self._load_parts(sim_options)

    # -- parts (allow-lists, resolved once) ------------------------------------------------
    def _load_parts(self, sim_options: Any) -> None:
        from ..agent import load_profile
        from ..providers import make_provider
        from ..providers.catalog import load_catalog
        from ..sim import SimOptions
        from ..checks.tasks import get_task

        cfg = self.config
        self.catalog = load_catalog(cfg.catalog)
        self.tiers = tuple(cfg.tiers) or tuple(self.catalog.ladder)
        for t in self.tiers:
            self.catalog.tier(t)
        self.catalog.require_prices(list(self.tiers))
        self.tasks = {}
        for tid in cfg.tasks:
            task = get_task(tid, cfg.tasks_root)
            self.tasks[tid] = task
        self.profiles = {p: load_profile(p) for p in cfg.profiles}
        allowed = policy_names(self.tiers)
        policies = cfg.policies or tuple(["ladder", "memory"] + [f"always:{t}" for t in self.tiers])
        for p in policies:
            if p not in allowed:
                raise UsageError(f"studio config: policy {p!r} is not possible with tiers {list(self.tiers)}")
        self.policies = tuple(policies)
        opts = sim_options if sim_options is not None else SimOptions(latency_scale=cfg.sim_latency_scale)
        self.providers = {t: make_provider(self.catalog.tier(t), sim_options=opts) for t in self.tiers}
        self.simulated = any(self.catalog.tier(t).simulated or self.catalog.tier(t).provider == "sim"
                             for t in self.tiers)

    def choice(self) -> Choice:
        return Choice(tuple((tid, t.title) for tid, t in self.tasks.items()), self.policies, tuple(self.profiles))

    # -- 1. open / 4. close ----------------------------------------------------------------
    def open(self) -> None:
        """Take the runs directory, recover what a killed studio left, journal ``studio.open``.
        Raises UsageError when another studio of this label runs on the runs directory."""
        self._lock_cm = self.store.experiment_lock(self.journal_id)  # one studio per label (FORMAT.md §1)
        self._lock_cm.__enter__()
        try:
            self.journal = self.store.journal(self.journal_id, "studio")
            recovered = [r.run_id for r in recover_store(self.store) if r.run_id]
            settled = self.budgets.recover()
            self._replay_journal(recovered)
            cfg, b = self.config, self.config.budgets
            self.journal.append("studio.open", {
                "exploratory": True, "label": cfg.label, "catalog": self.catalog.ref(), "tiers": list(self.tiers),
                "tasks": [f"{t.id}@{t.version}" for t in self.tasks.values()], "policies": list(self.policies),
                "profiles": list(self.profiles), "recovered_runs": len(recovered), "settled_reservations": settled,
                "budgets": {"session": {"usd": fmt_usd(b.session_usd), "tokens": b.session_tokens,
                                        "runs": b.session_runs},
                            "day": {"usd": fmt_usd(b.day_usd), "tokens": b.day_tokens},
                            "per_call_usd": fmt_usd(b.per_call_usd)}})
        except BaseException:
            self._release_lock()
            raise

    async def close(self) -> None:
        """Cancel running jobs (their runs are sealed ``aborted`` and journaled), close the
        providers and release the runs directory."""
        for task in list(self._tasks):
            task.cancel()
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)
        for p in self.providers.values():
            with contextlib.suppress(Exception):
                await p.aclose()
        self.budgets.close()
        self._release_lock()

    def _release_lock(self) -> None:
        if self._lock_cm is not None:
            cm, self._lock_cm = self._lock_cm, None
            cm.__exit__(None, None, None)

    def _replay_journal(self, recovered: list[str]) -> None:
        """Rebuild the per-session books from the journal, and journal what a killed studio
        left unfinished: a started run with no ``studio.run`` (its sealed run, found by its
        attempt id, as recovery left it) and a job with no ``studio.job.end``."""
        started: dict[str, dict] = {}
        jobs_open: dict[str, dict] = {}
        for entry in self.store.read_journal(self.journal_id):
            b = entry.body
            if entry.kind == "studio.run.start":
                started[b["attempt"]] = b
                self._runs_started[b["session"]] = self._runs_started.get(b["session"], 0) + 1
            elif entry.kind == "studio.run":
                started.pop(b.get("attempt"), None)
                self._note_run(b)
            elif entry.kind == "studio.job":
                jobs_open[b["job"]] = b
            elif entry.kind == "studio.job.end":
                jobs_open.pop(b.get("job"), None)
        if not started and not jobs_open:
            return
        by_attempt = self._runs_by_attempt(set(started), recovered)
        for attempt, b in started.items():
            run_id, end = by_attempt.get(attempt, (None, {}))
            body = self._run_body(b["session"], b["job"], b["step"], b["tier"], attempt, run_id, end,
                                  task=b.get("task", ""), profile=b.get("profile", ""))
            self.journal.append("studio.run", body)
            self._note_run(body)
        for job, b in jobs_open.items():
            self.journal.append("studio.job.end", {"exploratory": True, "session": b["session"], "job": job,
                                                   "status": "aborted", "detail": "the studio stopped during the job",
                                                   "tier": None})

    def _runs_by_attempt(self, attempts: set[str], recovered: list[str]) -> dict[str, tuple[str, dict]]:
        out = {}
        for run_id in recovered + self.store.run_ids():
            if len(out) == len(attempts):
                break
            try:
                run = self.store.read_run(run_id)
            except BenchClawError:
                continue
            pol = run.start.get("policy") or {}
            if isinstance(pol, dict) and pol.get("studio") == self.journal_id and pol.get("attempt") in attempts:
                out[pol["attempt"]] = (run_id, run.end)
        return out

    def _note_run(self, body: dict) -> None:
        self._session_runs.setdefault(body["session"], []).append(body)
        if body.get("gate_passed"):
            self._memory[(body["session"], body.get("task", ""), body.get("profile", ""))] = body["tier"]

    # -- what a session sees -----------------------------------------------------------------
    def session_view(self, sid: str) -> SessionView:
        b = self.config.budgets
        st, day = self.budgets.session_standing(sid), self.budgets.day_standing()
        used = self._runs_started.get(sid, 0)
        return SessionView(st.spent_usd, b.session_usd, st.spent_tokens, b.session_tokens, used, b.session_runs,
                           st.exhausted or used >= b.session_runs, day.exhausted,
                           tuple(reversed(self._session_runs.get(sid, []))))

    def running_jobs(self, sid: str | None = None) -> int:
        return sum(1 for j in self.jobs.values() if j.running and (sid is None or j.session == sid))

    def session_jobs(self, sid: str) -> list[Job]:
        return [j for j in reversed(list(self.jobs.values())) if j.session == sid]

    # -- 2. start ------------------------------------------------------------------------
    def start(self, sid: str, task: str, policy: str, profile: str) -> Job:
        """Start a job for session ``sid``. Raises Refusal (unknown id, busy, rate, budget)."""
        if task not in self.tasks or policy not in self.policies or profile not in self.profiles:
            raise Refusal("input", "unknown task, policy or profile: pick one from the lists", 400)
        view = self.session_view(sid)
        if view.day_exhausted:
            raise Refusal("day_budget", "the studio's budget for today is spent; come back tomorrow (UTC)", 402)
        if view.exhausted:
            raise Refusal("budget", "this session's budget is spent", 402)
        if self.running_jobs(sid) >= self.config.session_concurrency:
            raise Refusal("busy", "this session already has a run going; wait for it to finish", 429)
        if self.running_jobs() >= self.config.global_concurrency:
            raise Refusal("busy", "the studio is busy; try again in a minute", 429)
        if not self._rate.allow(sid) or not self._global_rate.allow("*"):
            raise Refusal("rate", "too many starts; wait a minute", 429)
        t = self.tasks[task]
        job = Job(uuid.uuid4().hex, sid, task, policy, profile, secrets.randbelow(1000) + 1, self.simulated)
        self.journal.append("studio.job", {"exploratory": True, "session": sid, "job": job.id,
                                           "task": f"{t.id}@{t.version}", "policy": policy, "profile": profile,
                                           "seed": job.seed})
        self._keep(job)
        task_ = asyncio.get_running_loop().create_task(self._run_job(job))
        self._tasks.add(task_)
        task_.add_done_callback(self._tasks.discard)
        return job

    def _keep(self, job: Job) -> None:
        self.jobs[job.id] = job
        if len(self.jobs) > MAX_JOBS_KEPT:  # forget the oldest finished jobs (their runs stay listed)
            for jid in [j.id for j in self.jobs.values() if not j.running][: len(self.jobs) - MAX_JOBS_KEPT]:
                del self.jobs[jid]

    # -- 3. one job ----------------------------------------------------------------------
    async def _run_job(self, job: Job) -> None:
        job.emit("job", {"task": job.task, "policy": job.policy, "profile": job.profile,
                         "simulated": job.simulated})
        attempts: list[Attempt] = []
        memory = self._memory.get((job.session, job.task, job.profile)) if job.policy == "memory" else None
        status, detail = "aborted", "cancelled"
        try:
            status, detail = await self._trial(job, attempts, memory)
        except asyncio.CancelledError:
            status, detail = "aborted", "the studio stopped during the job"
            raise
        except Exception as e:  # a bug: the visitor sees a plain note, the operator the log
            log.exception("studio job %s failed", job.id)
            status, detail = "aborted", f"internal error ({type(e).__name__})"
        finally:
            self._end_job(job, attempts, status, detail)

    async def _trial(self, job: Job, attempts: list[Attempt], memory: str | None) -> tuple[str, str]:
        batch_no = 0
        while True:
            batch = next_batch(job.policy, self.tiers, attempts, memory)
            if not batch:
                out = outcome(job.policy, self.tiers, attempts)
                job.taken_tier = out.taken.tier if out.taken else None
                return ("passed" if out.passed else "failed"), f"taken from tier {job.taken_tier}"
            if attempts:
                job.emit("escalate", {"from": attempts[-1].tier, "to": batch[0],
                                      "why": "the gate checks failed on the cheaper tier"})
            for tier in batch:  # sequentially, even for a speculative batch: one run at a time per job
                refusal = self._may_run(job.session)
                if refusal:
                    return "refused", refusal
                result = await self._one_run(job, tier, len(attempts), batch_no)
                attempts.append(Attempt(tier, result.gate_passed, result.passed, result.cost_low,
                                        result.cost_high, result.elapsed_ms, result.run_id, batch_no))
                if result.status == "budget_stop":
                    return "refused", result.reason
            batch_no += 1

    def _may_run(self, sid: str) -> str | None:
        view = self.session_view(sid)
        if view.day_exhausted:
            return "the studio's budget for today is spent"
        if view.exhausted:
            return "this session's budget is spent"
        return None

    async def _one_run(self, job: Job, tier: str, step: int, batch: int):
        from ..agent import run_agent

        attempt = uuid.uuid4().hex
        t = self.tasks[job.task]
        self.journal.append("studio.run.start", {"exploratory": True, "session": job.session, "job": job.id,
                                                 "step": step, "tier": tier, "attempt": attempt,
                                                 "task": job.task, "profile": job.profile})
        self._runs_started[job.session] = self._runs_started.get(job.session, 0) + 1
        job.emit("run", {"step": step, "tier": tier})
        ctx = {"studio": self.journal_id, "exploratory": True, "session": job.session, "job": job.id,
               "policy": job.policy, "trial": job.id, "step": step, "batch": batch, "attempt": attempt}
        budget: CallBudget = self.budgets.for_run(job.session, attempt)
        store = _ObservedStore(self.store.root, lambda rec: self._observe(job, rec), fsync=self.store.fsync)
        cfg = self.config
        try:
            result = await run_agent(store=store, task=t, tier=self.catalog.tier(tier), catalog=self.catalog,
                                     profile=self.profiles[job.profile], seed=job.seed, provider=self.providers[tier],
                                     limits={"turns": cfg.turns, "seconds": cfg.seconds}, policy_context=ctx,
                                     ledger=budget, max_tokens=cfg.max_tokens)
        except BaseException:
            budget.settle_open("cancelled")
            self._journal_cut_off(job, tier, step, attempt, store.writer)
            raise
        body = self._run_body(job.session, job.id, step, tier, attempt, result.run_id, {
            "status": result.status, "passed": result.passed, "gate_passed": result.gate_passed,
            "cost": {"known": result.cost_low == result.cost_high, "low": fmt_usd(result.cost_low),
                     "high": fmt_usd(result.cost_high)}}, task=job.task, profile=job.profile)
        self.journal.append("studio.run", body)
        self._note_run(body)
        job.runs.append(body)
        job.emit("sealed", {"step": step, "tier": tier, "run_id": result.run_id})
        job.emit("budget", self.session_view(job.session).to_event())
        return result

    def _journal_cut_off(self, job: Job, tier: str, step: int, attempt: str, writer) -> None:
        """A run cancelled mid-way was sealed ``aborted`` by the agent; journal it. (A run
        the agent could not seal stays open: the next start's recovery seals and journals it.)"""
        run_id = writer.run_id if writer is not None else None
        if run_id is None and writer is not None and writer.path.exists():
            return
        end = self.store.read_run(run_id).end if run_id else {}
        body = self._run_body(job.session, job.id, step, tier, attempt, run_id, end, task=job.task,
                              profile=job.profile)
        self.journal.append("studio.run", body)
        self._note_run(body)

    @staticmethod
    def _run_body(session: str, job: str, step: int, tier: str, attempt: str, run_id: str | None, end: dict,
                  *, task: str = "", profile: str = "") -> dict:
        cost = end.get("cost") or {}
        return {"exploratory": True, "session": session, "job": job, "step": step, "tier": tier,
                "attempt": attempt, "run_id": run_id, "task": task, "profile": profile,
                "status": end.get("status", "aborted"), "passed": bool(end.get("passed")),
                "gate_passed": bool(end.get("gate_passed")),
                "cost": {"known": bool(cost.get("known", False)), "low": cost.get("low", "0"),
                         "high": cost.get("high", "0")}}

    def _observe(self, job: Job, rec: Record) -> None:
        """``on_append`` of a run's writer: must never raise into the agent."""
        try:
            ev = record_event(rec)
            if ev is not None:
                job.emit(*ev)
        except Exception:  # a live view is a convenience; the run's evidence is what counts
            log.exception("studio: could not turn a record into an event")

    def _end_job(self, job: Job, attempts: list[Attempt], status: str, detail: str) -> None:
        job.status, job.detail = status, detail
        try:
            self.journal.append("studio.job.end", {"exploratory": True, "session": job.session, "job": job.id,
                                                   "status": status, "detail": detail, "tier": job.taken_tier})
        except BenchClawError:
            log.exception("studio: could not journal the end of job %s", job.id)
        job.emit("done", {"status": status, "detail": detail, "tier": job.taken_tier,
                          "runs": [r["run_id"] for r in job.runs if r.get("run_id")],
                          "budget": self.session_view(job.session).to_event()})
