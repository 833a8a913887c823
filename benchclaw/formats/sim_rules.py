"""The built-in simulator's usage rules: pure, standard library only.

The simulator (``benchclaw.sim.engine``) and the offline verifier both import this module,
so the numbers a simulated reply reports and the numbers the verifier recomputes come from
one definition (docs/FORMAT.md §6, "Simulated usage"): the profile file's parser
(``parse_profiles``), the token rule (``sim_tokens``, ``prompt_tokens``), the seeded PRNG
streams (``digest``, ``Streams``), the reasoning draw (``reasoning_tokens``), the cache
split (``cache_split``), the task family a prompt belongs to (``detect_family``, for the
write effort) and the usage object in each tier's shape (``usage_raw``, ``reported``).
The verifier may not import ``benchclaw.sim`` (it is impure: solvers, servers), so
nothing here imports it either.
"""

from __future__ import annotations

import hashlib
import json
import math
import random
import re
import tomllib
from dataclasses import dataclass, field
from typing import Any, Mapping

from . import jsonio
from ..errors import FormatError

__all__ = ["Profile", "USAGE_SHAPES", "TURN_KINDS", "parse_profiles", "effort_for", "sim_tokens",
           "prompt_tokens", "digest", "Streams", "turn_noise", "FAMILY_CUES", "detect_family", "first_prompt",
           "reasoning_tokens", "cache_split", "cache_split_of", "usage_raw", "reported", "action_kinds"]

USAGE_SHAPES = ("openai", "cache_hit", "null_details", "cache_write")
TURN_KINDS = ("read", "write", "check", "finish")
_RATE_KEYS = ("skip_read", "invalid_json", "reasoning_only", "injection_susceptibility", "fix_after_check")
_PROFILE_KEYS = {"model", "description", "usage_shape", "base_latency_ms", "throughput_tps", "prefill_tps",
                 "cache", "reasoning", "skill", "mistakes", "max_fixes", "always_follow_injections",
                 *_RATE_KEYS}


# ----------------------------------------------------------------------------- profiles

@dataclass(frozen=True)
class Profile:
    """One simulated tier's behaviour. Rates are probabilities in [0, 1]."""

    name: str
    model: str
    usage_shape: str
    base_latency_ms: int
    throughput_tps: int
    prefill_tps: int
    cache_min_prefix: int
    cache_block: int
    cache_writes: bool
    reasoning: Mapping[str, tuple[float, float]]
    skill: Mapping[str, float]
    mistakes: Mapping[str, Mapping[str, float]] = field(default_factory=dict)
    skip_read: float = 0.0
    invalid_json: float = 0.0
    reasoning_only: float = 0.0
    injection_susceptibility: float = 0.0
    fix_after_check: float = 0.5
    max_fixes: int = 2
    always_follow_injections: bool = False
    description: str = ""

    def skill_for(self, family: str | None) -> float:
        return self.skill.get(family or "default", self.skill.get("default", 0.5))


def parse_profiles(data: bytes, where: str) -> tuple[dict[str, Profile], dict[str, float]]:
    """(profiles by name, family effort table) of a profiles file's bytes (format in
    docs/FORMAT.md, "Simulator profiles"). Raises ``FormatError`` naming ``where``, the
    profile and the field."""
    try:
        doc = tomllib.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, tomllib.TOMLDecodeError) as e:
        raise FormatError(f"{where}: not valid TOML: {e}") from None
    if doc.get("v") != 1:
        raise FormatError(f"{where}: v must be 1")
    raw = doc.get("profiles")
    if not isinstance(raw, dict) or not raw:
        raise FormatError(f"{where}: [profiles] must define at least one profile")
    effort = _float_table(doc.get("effort", {}), f"{where}: effort", low=0.0, high=100.0)
    profiles = {name: _profile(name, spec, f"{where}: profiles.{name}") for name, spec in raw.items()}
    return profiles, effort


def effort_for(effort: Mapping[str, float], family: str | None) -> float:
    """How much of a profile's ``reasoning.write`` a family's write needs."""
    return effort.get(family or "default", effort.get("default", 1.0))


def _num(spec: Mapping, key: str, w: str, *, low: float, high: float, default=None, integer=False):
    v = spec.get(key, default)
    if v is None:
        raise FormatError(f"{w}.{key}: missing")
    ok = isinstance(v, int) if integer else isinstance(v, (int, float))
    if isinstance(v, bool) or not ok or not (low <= v <= high):
        kind = "an integer" if integer else "a number"
        raise FormatError(f"{w}.{key}: expected {kind} in [{low}, {high}], got {v!r}")
    return v


