"""Steps 5-8: ledgers, summary, pre-registration, completeness (being written).

Until each step is implemented it fails closed: a bundle is never reported verified on
the strength of a step that did not run.
"""

from __future__ import annotations

from ._context import Bundle
from ._errors import VerificationError
from ._report import Section

__all__ = ["verify_ledgers", "verify_summary", "verify_prereg", "verify_completeness"]


def _not_yet(what: str):
    def step(b: Bundle, sec: Section) -> None:
        raise VerificationError("", f"{what}: not verified by this build of the verifier")
    return step


verify_ledgers = _not_yet("ledgers")
verify_summary = _not_yet("summary.json")
verify_prereg = _not_yet("pre-registration")
verify_completeness = _not_yet("completeness")
