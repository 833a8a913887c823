"""The analysis cell by cell: each cell's runs are selected, replayed and added to the rows,
then dropped.

Every policy reads one cell's runs at a time (the tier memory of replayed ``memory``
reads the previous cell of its task and profile: cells come in ``cell_sort_key`` order,
so a task/profile group's cells come together), so the runs need not all be held while
the analysis runs. ``RunGroups`` holds the experiment's views grouped by cell, in memory
or spilled to a temporary file (``spill=True``: export, the site), and ``analyse`` walks
them cell by cell into ``StreamAnalysis`` objects: the rows as ``RowStats``, the counts
``summary.json`` lists, and nothing per run but the ids it must list (exclusions).

The selection rules are ``cells.select``'s, applied per cell: a grid slot's runs are all
in its cell; a live trial is handed to the cell of its first eligible member (by step,
then time), which is the cell ``cells._fill_live`` files it under, and the trials of one
cell are taken in the same order of preference. What needs the whole experiment before
the first cell (the tiers seen, whether there are reruns, which runs a rerun replaces,
each live trial's members) is gathered as the views are added: for a grid, nothing per
run but where its view is.
"""

from __future__ import annotations

import marshal
import os
import pickle
import tempfile
from array import array
from dataclasses import replace
from typing import Callable, Iterable, Mapping, NamedTuple

from ..formats import policies
from .cells import LiveTrial, cell_sort_key
from .inputs import RunView, cut_off_calls, parse_cell, view_from_packed, view_to_packed
from .metrics import Sample
from .rowstats import RowStats
from .trials import ORACLE, Trial, batched_attempts, replay_one, attempt_of

__all__ = ["RunGroups", "StreamAnalysis", "analyse", "family_of"]


class _LiveKey(NamedTuple):
    """What the selection needs of a live run before its cell is read."""

    order: tuple  # (step, at, run id): a trial's members in this order
    at_id: tuple  # (at, run id)
    cell: str
    called_model: bool
    rerun: bool
    run_id: str
    where: object  # the view, or where it is spilled


