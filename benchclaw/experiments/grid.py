"""The grid as units of work, and what earlier invocations already did (FORMAT.md §8).

Why it is built this way: resuming must never redo a run that called the model, and must
redo one that did not. The only authority on what happened is the evidence itself: the
journal's ``run``/``trial`` records and, for runs cut off before their ``run`` record was
written, the sealed runs (each carries its experiment, cell and attempt in
``run.start.policy``) and the ledgers' reservations (a reservation under an attempt id
means that attempt may have reached the model). ``History`` folds those into one answer
per unit, so the runner's loop stays a plain "for each unit not done".

A *unit* is one grid run (cell x tier, policy ``grid``) or one live trial (cell x policy).
A unit writes only its own run files and journal records through the store's lock, so
units can be spread over machines and their runs directories merged.

**Shards** (``benchclaw run --shard I/N``): a cell belongs to shard
``1 + (first 8 bytes of SHA-256(key) as a big-endian integer) mod N``, where the key is the
cell id, or its task/profile group when a live ``memory`` policy runs (tier memory reads
the other seeds of the group, so a group stays on one machine). The assignment depends on
nothing but the key, so every machine computes the same slices, and a deviation that adds
cells moves no existing cell to another shard. A shard's budget is its share of the units:
``floor(limit * units_in_shard / units_in_grid)`` (USD to 10^-12, tokens to one), so the
shards' budgets together never exceed the experiment's.
"""

from __future__ import annotations

import fnmatch
import hashlib
from dataclasses import dataclass, field
from decimal import ROUND_FLOOR, Decimal
from typing import Any, Callable, Iterable, Mapping

from ..errors import FormatError, UsageError
from ..formats.policies import Attempt
from ..formats.records import parse_line
from ..evidence.store import Store

__all__ = ["Cell", "Unit", "History", "Shard", "resolve_tasks", "make_cells", "make_units", "cell_id",
           "group_key", "trial_id", "attempt_from_run", "BAD_STATUSES", "longest_first",
           "run_length_prior"]

# Primary outcomes a `--rerun` invocation re-runs (for secondary analyses only).
BAD_STATUSES = frozenset({"aborted", "provider_error", "budget_stop"})


def cell_id(task_id: str, version: int, profile: str, seed: int) -> str:
    return f"{task_id}@{version}/{profile}/{seed}"


def group_key(cell: str) -> str:
    """``task@version/profile``: the cells that share tier memory (every seed)."""
    return cell.rsplit("/", 1)[0]


def trial_id(policy: str, cell: str, rerun: bool) -> str:
    return f"{'rerun:' if rerun else ''}{policy}|{cell}"


@dataclass(frozen=True)
class Cell:
    task: Any        # benchclaw.checks.tasks.Task
    profile: str
    seed: int

    @property
    def id(self) -> str:
        return cell_id(self.task.id, self.task.version, self.profile, self.seed)


@dataclass(frozen=True)
class Unit:
    cell: Cell
    policy: str                 # "grid" or a live policy name
    tier: str | None = None     # the grid unit's tier

    @property
    def key(self) -> tuple[str, str, str | None]:
        return (self.cell.id, self.policy, self.tier)


def resolve_tasks(patterns: Iterable[str], tasks: list, where: str) -> list:
    """The task versions the grid names: ids or globs (latest version of each), ``id@N`` pins.
    Raises FormatError naming ``where`` when a pattern matches nothing."""
    latest: dict[str, Any] = {}
    for t in tasks:
        if t.id not in latest or t.version > latest[t.id].version:
            latest[t.id] = t
    chosen: dict[tuple[str, int], Any] = {}
    for i, pat in enumerate(patterns):
        if "@" in pat:
            tid, _, ver = pat.partition("@")
            hits = [t for t in tasks if fnmatch.fnmatchcase(t.id, tid) and str(t.version) == ver]
        else:
            hits = [t for tid, t in sorted(latest.items()) if fnmatch.fnmatchcase(tid, pat)]
        if not hits:
            known = ", ".join(sorted(latest)) or "none"
            raise FormatError(f"{where}: grid.tasks[{i}]: {pat!r} matches no task (known: {known})")
        for t in hits:
            chosen[(t.id, t.version)] = t
    return [chosen[k] for k in sorted(chosen)]


