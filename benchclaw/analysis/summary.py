"""``summarise(data) -> dict``: the summary.json object of one experiment (FORMAT.md, "Summary").

One pure pipeline, in the order a person would describe it:

1. condense every run of the experiment (unreadable runs are listed, not fatal);
2. for the primary analysis (no reruns) and, when reruns exist, the secondary one:
   a. select the runs and group them into cells, grid slots and live trials;
   b. build every policy's trials: live where it ran live, replayed over the grid always
      (``oracle`` included);
   c. compute each policy's and each tier's row, and each task family's breakdown;
   d. evaluate every hypothesis's rule over those rows;
3. list deviations (with the runs they affected), stops and registration problems.

The result holds only str, int, bool, None, lists and dicts: money as decimal strings,
rates as exact fractions plus fixed-digit strings. The verifier recomputes it from a
bundle and compares canonical JSON bytes, so nothing here may depend on a clock, the
order of a dict built from a set, or a float.

Memory and speed: the analysis runs cell by cell (``analysis.stream``): a cell's runs are
selected, replayed and added to the rows (``RowStats``: counts, exact sums, the values a
median needs), then dropped, so what is held per run is at most its place in a spill
file. The cyclic collector is paused while it runs (``gc_paused``), and per-run totals are
computed once and cached on the frozen views. ``tests/test_analysis_golden.py`` pins the
bytes, so none of this may change a result.
"""

from __future__ import annotations

import contextlib
import decimal
import gc
from fractions import Fraction
from typing import Iterable, Mapping

from ..formats import policies
from ..errors import FormatError
from .cells import Selection, select
from .inputs import ExperimentData, RunView, SpecView, parse_cell, spec_view, view_run
from ..formats.interval import UNKNOWN, Interval, to_decimal
from .metrics import MONEY_DIGITS, Row, Sample, make_row, money_text
from .rowstats import RowStats
from .stream import RunGroups, StreamAnalysis, analyse, family_of  # noqa: F401  (family_of: re-exported)
from ..formats.rules import RuleError, parse_rule
from .trials import ORACLE, Trial, live_trials, replayed_trials
from .wilson import fixed, rate_obj

__all__ = ["summarise", "summarise_cells", "summarise_with_trials", "SUMMARY_VERSION", "Analysis",
           "spec_tiers", "policy_trials", "gc_paused"]

SUMMARY_VERSION = 4  # 2: per-family breakdown; 3: bounds rounded outward (were to nearest); 4: tier health
MODES = ("live", "replayed")


# ---------------------------------------------------------------------------- 1. runs

def _views(data: ExperimentData) -> tuple[list[RunView], list[dict]]:
    cached = data.views
    return _readable(data, sorted(set(data.runs) | set(cached) if cached else data.runs), cached or {})


def _readable(data: ExperimentData, run_ids: Iterable[str],
              cached: Mapping[str, RunView]) -> tuple[list[RunView], list[dict]]:
    """The experiment's views of ``run_ids`` (``cached`` ones as they are, the others read
    from ``data.runs``), and the runs that cannot be read."""
    views, bad = [], []
    for run_id in run_ids:
        view = cached.get(run_id)
        if view is None:
            try:
                view = view_run(run_id, data.runs[run_id], data.reservations)
            except FormatError as e:
                bad.append({"run": run_id, "error": str(e)})
                continue
        if view.experiment == data.experiment:
            views.append(view)
    return views, bad


def _groups(data: ExperimentData) -> tuple[RunGroups, list[dict]]:
    """The experiment's views grouped by cell (``data.groups`` when the fold made them, with
    the runs it could not condense read here), and the runs that cannot be read."""
    groups = RunGroups() if data.groups is None else data.groups
    views, bad = _views(data) if data.groups is None else _readable(data, sorted(data.runs), {})
    for v in views:
        groups.add(v)
    return groups, bad


def _as_view(spec: SpecView | Mapping) -> SpecView:
    return spec if isinstance(spec, SpecView) else spec_view(spec)


def spec_tiers(spec: SpecView | Mapping, views: list[RunView]) -> list[str]:
    """The grid's tiers, cheapest first, from the spec (or, lacking one, as seen in runs).
    ``spec`` is a SpecView or the parsed spec dict (raises FormatError for a bad one)."""
    spec = _as_view(spec)
    return list(spec.tiers) if spec.tiers is not None else sorted({v.tier for v in views})


