"""Across experiments: the chosen policies side by side, what changed, and how each claim moved.

The seed's headline was a table across experiments ("ladder vs always-Ultra: E01 | E02 |
E04") and its story was a claim that changed as data came in, plus two published
corrections. ``compare`` builds that view from what the per-experiment report already
computed: each experiment's ``summarise`` object and a few facts from its spec and journal
(``experiment_facts``). It computes no pass rate or cost of its own; every figure is copied
from a summary, so the comparison cannot disagree with an experiment's page. The one
derived number, a policy's cost change against the baseline, is taken from those summary
strings with the worst case at each end (low: cheapest policy against dearest baseline).

Hypotheses are matched across experiments by their text (whitespace and case folded), since
ids are often renumbered from one spec to the next; each match lists every id it had.
Pure and standard-library only, like the rest of the analysis.
"""

from __future__ import annotations

import decimal
import re
from fractions import Fraction
from typing import Iterable, Mapping, Sequence

from ..formats.records import Record
from .inputs import parse_cell
from .wilson import fixed

__all__ = ["COMPARE_VERSION", "experiment_facts", "corrections_of", "compare", "default_policies",
           "movement", "CORRECTION_FIELDS"]

COMPARE_VERSION = 1
# The text fields of a `correction` journal record (FORMAT.md §8), in the order people read them.
CORRECTION_FIELDS = ("claim", "wrong", "why", "corrected")


# ---------------------------------------------------------------------------- facts

def corrections_of(journal: Iterable[Record]) -> list[dict]:
    """The experiment's ``correction`` records, in journal order, as plain dicts."""
    out = []
    for rec in journal:
        if rec.kind != "correction":
            continue
        b = rec.body
        item = {"at": rec.at, **{k: str(b.get(k) or "") for k in CORRECTION_FIELDS}}
        item["hypothesis"] = b.get("hypothesis") if isinstance(b.get("hypothesis"), str) else None
        runs = b.get("runs")
        item["runs"] = sorted(r for r in runs if isinstance(r, str)) if isinstance(runs, list) else []
        out.append(item)
    return out


def _grid(journal: Iterable[Record]) -> tuple[list[str], list[str], list[str]]:
    tasks, profiles, seeds = set(), set(), set()
    for rec in journal:
        if rec.kind != "grid.start" or not isinstance(rec.body.get("cells"), list):
            continue
        for cell in rec.body["cells"]:
            try:
                task, profile, seed = parse_cell(cell)
            except Exception:  # noqa: BLE001 - a malformed cell is the journal check's to report
                continue
            tasks.add(task)
            profiles.add(profile)
            seeds.add(seed)
    return sorted(tasks), sorted(profiles), sorted(seeds, key=lambda s: (len(s), s))


def experiment_facts(spec: Mapping, journal: Sequence[Record], run_times: Iterable[str]) -> dict:
    """What a comparison shows of an experiment besides its summary: when it was registered
    and run, its output-token budget and grid (tasks, profiles and seeds from the cells its
    ``grid.start`` records declared), and its corrections. Never raises for odd input."""
    settings = spec.get("settings") if isinstance(spec.get("settings"), Mapping) else {}
    grid = spec.get("grid") if isinstance(spec.get("grid"), Mapping) else {}
    tasks, profiles, seeds = _grid(journal)
    times = sorted(t for t in run_times if isinstance(t, str))
    prereg = next((r.at for r in journal if r.kind == "prereg"), None)
    max_tokens = settings.get("max_tokens")
    return {"registered_at": prereg, "first_run": times[0] if times else None,
            "last_run": times[-1] if times else None,
            "max_tokens": max_tokens if isinstance(max_tokens, int) and not isinstance(max_tokens, bool) else None,
            "catalog": grid.get("catalog") if isinstance(grid.get("catalog"), str) else None,
            "tasks": tasks, "profiles": profiles, "seeds": seeds,
            "corrections": corrections_of(journal)}


# ---------------------------------------------------------------------------- policies

_QUOTED = re.compile(r'"([^"\\]+)"')