class RunGroups:
    """An experiment's views, grouped by cell (grid runs) or by live trial.

    ``spill``: views are written to a temporary file as they are added (``marshal``led as
    ``inputs.view_to_packed`` packs them; pickled when a value is not marshal's), and what is kept per
    grid run is its view's offset and length (16 bytes); ``reservations`` (set once the
    ledgers are read, ``set_reservations``) then add a run's calls cut off in flight as its
    view is read back, as ``fold.ExperimentFold.data`` does for the views it holds."""

    def __init__(self, *, spill: bool = False):
        self._file = tempfile.TemporaryFile() if spill else None
        self._end = 0  # the file's length: views are appended there, read back by ``os.pread``
        self._grid: dict[str, object] = {}  # cell -> [views] or array of (offset, length)
        self._live: dict[tuple[str, str], list[_LiveKey]] = {}  # (policy, trial) -> members
        self.tiers: set[str] = set()
        self.any_rerun = False
        self.replaced: set[str] = set()
        self.simulated = False
        self.count = 0
        self._reservations: Mapping[str, tuple] = {}

    def add(self, view: RunView, attempt: str | None = None, keys: tuple[str, ...] = ()) -> None:
        """Add one run's view (``attempt``/``keys``: its attempt id and call keys, with
        which a spilled view meets the ledgers' reservations when it is read back)."""
        self.count += 1
        self.tiers.add(view.tier)
        self.simulated = self.simulated or view.simulated
        if view.rerun:
            self.any_rerun = True
            if view.called_model and view.replaces:
                self.replaced.add(view.replaces)
        where = view if self._file is None else self._spill(view, attempt, keys)
        if view.policy == "grid":
            got = self._grid.get(view.cell)
            if got is None:
                got = self._grid[view.cell] = [] if self._file is None else array("Q")
            got.extend((where,) if self._file is None else where)
        else:
            key = _LiveKey((view.step, view.at, view.run_id), (view.at, view.run_id), view.cell,
                           view.called_model, view.rerun, view.run_id, where)
            self._live.setdefault((view.policy, view.trial or view.run_id), []).append(key)

    def set_reservations(self, reservations: Mapping[str, tuple]) -> None:
        self._reservations = reservations

    def _spill(self, view: RunView, attempt, keys) -> tuple[int, int]:
        try:  # (marshal: a tenth of pickle's CPU for a view, its calls already packed bytes)
            data = b"m" + marshal.dumps((view_to_packed(view), attempt, keys))
        except (ValueError, TypeError):  # (a value marshal does not take)
            data = b"p" + pickle.dumps((view, attempt, keys), pickle.HIGHEST_PROTOCOL)
        offset = self._end  # (no seek: it would flush the file's buffer at every view)
        self._file.write(data)
        self._end += len(data)
        return offset, len(data)

    def _load(self, offset: int, length: int) -> RunView:
        f = self._file
        f.flush()  # (nothing to write when the views were all added: a no-op)
        data = os.pread(f.fileno(), length, offset)
        if len(data) != length:
            raise OSError("the analysis's temporary file was truncated")
        if data[:1] == b"m":
            packed, attempt, keys = marshal.loads(memoryview(data)[1:])
            view = view_from_packed(packed)
        else:
            view, attempt, keys = pickle.loads(memoryview(data)[1:])
        reserved = self._reservations.get(attempt, ()) if attempt is not None else ()
        extra = cut_off_calls(keys, reserved) if reserved else ()
        if extra:
            view = replace(view, calls=view.calls + tuple(extra))
        return view

    def grid_cells(self) -> Iterable[str]:
        return self._grid.keys()

    def grid(self, cell: str) -> list[RunView]:
        got = self._grid.get(cell, ())
        if self._file is None:
            return list(got)
        return [self._load(got[i], got[i + 1]) for i in range(0, len(got), 2)]

    def live(self) -> Mapping[tuple[str, str], list[_LiveKey]]:
        return self._live

    def live_views(self, members: list[_LiveKey]) -> list[RunView]:
        return [m.where if self._file is None else self._load(*m.where) for m in members]

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None


def family_of(task_key: str) -> str:
    """A run's task family: its task id up to the first '-'."""
    return task_key.split("@", 1)[0].split("-", 1)[0]


