"""Routing policies as pure decision logic, shared by live trials and offline replay.

A policy never runs anything: given the tiers (cheapest first) and the attempts made so
far in one cell, it names the next batch of tiers to run (a batch runs in parallel) or
says it is done, and which attempt's artifact it takes. The runner drives it live; the
analysis (and so the offline verifier) drives it over the grid's runs ("replayed"). Both
use this one module, so live and replayed policies cannot drift apart.

Standard library only: the verifier imports it.

Outcome of a trial: cost = sum over every attempt made; time = sum over batches of the
slowest attempt in the batch; passed = the taken attempt passed every check.
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal
from typing import Callable, Mapping, Sequence

__all__ = ["Attempt", "TrialOutcome", "POLICIES", "PolicyKind", "known_policy", "parse_policy", "next_batch",
           "taken", "replay", "outcome", "policy_names", "PolicyError"]


class PolicyError(ValueError):
    """An unknown policy name or a tier the grid does not have."""


@dataclass(frozen=True, slots=True)  # one per run or trial of an analysis: no instance dict
class Attempt:
    """One run's result as a policy sees it."""

    tier: str
    gate_passed: bool
    passed: bool
    cost_low: Decimal
    cost_high: Decimal
    elapsed_ms: int
    run_id: str | None = None
    batch: int = 0


@dataclass(frozen=True, slots=True)  # one per run or trial of an analysis: no instance dict
class TrialOutcome:
    policy: str
    attempts: tuple[Attempt, ...]
    taken: Attempt | None
    passed: bool
    cost_low: Decimal
    cost_high: Decimal
    elapsed_ms: int


def _ladder_from(start: int) -> Callable:
    def step(tiers: Sequence[str], attempts: Sequence[Attempt]) -> list[str]:
        if any(a.gate_passed for a in attempts):
            return []
        nxt = start + len(attempts)
        return [tiers[nxt]] if nxt < len(tiers) else []
    return step


def _always(tier: str) -> Callable:
    def step(tiers: Sequence[str], attempts: Sequence[Attempt]) -> list[str]:
        if tier not in tiers:
            raise PolicyError(f"policy always:{tier}: tier {tier!r} is not in the grid {list(tiers)}")
        return [] if attempts else [tier]
    return step


def _speculative(tiers: Sequence[str], attempts: Sequence[Attempt]) -> list[str]:
    if not attempts:
        return list(tiers[:2])
    if any(a.gate_passed for a in attempts) or len(attempts) >= len(tiers):
        return []
    return [tiers[len(attempts)]]


def _taken_first_gate(attempts: Sequence[Attempt], tiers: Sequence[str]) -> Attempt | None:
    """The cheapest-tier attempt that passed the gate; else the last (highest) attempt."""
    if len(attempts) == 1:  # the common case (always:<tier>, a first-try ladder): no ranking
        return attempts[0]
    order = {t: i for i, t in enumerate(tiers)}
    passing = [a for a in attempts if a.gate_passed]
    if passing:
        return min(passing, key=lambda a: order.get(a.tier, 0))
    return max(attempts, key=lambda a: order.get(a.tier, 0)) if attempts else None


@dataclass(frozen=True)
class PolicyKind:
    """One entry of the registry: whether the name takes a tier (``always:<tier>``) and
    ``make(tier_arg, tiers, memory_start) -> step``."""

    takes_tier: bool
    make: Callable[[str, Sequence[str], str | None], Callable]


def _memory(_arg: str, tiers: Sequence[str], memory_start: str | None) -> Callable:
    if memory_start is not None and memory_start not in tiers:
        raise PolicyError(f"policy memory: tier {memory_start!r} is not in the grid")
    return _ladder_from(list(tiers).index(memory_start) if memory_start else 0)


# name -> kind; adding a policy is one entry (routers after ``always`` keep their order)
POLICIES: dict[str, PolicyKind] = {
    "always": PolicyKind(True, lambda tier, tiers, memory_start: _always(tier)),
    "ladder": PolicyKind(False, lambda _arg, tiers, memory_start: _ladder_from(0)),
    "speculative": PolicyKind(False, lambda _arg, tiers, memory_start: _speculative),
    "memory": PolicyKind(False, _memory),
}


