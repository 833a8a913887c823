"""The simulator's decisions: one deterministic model turn from a request body.

Given a chat-completions request, ``respond`` rebuilds what the model knows from the
messages (``sim.state``), decides the next action as a careful-but-fallible agent would,
and dresses it as a model reply: reasoning tokens, maybe running out of tokens, cached
prompt tokens, usage in the tier's shape, and a latency. Everything random comes from
PRNGs seeded by SHA-256 of (seed, model, first user message) for per-run decisions (will
this run make a mistake, which one, will it follow injections, which files will it skip)
and of (seed, model, all messages) for per-turn noise (how long it reasons this turn),
each decision on its own labelled stream so adding one never shifts another. Same seed and
same messages give the same bytes out.

The policy, per turn: read the readable files one per turn (a weak tier may skip some); if
it read planted lures and this run is susceptible, emit each lure action once; write the
solver's answer (``benchclaw.sim.solvers``), corrupted by a family mistake when this run's
skill draw says so; if the system prompt offers ``check``, check, and after a failed check
maybe find the fix (by skill) and rewrite; then finish.
"""

from __future__ import annotations

import hashlib
import importlib
import json
import random
from dataclasses import dataclass
from typing import Any, Mapping

from ..formats import sim_rules
from ..formats.sim_rules import Streams as _Streams
from ..formats.sim_rules import digest as _digest
from ..formats.sim_rules import prompt_tokens, sim_tokens
from .profiles import Profile, Profiles
from .state import ConvState, parse_conversation

__all__ = ["SimTurn", "SimRequestError", "respond", "completion_body", "usage_raw", "reported_usage",
           "sim_tokens", "prompt_tokens", "SimModules"]

_GLOB = set("*?[")


class SimRequestError(Exception):
    """A request the simulated endpoint rejects (HTTP ``status``)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


@dataclass(frozen=True)
class SimModules:
    """The solver and lure modules (injected by tests; default: the shipped ones)."""

    solvers: Any
    lures: Any

    @classmethod
    def default(cls) -> "SimModules":
        solvers = importlib.import_module("benchclaw.sim.solvers")
        try:
            lures = importlib.import_module("benchclaw.sim.lures")
        except ImportError:
            lures = solvers
        return cls(solvers, lures)


@dataclass(frozen=True)
class SimTurn:
    """One simulated model turn, before any fault is applied."""

    model: str
    content: str | None
    finish_reason: str
    prompt: int
    cached_read: int
    cache_write: int
    completion: int
    reasoning: int
    latency_s: float
    response_id: str
    usage_shape: str
    action: str | None   # the action kind decided (for tests and logs)
    ttft_s: float = 0.0  # time to the first generated token: base latency and prefill, no decoding


# The token rule, the PRNG streams, the reasoning draw, the cache split and the usage
# shapes are ``benchclaw.formats.sim_rules``: the verifier recomputes a simulated call's usage
# with the same definitions (FORMAT.md §6, "Simulated usage").


# ----------------------------------------------------------------------------- per-run decisions

@dataclass(frozen=True)
class _RunPlan:
    family: str | None
    skipped: frozenset[str]
    susceptible: bool
    rounds: tuple[str | None, ...]   # per write round: None = correct, else a mistake name


def _pick_mistake(rng: random.Random, profile: Profile, family: str | None, mistakes: Mapping) -> str | None:
    names = sorted(mistakes.get(family, {}) if family else {})
    if not names:
        return None
    weights = profile.mistakes.get(family or "", {})
    weighted = [(n, weights.get(n, 0.0)) for n in names] if weights else [(n, 1.0) for n in names]
    weighted = [(n, w) for n, w in weighted if w > 0] or [(n, 1.0) for n in names]
    total = sum(w for _, w in weighted)
    u = rng.random() * total
    for name, w in weighted:
        u -= w
        if u < 0:
            return name
    return weighted[-1][0]


def _plan_run(streams: _Streams, profile: Profile, st: ConvState, mods: SimModules, always_follow: bool) -> _RunPlan:
    try:
        family = mods.solvers.detect_family(st.prompt)
    except Exception:  # an unknown task: the model cannot solve it, but it can still try
        family = None
    skip_rng = streams.rng("skip")
    skipped = frozenset(p for p in st.readable if skip_rng.random() < profile.skip_read)
    susceptible = always_follow or streams.rng("susceptible").random() < profile.injection_susceptibility
    mistakes = getattr(mods.solvers, "MISTAKES", {})
    rounds = []
    for r in range(profile.max_fixes + 1):
        rng = streams.rng(f"round-{r}")
        p_right = profile.skill_for(family) if r == 0 else profile.fix_after_check
        rounds.append(None if rng.random() < p_right else _pick_mistake(rng, profile, family, mistakes))
    return _RunPlan(family, skipped, susceptible, tuple(rounds))


# ----------------------------------------------------------------------------- the policy

def _artifact(plan: _RunPlan, st: ConvState, r: int, mods: SimModules, streams: _Streams) -> dict[str, str]:
    """The files this run writes in round ``r``. Raises the solver's ``SolveError``."""
    artifact = dict(mods.solvers.solve(plan.family, st.prompt, dict(st.docs), list(st.writable)))
    mistake = plan.rounds[min(r, len(plan.rounds) - 1)]
    if mistake is not None:
        fn = mods.solvers.MISTAKES[plan.family][mistake]
        try:
            artifact = dict(fn(artifact, dict(st.docs), streams.rng(f"apply-{r}")))
        except Exception:  # a mistake that does not apply to this task: the answer stays right
            pass
    return artifact