def _live_names(spec: SpecView | Mapping, sel: Selection) -> list[str]:
    """The spec's live policies, then any other policy that has live runs."""
    names = list(_as_view(spec).live)
    return names + sorted(n for n in sel.live if n not in names)


def _declared_cells(data: ExperimentData) -> list[str]:
    """Cells every grid.start declared (a malformed id is the journal check's to report)."""
    cells: set[str] = set()
    for rec in data.journal:
        if rec.kind == "grid.start" and isinstance(rec.body.get("cells"), list):
            cells.update(c for c in rec.body["cells"] if isinstance(c, str) and _is_cell(c))
    return sorted(cells)


def _is_cell(cell: str) -> bool:
    try:
        parse_cell(cell)
    except FormatError:
        return False
    return True


# ---------------------------------------------------------------------------- 2. analysis

class Analysis:
    """The rows of one analysis (``stream.StreamAnalysis``) and the metric lookup its
    decision rules use."""

    def __init__(self, an: StreamAnalysis):
        self.an, self.tiers, self.live = an, an.tiers, an.live
        self.rows, self.tier_rows = an.rows, an.tier_rows

    def known_policies(self) -> list[str]:
        return policies.policy_names(self.tiers) + [ORACLE]

    def row(self, policy: str, mode: str | None) -> Row:
        """Raises RuleError for a policy that is not in the grid or did not run live."""
        if policy not in self.known_policies() and policy not in self.live:
            raise RuleError(f"unknown policy {policy!r} (known: {', '.join(self.known_policies())})")
        mode = mode or ("live" if (policy, "live") in self.rows else "replayed")
        if (policy, mode) not in self.rows:
            raise RuleError(f"policy {policy!r} has no {mode} results (live policies: "
                            f"{', '.join(self.live) or 'none'})")
        return self.rows[(policy, mode)]

    def tier_row(self, tier: str) -> Row:
        if tier not in self.tier_rows:
            raise RuleError(f"unknown tier {tier!r} (tiers: {', '.join(self.tiers)})")
        return self.tier_rows[tier]

    def gap_closed(self, policy: str, mode: str | None) -> Interval:
        if not self.tiers:
            return UNKNOWN
        base = self.row(f"always:{self.tiers[0]}", "replayed").pass_interval()
        best = self.row(ORACLE, "replayed").pass_interval()
        return (self.row(policy, mode).pass_interval() - base) / (best - base)

    def metric(self, name: str, subject: str, mode: str | None) -> Interval:
        if name in _TIER_METRICS:
            return _TIER_METRICS[name](self.tier_row(subject))
        if name == "gap_closed":
            return self.gap_closed(subject, mode)
        return _POLICY_METRICS[name](self.row(subject, mode))


_POLICY_METRICS = {
    "pass_rate": RowStats.pass_interval, "pass_k": RowStats.pass_k_interval,
    "cost_per_task": RowStats.cost_per_task, "cost_per_pass": RowStats.cost_per_pass,
    "total_cost": RowStats.total_cost, "mean_time": RowStats.mean_time, "median_time": RowStats.median_time,
    "pass_rate_injected": lambda r: r.split_rate(True),
    "pass_rate_clean": lambda r: r.split_rate(False),
}
_TIER_METRICS = {"attempt_rate": RowStats.attempt_rate, "tier_pass_rate": RowStats.pass_interval,
                 "turns": RowStats.turns,
                 "error_rate": lambda r: r.health.error_rate(), "timeout_rate": lambda r: r.health.timeout_rate(),
                 "throughput": lambda r: r.health.throughput(),
                 "throughput_spread": lambda r: r.health.throughput_spread(), "ttft": lambda r: r.health.ttft()}


def _trial_row(trials: dict[str, Trial], cells: list[str], lures) -> Row:
    samples = [Sample(t.cell, t.outcome.passed, t.outcome.cost_low, t.outcome.cost_high,
                      t.outcome.elapsed_ms, t.runs) for t in trials.values() if t.complete]
    incomplete = [r for t in trials.values() if not t.complete for r in t.runs]
    return make_row(samples, incomplete, cells, len(cells) - len(samples), lures)


def _all_trials(sel: Selection, spec: SpecView, tiers: list[str],
                memo: dict | None = None) -> dict[tuple[str, str], dict[str, Trial]]:
    out = {(n, "live"): t for n, t in live_trials(sel, tiers, _live_names(spec, sel)).items()}
    names = policies.policy_names(tiers) + [ORACLE]
    out.update({(n, "replayed"): t for n, t in replayed_trials(sel, tiers, names, memo).items()})
    return out