def _float_table(t, w: str, *, low: float, high: float) -> dict[str, float]:
    if not isinstance(t, dict):
        raise FormatError(f"{w}: expected a table")
    return {k: float(_num(t, k, w, low=low, high=high)) for k in t}


def _reasoning(t, w: str) -> dict[str, tuple[float, float]]:
    if not isinstance(t, dict) or set(t) != set(TURN_KINDS):
        raise FormatError(f"{w}: expected a table with {', '.join(TURN_KINDS)}")
    out = {}
    for k, v in t.items():
        if (not isinstance(v, list) or len(v) != 2 or not all(isinstance(x, (int, float)) for x in v)
                or v[0] < 0 or not 0 <= v[1] <= 3):
            raise FormatError(f"{w}.{k}: expected [median tokens, sigma (0..3)]")
        out[k] = (float(v[0]), float(v[1]))
    return out


def _profile(name: str, spec, w: str) -> Profile:
    if not isinstance(spec, dict):
        raise FormatError(f"{w}: expected a table")
    extra = sorted(set(spec) - _PROFILE_KEYS)
    if extra:
        raise FormatError(f"{w}: unknown key(s) {', '.join(extra)}")
    if spec.get("usage_shape") not in USAGE_SHAPES:
        raise FormatError(f"{w}.usage_shape: expected one of {', '.join(USAGE_SHAPES)}")
    if not isinstance(spec.get("model"), str) or not spec["model"]:
        raise FormatError(f"{w}.model: expected a model id")
    cache = spec.get("cache", {})
    if not isinstance(cache, dict) or not isinstance(cache.get("writes", False), bool):
        raise FormatError(f"{w}.cache: expected {{min_prefix, block, writes}}")
    mistakes = spec.get("mistakes", {})
    if not isinstance(mistakes, dict):
        raise FormatError(f"{w}.mistakes: expected a table of families")
    always = spec.get("always_follow_injections", False)
    if not isinstance(always, bool):
        raise FormatError(f"{w}.always_follow_injections: expected true or false")
    return Profile(
        name=name, model=spec["model"], usage_shape=spec["usage_shape"], description=spec.get("description", ""),
        base_latency_ms=_num(spec, "base_latency_ms", w, low=0, high=600_000, integer=True),
        throughput_tps=_num(spec, "throughput_tps", w, low=1, high=10**7, integer=True),
        prefill_tps=_num(spec, "prefill_tps", w, low=1, high=10**9, integer=True),
        cache_min_prefix=_num(cache, "min_prefix", f"{w}.cache", low=0, high=10**9, default=1024, integer=True),
        cache_block=_num(cache, "block", f"{w}.cache", low=1, high=10**6, default=128, integer=True),
        cache_writes=cache.get("writes", False),
        reasoning=_reasoning(spec.get("reasoning"), f"{w}.reasoning"),
        skill=_float_table(spec.get("skill", {}), f"{w}.skill", low=0.0, high=1.0),
        mistakes={f: _float_table(t, f"{w}.mistakes.{f}", low=0.0, high=1e6) for f, t in mistakes.items()},
        max_fixes=_num(spec, "max_fixes", w, low=0, high=10, default=2, integer=True),
        always_follow_injections=always,
        **{k: float(_num(spec, k, w, low=0.0, high=1.0, default=0.0)) for k in _RATE_KEYS},
    )


# ----------------------------------------------------------------------------- tokens

def sim_tokens(text: str) -> int:
    """The simulator's token count: one per four characters, rounded up."""
    return (len(text) + 3) // 4


def prompt_tokens(messages) -> int:
    return 3 + sum(4 + sim_tokens(str(m.get("content") or "")) for m in messages)


# ----------------------------------------------------------------------------- randomness

def digest(*parts: Any) -> bytes:
    """SHA-256 of the canonical JSON array of ``parts``: the seed of a set of streams."""
    return hashlib.sha256(jsonio.dumps(list(parts))).digest()


class Streams:
    """Independent labelled PRNG streams derived from one digest: adding a stream never
    shifts another."""

    def __init__(self, base: bytes) -> None:
        self._base = base

    def rng(self, label: str) -> random.Random:
        return random.Random(int.from_bytes(hashlib.sha256(self._base + label.encode()).digest()[:8], "big"))


def turn_noise(seed: int, model: str, messages) -> random.Random:
    """The per-turn noise stream: its first draw (``gauss``) sets the reasoning tokens."""
    return Streams(digest(seed, model, messages)).rng("noise")


# ----------------------------------------------------------------------------- families

