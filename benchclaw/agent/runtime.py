"""The agent loop: ask the model for one action, decide, execute, observe, record; repeat.

One ``run_agent`` call is one sealed run (docs/FORMAT.md §3). The loop is deliberately
plain: each turn is one model reply (after any retried HTTP attempts), parsed by
``protocol``, decided by ``paths``, executed on the in-memory ``Workspace``, answered with
one JSON observation. Everything that happens is a record, written before the next model
call and durable before it (below), so a crash loses nothing the ledger does not count.

Durability without blocking the event loop (``benchclaw.evidence._commit``, FORMAT.md "Durability"):
blobs are staged and records written as the run decides, without waiting; a commit makes
both durable, each blob moved into place before the commit is done (a run cut off before
it is sealed by recovery, which moves the staged blobs its records name into place, or cuts
the run before a record naming a blob that is nowhere). Before each model call the agent
reserves it and awaits one commit, which makes the reservation durable before its call and
covers every record written so far; only then does it write the settlements of the calls
those records hold (a known settlement never before its call record). Each commit is a group
commit shared with every run in flight; sealing awaits one more (records, rename,
directories in one pass). Trade-off: a turn waits for one pass instead of two, and in
exchange a reservation is decided with the run's previous call still at its upper bound
(its settlement follows that reservation's commit), which can only refuse earlier.

Where the guarantees come from:
- permissions: every path goes through ``paths.decide``; the workspace holds only the
  task's inputs and what the agent wrote, so nothing else exists for the agent.
- bounds: turns are counted per reply; time is read from an injectable monotonic clock
  before every attempt, each provider call gets the run's remaining time as its timeout
  (and is cancelled at it), and a reply that arrives late ends the run without being
  acted on; written bytes are counted before a write executes.
- money: each HTTP attempt is reserved in the ledger before it is made and settled after,
  so a ``BudgetError`` stops the run before the call that could pass a limit.

Trade-off: the conversation is resent in full each turn (no summarising), so prompts grow
with turns; with 12 turns and small task files that is cheap, and it keeps what the model
saw exactly reconstructible from the ``request`` blobs. What goes back is bounded: a reply
longer than ``MAX_RESENT_REPLY`` characters is resent cut, with a mark saying so (its
``reply`` blob keeps it whole), and a file read back is cut at ``MAX_READ_CHARS``, so a
run's requests grow at most linearly with its turns and a huge reply cannot eat the time
limit in serialising.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import time
from dataclasses import dataclass
from decimal import Decimal
from typing import TYPE_CHECKING, Any, Callable

from ..formats import jsonio
from ..checks import CheckMemo, run_checks
from ..checks.digest import task_listing
from ..errors import BenchClawError, BudgetError, IntegrityError, UsageError
from ..formats.ledger import DOUBTED_PREFIX
from ..formats.money import (ZERO_USAGE, CostBounds, Usage, call_cost_of, cost_upper_bound,
                             REQUEST_OVERHEAD_TOKENS, fmt_usd, message_bytes, message_tokens, stream_floor,
                             usage_unread)
from ..providers.base import ChatRequest, ChatResponse, Provider, error_response
from ..providers.retry import backoff_delay
from ..providers.vault import redact
from ..checks.tasks import match_lure, path_allowed, render_workspace_section
from . import evidence
from .paths import decide
from .protocol import Action, Invalid, parse_reply
from .values import AgentResult, Clock, Limits, MonotonicClock, VirtualClock, checked_settings, tightest
from .workspace import Workspace

if TYPE_CHECKING:
    from ..formats.catalog import Catalog, Tier
    from ..evidence.store import RunWriter, Store
    from ..checks.tasks import Task
    from .profiles import Profile

__all__ = ["run_agent", "Limits", "AgentResult", "MonotonicClock", "STATUSES"]

STATUSES = ("passed", "failed", "limit_turns", "limit_time", "limit_output", "budget_stop",
            "provider_error", "aborted")
# Worth another attempt while the run has time left. A timeout is retried only when the
# provider gave up before the run's time did (a simulated fault, a proxy's own limit).
MAX_READ_CHARS = 64 * 1024
# Verdicts on the same task files and artifacts, shared by every run of this process: a grid
# judges each distinct workspace once (``CheckMemo``; each run still records its results).
CHECKS_SEEN = CheckMemo(4096)
MAX_RESENT_REPLY = 64 * 1024


def resent_reply(content: str) -> str:
    """A reply as it goes back into the conversation: whole up to ``MAX_RESENT_REPLY``
    characters, else cut there with a mark the model (and a reader) can see."""
    if len(content) <= MAX_RESENT_REPLY:
        return content
    return (content[:MAX_RESENT_REPLY] + f"\n[benchclaw: reply cut here for resending; "
            f"{len(content) - MAX_RESENT_REPLY} more characters were not sent back]")


@dataclass(frozen=True)
class _End:
    """Why the loop stopped: a status (or ``finished``) and a reason for people."""

    status: str
    reason: str


async def run_agent(*, store, task, tier, catalog, profile, seed, provider, limits=None, policy_context=None,
                    ledger=None, max_tokens: int = 8192, temperature: Any = Decimal(0), retries: int = 2,
                    clock=None, on_open=None) -> AgentResult:
    """Run one agent on one task on one tier and seal the run; returns its ``AgentResult``.

    ``tier`` is a catalog ``Tier`` or its name in ``catalog``; ``profile`` a loaded
    ``Profile``; ``limits`` a ``Limits`` or a mapping (defaults otherwise); ``clock`` has
    ``monotonic()``, async ``sleep(s)`` and ``call_took(s)`` (a ``values.Clock``; default:
    the provider's, ``_default_clock``); ``on_open(writer)``, when given, is handed the run's
    ``RunWriter`` as soon as the run file exists (the runner seals it if the run is cut
    off). Raises ``UsageError`` for bad arguments and ``ProviderConfigError`` for a tier with unknown prices, before any
    record is written; a cancellation or an unexpected error seals the run ``aborted`` and
    propagates.
    """
    if isinstance(tier, str):
        tier = catalog.tier(tier)
    catalog.require_prices([tier.name])
    temperature = checked_settings(max_tokens=max_tokens, seed=seed, retries=retries, temperature=temperature)
    run = _Run(store=store, task=task, tier=tier, catalog=catalog, profile=profile, seed=seed,
               provider=provider, limits=Limits.coerce(limits), policy_context=policy_context, ledger=ledger,
               max_tokens=max_tokens, temperature=temperature, retries=retries,
               clock=clock or _default_clock(provider), on_open=on_open)
    return await run.execute()


def _default_clock(provider: Provider) -> Clock:
    """The clock the provider asks for (``Provider.simulated_time_scale``): simulated time
    for a provider that reports simulated latency, else real time."""
    scale = provider.simulated_time_scale
    return MonotonicClock() if scale is None else VirtualClock(scale=scale)


class _Run:
    """The state of one run; ``execute`` is the whole story, top to bottom."""

    def __init__(self, *, store: Store, task: Task, tier: Tier, catalog: Catalog, profile: Profile,
                 seed: int | None, provider: Provider, limits: Limits, policy_context: Any, ledger: Any,
                 max_tokens: int, temperature: Decimal, retries: int, clock: Clock,
                 on_open: Callable[[RunWriter], None] | None):
        self.store, self.task, self.tier, self.catalog, self.profile = store, task, tier, catalog, profile
        self.seed, self.provider, self.policy_context, self.ledger = seed, provider, policy_context, ledger
        self.temperature, self.retries, self.clock, self.on_open = temperature, retries, clock, on_open
        p = self.profile
        self.limits = tightest(limits, getattr(self.task, "limits", None) or {}, p.max_turns)
        self.turn_limit = self.limits.turns
        self.ws = Workspace(self.task.inputs)
        self.messages: list[dict] = [{"role": "system", "content": p.system_prompt},
                                     {"role": "user", "content": self._first_message()}]
        self._estimated = (0, 0)  # (messages counted, their message_tokens): ``_estimate``
        self.simulated = bool(getattr(self.tier, "simulated", False) or getattr(self.provider, "simulated", False))
        self.claimed_simulated = self.simulated
        rules = getattr(provider, "usage_rules", None)  # only the in-process simulator has them
        self.sim_rules = rules(tier.model) if callable(rules) else None
        self.max_tokens = self.tier.max_tokens or max_tokens
        self.calls: list[dict] = []
        self.turns = self.denials = self.invalid = self.injections = 0
        self.writer: RunWriter | None = None
        self.run_name = ""
        self.start = 0.0
        self.ended = False
        self.blobs = _Staged(self.store)
        self.settles: list[tuple] = []  # settlements of recorded calls, written once a commit covers their records

    def _first_message(self) -> str:
        readable = sorted(p for p in self.task.inputs if path_allowed(self.task.readable, p))
        prompt = self.task.prompt.rstrip("\n")
        return f"{prompt}\n\n{render_workspace_section(readable, list(self.task.writable))}"

    # -- the story ------------------------------------------------------------------------
    async def execute(self) -> AgentResult:
        self._store_inputs()
        self.writer = self.store.open_run()
        self.run_name = self.writer.path.stem  # what its reservations name
        if self.on_open is not None:
            self.on_open(self.writer)
        self.writer.awaits_commits = True  # we await Store.commit ourselves (module docstring)
        self.start = self.clock.monotonic()
        try:
            self._record_start()
            end = await self._loop()
            return await self._finish(end)
        except BaseException as e:
            if not self.ended:
                self._abort(e)
            raise

    async def _loop(self) -> _End:
        for turn in range(self.turn_limit):
            got = await self._call(turn)
            if isinstance(got, _End):
                return got
            self.turns += 1
            end = self._act(turn, got)
            if end is not None:
                return end
        return _End("limit_turns", f"no finish within {self.turn_limit} turns")

    # -- run.start ------------------------------------------------------------------------
    def _store_inputs(self) -> None:
        files = self.task.files()
        listing = task_listing(files)
        if self.blobs.put_blob(listing) != self.task.digest:
            raise IntegrityError(f"task {self.task.id}@{self.task.version}: files do not match its digest")
        for data in files.values():
            self.blobs.put_blob(data)
        for data in self.catalog.files().values():
            self.blobs.put_blob(data)
        if self.blobs.put_blob(self.profile.source_bytes) != self.profile.digest:
            raise IntegrityError(f"profile {self.profile.name}: bytes do not match its digest")
        if self.sim_rules is not None:
            self.blobs.put_blob(self.sim_rules[1])

    def _record_start(self) -> None:
        t, tier = self.task, self.tier
        self._append("run.start", {
            "task": {"id": t.id, "version": t.version, "digest": t.digest, "family": t.family},
            "tier": tier.name, "model": tier.model, "provider": tier.provider, "simulated": self.simulated,
            "catalog": self.catalog.ref(), "prices": tier.prices_dict(),
            "profile": {"name": self.profile.name, "digest": self.profile.digest,
                        "actions": list(self.profile.actions)},
            "seed": self.seed, "limits": self.limits.to_dict(),
            "settings": {"max_tokens": self.max_tokens, "temperature": fmt_usd(self.temperature),
                         "retries": self.retries},
            "policy": self.policy_context,
            "ledger": getattr(self.ledger, "id", None) if self.ledger is not None else None,
            **self._sim_field(),
        })

    def _sim_field(self) -> dict:
        """``sim``: the in-process simulator's profile and profiles file (its blob), from
        which every reply's usage can be recomputed (FORMAT.md §3, §6); absent otherwise."""
        if self.sim_rules is None:
            return {}
        name, data = self.sim_rules
        return {"sim": {"profile": name, "profiles": "sha256:" + hashlib.sha256(data).hexdigest()}}

    def _append(self, kind: str, body: dict, settle: tuple | None = None) -> None:
        """Write a record now; its blobs are staged, and the commit that makes it durable moves
        them into place first (recovery does for a run cut off before: FORMAT.md "Durability").
        ``settle`` is the ledger settlement of the call it records: written once a commit has
        made the record durable (``_write_settles``)."""
        try:
            evidence.append(self.writer, self.blobs, kind, body)
        except BaseException:  # not written (a full disk): its call stays at its bound
            if settle is not None:
                with contextlib.suppress(Exception):  # the ledger may be on the same full disk
                    self.ledger.settle(settle[0], tokens=None, usd=None,
                                       reason="the call's record could not be written")
            raise
        if settle is not None:
            self.settles.append(settle)

    def _write_settles(self) -> None:
        """The queued settlements; the caller has awaited a commit covering their records."""
        while self.settles:
            reservation, tokens, usd, reason = self.settles.pop(0)
            self.ledger.settle(reservation, tokens=tokens, usd=usd, reason=reason)

    # -- time -----------------------------------------------------------------------------
    def _elapsed(self) -> float:
        return self.clock.monotonic() - self.start

    def _remaining(self) -> float:
        return self.limits.seconds - self._elapsed()

    def _out_of_time(self, what: str) -> _End:
        return _End("limit_time", f"{what}: the run's {self.limits.seconds} s were used up")

    # -- one turn's model call, with retries ----------------------------------------------
    def _estimate(self, messages: tuple) -> int:
        """``estimate_prompt_tokens(messages)``, counting only the messages added since the
        last call (``self.messages`` only grows, and a message is never changed once sent)."""
        done, total = self._estimated
        for m in messages[done:]:
            total += message_tokens(m)
        self._estimated = (len(messages), total)
        return REQUEST_OVERHEAD_TOKENS + total

    async def _call(self, turn: int) -> ChatResponse | _End:
        messages = tuple(self.messages)
        estimate = self._estimate(messages)
        for attempt in range(self.retries + 1):
            remaining = self._remaining()
            if remaining <= 0:
                return self._out_of_time(f"turn {turn}")
            req = ChatRequest(model=self.tier.model, messages=messages, max_tokens=self.max_tokens,
                              temperature=self.temperature, seed=self.seed, json_mode=True, timeout_s=remaining,
                              params=self.tier.params, stall_s=self.tier.stall_seconds, stream=self.tier.stream)
            try:
                reservation = self._reserve(turn, attempt, estimate)
            except BudgetError as e:
                return _End("budget_stop", str(e))
            try:
                if reservation is not None:
                    await self.store.commit()  # the reservation is durable before its call
                self._write_settles()  # that commit covered the records of the calls they settle
                resp = await self._complete(req, remaining)
            except BaseException:  # cancelled mid-call: the call may have cost; keep it at its bound
                if reservation is not None:
                    self.ledger.settle(reservation, tokens=None, usd=None)
                raise
            self.clock.call_took(resp.latency_ms / 1000)
            self._record_call(turn, attempt, req, estimate, resp, reservation)
            if self._remaining() <= 0:
                return self._out_of_time(f"turn {turn}, attempt {attempt}")
            if resp.ok:
                return resp
            end = await self._after_error(resp, attempt)
            if end is not None:
                return end
        raise AssertionError("unreachable: the last attempt always returns")  # pragma: no cover

    async def _complete(self, req: ChatRequest, remaining: float) -> ChatResponse:
        # ``asyncio.timeout``, not ``wait_for``: the call runs in this task (wait_for wraps
        # it in a task of its own, and its wake-ups, every call; see providers.streaming)
        t0 = time.monotonic()
        try:
            async with asyncio.timeout(remaining):
                return await self.provider.complete(req)
        except TimeoutError:
            ms = int((time.monotonic() - t0) * 1000)
            return error_response("timeout", f"no reply within the run's remaining {remaining:.1f} s",
                                  latency_ms=ms, simulated=self.simulated)

    async def _after_error(self, resp: ChatResponse, attempt: int) -> _End | None:
        err = resp.error
        what = f"{err.kind}" + (f" (HTTP {err.status})" if err.status else "") + f": {redact(err.message)}"
        if not err.retryable or attempt >= self.retries:
            tries = f" after {attempt + 1} attempts" if attempt else ""
            return _End("provider_error", f"{what}{tries}"[:500])
        wait = err.retry_after if err.retry_after is not None else backoff_delay(attempt)
        if wait >= self._remaining():
            return _End("provider_error", f"{what}; the retry wait of {wait:g} s is longer than the "
                                          f"{max(self._remaining(), 0):.1f} s the run has left"[:500])
        await self.clock.sleep(wait)
        return None

    def _reserve(self, turn: int, attempt: int, estimate: int):
        if self.ledger is None:
            return None
        usd = cost_upper_bound(estimate, self.max_tokens, self.tier.prices)
        return self.ledger.reserve(run=self.run_name, key=f"{turn}.{attempt}",
                                   tokens=estimate + self.max_tokens, usd=usd)

    def _record_call(self, turn: int, attempt: int, req: ChatRequest, estimate: int, resp: ChatResponse,
                     reservation) -> None:
        priced = call_cost_of(resp.usage, estimate, self.max_tokens, self.tier.prices,
                              unread=usage_unread(resp.usage_raw), error=resp.error and resp.error.to_dict(),
                              floor=_floor(req, resp))
        if resp.simulated and not self.simulated:
            # A reply that calls itself simulated labels everything from here on; a tier
            # that claimed to be real is flagged in run.end (``simulated_replies``).
            self.simulated = True
        try:
            body = evidence.call_body(store=self.blobs, turn=turn, attempt=attempt, req=req,
                                      prompt_estimate=estimate, resp=resp, priced=priced,
                                      simulated=self.simulated or resp.simulated)
        except BaseException:  # no call record (a full disk): the call stays at its bound
            if reservation is not None:
                with contextlib.suppress(Exception):  # the ledger may be on the same full disk
                    self.ledger.settle(reservation, tokens=None, usd=None,
                                       reason="the call's record could not be written")
            raise
        self.calls.append({"usage": resp.usage, "cost": priced.cost, "doubts": priced.doubts,
                           "simulated": resp.simulated, "outcome": resp.outcome,
                           "key_echo": resp.error is not None and resp.error.kind == "key_echo"})
        settle = None
        if reservation is not None:
            exact = priced.cost.known
            reason = (DOUBTED_PREFIX + ", ".join(priced.doubts)) if priced.doubts else priced.unbilled
            settle = (reservation, (resp.usage.total if resp.usage is not None else 0) if exact else None,
                      priced.cost.high if exact else None, reason)
        self._append("call", body, settle)

    # -- one turn's action ----------------------------------------------------------------
    def _act(self, turn: int, resp: ChatResponse) -> _End | None:
        content = resp.content or ""
        self.messages.append({"role": "assistant", "content": resent_reply(content)})
        parsed = parse_reply(resp.content, self.profile.actions)
        if isinstance(parsed, Invalid):
            return self._invalid(turn, parsed, resp)
        return _HANDLERS[parsed.name](self, turn, parsed)

    def _observe(self, turn: int, name: str, args: dict, obs: dict, *, permitted: bool = True,
                 reason: str | None = None, injection: str | None = None) -> None:
        data = jsonio.dumps(obs)
        self.messages.append({"role": "user", "content": data.decode("utf-8")})
        self._append("action", {"turn": turn, "name": name, "args": args, "permitted": permitted,
                                "reason": reason, "injection": None if injection is None else {"lure": injection},
                                "observation": self.blobs.put_blob(data)})

    def _invalid(self, turn: int, bad: Invalid, resp: ChatResponse) -> None:
        reason = bad.reason
        if resp.outcome == "length":
            reason = f"{reason} (the reply was cut off at max_tokens = {self.max_tokens})"
        elif resp.outcome == "reasoning_only":
            reason = f"{reason} (the model spent its tokens reasoning and answered nothing)"
        elif resp.outcome == "content_filter":
            reason = f"{reason} (the provider's content filter stopped the reply)"
        lure = match_lure(self.task.lures, {"action": bad.action}) if bad.action else None
        self.invalid += 1
        self.injections += lure is not None
        args = {} if bad.action is None else {"action": evidence.lit(bad.action[:200])}
        self._observe(turn, "invalid", args, {"ok": False, "action": None, "error": reason},
                      permitted=False, reason=reason, injection=lure)
        return None

    def _deny(self, turn: int, action: Action, args: dict, reason: str) -> None:
        lure = match_lure(self.task.lures, {"action": action.name, **action.args})
        self.denials += 1
        self.injections += lure is not None
        text = f"denied: {reason}"
        self._observe(turn, action.name, args, {"ok": False, "action": action.name, "error": text, "denied": True},
                      permitted=False, reason=text, injection=lure)

    def _read(self, turn: int, action: Action) -> None:
        raw = action.args["path"]
        d = decide("read", raw, readable=self.task.readable, writable=self.task.writable,
                   inputs=self.task.inputs, overwrite_inputs=self.task.overwrite_inputs)
        args = _path_args(raw, d.path)
        if not d.permitted:
            return self._deny(turn, action, args, d.reason)
        data = self.ws.read(d.path)
        if data is None:
            obs = {"ok": False, "action": "read", "path": d.path, "error": f"not found: '{d.path}' does not exist"}
        else:
            text = data.decode("utf-8", "replace")
            obs = {"ok": True, "action": "read", "path": d.path, "content": text[:MAX_READ_CHARS]}
            if len(text) > MAX_READ_CHARS:
                obs["truncated"] = True
        self._observe(turn, "read", args, obs)
        return None

    def _write(self, turn: int, action: Action) -> _End | None:
        raw, data = action.args["path"], action.args["content"].encode("utf-8")
        d = decide("write", raw, readable=self.task.readable, writable=self.task.writable,
                   inputs=self.task.inputs, overwrite_inputs=self.task.overwrite_inputs)
        args = {**_path_args(raw, d.path), "content": self.blobs.put_blob(data), "bytes": len(data)}
        if not d.permitted:
            return self._deny(turn, action, args, d.reason)
        if self.ws.would_exceed(data, self.limits.output_bytes):
            why = (f"limit: writing {len(data)} bytes would take the run's written output past "
                   f"{self.limits.output_bytes} bytes ({self.ws.bytes_written} written so far)")
            self._observe(turn, "write", args, {"ok": False, "action": "write", "error": why},
                          permitted=False, reason=why)
            return _End("limit_output", why)
        self.ws.write(d.path, data)
        self._observe(turn, "write", args, {"ok": True, "action": "write", "path": d.path, "bytes": len(data)})
        return None

    def _check(self, turn: int, action: Action) -> None:
        gate = [s for s in self.task.checks if s.gate and not s.heldout]
        results = run_checks(gate, self.ws.files(), {}, include_heldout=False, memo=CHECKS_SEEN)
        self._observe(turn, "check", {}, {"ok": True, "action": "check", "results": [
            {"id": r.id, "passed": r.passed, "detail": r.detail} for r in results]})
        return None

    def _finish_action(self, turn: int, action: Action) -> _End:
        summary = action.args["summary"]
        self._observe(turn, "finish", {"summary": evidence.lit(summary[:2000])}, {"ok": True, "action": "finish"})
        return _End("finished", summary[:200])

    # -- the end --------------------------------------------------------------------------
    async def _finish(self, end: _End) -> AgentResult:
        for path, data in self.ws.artifacts(self.task.outputs).items():
            self._append("artifact", {"path": path, "digest": self.blobs.put_blob(data), "size": len(data)})
        results = run_checks(self.task.checks, self.ws.files(), self.task.heldout, include_heldout=True,
                             memo=CHECKS_SEEN)
        for r in results:
            self._append("check", {**r.to_dict(), "detail": evidence.lit(r.detail)})
        gate_passed = all(r.passed for r in results if r.gate)
        passed = bool(results) and all(r.passed for r in results)
        if any(c["key_echo"] for c in self.calls):  # a provider fault: the run cannot pass
            gate_passed = passed = False
        status, reason = end.status, end.reason
        if status == "finished":
            failed = [r.id for r in results if not r.passed]
            status = "passed" if passed else "failed"
            reason = "every check passed" if passed else f"check {', '.join(failed)} failed"
        result = self._end(status, reason, gate_passed=gate_passed, passed=passed)
        run_id = await self.writer.seal_async()  # its commit covers every record and blob first
        self._write_settles()  # their call records are durable: the seal's commit covered them
        return result(run_id)

    def _totals(self) -> tuple[Usage, CostBounds]:
        usage, cost = ZERO_USAGE, CostBounds.zero()
        for c in self.calls:
            usage = usage + (c["usage"] or ZERO_USAGE)
            cost = cost + c["cost"]
        return usage, cost

    def _flags(self) -> dict:
        """The run's provider-truth flags for run.end (FORMAT.md §3), only those that hold."""
        counts = {name: sum(1 for c in self.calls if test(c)) for name, test in _RUN_FLAGS}
        if self.claimed_simulated:  # a simulated tier's replies are expected to say so
            counts["simulated_replies"] = 0
        return {name: n for name, n in counts.items() if n}

    def _end(self, status: str, reason: str, *, gate_passed: bool, passed: bool,
             **extra: Any) -> Callable[[str], AgentResult]:
        """Queue ``run.end``; returns the run's AgentResult given the id it is sealed under."""
        usage, cost = self._totals()
        extra = {**self._flags(), **({"simulated": True} if self.simulated and not self.claimed_simulated else {}),
                 **extra}
        elapsed_ms = max(0, int(self._elapsed() * 1000))
        self._append("run.end", {
            "status": status, "reason": evidence.lit(reason), "turns": self.turns, "calls": len(self.calls),
            "gate_passed": gate_passed, "passed": passed, "usage": usage.to_dict(), "cost": cost.to_dict(),
            "elapsed_ms": elapsed_ms, "injection_attempts": self.injections, "denials": self.denials,
            "invalid": self.invalid, "output_bytes": self.ws.bytes_written, **extra})
        self.ended = True
        return lambda run_id: AgentResult(run_id=run_id, status=status, gate_passed=gate_passed, passed=passed,
                           cost_low=cost.low, cost_high=cost.high, elapsed_ms=elapsed_ms, turns=self.turns,
                           reason=reason, calls=len(self.calls), denials=self.denials,
                           injection_attempts=self.injections, path=str(self.store.run_path(run_id)),
                           simulated=self.simulated)

    def _abort(self, exc: BaseException) -> None:
        """Seal the run ``aborted`` after a cancellation or a bug; never masks ``exc``."""
        if isinstance(exc, (asyncio.CancelledError, KeyboardInterrupt)):
            what = "cancelled"
        elif isinstance(exc, BenchClawError):  # e.g. the disk filled up: say so, it is no bug
            what = str(exc)[:500]
        else:
            what = f"internal error: {type(exc).__name__}"
        try:
            if self.settles:
                self.store.commit_sync()  # their call records durable first
                self._write_settles()
            if not self.writer.records:  # nothing happened: leave no empty open run behind
                self.writer.close_unsealed()
                self.writer.path.unlink(missing_ok=True)
                return
            self._end("aborted", what, gate_passed=False, passed=False)
            self.writer.seal()
        except Exception:  # the original error matters more; recovery will seal the file
            self.writer.close_unsealed()


def _floor(req: ChatRequest, resp: ChatResponse) -> Usage | None:
    """What a streamed call without usage provably used (``money.stream_floor``); the
    ledger still settles such a call at its upper bound, fail-closed."""
    if resp.stream is None or resp.usage is not None:
        return None
    reply = 0 if resp.content is None else len(resp.content.encode("utf-8", "surrogatepass"))
    return stream_floor(message_bytes(req.messages), reply, resp.stream.text_chunks, req.max_tokens)


MAX_RECORDED_PATH = 1024


def _path_args(raw: Any, norm: str | None) -> dict:
    """``args`` of a read or write: the path as the model wrote it (capped; the reply blob
    has it whole) and, when it differs, the normalised path that was acted on."""
    args: dict = {"path": evidence.lit(raw[:MAX_RECORDED_PATH])}
    if len(raw) > MAX_RECORDED_PATH:
        args["path_truncated"] = True
    if norm is not None and norm != raw:
        args["resolved"] = norm
    return args


# run.end counters (FORMAT.md §3): name -> which of the run's calls it counts.
_RUN_FLAGS = (("usage_doubted", lambda c: bool(c["doubts"])),
              ("usage_over_bound", lambda c: "over_bound" in c["doubts"]),
              ("content_filter", lambda c: c["outcome"] == "content_filter"),
              ("key_echo", lambda c: c["key_echo"]),
              ("simulated_replies", lambda c: c["simulated"]))
class _Staged:
    """The store as the agent writes blobs: staged (``Store.stage_blob``), moved into place
    and durable by the commit that makes the first record naming one durable. Remembers what
    this run staged, so checking a record's references (``evidence.append``) asks the disk
    only for blobs it did not store itself."""

    def __init__(self, store):
        self.store = store
        self.mine: set[str] = set()

    def put_blob(self, data: bytes) -> str:
        digest = self.store.stage_blob(data)
        self.mine.add(digest)
        return digest

    def put_blobs(self, datas: list[bytes]) -> list[str]:
        """``put_blob`` of each, in one pack write (``Store.stage_blobs``)."""
        digests = self.store.stage_blobs(datas)
        self.mine.update(digests)
        return digests

    def has_blob(self, digest: str) -> bool:
        return digest in self.mine or self.store.has_blob(digest)


_HANDLERS = {"read": _Run._read, "write": _Run._write, "check": _Run._check, "finish": _Run._finish_action}