def policy_trials(data: ExperimentData, *, with_reruns: bool = False):
    """The trials behind the policy rows, for a consumer that shows them cell by cell (the
    site): ``(selection, tiers, {(policy, mode): {cell: Trial}})``. Raises as
    ``summarise`` does for a bad spec. (``summarise_with_trials`` gives the primary
    analysis's trials together with the summary, without computing them twice.)"""
    with gc_paused():
        spec = spec_view(data.spec, f"{data.experiment} spec")
        views, _ = _views(data)
        tiers = spec_tiers(spec, views)
        sel = select(views, _declared_cells(data), with_reruns=with_reruns)
        return sel, tiers, _all_trials(sel, spec, tiers)


# ---------------------------------------------------------------------------- JSON objects

def _fixed(x, digits: int) -> str:
    """An exact rational with ``digits`` fractional digits, ROUND_HALF_EVEN."""
    return fixed(to_decimal(x, digits, decimal.ROUND_HALF_EVEN), digits)


def _bounds(iv: Interval, digits: int = 4) -> list[str] | None:
    """``[low, high]`` rounded outward (low toward -inf, high toward +inf), so the written
    interval always contains the exact one; an exact value (low == high) is written as
    itself rounded half to even, as a decision term is (FORMAT.md "Summary", rounding)."""
    if not iv.bounded:
        return None
    if iv.lo == iv.hi:
        point = _fixed(iv.lo, digits)
        return [point, point]
    return [fixed(to_decimal(iv.lo, digits, decimal.ROUND_FLOOR), digits),
            fixed(to_decimal(iv.hi, digits, decimal.ROUND_CEILING), digits)]


def _money(iv: Interval) -> dict | None:
    if iv == UNKNOWN:
        return None
    return {"low": money_text(iv.lo, False), "high": money_text(iv.hi, True),
            "known": iv.lo == iv.hi}


def _seconds(iv: Interval) -> str | None:
    return None if iv == UNKNOWN else _fixed(iv.lo, 3)


def _pass_k_obj(row: RowStats) -> dict:
    groups, ok, unknown, k = row.pass_k()
    return {"k": k, "groups": groups, "passed": ok, "unknown": unknown,
            "fraction": f"{ok}/{groups}" if groups and not unknown else None,
            "bounds": _bounds(row.pass_k_interval())}


def _common(row: RowStats) -> dict:
    split = row.split_by_lures()
    return {
        "cells": row.n_cells, "samples": row.n, "missing": row.missing,
        "pass_rate": {**rate_obj(row.passed, row.n), "bounds": _bounds(row.pass_interval())},
        "pass_k": _pass_k_obj(row),
        "cost": {"total": _money(row.total_cost()), "per_task": _money(row.cost_per_task()),
                 "per_pass": _money(row.cost_per_pass()) if row.passed else None,
                 "unknown_calls": row.unknown_calls()},
        "time_s": {"mean": _seconds(row.mean_time()), "median": _seconds(row.median_time())},
        "tokens": row.tokens(), "finish": row.finishes(), "statuses": row.statuses(),
        "injection": row.injection(),
        "under_attack": None if split is None else {
            "injected": rate_obj(split[0][1], split[0][0]), "clean": rate_obj(split[1][1], split[1][0])},
    }


def _policy_obj(an: Analysis, name: str, mode: str) -> dict:
    row = an.rows[(name, mode)]
    return {"policy": name, "mode": mode, **_common(row),
            "gap_closed": _bounds(an.gap_closed(name, mode))}


def _tier_obj(an: Analysis, tier: str) -> dict:
    row = an.tier_rows[tier]
    inj = row.injection()
    turns = row.turns()
    return {"tier": tier, **_common(row),
            "turns_mean": None if turns == UNKNOWN else _fixed(turns.lo, 2),
            "attempt_rate": rate_obj(inj["runs_attempted"], inj["runs_exposed"]),
            "health": _health_obj(row.health)}


