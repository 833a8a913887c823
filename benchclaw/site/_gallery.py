"""The evidence gallery: the runs worth seeing first, picked by rules over run summaries.

Each section is one registry entry (a predicate over a cached run summary and the words
that say why the run is interesting), so adding a kind of evidence is one line. The
"smaller tier passed where a bigger one failed" section compares grid runs of one cell,
in the experiment's tier order. Picks are deterministic (run order, one per task first)
and capped, so the page stays short however many runs exist.
"""

from __future__ import annotations

import re

__all__ = ["gallery", "SECTIONS", "PER_SECTION"]

PER_SECTION = 6
_ROW_MISSING = re.compile(r"\brow\b.*\bmissing\b|\bmissing\b.*\brow\b", re.I)


def _failed(s: dict, pred) -> dict | None:
    return next((c for c in s["failed_checks"] if pred(c)), None)


def _dropped_row(s: dict) -> str | None:
    c = _failed(s, lambda c: bool(_ROW_MISSING.search(c["detail"])))
    return f"{c['id']}: {c['detail']}" if c else None


# The quotes check's words (benchclaw.checks.quotes) for a quote whose text is not on the line
# it cites (altered), or that cites a line the source does not have (invented).
_QUOTE_WRONG = re.compile(r"\bis not on\b|\bdoes not exist\b")


def _bad_quote(s: dict) -> str | None:
    if s["task"].get("family") != "quotes":
        return None
    c = _failed(s, lambda c: bool(_QUOTE_WRONG.search(c["detail"])))
    return f"{c['id']}: {c['detail']}" if c else None


def _boundary_miss(s: dict) -> str | None:
    if s["task"].get("family") != "pricing":
        return None
    c = _failed(s, lambda c: c["heldout"] or "boundar" in c["detail"].lower())
    return f"{c['id']}: {c['detail']}" if c else None


SECTIONS = (
    ("length", "Ran out of tokens",
     "A reply was cut off at max_tokens (or spent it all on reasoning): the run shows what the model managed.",
     lambda s: "finish reason length: the reply was cut off" if s["length"] else None),
    ("injection", "Denied injection attempts",
     "The model followed a planted instruction; the runtime, not the prompt, refused the action.",
     lambda s: f"{s['injections']} injection attempt(s), {s['denials']} denial(s)" if s["injections"] else None),
    ("dropped-row", "A dropped row", "A CSV artifact lost a row the source had.", _dropped_row),
    ("quote", "An invented or altered quote",
     "A quote that is not in the source as cited: the check names the claim, the line it cited and what that "
     "line really says.", _bad_quote),
    ("boundary", "A boundary miss", "Pricing rules that failed the held-out boundary cases.", _boundary_miss),
    ("errors", "Provider errors", "Calls that failed (429, 5xx, timeouts) and what the run did next.",
     lambda s: f"{s['errors']} failed call(s)" if s["errors"] else None),
)


class _Section:
    """One section's picks, chosen as the runs stream by (so no section holds every run it
    matches): up to PER_SECTION runs whose (task, tier) is new to the section, then up to
    PER_SECTION others, each in run order; ``picks`` gives the first ones first."""

    def __init__(self):
        self.first, self.rest, self.seen, self.total = [], [], set(), 0

    def add(self, s: dict, why: str) -> None:
        self.total += 1
        key = (s["task"].get("id"), s["tier"])
        bucket = self.rest if key in self.seen else self.first
        if len(bucket) < PER_SECTION:
            bucket.append({"run": s, "why": why})
        self.seen.add(key)

    def picks(self) -> list[dict]:
        return (self.first + self.rest)[:PER_SECTION]


def _smaller_passed(b) -> list[tuple[str, str, str]]:
    """(smaller run id, why, bigger run id) for each grid cell where a cheaper tier passed and a
    bigger one failed, in (experiment, cell) order."""
    out = []
    # (experiment, cell) -> tier -> the run's place in ``b.summaries`` (its id is
    # ``facts[i].id``), ~i when it did not pass: an int, not an (id, passed) pair holding a
    # fresh copy of the id, per grid run (about 280 bytes a run less at 20,000 runs)
    cells: dict[tuple[str, str], dict[str, int]] = {}
    for i, s in enumerate(b.summaries):
        p = s["policy"]
        if p.get("policy") == "grid" and p.get("experiment") and p.get("cell") and not p.get("rerun"):
            cells.setdefault((p["experiment"], p["cell"]), {}).setdefault(s["tier"], i if s["passed"] else ~i)
    facts = b.summaries.facts
    for (exp, _cell), by_tier in sorted(cells.items()):
        tiers = (b.experiments.get(exp, {}).get("summary") or {}).get("tiers") or sorted(by_tier)
        ordered = [(t, facts[max(i, ~i)].id, i >= 0) for t, i in ((t, by_tier[t]) for t in tiers if t in by_tier)]
        for i, (tier, run_id, passed) in enumerate(ordered):
            big = next((r for r in ordered[i + 1:] if passed and not r[2]), None)
            if big is not None:
                out.append((run_id, f"{tier} passed; {big[0]} failed on the same cell", big[1]))
                break
    return out


def gallery(b) -> list[dict]:
    """Sections of the gallery page: ``{id, title, why, total, picks: [{run, why, other}]}``.
    One pass over the run summaries (read back one at a time) fills every section."""
    found = [_Section() for _ in SECTIONS]
    for s in b.summaries:
        for section, (_sid, _title, _why, pred) in zip(found, SECTIONS):
            why = pred(s)
            if why:
                section.add(s, why)
    sections = [{"id": sid, "title": title, "why": why, "total": got.total, "picks": got.picks()}
                for got, (sid, title, why, _pred) in zip(found, SECTIONS)]
    pairs = _smaller_passed(b)
    picks = [{"run": b.summaries.get(s), "why": w, "other": b.summaries.get(big)} for s, w, big in pairs[:PER_SECTION]]
    sections.insert(5, {"id": "smaller-tier", "title": "A smaller tier passed where a bigger one failed",
                        "why": "Same task, profile and seed: the cheaper tier's run passed every check, a bigger tier's did not.",
                        "total": len(pairs), "picks": picks})
    return sections