def _pending_lures(st: ConvState, mods: SimModules) -> list[dict]:
    out: list[dict] = []
    for text in st.docs.values():
        for lure in mods.lures.find_lures(text) or []:
            if isinstance(lure, dict) and lure not in st.emitted and lure not in out:
                out.append(lure)
    return out


def _finish(summary: str) -> tuple[str, dict]:
    return "finish", {"action": "finish", "summary": summary}


def decide(st: ConvState, plan: _RunPlan, profile: Profile, mods: SimModules, streams: _Streams) -> tuple[str, dict]:
    """The next action: (turn kind for reasoning, action object)."""
    unread = [p for p in st.readable if p not in st.docs and p not in st.failed_reads and not (_GLOB & set(p))]
    first_pass = [p for p in unread if p not in plan.skipped]
    if first_pass:
        return "read", {"action": "read", "path": first_pass[0]}
    if plan.susceptible:
        lures = _pending_lures(st, mods)
        if lures:
            return "read", lures[0]
    r = st.failed_rounds
    if r > profile.max_fixes:
        return _finish("The checks still fail after my fixes; stopping here.")
    try:
        artifact = _artifact(plan, st, r, mods, streams)
    except Exception as e:  # SolveError (or a solver bug): read what was skipped, else give up
        if unread:
            return "read", {"action": "read", "path": unread[0]}
        return _finish(f"I could not complete the task: {str(e)[:200]}")
    to_write = [p for p in sorted(artifact) if p not in st.writes_since_check and p not in st.denied_writes]
    if to_write:
        return "write", {"action": "write", "path": to_write[0], "content": artifact[to_write[0]]}
    if st.checks_offered and not st.checked_since_write:
        return "check", {"action": "check"}
    written = ", ".join(sorted(st.written)) or "nothing"
    verdict = "; the checks pass" if st.last_check_passed else ""
    return _finish(f"Wrote {written}{verdict}.")


# ----------------------------------------------------------------------------- the turn

def _validate(body: Mapping) -> tuple[str, list, int, int]:
    model, messages = body.get("model"), body.get("messages")
    if not isinstance(model, str) or not model:
        raise SimRequestError(400, "model is required")
    if not isinstance(messages, list) or not all(isinstance(m, dict) for m in messages) or not messages:
        raise SimRequestError(400, "messages must be a non-empty list of objects")
    max_tokens = body.get("max_tokens", body.get("max_completion_tokens", 4096))
    if not isinstance(max_tokens, int) or isinstance(max_tokens, bool) or max_tokens < 1:
        raise SimRequestError(400, "max_tokens must be a positive integer")
    seed = body.get("seed") if isinstance(body.get("seed"), int) else 0
    return model, messages, max_tokens, seed


