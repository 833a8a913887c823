"""What an exploratory journal is (the studio's; docs/FORMAT.md "Studio journal"), defined once
for the export that packs it, the verifier that checks it and the site that lists it apart
from the experiments. Pure: standard library only.

An exploratory journal is recognised by its records, never by its name: it opens with a
``studio.open`` record labelled ``exploratory: true``. Its ledgers are named after it:
``<journal>-s-<16 hex>`` per visitor session and ``<journal>-day-<yyyymmdd>`` per UTC day.
"""

from __future__ import annotations

import re
from typing import Iterable

__all__ = ["STUDIO_KINDS", "is_exploratory", "studio_ledger", "label_of"]

STUDIO_KINDS = frozenset({"studio.open", "studio.job", "studio.run.start", "studio.run", "studio.job.end"})
_SESSION = re.compile(r"^s-([0-9a-f]{16})$")
_DAY = re.compile(r"^day-([0-9]{8})$")


def is_exploratory(records: Iterable[tuple[str, dict]]) -> bool:
    """True when the journal's first record (``(kind, body)`` in reader order) is a
    ``studio.open`` that says ``exploratory: true``."""
    for kind, body in records:
        return kind == "studio.open" and isinstance(body, dict) and body.get("exploratory") is True
    return False


def studio_ledger(journal_id: str, ledger_id: str) -> tuple[str, str] | None:
    """``("session", <session id>)`` or ``("day", <yyyymmdd>)`` when ``ledger_id`` is one of the
    journal's ledgers by name, else None (its ``ledger.open`` must also name the journal)."""
    if not ledger_id.startswith(journal_id + "-"):
        return None
    rest = ledger_id[len(journal_id) + 1:]
    m = _SESSION.match(rest)
    if m:
        return "session", m.group(1)
    m = _DAY.match(rest)
    return ("day", m.group(1)) if m else None


def label_of(journal_id: str) -> str:
    """The studio's label: the journal id without its ``studio-`` prefix."""
    return journal_id.removeprefix("studio-")
