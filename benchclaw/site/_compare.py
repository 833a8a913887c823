"""Stage 4b of the build: the comparison page across experiments (``compare.html``).

Built when the runs hold more than one experiment. The page is ``analysis.compare`` over
the very summaries the experiment pages render (cached by stage 4), so a figure here cannot
disagree with its experiment's page; every figure links to its experiment's policy table
and cell list. Experiments are shown in the order they were registered (then by id): the
order in which the claims were made.
"""

from __future__ import annotations

from decimal import Decimal, InvalidOperation

from ..analysis import compare
from ._charts import across_experiments, claim_strip
from ._exppages import experiment_ids
from ._state import Build, digest_of

__all__ = ["stage_compare", "COMPARE_PAGE"]

COMPARE_PAGE = "compare.html"


def _dec(text) -> Decimal | None:
    try:
        return None if text in (None, "inf", "-inf") else Decimal(str(text))
    except InvalidOperation:
        return None


def _subjects(b: Build) -> list[tuple[dict, dict]]:
    items = []
    for exp in experiment_ids(b):
        entry = b.experiments.get(exp)
        if not entry or not entry.get("summary"):
            continue
        facts = dict((entry["facts"] or {}).get("compare") or {})
        times = sorted(f.at for f in b.summaries.facts if f.experiment == exp)
        facts["first_run"], facts["last_run"] = (times[0], times[-1]) if times else (None, None)
        items.append((entry["summary"], facts))
    return sorted(items, key=lambda it: (it[1].get("registered_at") or "~", it[0]["experiment"]))


def _bounds(obj: dict | None) -> tuple | None:
    """(low, middle, high) of a ``{"low", "high"}`` object, or None."""
    lo, hi = _dec((obj or {}).get("low")), _dec((obj or {}).get("high"))
    return None if lo is None or hi is None else (lo, (lo + hi) / 2 if lo != hi else lo, hi)


def _rate(r: dict) -> tuple | None:
    w = r.get("wilson95") or [r.get("value"), r.get("value")]
    v, lo, hi = _dec(r.get("value")), _dec(w[0]), _dec(w[1])
    return None if v is None or lo is None or hi is None else (lo, v, hi)


def _series(comparison: dict, axis: str) -> list[tuple[str, list]]:
    """One series per chosen policy (for ``change``, every one but the baseline)."""
    out = []
    for p in comparison["policies"]:
        if axis == "change" and p["policy"] == comparison["baseline"]:
            continue
        get = {"rate": lambda f: _rate(f["pass_rate"]), "money": lambda f: _bounds(f["cost_per_task"]),
               "change": lambda f: _bounds(f["vs_baseline"])}[axis]
        out.append((p["policy"], [None if f is None else get(f) for f in p["results"]]))
    return out


def stage_compare(b: Build) -> None:
    items = _subjects(b)
    b.comparison = None
    if len(items) < 2:
        return
    comparison = compare(items)
    b.comparison = comparison
    key = digest_of({"comparison": comparison})
    if b.pages.unchanged(COMPARE_PAGE, key):
        return
    ids = [e["experiment"] for e in comparison["experiments"]]
    charts = {"pass": across_experiments(ids, _series(comparison, "rate"), axis="rate",
                                         title="Pass rate of each chosen policy, experiment by experiment"),
              "cost": across_experiments(ids, _series(comparison, "money"), axis="money",
                                         title="Cost per task of each chosen policy, experiment by experiment"),
              "change": across_experiments(ids, _series(comparison, "change"), axis="change",
                                           title=f"Cost per task against {comparison['baseline']}, experiment "
                                                 "by experiment") if comparison["baseline"] else None,
              "claims": claim_strip(ids, comparison["hypotheses"])}
    b.pages.render(COMPARE_PAGE, "compare.html", key=key, title="Across experiments",
                   simulated=any(e["simulated"] for e in comparison["experiments"]), cmp=comparison,
                   ids=ids, charts=charts)
