"""Stage 4 of the build: experiment pages, their cell lists and cell pages.

An experiment's analysis is recomputed only when its inputs change: the key is the list of
its run ids and the digests of its journal files (runs are immutable; journals only grow). When the
key matches the previous build, the cached summary renders the experiment page and every
cell page of the previous build is kept as it is.
"""

from __future__ import annotations

import bisect
import hashlib

from ..analysis import experiment_facts
from ..analysis.report import experiment_input
from ._charts import pass_vs_cost, throughput_by_quarter, time_per_policy, tokens_per_tier
from ._experiment import CachedRuns, analyse, journal_facts
from ._runpages import render_pages
from ._render import cell_url, cells_list_url, exp_dir, exp_url
from ._state import Build, RunFacts, digest_of

__all__ = ["stage_experiments", "CELLS_PER_PAGE", "experiment_ids", "exploratory_ids"]

CELLS_PER_PAGE = 100
CELL_BATCH = 500  # cell pages rendered per batch (their contexts hold run summaries)


def experiment_ids(b: Build) -> list[str]:
    """Pre-registered experiments: every journal but the exploratory ones (the studio's, listed
    apart by the index), and every experiment a run names."""
    seen = {f.experiment for f in b.summaries.facts if isinstance(f.experiment, str)}
    return sorted(seen | (set(b.store.experiments()) - set(exploratory_ids(b))))


def exploratory_ids(b: Build) -> list[str]:
    """Journals whose first record in reader order (the earliest of each writer file's first
    line) is an exploratory ``studio.open`` (``verify.exploratory``): they register nothing
    and decide nothing, so they never get an experiment page, a policy table or a place in
    the comparison."""
    from ..formats import jsonio
    from ..verify.exploratory import is_exploratory

    out = []
    for exp in b.store.experiments():
        heads = []
        for path in b.store.journal_paths(exp):
            with open(path, "rb") as f:
                line = f.readline()
            try:
                rec = jsonio.loads(line)
                heads.append((str(rec["at"]), path.stem, rec["kind"], rec["body"]))
            except (ValueError, KeyError, TypeError):
                continue
        if heads and is_exploratory([min(heads)[2:]]):
            out.append(exp)
    return out


def stage_experiments(b: Build) -> None:
    for exp in experiment_ids(b):
        _experiment(b, exp)
    for entry in b.experiments.values():
        facts = entry["facts"]
        for digest in (facts["spec_digest"], (facts["prereg"] or {}).get("digest")):
            if isinstance(digest, str) and b.store.has_blob(digest):
                b.objects.add(digest)


def _experiment(b: Build, exp: str) -> None:
    runs = [f for f in b.summaries.facts if f.experiment == exp]  # RunFacts: summaries are read per cell
    journal = [hashlib.sha256(p.read_bytes()).hexdigest() for p in b.store.journal_paths(exp)]
    key = digest_of({"runs": [f.id for f in runs], "journal": journal})
    cached = b.cache.experiments.get(exp)
    if cached and cached.get("key") == key:
        summary, facts = cached["summary"], cached["facts"]
        for rel in sorted(r for r in b.cache.pages if r.startswith(exp_dir(exp))):
            b.pages.keep(rel)
    else:
        got = experiment_input(b.reader(), exp, CachedRuns([f.id for f in runs], b.payload))
        result = analyse(got.data)
        summary = result["summary"]
        _cell_pages(b, exp, result, runs, summary)
        facts = {**journal_facts(got.data.journal), "spec": _spec_facts(got.data.spec), "spec_error": got.spec_error,
                 "compare": experiment_facts(got.data.spec, got.data.journal, ())}  # run times: added by the page
    b.experiments[exp] = {"key": key, "summary": summary, "facts": facts}
    several = len(experiment_ids(b)) > 1  # then stage 4b writes the comparison page
    page_key = digest_of({"experiment": key, "summary": summary, "facts": facts, "compare": several})
    if b.pages.unchanged(exp_url(exp), page_key):  # its charts need not be drawn again
        return
    view = experiment_view(exp, summary, facts, runs)
    view["compare"] = several
    b.pages.render(exp_url(exp), "experiment.html", key=page_key, title=view["title"],
                   simulated=view["simulated"], exp=view)


def _spec_facts(spec) -> dict:
    """The spec's title and notes (what the experiment page shows of it), as strings or None."""
    return {k: spec.get(k) if isinstance(spec.get(k), str) else None for k in ("title", "notes")}