def make_cells(tasks: list, profiles: Iterable[str], seeds: Iterable[int]) -> list[Cell]:
    return [Cell(t, p, s) for t in tasks for p in profiles for s in seeds]


def make_units(cells: list[Cell], tiers: Iterable[str], all_tiers: bool, live: Iterable[str]) -> list[Unit]:
    """Grid runs first (they feed replay and tier memory), then the live trials."""
    units = [Unit(c, "grid", t) for c in cells for t in tiers] if all_tiers else []
    return units + [Unit(c, p) for p in live for c in cells]


# ----------------------------------------------------------------------------- shards

@dataclass(frozen=True)
class Shard:
    """Shard ``index`` (1-based) of ``count``: a deterministic slice of a grid's cells."""

    index: int
    count: int

    @classmethod
    def parse(cls, text: str) -> "Shard":
        """``"I/N"`` with 1 <= I <= N. Raises UsageError naming the value."""
        i, sep, n = str(text).partition("/")
        if not (sep and i.isdigit() and n.isdigit() and 1 <= int(i) <= int(n)):
            raise UsageError(f"--shard {text!r}: expected I/N with 1 <= I <= N (e.g. 2/3)")
        return cls(int(i), int(n))

    def __str__(self) -> str:
        return f"{self.index}/{self.count}"

    @property
    def writer_suffix(self) -> str:
        """Appended to the journal writer, so shards never append to one file."""
        return f".shard-{self.index}-of-{self.count}"

    def owns(self, cell: "Cell", live: Iterable[str]) -> bool:
        key = group_key(cell.id) if "memory" in live else cell.id
        h = int.from_bytes(hashlib.sha256(key.encode("utf-8")).digest()[:8], "big")
        return h % self.count == self.index - 1

    @staticmethod
    def share_usd(usd: Decimal, mine: int, total: int) -> Decimal:
        """``usd * mine / total`` rounded down to 10^-12, in integer arithmetic (exact)."""
        if mine >= total:
            return usd
        micro = int(usd.scaleb(12).to_integral_value(rounding=ROUND_FLOOR))  # scaleb is exact
        return Decimal(micro * mine // total).scaleb(-12) if total > 0 else Decimal(0)

    @staticmethod
    def share_tokens(tokens: int | None, mine: int, total: int) -> int | None:
        return None if tokens is None else (tokens * mine // total if total > 0 else 0)


# Live policies whose runs depend on the order grid runs reach the journal: ``memory``
# starts at the tier of the *last* passing run in journal order (FORMAT.md §8).
JOURNAL_ORDER_POLICIES = frozenset({"memory"})


def longest_first(units: list[Unit], history: "History", prior: Callable[[Unit], Any], *,
                  capped: Iterable[str] = ()) -> list[Unit]:
    """The order the runner starts ``units`` in: the longest-expected first, so the last
    wave of a concurrent grid is short runs and every slot stays busy to the end (in grid
    order the long runs of the last cells start last and finish alone).

    Only the order changes, never which units run or what they do. Grid runs stay before
    live trials (tier memory reads the grid's runs); live trials keep their order. When a
    live policy reads the grid's journal order (``JOURNAL_ORDER_POLICIES``: tier memory)
    the grid order is kept as it is, since reordering would change where such a trial
    starts. It is kept too when a tier is ``capped`` below the grid's concurrency
    (``settings.tier_concurrency``): sorted by length, that tier's runs would queue
    together and wait on its cap one after another, where grid order interleaves them
    with the other tiers' runs. A grid unit's expected length is, best evidence first:

    1. earlier runs: the mean ``elapsed_ms`` of the journal's runs that called the model
       on the same task version, profile and tier (any seed, any invocation);
    2. without any, ``prior(unit)``: a sort key, smallest first, for the units expected
       to take longest (the runner's is ``run_length_prior``). Units with no earlier runs
       go before those with some: an unknown group may be long.

    Ties keep grid order (the sort is stable), so the order is deterministic."""
    if any(u.policy in JOURNAL_ORDER_POLICIES for u in units) or any(True for _ in capped):
        return list(units)
    sums: dict[tuple[str, str | None], list[float]] = {}
    for r in history.runs:
        if r.get("called_model") and r.get("cell"):
            acc = sums.setdefault((group_key(r["cell"]), r.get("tier")), [0.0, 0])
            acc[0] += float(r.get("elapsed_ms") or 0)
            acc[1] += 1

    def key(u: Unit) -> tuple:
        acc = sums.get((group_key(u.cell.id), u.tier))
        return (0, prior(u)) if acc is None else (1, -acc[0] / acc[1])

    grid = [u for u in units if u.policy == "grid"]
    return sorted(grid, key=key) + [u for u in units if u.policy != "grid"]


def run_length_prior(ladder: Iterable[str], actions: Mapping[str, int]) -> Callable[[Unit], tuple]:
    """The expected-length key of a grid unit that has no earlier runs, smallest first:
    a cheaper tier on the catalog's ladder first (it fails checks and spends more turns),
    then a profile offering more kinds of action first (one that can run the checks
    spends turns checking and revising). Measured on the simulator (calls a run):
    lightning 8.4 with checker, 5.6 direct; super 5.7 / 4.2; ultra 5.4 / 4.0."""
    rank = {t: i for i, t in enumerate(ladder)}
    return lambda u: (rank.get(u.tier, len(rank)), -actions.get(u.cell.profile, 0))


# ----------------------------------------------------------------------------- history

@dataclass
class History:
    """What the journal (and the evidence behind it) says was done, unit by unit."""

    runs: list[dict] = field(default_factory=list)           # journal `run` bodies, journal order
    trials: dict[str, dict] = field(default_factory=dict)    # trial id -> `trial` body
    recorded: set[str] = field(default_factory=set)          # run ids with a `run` record
    ledgers: list[str] = field(default_factory=list)         # ledger ids of earlier invocations
    ledger_shards: dict[str, str | None] = field(default_factory=dict)  # ledger id -> grid.start shard
    reserved_attempts: set[str] = field(default_factory=set)  # attempt ids with a reservation
    # (cell, tier, rerun) -> its grid runs, in journal order, over ``runs[:_indexed]``: every
    # unit asks for its own (``grid_runs``), so a scan of every run each time grew with the grid
    _by_unit: dict = field(default_factory=dict, init=False, repr=False, compare=False)
    _indexed: int = field(default=0, init=False, repr=False, compare=False)

    @classmethod
    def load(cls, store: Store, experiment: str) -> "History":
        h = cls()
        for e in store.read_journal(experiment):
            b = e.body
            if e.kind == "run":
                h.runs.append(b)
                h.recorded.add(b.get("run_id"))
            elif e.kind == "trial":
                h.trials[b.get("trial")] = b
            elif e.kind == "grid.start" and b.get("ledger"):
                h.ledgers.append(b["ledger"])
                h.ledger_shards[b["ledger"]] = b.get("shard")
        h.reserved_attempts = reserved_attempts(store, h.ledgers)
        return h

    def add(self, body: dict) -> None:
        self.runs.append(body)
        self.recorded.add(body["run_id"])

    # -- per unit ----------------------------------------------------------------------
    def grid_runs(self, cell: str, tier: str, rerun: bool) -> list[dict]:
        """The grid runs of one unit (``rerun`` or primary), in journal order."""
        runs = self.runs
        for r in runs[self._indexed:]:  # ``runs`` is only appended to
            if r.get("policy") == "grid":
                self._by_unit.setdefault((r.get("cell"), r.get("tier"), bool(r.get("rerun"))), []).append(r)
        self._indexed = len(runs)
        return list(self._by_unit.get((cell, tier, bool(rerun)), ()))

    def trial_runs(self, trial: str) -> list[dict]:
        return [r for r in self.runs if r.get("trial") == trial]

    def unit_done(self, unit: Unit, rerun: bool) -> bool:
        """A unit is done when a run that called the model exists for it (grid), or its
        trial record exists (live). Runs that never called the model do not count."""
        if unit.policy == "grid":
            return any(r.get("called_model") for r in self.grid_runs(unit.cell.id, unit.tier, rerun))
        return trial_id(unit.policy, unit.cell.id, rerun) in self.trials

    def needs_rerun(self, unit: Unit) -> bool:
        """For ``--rerun``: the unit's primary outcome was cut off or errored."""
        if unit.policy == "grid":
            prim = [r for r in self.grid_runs(unit.cell.id, unit.tier, False) if r.get("called_model")]
        else:
            prim = [r for r in self.trial_runs(trial_id(unit.policy, unit.cell.id, False)) if r.get("called_model")]
        return any(r.get("status") in BAD_STATUSES for r in prim)

    def replaced(self, unit: Unit, rerun: bool, tier: str | None = None, trial: str | None = None) -> str | None:
        """The run a new run stands in for: for a rerun, the primary run; otherwise the
        last earlier run of the same unit that never called the model (or None)."""
        if unit.policy == "grid":
            mine = self.grid_runs(unit.cell.id, unit.tier, rerun)
            prim = self.grid_runs(unit.cell.id, unit.tier, False) if rerun else []
        else:
            mine = [r for r in self.trial_runs(trial) if r.get("tier") == tier]
            prim = [r for r in self.trial_runs(trial_id(unit.policy, unit.cell.id, False))
                    if r.get("tier") == tier] if rerun else []
        uncalled = [r for r in mine if not r.get("called_model")]
        if uncalled:
            return uncalled[-1]["run_id"]
        called = [r for r in prim if r.get("called_model")]
        return called[-1]["run_id"] if called else None

    def memory_start(self, cell: str) -> str | None:
        """Tier memory (FORMAT.md §8): the tier of the *last* run, in journal order, that
        passed every check on the same task version and profile in another cell (seed)."""
        g = group_key(cell)
        for r in reversed(self.runs):
            c = r.get("cell", "")
            if r.get("passed") and c != cell and group_key(c) == g and not r.get("rerun"):
                return r.get("tier")
        return None


def attempt_from_run(r: dict) -> Attempt:
    """A journal ``run`` body as the policy sees it. An aborted run counts as it stands:
    failed, at its recorded cost."""
    cost = r.get("cost") or {}
    return Attempt(tier=r["tier"], gate_passed=bool(r.get("gate_passed")), passed=bool(r.get("passed")),
                   cost_low=Decimal(cost.get("low", "0")), cost_high=Decimal(cost.get("high", "0")),
                   elapsed_ms=int(r.get("elapsed_ms") or 0), run_id=r.get("run_id"), batch=int(r.get("batch") or 0))


def reserved_attempts(store: Store, ledgers: list[str]) -> set[str]:
    out: set[str] = set()
    for lid in ledgers:
        path = store.root / "ledgers" / f"{lid}.jsonl"
        if not path.is_file():
            continue
        for line in path.read_bytes().split(b"\n"):
            if b'"kind":"reserve"' in line:  # canonical JSON: a cheap pre-filter
                try:
                    rec = parse_line(line, str(path))
                except FormatError:
                    continue  # a torn last line: the chain check reports it elsewhere
                if rec.kind == "reserve" and rec.body.get("attempt"):
                    out.add(rec.body["attempt"])
    return out
