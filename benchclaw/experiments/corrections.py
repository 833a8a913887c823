"""Corrections: a journal record saying that an earlier published claim was wrong, and why.

The seed published two corrections of its own headline (a cost average that left out a
cell of unknown cost, a pass rate that counted reruns its rule did not allow). Such a
correction belongs in the evidence, not in a blog post: ``correct`` appends a
``correction`` record (FORMAT.md §8) to the experiment's journal, where it is hash-chained
with everything else, carried in bundles and checked by the verifier (its fields, that it
follows the runs it talks about). It never edits or hides anything written before: the
wrong claim stays where it was published; the log says what replaced it.
"""

from __future__ import annotations

import tomllib

from ..errors import RegistrationError, UsageError
from ..evidence.store import Store
from .prereg import registration

__all__ = ["correct", "CORRECTION_TEXT_LIMIT"]

CORRECTION_TEXT_LIMIT = 2000  # characters per text field: a paragraph, not a document


def _text(name: str, value: str) -> str:
    value = (value or "").strip()
    if not value:
        raise UsageError(f"a correction needs --{name} (what was claimed, what was wrong, why, "
                         "and the corrected figure)")
    if len(value) > CORRECTION_TEXT_LIMIT:
        raise UsageError(f"--{name} is {len(value)} characters; keep it under {CORRECTION_TEXT_LIMIT}")
    return value


def _hypothesis_ids(store: Store, digest: str) -> list[str]:
    try:
        spec = tomllib.loads(store.get_blob(digest).decode("utf-8"))
    except Exception:  # noqa: BLE001 - an unreadable spec blob: no ids to check against
        return []
    hyps = spec.get("hypotheses") if isinstance(spec.get("hypotheses"), list) else []
    return [str(h.get("id")) for h in hyps if isinstance(h, dict) and "id" in h]


def _resolve(run: str, named: set, experiment: str) -> str:
    """A run id, or a unique prefix of at least 8 characters, among the journal's runs."""
    if run in named:
        return run
    found = [r for r in named if isinstance(r, str) and len(run) >= 8 and r.startswith(run)]
    if len(found) != 1:
        why = "matches several runs" if found else "is not a run of " + experiment + " (the journal names no such run)"
        raise UsageError(f"--run {run}: {why}")
    return found[0]


def correct(store: Store, experiment: str, *, claim: str, wrong: str, why: str, corrected: str,
            hypothesis: str | None = None, runs: list[str] | tuple[str, ...] = ()) -> dict:
    """Append a ``correction`` record to ``experiment``'s journal and return its body.

    Raises RegistrationError when the experiment is unregistered or has no journaled run
    yet (there is no result to correct), UsageError for an empty or overlong text field,
    a hypothesis id the registered spec lacks, or a run id (or unique prefix of 8 or more
    characters) the journal does not name.
    """
    body = {"experiment": experiment, "claim": _text("claim", claim), "wrong": _text("wrong", wrong),
            "why": _text("why", why), "corrected": _text("corrected", corrected)}
    reg = registration(store, experiment)
    if reg is None:
        raise RegistrationError(f"experiment {experiment} is not registered in {store.root}; there is "
                                "nothing to correct")
    named = {e.body.get("run_id") for e in store.read_journal(experiment) if e.kind == "run"}
    if not named:
        raise RegistrationError(f"experiment {experiment} has no run in its journal yet: a correction "
                                "corrects a published result")
    if hypothesis is not None:
        ids = _hypothesis_ids(store, reg.spec_digest)
        if hypothesis not in ids:
            raise UsageError(f"--hypothesis {hypothesis}: the registered spec of {experiment} has "
                             f"{', '.join(ids) or 'no hypotheses'}")
        body["hypothesis"] = hypothesis
    body["runs"] = sorted({_resolve(r, named, experiment) for r in runs})
    store.journal(experiment).append("correction", body)
    return body