class StreamAnalysis:
    """One analysis (primary or secondary), as ``summary.Analysis`` reads it: rows by
    (policy, mode) and by tier (``RowStats``), plus the counts ``summary.json`` lists."""

    def __init__(self, label: str, tiers: list[str], live: list[str], lures, all_tiers: bool):
        self.label, self.tiers, self.live, self.lures, self.all_tiers = label, tiers, live, lures, all_tiers
        self.names = policies.policy_names(tiers) + [ORACLE]
        self.rows: dict[tuple[str, str], RowStats] = {}
        for n in live:
            self.rows[(n, "live")] = RowStats(lures)
        for n in self.names:
            self.rows[(n, "replayed")] = RowStats(lures)
        self.tier_rows = {t: RowStats(lures, health=True) for t in tiers}
        self._tier_missing = dict.fromkeys(tiers, 0)
        self.n_cells = self.n_used = 0
        self.excluded: dict[str, list[str]] = {}
        self.families: dict[str, dict] = {}
        self._memory: dict[tuple[str, str], str] = {}

    def exclude(self, reason: str, run_id: str) -> None:
        self.excluded.setdefault(reason, []).append(run_id)

    def _family(self, family: str) -> dict:
        fam = self.families.get(family)
        if fam is None:
            first = dict.fromkeys(self.tiers, 0)
            first["none"] = 0
            fam = self.families[family] = {"cells": 0, "first": first,
                                           "tiers": {t: RowStats(None) for t in self.tiers}}
        return fam

    def add_cell(self, cell: str, grid: dict[str, RunView], live: dict[str, LiveTrial],
                 used: list[RunView]) -> dict[tuple[str, str], Trial]:
        """One cell of the analysis; returns its trials by (policy, mode)."""
        self.n_cells += 1
        self.n_used += len(used)
        trials: dict[tuple[str, str], Trial] = {}
        for name in self.live:
            lt = live.get(name)
            if lt is not None:
                attempts, complete = batched_attempts(name, self.tiers, lt.runs)
                trials[(name, "live")] = Trial(cell, policies.outcome(name, self.tiers, attempts), complete, lt.runs)
        slot = {t: attempt_of(r) for t, r in grid.items() if t in self.tiers}
        group = parse_cell(cell)[:2]
        for name in self.names:
            start = self._memory.get(group) if name == "memory" else None
            out, complete = replay_one(name, self.tiers, slot, start)
            trials[(name, "replayed")] = Trial(cell, out, complete, tuple(grid[a.tier] for a in out.attempts))
            if name == "memory" and complete and out.passed and out.taken:
                self._memory[group] = out.taken.tier
        for key, row in self.rows.items():
            t = trials.get(key)
            if t is None:
                row.add_cell(cell, [])
            elif t.complete:
                o = t.outcome
                row.add_cell(cell, [Sample(cell, o.passed, o.cost_low, o.cost_high, o.elapsed_ms, t.runs)])
            else:
                row.add_cell(cell, [], t.runs)
        for tier, row in self.tier_rows.items():
            at = [r for r in used if r.tier == tier]
            samples = [Sample(r.cell, r.passed, r.cost_low, r.cost_high, r.elapsed_ms, (r,)) for r in at]
            row.add_cell(cell, samples, counted=self.all_tiers or bool(at))
            self._tier_missing[tier] += not at
        self._families(cell, grid, used)
        return trials

    def _families(self, cell: str, grid: dict[str, RunView], used: list[RunView]) -> None:
        fam = self._family(family_of(cell))
        fam["cells"] += 1
        fam["first"][next((t for t in self.tiers if t in grid and grid[t].passed), "none")] += 1
        for r in used:
            if r.tier in self.tiers:
                f = self._family(family_of(r.task))
                f["tiers"][r.tier].add_cell(cell, [Sample(r.cell, r.passed, r.cost_low, r.cost_high,
                                                          r.elapsed_ms, ())], counted=False)
            else:
                self._family(family_of(r.task))

    def finish(self) -> "StreamAnalysis":
        for key, row in self.rows.items():
            row.finish(self.n_cells - row.n)
        for tier, row in self.tier_rows.items():
            row.finish(self._tier_missing[tier] if self.all_tiers else 0)
        for fam in self.families.values():
            for row in fam["tiers"].values():
                row.finish(0)
        for ids in self.excluded.values():
            ids.sort()
        return self


# ---------------------------------------------------------------------------- selection per cell

def _preference(with_reruns: bool):
    return lambda r: ((not r.rerun) if with_reruns else False, r.at_id if isinstance(r, _LiveKey) else (r.at, r.run_id))


def _eligible(v, with_reruns: bool, replaced: set[str]) -> str | None:
    """Why ``v`` (a view or a ``_LiveKey``) is left out of the analysis, or None."""
    if not v.called_model:
        return "no_model_call"
    if v.rerun and not with_reruns:
        return "rerun"
    if with_reruns and v.run_id in replaced:
        return "replaced_by_rerun"
    return None


def _trial_cells(groups: RunGroups, with_reruns: bool) -> dict[str, list[tuple[str, str]]]:
    """cell -> the live trials filed under it (the cell of a trial's first eligible member;
    a trial without one goes to its first member's cell, for its exclusions)."""
    replaced = groups.replaced if with_reruns else set()
    out: dict[str, list[tuple[str, str]]] = {}
    for key, members in groups.live().items():
        ok = [m for m in members if _eligible(m, with_reruns, replaced) is None]
        first = min(ok or members, key=lambda m: m.order)
        out.setdefault(first.cell, []).append(key)
    return out


def live_policies(groups: RunGroups, with_reruns: bool) -> set[str]:
    """Policies with at least one eligible live run in the analysis (``Selection.live``)."""
    replaced = groups.replaced if with_reruns else set()
    return {policy for (policy, _), members in groups.live().items()
            if any(_eligible(m, with_reruns, replaced) is None for m in members)}