def default_policies(summaries: Sequence[Mapping]) -> list[str]:
    """The policies the experiments chose: every one run live, then every policy a
    hypothesis's rule names (in order of appearance), then last the baseline
    ``always:<dearest tier>`` of each: the seed's "ladder vs always Ultra"."""
    names: list[str] = []
    for s in summaries:
        names += [p for p in s.get("live_policies") or [] if p not in names]
    for s in summaries:
        an = s.get("primary") or {}
        rows = {p["policy"] for p in an.get("policies") or []}
        for d in an.get("decisions") or []:
            for t in d.get("terms") or []:
                names += [p for p in _QUOTED.findall(t["expr"]) if p in rows and p not in names]
    baselines = [f"always:{s['tiers'][-1]}" for s in summaries if s.get("tiers")]
    names = [p for p in names if p not in baselines]
    return names + [b for i, b in enumerate(baselines) if b not in baselines[:i]]


def _row(analysis: Mapping | None, policy: str) -> dict | None:
    """The policy's row as a decision rule reads it: live where it ran live, else replayed."""
    rows = {(p["policy"], p["mode"]): p for p in (analysis or {}).get("policies") or []}
    return rows.get((policy, "live")) or rows.get((policy, "replayed"))


def _frac(text) -> Fraction | None:
    try:
        return None if text in (None, "inf", "-inf") else Fraction(decimal.Decimal(str(text)))
    except (decimal.InvalidOperation, ValueError):
        return None


def _pct(x: Fraction, rounding: str) -> str:
    ctx = decimal.Context(prec=60, rounding=rounding)
    return fixed(ctx.divide(decimal.Decimal(x.numerator), decimal.Decimal(x.denominator)).quantize(
        decimal.Decimal("0.0001"), rounding=rounding), 4)


def _vs(row: Mapping, base: Mapping) -> dict | None:
    """Relative change of cost per task against the baseline, worst case at each end."""
    p, b = (row.get("cost") or {}).get("per_task"), (base.get("cost") or {}).get("per_task")
    if not p or not b:
        return None
    pl, ph, bl, bh = (_frac(p.get("low")), _frac(p.get("high")), _frac(b.get("low")), _frac(b.get("high")))
    if None in (pl, ph, bl, bh) or bl <= 0:
        return None
    if p.get("known") and b.get("known"):  # both exact (a mean's 12-digit rounding aside): one ratio
        x = _pct(pl / bl - 1, decimal.ROUND_HALF_EVEN)
        return {"low": x, "high": x}
    low, high = pl / bh - 1, ph / bl - 1
    return {"low": _pct(low, decimal.ROUND_FLOOR), "high": _pct(high, decimal.ROUND_CEILING)}


def _figure(analysis: Mapping | None, policy: str, baseline: str | None) -> dict | None:
    row = _row(analysis, policy)
    if row is None:
        return None
    base = _row(analysis, baseline) if baseline and baseline != policy else None
    return {"mode": row["mode"], "samples": row["samples"], "missing": row["missing"],
            "pass_rate": row["pass_rate"], "cost_per_task": row["cost"]["per_task"],
            "unknown_calls": row["cost"]["unknown_calls"], "mean_time_s": row["time_s"]["mean"],
            "vs_baseline": _vs(row, base) if base else None}


def _policy_obj(summaries: Sequence[Mapping], policy: str, baseline: str | None) -> dict:
    results = []
    for s in summaries:
        fig = _figure(s.get("primary"), policy, baseline)
        if fig is not None:
            second = _figure(s.get("secondary"), policy, baseline)
            fig["secondary"] = second and {k: second[k] for k in ("pass_rate", "cost_per_task", "vs_baseline")}
        results.append(fig)
    return {"policy": policy, "results": results}


# ---------------------------------------------------------------------------- hypotheses

def _key(text: str, hid: str) -> str:
    """Hypotheses are the same claim when their texts are; one without text is matched by id."""
    words = " ".join(text.split()).casefold()
    return words if words else f"\0{hid}"