def _nearest_rank(values: tuple, p: int):
    return values[max(0, -(-p * len(values) // 100) - 1)]


def _spread_obj(values: tuple, scale: int, digits: int) -> dict:
    if not values:
        return {"calls": 0, "median": None, "p10": None, "p90": None}
    med = _median_of(values)
    return {"calls": len(values), "median": _fixed(Fraction(med) / scale, digits),
            "p10": _fixed(Fraction(_nearest_rank(values, 10)) / scale, digits),
            "p90": _fixed(Fraction(_nearest_rank(values, 90)) / scale, digits)}


def _median_of(values: tuple):
    mid = len(values) // 2
    return Fraction(values[mid]) if len(values) % 2 else Fraction(values[mid - 1] + values[mid], 2)


def _health_obj(h) -> dict:
    """summary.json's ``health`` of a tier (FORMAT "Summary"): calls, errors, timeouts,
    output tokens per second (median, p10, p90, per span of the duration, max/min span
    ratio) and the streamed calls' time to first token in seconds."""
    spread = h.throughput_spread()
    return {"calls": h.calls, "errors": h.errors, "cut_off": h.cut_off, "error_rate": _bounds(h.error_rate()),
            "runs": h.runs, "timeout_runs": h.timeout_runs, "timeout_rate": _bounds(h.timeout_rate()),
            "tokens_per_s": {**_spread_obj(h.speeds, 1, 1),
                             "windows": [None if w is None else _fixed(w, 1) for w in h.windows],
                             "spread": None if spread == UNKNOWN else _fixed(spread.lo, 2)},
            "ttft_s": _spread_obj(h.ttfts_ms, 1000, 3)}


def _policy_order(an: Analysis) -> list[tuple[str, str]]:
    order = {n: i for i, n in enumerate(an.known_policies())}
    keys = sorted(an.rows, key=lambda k: (order.get(k[0], len(order)), k[0], MODES.index(k[1])))
    return keys


def _term(text: str, iv: Interval) -> dict:
    """A metric a rule read: exact points rounded to nearest, bounds rounded outward."""
    if iv.exact:
        point = _fixed(iv.lo, MONEY_DIGITS).rstrip("0").rstrip(".")
        return {"expr": text, "low": point, "high": point, "exact": True}
    return {"expr": text, "low": money_text(iv.lo, False), "high": money_text(iv.hi, True),
            "exact": False}


def _decisions(an: Analysis, spec: SpecView) -> list[dict]:
    out = []
    for hid, text, rule in spec.hypotheses:
        item = {"id": hid, "text": text, "rule": rule, "decision": "error", "terms": [],
                "error": None}
        try:
            ev = parse_rule(item["rule"], f"hypothesis {hid}").evaluate(an)
            item["decision"] = ev.decision
            item["terms"] = [_term(t.text, t.value) for t in ev.terms]
        except RuleError as e:
            item["error"] = str(e)
        out.append(item)
    return out


def _family_obj(an: Analysis, family: str) -> dict:
    """One family's pass rate and cost per task at each tier (its runs at that tier, as a
    tier row counts them), and, per cell, the first tier (cheapest first) whose grid run
    on the cell passed: where a ladder would stop."""
    fam = an.an.families[family]
    tiers = [{"tier": tier, "pass_rate": rate_obj(row.passed, row.n), "cost_per_task": _money(row.cost_per_task())}
             for tier, row in fam["tiers"].items()]
    return {"family": family, "cells": fam["cells"], "tiers": tiers, "first_pass": dict(fam["first"])}


def _families(an: Analysis) -> list[dict]:
    return [_family_obj(an, f) for f in sorted(an.an.families)]


_LABELS = {"primary": "every run that called the model; reruns excluded",
           "secondary": "reruns stand in for the runs they replace"}


def _analysis_obj(an: Analysis, spec: SpecView, label: str) -> dict:
    return {
        "label": label, "description": _LABELS[label], "cells": an.an.n_cells,
        "runs": {"used": an.an.n_used,
                 "excluded": {k: v for k, v in sorted(an.an.excluded.items())}},
        "policies": [_policy_obj(an, n, m) for n, m in _policy_order(an)],
        "tiers": [_tier_obj(an, t) for t in an.tiers],
        "families": _families(an),
        "decisions": _decisions(an, spec),
    }


# ---------------------------------------------------------------------------- 3. journal

def _registered(data: ExperimentData) -> list[tuple[str, str]]:
    return [(r.at, r.body["spec_digest"]) for r in data.journal
            if r.kind in ("prereg", "deviation") and isinstance(r.body.get("spec_digest"), str)]


class _JournalFacts:
    """The deviations (with the runs each affected) and the registration problems, gathered
    as the analysis visits each view once."""

    def __init__(self, data: ExperimentData):
        self.devs = [r for r in data.journal if r.kind == "deviation"]
        self.by_digest: dict = {r.body.get("spec_digest"): [] for r in self.devs}
        self.registered = _registered(data)
        self.problems: list[dict] = []

    def visit(self, v: RunView) -> None:
        runs = self.by_digest.get(v.spec_digest)
        if runs is not None:
            runs.append(v.run_id)
        if not any(d == v.spec_digest and at < v.at for at, d in self.registered):
            self.problems.append({"run": v.run_id, "problem": f"spec digest {v.spec_digest} was not "
                                  "registered before the run started"})

    def deviations(self) -> list[dict]:
        out = []
        for r in self.devs:
            digest = r.body.get("spec_digest")
            out.append({"at": r.at, "reason": r.body.get("reason"), "spec_digest": digest,
                        "previous_digest": r.body.get("previous_digest"),
                        "runs": sorted(self.by_digest[digest])})
        return out

    def registration_problems(self) -> list[dict]:
        return sorted(self.problems, key=lambda p: p["run"])


def _stops(data: ExperimentData) -> list[dict]:
    return [{"at": r.at, "invocation": r.body.get("invocation"), "rule": r.body.get("rule"),
             "detail": r.body.get("detail"),
             "cells_left": len(r.body.get("cells_left") or [])}
            for r in data.journal if r.kind == "stop"]


# ---------------------------------------------------------------------------- entry point

@contextlib.contextmanager
def gc_paused():
    """Pause the cyclic garbage collector (restored on exit; nests). The analysis makes
    hundreds of thousands of small acyclic objects next to millions of record objects it
    reads, so each generation-2 collection rescans them all: about a third of the time of
    ``summarise`` on 10,000 runs went there. Reference counting still frees everything."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def summarise(data: ExperimentData) -> dict:
    """The summary.json object (FORMAT.md, "Summary"). Never raises for odd or partial runs:
    an empty experiment gives empty tables, a bad rule a decision ``error``, an unreadable
    run a line in ``unreadable_runs``. Raises FormatError for a spec of the wrong shape."""
    with gc_paused():
        return _summarise(data)[0]


def summarise_cells(data: ExperimentData, on_cell) -> dict:
    """``summarise(data)``, handing each cell of the primary analysis, in order, to
    ``on_cell(cell, grid slot {tier: RunView}, {(policy, mode): Trial})`` as it is analysed
    (the trials behind its policy rows), for a consumer that shows them cell by cell and
    need not hold them all (the site). Raises as ``summarise`` does."""
    with gc_paused():
        return _summarise(data, on_cell)[0]


def summarise_with_trials(data: ExperimentData):
    """``(summarise(data), (selection, tiers, {(policy, mode): {cell: Trial}}))``: the
    summary and the primary analysis's trials behind its policy rows (what
    ``policy_trials(data)`` returns; the selection holds its cells and grid slots), computed
    once, for a consumer that shows both and can hold every cell's trials (the site uses
    ``summarise_cells``, which does not hold them). Raises as ``summarise`` does."""
    sel = Selection("primary", [])
    trials: dict[tuple[str, str], dict[str, Trial]] = {}

    def keep(cell: str, slot: dict, got: dict) -> None:
        sel.cells.append(cell)
        if slot:
            sel.grid[cell] = slot
        for key, trial in got.items():
            trials.setdefault(key, {})[cell] = trial

    with gc_paused():
        summary, tiers = _summarise(data, keep)
    return summary, (sel, tiers, trials)


def _summarise(data: ExperimentData, on_cell=None):
    spec = spec_view(data.spec, f"{data.experiment} spec")
    groups, unreadable = _groups(data)
    tiers = list(spec.tiers) if spec.tiers is not None else sorted(groups.tiers)
    journal = _JournalFacts(data)
    analyses = analyse(groups, _declared_cells(data), tiers, list(spec.live), data.tasks_with_lures,
                       spec.all_tiers, visit=journal.visit, on_cell=on_cell)
    objs = {label: None if an is None else _analysis_obj(Analysis(an), spec, label) for label, an in analyses.items()}
    return {
        "v": SUMMARY_VERSION, "format": "benchclaw.summary", "experiment": data.experiment,
        "title": spec.title, "spec_digest": data.spec_digest,
        "simulated": groups.simulated, "tiers": tiers,
        "live_policies": list(spec.live), "lures_known": data.tasks_with_lures is not None,
        "primary": objs["primary"], "secondary": objs["secondary"],
        "deviations": journal.deviations(), "stops": _stops(data),
        "registration_problems": journal.registration_problems(),
        "unreadable_runs": unreadable,
    }, tiers
