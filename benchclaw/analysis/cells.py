"""Which runs an analysis uses, grouped into cells, grid slots and live trials.

The primary analysis keeps every run that called the model and excludes reruns: a run
that cost money and failed is never replaced by a luckier rerun. The secondary analysis
(reported separately, labelled) lets a rerun stand in for the run it ``replaces``.
Runs that never called the model (a budget stop before the first call) carry no evidence
about a tier and are left out of both, listed as such.

Where two runs claim the same slot (one cell's grid run at one tier, or one policy's
trial on one cell) the earliest wins and the other is listed as a duplicate; in the
secondary analysis a rerun wins over the run it stands in for, and a rerun trial
supersedes the whole primary trial of its policy and cell. Nothing is dropped
silently: every run the analysis does not use is listed under a reason.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..errors import FormatError
from .inputs import RunView, parse_cell

__all__ = ["Selection", "select", "cell_sort_key", "LiveTrial"]


@dataclass(frozen=True, slots=True)  # one per run or trial of an analysis: no instance dict
class LiveTrial:
    """One live trial: its runs in step order, and its id."""

    trial: str
    policy: str
    cell: str
    runs: tuple[RunView, ...]


@dataclass
class Selection:
    label: str
    cells: list[str]
    grid: dict[str, dict[str, RunView]] = field(default_factory=dict)
    live: dict[str, dict[str, LiveTrial]] = field(default_factory=dict)
    used: list[RunView] = field(default_factory=list)
    excluded: dict[str, list[str]] = field(default_factory=dict)

    def exclude(self, reason: str, run_id: str) -> None:
        self.excluded.setdefault(reason, []).append(run_id)


def cell_sort_key(cell: str) -> tuple:
    """Cells sort by task, profile, then seed numerically (``2`` before ``10``)."""
    try:
        task, profile, seed = parse_cell(cell)
    except FormatError:
        return ("", "", (1, cell))
    return (task, profile, (0, int(seed), "") if seed.isdigit() else (1, 0, seed))


def select(runs: list[RunView], declared_cells: list[str], *, with_reruns: bool) -> Selection:
    """Choose the runs of one analysis (see the module docstring for the rules)."""
    sel = Selection("secondary" if with_reruns else "primary", [])
    candidates = _eligible(runs, sel, with_reruns)
    _fill_grid(sel, [r for r in candidates if r.policy == "grid"], with_reruns)
    _fill_live(sel, [r for r in candidates if r.policy != "grid"], with_reruns)
    cells = set(declared_cells) | {r.cell for r in sel.used}
    sel.cells = sorted(cells, key=cell_sort_key)
    sel.used.sort(key=lambda r: (r.at, r.run_id))
    for ids in sel.excluded.values():
        ids.sort()
    return sel


def _eligible(runs: list[RunView], sel: Selection, with_reruns: bool) -> list[RunView]:
    replaced = {r.replaces for r in runs if with_reruns and r.rerun and r.called_model and r.replaces}
    out = []
    for r in runs:
        if not r.called_model:
            sel.exclude("no_model_call", r.run_id)
        elif r.rerun and not with_reruns:
            sel.exclude("rerun", r.run_id)
        elif r.run_id in replaced:
            sel.exclude("replaced_by_rerun", r.run_id)
        else:
            out.append(r)
    return out


def _preference(with_reruns: bool):
    """Sort key: earliest first; in the secondary analysis reruns before the runs they redo."""
    return lambda r: ((not r.rerun) if with_reruns else False, r.at, r.run_id)


def _fill_grid(sel: Selection, runs: list[RunView], with_reruns: bool) -> None:
    for r in sorted(runs, key=_preference(with_reruns)):
        slot = sel.grid.setdefault(r.cell, {})
        if r.tier in slot:
            sel.exclude("duplicate", r.run_id)
            continue
        slot[r.tier] = r
        sel.used.append(r)


def _fill_live(sel: Selection, runs: list[RunView], with_reruns: bool) -> None:
    trials: dict[tuple[str, str], list[RunView]] = {}
    for r in runs:
        trials.setdefault((r.policy, r.trial or r.run_id), []).append(r)
    ordered = sorted(trials.items(), key=lambda kv: _preference(with_reruns)(
        min(kv[1], key=lambda r: (r.at, r.run_id))))
    for (policy, trial_id), members in ordered:
        members.sort(key=lambda r: (r.step, r.at, r.run_id))
        cell = members[0].cell
        by_cell = sel.live.setdefault(policy, {})
        if cell in by_cell or any(m.cell != cell for m in members):
            reason = _losing_reason(by_cell.get(cell), members)
            for m in members:
                sel.exclude(reason, m.run_id)
            continue
        by_cell[cell] = LiveTrial(trial_id, policy, cell, tuple(members))
        sel.used.extend(members)


def _losing_reason(winner: LiveTrial | None, members: list[RunView]) -> str:
    if winner is None:
        return "trial_spans_cells"
    if winner.runs[0].rerun and not members[0].rerun:
        return "superseded_by_rerun"
    return "duplicate"
