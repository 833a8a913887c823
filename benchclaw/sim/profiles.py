"""Simulator tier profiles: behaviour as data (``benchclaw/data/sim_profiles.toml``).

A profile says how a simulated tier behaves: how much it reasons per turn, how fast it
produces tokens, how it caches, which usage shape it reports, how often it gets each task
family right, how easily planted injections sway it. Keeping this in a TOML file (format
in docs/FORMAT.md, "Simulator profiles") means tuning the simulator never touches the
engine, and a test or a user can load another file.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping

from ..errors import FormatError, InputError
from ..paths import package_data_dir

__all__ = ["Profile", "Profiles", "load_profiles", "USAGE_SHAPES", "TURN_KINDS", "default_profiles_path"]

USAGE_SHAPES = ("openai", "cache_hit", "null_details", "cache_write")
TURN_KINDS = ("read", "write", "check", "finish")
_RATE_KEYS = ("skip_read", "invalid_json", "reasoning_only", "injection_susceptibility", "fix_after_check")
_PROFILE_KEYS = {"model", "description", "usage_shape", "base_latency_ms", "throughput_tps", "prefill_tps",
                 "cache", "reasoning", "skill", "mistakes", "max_fixes", "always_follow_injections",
                 *_RATE_KEYS}


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


@dataclass(frozen=True)
class Profiles:
    """All profiles of a file, with the family effort table."""

    by_name: dict[str, Profile]
    effort: Mapping[str, float]
    path: Path | None = None

    def resolve(self, model: str) -> Profile | None:
        """The profile whose model id (or name) is ``model``."""
        for p in self.by_name.values():
            if p.model == model:
                return p
        return self.by_name.get(model)

    def effort_for(self, family: str | None) -> float:
        return self.effort.get(family or "default", self.effort.get("default", 1.0))

    @property
    def models(self) -> list[str]:
        return [p.model for p in self.by_name.values()]


def default_profiles_path() -> Path:
    return package_data_dir() / "sim_profiles.toml"


def load_profiles(path: str | Path | None = None) -> Profiles:
    """Load and validate a profiles file (default: the shipped one). Raises
    ``InputError`` when unreadable, ``FormatError`` naming the profile and field."""
    p = Path(path) if path is not None else default_profiles_path()
    try:
        doc = tomllib.loads(p.read_text(encoding="utf-8"))
    except OSError as e:
        raise InputError(f"{p}: cannot read simulator profiles ({e.strerror or e})") from None
    except (UnicodeDecodeError, tomllib.TOMLDecodeError) as e:
        raise FormatError(f"{p}: not valid TOML: {e}") from None
    if doc.get("v") != 1:
        raise FormatError(f"{p}: v must be 1")
    raw = doc.get("profiles")
    if not isinstance(raw, dict) or not raw:
        raise FormatError(f"{p}: [profiles] must define at least one profile")
    effort = _float_table(doc.get("effort", {}), f"{p}: effort", low=0.0, high=100.0)
    profiles = {name: _profile(name, spec, f"{p}: profiles.{name}") for name, spec in raw.items()}
    return Profiles(by_name=profiles, effort=effort, path=p)


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