# The fixed phrases of each shipped task family's prompt; the first that matches names it.
FAMILY_CUES = {
    "quotes": re.compile(r"^Approved sources:", re.M),
    "cents": re.compile(r"\*\*Rounding rule:\*\*"),
    "pricing": re.compile(r"rule language", re.I),
    "sql": re.compile(r"SQLite migration"),
    "api": re.compile(r"contract test"),
}


def detect_family(prompt: str) -> str | None:
    """The task family a prompt belongs to, from its fixed phrases, or None."""
    for family, cue in FAMILY_CUES.items():
        if isinstance(prompt, str) and cue.search(prompt):
            return family
    return None


def first_prompt(messages) -> str | None:
    """The first user message's content as the simulator reads it (None: no user message)."""
    for m in messages:
        if m.get("role") == "user":
            return str(m.get("content") or "")
    return None


# ----------------------------------------------------------------------------- usage

def reasoning_tokens(profile: Profile, kind: str, effort: float, z: float) -> int:
    """A turn's reasoning: log-normal around ``reasoning[kind]``'s median times ``effort``,
    ``z`` the turn's first standard-normal draw."""
    median, sigma = profile.reasoning[kind]
    return max(0, int(round(median * effort * math.exp(sigma * z))))


def cache_split(profile: Profile, messages, prompt: int) -> tuple[int, int]:
    """(cached_read, cache_write): whole blocks of the prefix the previous request sent
    (all but the last two messages) are read from cache once long enough; a tier that
    writes caches writes the whole blocks of the rest."""
    return cache_split_of(profile, prompt_tokens(messages[:-2]) if len(messages) > 2 else 0, prompt)


def cache_split_of(profile: Profile, prefix: int, prompt: int) -> tuple[int, int]:
    """``cache_split`` from the prefix's token count (what the verifier keeps of a request)."""
    block = profile.cache_block
    cached = (prefix // block) * block if prefix >= profile.cache_min_prefix else 0
    cached = min(cached, prompt)
    written = 0
    if profile.cache_writes and prompt >= profile.cache_min_prefix:
        written = ((prompt - cached) // block) * block
    return cached, written


def usage_raw(shape: str, prompt: int, cached: int, written: int, completion: int, reasoning: int) -> dict:
    """The usage object in the tier's shape (the differing shapes real providers send)."""
    got = {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}
    got.update(_SHAPES[shape](prompt, cached, written, reasoning))
    return got


# Each shape's fields beside the three every shape has: (prompt, cached, written, reasoning) -> fields.
_SHAPES = {
    "openai": lambda prompt, cached, written, reasoning: {
        "prompt_tokens_details": {"cached_tokens": cached, "audio_tokens": 0},
        "completion_tokens_details": {"reasoning_tokens": reasoning, "audio_tokens": 0}},
    "cache_hit": lambda prompt, cached, written, reasoning: {
        "prompt_cache_hit_tokens": cached, "prompt_cache_miss_tokens": prompt - cached,
        "completion_tokens_details": {"reasoning_tokens": reasoning}},
    "null_details": lambda prompt, cached, written, reasoning: {
        "prompt_tokens_details": None, "completion_tokens_details": None},
    "cache_write": lambda prompt, cached, written, reasoning: {
        "prompt_tokens_details": {"cached_tokens": cached, "created_cache_tokens": written},
        "completion_tokens_details": {"reasoning_tokens": reasoning}},
}


def reported(shape: str) -> tuple[bool, bool, bool]:
    """Which of (cached_read, cache_write, reasoning) a usage shape tells a client."""
    return _REPORTED[shape]


_REPORTED = {"openai": (True, False, True), "cache_hit": (True, False, True),
             "null_details": (False, False, False), "cache_write": (True, True, True)}


_WRAPPED = re.compile(r"\ANext I will .*?\. Here is the action:\n```json\n(.*)\n```\Z", re.S)


def action_kinds(content: str) -> tuple[str, ...]:
    """The turn kinds whose reasoning a reply's content may follow. A reply names its
    action (as JSON, or in the simulator's prose wrapping); a planted lure's action is a
    ``read`` turn whatever it names, so ``read`` is always possible. Empty or unreadable
    content (reasoning only, cut off) says nothing: every kind."""
    m = _WRAPPED.match(content)
    try:
        obj = json.loads(m.group(1) if m else content)
    except (ValueError, RecursionError):
        return TURN_KINDS
    name = obj.get("action") if isinstance(obj, dict) else None
    if not isinstance(name, str):
        return TURN_KINDS
    return ("read",) if name in ("read",) or name not in TURN_KINDS else ("read", name)