def movement(decisions: Sequence[str | None]) -> str:
    """How a claim moved over the experiments that tested it, in order: ``single`` (tested
    once), ``held`` (the same decision every time), ``flipped`` (supported somewhere and
    refuted somewhere), ``became_inconclusive`` (decided, then inconclusive at the end),
    ``resolved`` (inconclusive first, decided at the end), ``unsettled`` (otherwise: e.g.
    inconclusive every time), ``error`` (a rule could not be evaluated somewhere)."""
    seen = [d for d in decisions if d is not None]
    if "error" in seen:
        return "error"
    if len(seen) < 2:
        return "single"
    if len(set(seen)) == 1:
        return "held" if seen[0] != "inconclusive" else "unsettled"
    if "supported" in seen and "refuted" in seen:
        return "flipped"
    if seen[-1] == "inconclusive":
        return "became_inconclusive"
    if seen[0] == "inconclusive":
        return "resolved"
    return "unsettled"


def _hypotheses(summaries: Sequence[Mapping]) -> list[dict]:
    claims: dict[str, dict] = {}
    for i, s in enumerate(summaries):
        for d in (s.get("primary") or {}).get("decisions") or []:
            claim = claims.setdefault(_key(d["text"], d["id"]), {"text": " ".join(d["text"].split()), "ids": [],
                                                        "results": [None] * len(summaries)})
            if claim["results"][i] is None:  # a spec repeating a text: its first hypothesis counts
                claim["results"][i] = {"id": d["id"], "rule": d["rule"], "decision": d["decision"],
                                       "terms": d["terms"], "error": d["error"]}
            if d["id"] not in claim["ids"]:
                claim["ids"].append(d["id"])
    out = []
    for claim in claims.values():  # first seen first: the earliest experiment's order
        claim["movement"] = movement([r and r["decision"] for r in claim["results"]])
        out.append(claim)
    return out


# ---------------------------------------------------------------------------- spec differences

_SPEC_ROWS = (("max_tokens", "output tokens (max_tokens)"), ("tiers", "tiers"), ("tasks", "tasks"),
              ("profiles", "agent profiles"), ("seeds", "seeds"), ("cells", "cells"),
              ("catalog", "catalog"), ("registered_at", "registered"), ("first_run", "first run"),
              ("last_run", "last run"))


def _spec_rows(summaries: Sequence[Mapping], facts: Sequence[Mapping]) -> list[dict]:
    rows = []
    for key, label in _SPEC_ROWS:
        if key == "tiers":
            values = [list(s.get("tiers") or []) for s in summaries]
        elif key == "cells":
            values = [(s.get("primary") or {}).get("cells", 0) for s in summaries]
        else:
            values = [f.get(key) for f in facts]
        differs = len({repr(v) for v in values}) > 1
        # every run has its own dates: they always differ, and that is not a difference in design
        rows.append({"field": key, "label": label, "values": values,
                     "differs": differs and key not in ("registered_at", "first_run", "last_run")})
    return rows


# ---------------------------------------------------------------------------- entry point

def compare(items: Sequence[tuple[Mapping, Mapping]], policies: Sequence[str] | None = None) -> dict:
    """The comparison object (FORMAT.md, "Comparison") of ``items``, each ``(summary,
    facts)``: a ``summarise`` object and that experiment's ``experiment_facts``, in the
    order to show them (usually oldest first). ``policies``: the rows to compare (default
    ``default_policies``); the last ``always:<tier>`` among them is the baseline that
    ``vs_baseline`` compares cost per task against. Never raises for a missing policy or
    hypothesis: its figure is null."""
    summaries = [s for s, _ in items]
    facts = [f for _, f in items]
    names = list(policies) if policies else default_policies(summaries)
    baseline = next((p for p in reversed(names) if p.startswith("always:")), None)
    return {
        "v": COMPARE_VERSION, "format": "benchclaw.compare",
        "experiments": [{"experiment": s["experiment"], "title": s.get("title"),
                         "simulated": bool(s.get("simulated")), "spec_digest": s.get("spec_digest"),
                         "secondary": s.get("secondary") is not None} for s in summaries],
        "spec": _spec_rows(summaries, facts),
        "baseline": baseline,
        "policies": [_policy_obj(summaries, p, baseline) for p in names],
        "hypotheses": _hypotheses(summaries),
        "corrections": [{"experiment": s["experiment"], **c}
                        for s, f in zip(summaries, facts) for c in f.get("corrections") or []],
    }