def known_policy(name: str) -> bool:
    """Whether ``name`` is a policy of the registry (``always:<tier>`` or a router)."""
    kind, sep, _ = name.partition(":")
    return kind in POLICIES and POLICIES[kind].takes_tier == bool(sep)


def parse_policy(name: str, tiers: Sequence[str], memory_start: str | None = None) -> Callable:
    """The step function of a policy name. ``memory_start`` is the tier where this task and
    profile last passed (``memory`` falls back to the ladder when it is None)."""
    if not known_policy(name):
        raise PolicyError(f"unknown policy {name!r} (known: always:<tier>, ladder, speculative, memory)")
    kind, _, arg = name.partition(":")
    return POLICIES[kind].make(arg, tiers, memory_start)


def policy_names(tiers: Sequence[str]) -> list[str]:
    """Every live-able policy for a grid: always:<tier> for each tier, then the routers."""
    return [f"always:{t}" for t in tiers] + [n for n, k in POLICIES.items() if not k.takes_tier]


def next_batch(name: str, tiers: Sequence[str], attempts: Sequence[Attempt],
               memory_start: str | None = None) -> list[str]:
    """The tiers to run next (in parallel), or [] when the trial is over."""
    return parse_policy(name, tiers, memory_start)(tiers, attempts)


def taken(attempts: Sequence[Attempt], tiers: Sequence[str]) -> Attempt | None:
    return _taken_first_gate(attempts, tiers)


def outcome(name: str, tiers: Sequence[str], attempts: Sequence[Attempt]) -> TrialOutcome:
    """Totals of a finished trial (see the module docstring for the arithmetic)."""
    chosen = taken(attempts, tiers)
    if len(attempts) == 1:  # most trials; the same sums, without the generators
        a = attempts[0]
        return TrialOutcome(policy=name, attempts=(a,), taken=chosen, passed=bool(chosen and chosen.passed),
                            cost_low=_plus_zero(a.cost_low), cost_high=_plus_zero(a.cost_high),
                            elapsed_ms=max(0, a.elapsed_ms))
    batches: dict[int, int] = {}
    for a in attempts:
        batches[a.batch] = max(batches.get(a.batch, 0), a.elapsed_ms)
    return TrialOutcome(
        policy=name, attempts=tuple(attempts), taken=chosen,
        passed=bool(chosen and chosen.passed),
        cost_low=sum((a.cost_low for a in attempts), Decimal(0)),
        cost_high=sum((a.cost_high for a in attempts), Decimal(0)),
        elapsed_ms=sum(batches.values()),
    )


_ZERO = Decimal(0)


def _plus_zero(x: Decimal) -> Decimal:
    """``Decimal(0) + x`` (the sum of one attempt's cost, as the sum of several is taken),
    as ``x`` itself when that is the same value written the same way (nearly always): an
    analysis makes one outcome per policy and cell, and two fresh Decimals each were about
    650 bytes a run of its peak."""
    y = _ZERO + x
    return x if y.compare_total(x) == _ZERO else y


def replay(name: str, tiers: Sequence[str], grid: Mapping[str, Attempt],
           memory_start: str | None = None) -> TrialOutcome:
    """Apply a policy offline to one cell's grid runs (one Attempt per tier).

    ``oracle`` is replay-only: the cheapest tier whose run passed every check (the best any
    router could do on these runs); when none passed, the cheapest tier's run.
    A tier missing from ``grid`` ends the trial there (its attempts so far stand).
    """
    if name == "oracle":
        passing = [grid[t] for t in tiers if t in grid and grid[t].passed]
        pick = passing[:1] or [grid[t] for t in tiers if t in grid][:1]
        return outcome(name, tiers, pick)
    step = parse_policy(name, tiers, memory_start)  # what next_batch does, parsed once
    attempts: list[Attempt] = []
    batch_no = 0
    while True:
        batch = step(tiers, attempts)
        if not batch or any(t not in grid for t in batch):
            break
        attempts.extend(_with_batch(grid[t], batch_no) for t in batch)
        batch_no += 1
    return outcome(name, tiers, attempts)


def _with_batch(a: Attempt, batch: int) -> Attempt:
    if a.batch == batch:  # a frozen value: the same attempt needs no copy
        return a
    return Attempt(a.tier, a.gate_passed, a.passed, a.cost_low, a.cost_high, a.elapsed_ms,
                   a.run_id, batch)
