"""One trial per (policy, mode, cell): live from the trial's own runs, replayed from the grid.

Both go through ``benchclaw.formats.policies`` (``replay`` and ``outcome``), the same code the
runner uses live, so a replayed ladder cannot drift from a live one. A trial is
*complete* when the policy has nothing left to run; a replayed trial whose next tier is
missing from the grid, or a live trial cut off by a stop or a crash, is incomplete and is
counted as missing, never as a pass or a fail.

Replayed ``memory`` walks each task/profile's cells in seed order and starts at the tier
where the previous replayed memory trial of that task and profile passed.
Live batches (which attempts ran in parallel, for a speculative ladder's time) are
re-derived by asking the policy what it would have run at each step.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..formats import policies
from ..formats.policies import Attempt, TrialOutcome
from .cells import LiveTrial, Selection
from .inputs import RunView, parse_cell

__all__ = ["Trial", "replayed_trials", "live_trials", "attempt_of", "replay_one", "batched_attempts", "ORACLE"]

ORACLE = "oracle"


@dataclass(frozen=True, slots=True)  # one per run or trial of an analysis: no instance dict
class Trial:
    cell: str
    outcome: TrialOutcome
    complete: bool
    runs: tuple[RunView, ...]


def attempt_of(run: RunView, batch: int = 0) -> Attempt:
    return Attempt(run.tier, run.gate_passed, run.passed, run.cost_low, run.cost_high,
                   run.elapsed_ms, run.run_id, batch)


def _oracle_complete(tiers: list[str], grid: dict[str, Attempt]) -> bool:
    for t in tiers:
        if t not in grid:
            return False
        if grid[t].passed:
            return True
    return True


def replay_one(name: str, tiers: list[str], grid: dict[str, Attempt],
                memory_start: str | None) -> tuple[TrialOutcome, bool]:
    out = policies.replay(name, tiers, grid, memory_start)
    if name == ORACLE:
        return out, _oracle_complete(tiers, grid)
    rest = policies.next_batch(name, tiers, out.attempts, memory_start)
    return out, not rest


def replayed_trials(sel: Selection, tiers: list[str], names: list[str],
                    memo: dict | None = None) -> dict[str, dict[str, Trial]]:
    """policy name -> cell -> replayed Trial, for every cell of the selection.

    ``memo`` (a dict the caller keeps for one set of tiers) reuses a replay over the same
    grid runs: the primary and secondary analyses share most cells. Without one nothing is
    kept beyond the trials (within one analysis only cells without grid runs share one)."""
    result: dict[str, dict[str, Trial]] = {n: {} for n in names}
    memory: dict[tuple[str, str], str] = {}
    for cell in sel.cells:
        runs = sel.grid.get(cell, {})
        slot = None if memo is None else tuple(sorted((t, r.run_id) for t, r in runs.items() if t in tiers))
        grid = None
        group = parse_cell(cell)[:2]
        for name in names:
            start = memory.get(group) if name == "memory" else None
            key = (name, start, slot)
            found = None if memo is None else memo.get(key)
            if found is None:
                if grid is None:
                    grid = {t: attempt_of(r) for t, r in runs.items() if t in tiers}
                found = replay_one(name, tiers, grid, start)
                if memo is not None:
                    memo[key] = found
            out, complete = found
            used = tuple(runs[a.tier] for a in out.attempts)
            result[name][cell] = Trial(cell, out, complete, used)
            if name == "memory" and complete and out.passed and out.taken:
                memory[group] = out.taken.tier
    return result


def batched_attempts(name: str, tiers: list[str], runs: tuple[RunView, ...]) -> tuple[list[Attempt], bool]:
    """Attempts with batch numbers as the policy would have grouped them, and whether the
    policy had nothing left to run."""
    start = runs[0].tier if name == "memory" and runs else None
    done: list[Attempt] = []
    i = 0
    try:
        while i < len(runs):
            want = policies.next_batch(name, tiers, done, start)
            size = len(want) if want and sorted(want) == sorted(r.tier for r in runs[i:i + len(want)]) else 1
            batch = len({a.batch for a in done})
            done.extend(attempt_of(r, batch) for r in runs[i:i + size])
            i += size
        return done, not policies.next_batch(name, tiers, done, start)
    except policies.PolicyError:
        return done or [attempt_of(r, k) for k, r in enumerate(runs)], False


def live_trials(sel: Selection, tiers: list[str], names: list[str]) -> dict[str, dict[str, Trial]]:
    """policy name -> cell -> live Trial (only cells where the policy ran)."""
    result: dict[str, dict[str, Trial]] = {}
    for name in names:
        by_cell: dict[str, LiveTrial] = sel.live.get(name, {})
        result[name] = {}
        for cell, lt in by_cell.items():
            attempts, complete = batched_attempts(name, tiers, lt.runs)
            out = policies.outcome(name, tiers, attempts)
            result[name][cell] = Trial(cell, out, complete, lt.runs)
    return result