def experiment_view(exp: str, summary: dict, facts: dict, runs: list[RunFacts]) -> dict:
    """The experiment page's data: the summary as the analysis wrote it, plus the charts."""
    primary = summary.get("primary") or {}
    policies = primary.get("policies") or []
    spec = facts["spec"]
    return {
        "id": exp, "title": summary.get("title") or (spec["title"] if spec["title"] is not None else exp), "notes": spec["notes"] or "",
        "simulated": bool(summary.get("simulated")) or any(r.simulated for r in runs),
        "prereg": facts["prereg"], "spec_digest": facts["spec_digest"], "spec_error": facts["spec_error"],
        "invocations": facts["invocations"], "summary": summary, "primary": primary,
        "corrections": (facts.get("compare") or {}).get("corrections") or [],
        "secondary": summary.get("secondary"), "policies": policies, "tiers": primary.get("tiers") or [],
        "families": primary.get("families") or [],
        "decisions": primary.get("decisions") or [], "runs": len(runs),
        "cells": primary.get("cells", 0), "cell_pages": max(1, -(-int(primary.get("cells") or 0) // CELLS_PER_PAGE)),
        "chart_pass": pass_vs_cost(policies), "chart_tokens": tokens_per_tier(primary.get("tiers") or []),
        "chart_time": time_per_policy(policies),
        "chart_speed": throughput_by_quarter(primary.get("tiers") or []),
    }


def headline(summary: dict) -> list[dict]:
    """The index page's short policy table: every policy row of the primary analysis."""
    return (summary.get("primary") or {}).get("policies") or []


# ---------------------------------------------------------------------------- cells

def _cell_pages(b: Build, exp: str, result: dict, runs: list[RunFacts], summary: dict) -> None:
    tiers = summary.get("tiers") or []
    live_runs: dict[str, list[str]] = {}  # cell -> its live (not grid) runs' ids, in run order
    for f in runs:
        s = b.summaries.get(f.id)
        if s["policy"].get("policy") != "grid":
            live_runs.setdefault(str(s["policy"].get("cell")), []).append(f.id)
    ids = _SortedIds(f.id for f in runs)
    order = {f"{p}/{m}": i for i, (p, m) in enumerate(
        (r["policy"], r["mode"]) for r in ((summary.get("primary") or {}).get("policies") or []))}
    cells = result["cells"]
    pages = max(1, -(-cells.count // CELLS_PER_PAGE))  # a cell list page per CELLS_PER_PAGE cells
    rows, jobs, page = [], [], 0
    for cell, slot, trials in cells:  # one batch's run summaries and one list page's rows held at a time
        row, job = _cell(b, exp, cell, slot, trials, tiers, order, ids, live_runs)
        rows.append(row)
        if job is not None:
            jobs.append(job)
        if len(jobs) >= CELL_BATCH:
            render_pages(b.workers, jobs)
            jobs = []
        if len(rows) == CELLS_PER_PAGE:
            page += 1
            _cells_list(b, exp, rows, page, pages, tiers)
            rows = []
    render_pages(b.workers, jobs)
    if rows or not page:
        _cells_list(b, exp, rows, page + 1, pages, tiers)


def _cells_list(b: Build, exp: str, rows: list[dict], page: int, pages: int, tiers: list) -> None:
    b.pages.render(cells_list_url(exp, page), "cells.html", key=digest_of({"rows": rows, "pages": pages, "tiers": tiers}),
                   title=f"{exp}: cells", exp_id=exp, rows=rows, page=page, pages=pages, tiers=tiers,
                   simulated=False)


class _SortedIds:
    """``in`` over run ids, held as one sorted list (a set of 20,000 ids was about 1 MB)."""

    def __init__(self, ids):
        self._ids = sorted(ids)

    def __contains__(self, run_id) -> bool:
        i = bisect.bisect_left(self._ids, run_id)
        return i < len(self._ids) and self._ids[i] == run_id


def _cell(b: Build, exp: str, cell: str, slot: dict, trials: list, tiers: list, order: dict, ids: "_SortedIds",
          live_runs: dict) -> tuple[dict, tuple | None]:
    """A cell's row on the cells list, and its page's job (None when the page is unchanged).
    ``slot``: its grid runs' ids by tier; ``trials``: its policy trials (``CellSpool``)."""
    grid = {t: (b.summaries.get(rid) if rid in ids else None) for t, rid in slot.items()}
    trials = sorted(trials, key=lambda t: (order.get(f"{t['policy']}/{t['mode']}", 999), t["policy"], t["mode"]))
    ctx = {"exp": exp, "cell": cell, "tiers": tiers, "grid": grid, "trials": trials,
           "live": [b.summaries.get(rid) for rid in live_runs.get(cell, [])],
           "simulated": any(s and s["simulated"] for s in grid.values())}
    rel, key = cell_url(exp, cell), digest_of(ctx)
    job = None
    if not b.pages.unchanged(rel, key):
        job = (rel, "cell.html", {"title": f"Cell {cell}", **ctx})
        b.pages.record(rel, key, written=True)
    row = {"cell": cell, "grid": {t: (g["status"] if g else None) for t, g in grid.items()},
           "ladder": next((t for t in trials if t["policy"] == "ladder" and t["mode"] == "replayed"), None)}
    return row, job