def _select_cell(an: StreamAnalysis, groups: RunGroups, cell: str, grid_views: list[RunView],
                 trials: list[tuple[tuple[str, str], list[RunView]]], with_reruns: bool):
    """``cells.select`` restricted to one cell: its grid slot, its live trials by policy and
    its used runs (exclusions are recorded on ``an``)."""
    replaced = groups.replaced if with_reruns else set()
    slot: dict[str, RunView] = {}
    used: list[RunView] = []
    for r in sorted(grid_views, key=_preference(with_reruns)):
        why = _eligible(r, with_reruns, replaced)
        if why is not None:
            an.exclude(why, r.run_id)
        elif r.tier in slot:
            an.exclude("duplicate", r.run_id)
        else:
            slot[r.tier] = r
            used.append(r)
    candidates = []
    for (policy, trial_id), views in trials:
        members = []
        for r in views:
            why = _eligible(r, with_reruns, replaced)
            if why is not None:
                an.exclude(why, r.run_id)
            else:
                members.append(r)
        if members:
            candidates.append(((policy, trial_id), members))
    candidates.sort(key=lambda kv: _preference(with_reruns)(min(kv[1], key=lambda r: (r.at, r.run_id))))
    live: dict[str, LiveTrial] = {}
    for (policy, trial_id), members in candidates:
        members.sort(key=lambda r: (r.step, r.at, r.run_id))
        if policy in live or any(m.cell != cell for m in members):  # (members[0].cell is ``cell``)
            winner = live.get(policy)
            reason = "trial_spans_cells" if winner is None else (
                "superseded_by_rerun" if winner.runs[0].rerun and not members[0].rerun else "duplicate")
            for m in members:
                an.exclude(reason, m.run_id)
            continue
        live[policy] = LiveTrial(trial_id, policy, cell, tuple(members))
        used.extend(members)
    return slot, live, used


def analyse(groups: RunGroups, declared: list[str], tiers: list[str], spec_live: list[str], lures, all_tiers: bool,
            *, visit: Callable[[RunView], None] | None = None,
            on_cell: Callable[[str, dict, dict], None] | None = None) -> dict[str, StreamAnalysis | None]:
    """The primary analysis and (when there are reruns) the secondary one, cell by cell.
    ``visit`` sees every view once; ``on_cell(cell, grid slot, trials)`` each cell of the
    primary analysis with its trials by (policy, mode)."""
    labels = [("primary", False)] + ([("secondary", True)] if groups.any_rerun else [])
    state = {}
    for label, reruns in labels:
        live = list(spec_live)
        live += sorted(n for n in live_policies(groups, reruns) if n not in live)
        state[label] = (StreamAnalysis(label, tiers, live, lures, all_tiers), reruns, _trial_cells(groups, reruns))
    live_members = groups.live()
    cells = sorted(set(declared) | set(groups.grid_cells()) | {m.cell for ms in live_members.values() for m in ms}
                   | {c for _, _, tc in state.values() for c in tc}, key=cell_sort_key)
    declared_set = set(declared)
    for cell in cells:
        grid_views = groups.grid(cell)
        if visit is not None:
            for v in grid_views:
                visit(v)
        for label, (an, reruns, trial_cells) in state.items():
            trials = [(key, groups.live_views(live_members[key])) for key in trial_cells.get(cell, ())]
            if visit is not None and label == "primary":
                for _, views in trials:
                    for v in views:
                        visit(v)
            slot, live, used = _select_cell(an, groups, cell, grid_views, trials, reruns)
            if not used and cell not in declared_set:
                continue
            got = an.add_cell(cell, slot, live, used)
            if on_cell is not None and label == "primary":
                on_cell(cell, slot, got)
    out: dict[str, StreamAnalysis | None] = {"primary": None, "secondary": None}
    for label, (an, _, _) in state.items():
        out[label] = an.finish()
    return out