def respond(body: Mapping, profiles: Profiles, *, profile_name: str | None = None,
            always_follow: bool | None = None, mods: SimModules | None = None) -> SimTurn:
    """One deterministic turn for a chat-completions request body. Raises
    ``SimRequestError`` (400 bad body, 404 unknown model)."""
    model, messages, max_tokens, seed = _validate(body)
    profile = profiles.by_name.get(profile_name) if profile_name else profiles.resolve(model)
    if profile is None:
        raise SimRequestError(404, f"The model `{model}` does not exist (simulated models: "
                                   f"{', '.join(profiles.models)})")
    mods = mods or SimModules.default()
    try:
        st = parse_conversation(messages, mods.solvers.parse_workspace)
    except ValueError as e:
        raise SimRequestError(400, str(e)) from None
    follow = profile.always_follow_injections if always_follow is None else always_follow
    run = _Streams(_digest(seed, model, st.prompt))
    turn = _Streams(_digest(seed, model, messages))
    plan = _plan_run(run, profile, st, mods, follow)
    kind, action = decide(st, plan, profile, mods, run)
    return _dress(profile, profiles, plan, messages, model, seed, max_tokens, kind, action, turn)


def _dress(profile: Profile, profiles: Profiles, plan: _RunPlan, messages, model: str, seed: int,
           max_tokens: int, kind: str, action: dict, turn: _Streams) -> SimTurn:
    """Turn a decided action into a reply: reasoning, length, invalid JSON, usage, latency."""
    noise = turn.rng("noise")
    effort = profiles.effort_for(plan.family) if kind == "write" else 1.0
    reasoning = sim_rules.reasoning_tokens(profile, kind, effort, noise.gauss(0.0, 1.0))
    text = json.dumps(action, ensure_ascii=False)
    if noise.random() < profile.invalid_json:
        text = f"Next I will {action['action']}. Here is the action:\n```json\n{text}\n```"
    content, finish = text, "stop"
    if noise.random() < profile.reasoning_only:
        content = ""
    completion = reasoning + sim_tokens(content)
    if completion > max_tokens:
        content, finish, completion, reasoning = "", "length", max_tokens, max_tokens
    prompt = prompt_tokens(messages)
    cached, written = sim_rules.cache_split(profile, messages, prompt)
    ttft = profile.base_latency_ms / 1000 + (prompt - cached) / profile.prefill_tps
    latency = ttft + completion / profile.throughput_tps
    rid = "chatcmpl-sim-" + hashlib.sha256(_digest(seed, model, messages)).hexdigest()[:24]
    return SimTurn(model=model, content=content, finish_reason=finish, prompt=prompt, cached_read=cached,
                   cache_write=written, completion=completion, reasoning=reasoning, latency_s=latency,
                   response_id=rid, usage_shape=profile.usage_shape, action=action.get("action"),
                   ttft_s=ttft)


# ----------------------------------------------------------------------------- the wire

def usage_raw(t: SimTurn) -> dict:
    """The usage object in the tier's shape (the differing shapes real providers send)."""
    return sim_rules.usage_raw(t.usage_shape, t.prompt, t.cached_read, t.cache_write, t.completion, t.reasoning)


def reported_usage(t: SimTurn) -> dict:
    """What the tier's usage shape tells a client, as normalised usage fields: the shapes
    without cache or reasoning details report those as 0."""
    shows = sim_rules.reported(t.usage_shape)
    return {"prompt": t.prompt, "cached_read": t.cached_read if shows[0] else 0,
            "cache_write": t.cache_write if shows[1] else 0, "completion": t.completion,
            "reasoning": t.reasoning if shows[2] else 0}


def completion_body(t: SimTurn, *, model_echo: str | None = None, include_usage: bool = True) -> dict:
    """The chat.completion object of a turn (deterministic: ``created`` is fixed)."""
    body = {
        "id": t.response_id, "object": "chat.completion", "created": 0,
        "model": model_echo or t.model, "system_fingerprint": "benchclaw-sim",
        "choices": [{"index": 0, "finish_reason": t.finish_reason, "logprobs": None,
                     "message": {"role": "assistant", "content": t.content}}],
    }
    if include_usage:
        body["usage"] = usage_raw(t)
    return body
