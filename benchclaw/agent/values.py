"""The values a caller hands to and gets back from ``run_agent``: limits, result, clock.

Kept apart from the loop so the runner, the CLI and tests can build and read them without
pulling in the runtime, and so the rule for which bound holds (``tightest``) is one small
function next to the defaults it starts from.
"""

from __future__ import annotations

import asyncio
import decimal
import time
from dataclasses import dataclass
from decimal import Decimal
from typing import Any, Mapping, Protocol

from ..errors import UsageError
from ..formats.money import fmt_usd

__all__ = ["Limits", "AgentResult", "Clock", "MonotonicClock", "VirtualClock", "checked_settings", "tightest"]


@dataclass(frozen=True)
class Limits:
    """Bounds of one run; the defaults are the project's (12 turns, 180 s, 32 KiB)."""

    turns: int = 12
    seconds: int = 180
    output_bytes: int = 32 * 1024

    def __post_init__(self) -> None:
        for name in ("turns", "seconds", "output_bytes"):
            v = getattr(self, name)
            if type(v) is not int or v <= 0:
                raise UsageError(f"limits.{name} must be a positive integer, got {v!r}")

    @classmethod
    def coerce(cls, value: "Limits | Mapping | None") -> "Limits":
        """``Limits`` from itself, a mapping of some of its fields, or ``None`` (defaults).
        Raises ``UsageError`` naming an unknown or bad field."""
        if value is None:
            return cls()
        if isinstance(value, Limits):
            return value
        unknown = sorted(set(value) - {"turns", "seconds", "output_bytes"})
        if unknown:
            raise UsageError(f"limits: unknown field '{unknown[0]}' (known: turns, seconds, output_bytes)")
        return cls(**dict(value))

    def to_dict(self) -> dict:
        return {"turns": self.turns, "seconds": self.seconds, "output_bytes": self.output_bytes}


@dataclass(frozen=True)
class AgentResult:
    """What a caller (CLI, runner, policy) needs of a finished run; the rest is in the run."""

    run_id: str
    status: str
    gate_passed: bool
    passed: bool
    cost_low: Decimal
    cost_high: Decimal
    elapsed_ms: int
    turns: int
    reason: str = ""
    calls: int = 0
    denials: int = 0
    injection_attempts: int = 0
    path: str | None = None
    simulated: bool = False


class Clock(Protocol):
    """What a run reads its time from: ``monotonic()``, async ``sleep(s)``, and
    ``call_took(s)``, told the latency each model reply reports (a clock that keeps
    simulated time moves by it; a real clock has already seen it pass)."""

    def monotonic(self) -> float: ...

    async def sleep(self, seconds: float) -> None: ...

    def call_took(self, seconds: float) -> None: ...


class MonotonicClock:
    """The real clock: ``time.monotonic`` and ``asyncio.sleep``."""

    def monotonic(self) -> float:
        return time.monotonic()

    def call_took(self, seconds: float) -> None:
        """Real time already passed during the call."""

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)


class VirtualClock:
    """Simulated time for in-process simulated providers.

    It starts at 0 and moves only by what the run spends: each call's reported (simulated)
    latency and each retry wait. Waits really sleep ``scale`` times as long, so a demo still
    shows progress. Runs on it are deterministic: same seed, same times, same bounds.
    """

    def __init__(self, scale: float = 0.0):
        self.now = 0.0
        self.scale = scale

    def monotonic(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += max(0.0, seconds)

    def call_took(self, seconds: float) -> None:
        """The call's simulated latency is simulated time spent."""
        self.advance(seconds)

    async def sleep(self, seconds: float) -> None:
        self.advance(seconds)
        if self.scale > 0 and seconds > 0:
            await asyncio.sleep(seconds * self.scale)


def tightest(limits: Limits, task_limits: Mapping, profile_turns: int) -> Limits:
    """The bounds that hold for a run: the tightest of the caller's (the experiment's),
    the task's ``[limits]`` and the profile's turn limit. Recorded in ``run.start``."""
    def pick(name: str, *more: int) -> int:
        values = [getattr(limits, name), *more]
        if isinstance(task_limits.get(name), int):
            values.append(task_limits[name])
        return min(values)
    return Limits(pick("turns", profile_turns), pick("seconds"), pick("output_bytes"))


def checked_settings(*, max_tokens: Any, seed: Any, retries: Any, temperature: Any) -> Decimal:
    """The canonical temperature (a Decimal as recorded) once ``run_agent``'s settings are
    checked; raises ``UsageError`` naming the first bad one."""
    if type(max_tokens) is not int or max_tokens < 1:
        raise UsageError(f"max_tokens must be a positive integer, got {max_tokens!r}")
    if seed is not None and type(seed) is not int:
        raise UsageError(f"seed must be an integer, got {seed!r}")
    if type(retries) is not int or retries < 0:
        raise UsageError(f"retries must be a non-negative integer, got {retries!r}")
    try:
        t = temperature
        d = t if isinstance(t, Decimal) else Decimal(repr(t) if isinstance(t, float) else str(t))
    except decimal.InvalidOperation:
        raise UsageError(f"temperature must be a number between 0 and 2, got {temperature!r}") from None
    if not d.is_finite() or d < 0 or d > 2:
        raise UsageError(f"temperature must be between 0 and 2, got {temperature!r}")
    return Decimal(fmt_usd(d))
