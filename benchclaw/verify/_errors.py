"""The verifier's errors: one precise error per thing that does not hold.

A verification step never returns ``False``: it returns nothing or raises a
``VerificationError`` that names the file, the record (1-based line, or a label such as
``check quotes-exact``) and what differs. The pipeline collects them per section, so one
bad run is reported once and the others still get checked.

``UnreadableBundle`` is the one kind that stops everything: the input is not a bundle we
are willing to interpret (not a zip, a crafted archive, a limit passed, no manifest). It
exits 2; every other failure means the evidence does not match (exit 1).
"""

from __future__ import annotations

import re

from ..errors import EXIT_FAILED, EXIT_USAGE, BenchClawError

__all__ = ["VerificationError", "UnreadableBundle", "from_error"]


class VerificationError(BenchClawError):
    """Evidence in the bundle does not match what was recomputed (exit 1).

    ``path`` is the bundle entry at fault ("" for the bundle as a whole), ``record`` the
    line number or label inside it (None when the whole entry is at fault).
    """

    exit_code = EXIT_FAILED

    def __init__(self, path: str, message: str, record: int | str | None = None):
        self.path = path
        self.record = record
        self.message = message
        super().__init__(self.where() + message if path or record is not None else message)

    def where(self) -> str:
        if self.record is None:
            return f"{self.path}: " if self.path else ""
        return f"{self.path}:{self.record}: " if self.path else f"{self.record}: "

    def to_dict(self) -> dict:
        return {"path": self.path, "record": self.record, "message": self.message}


class UnreadableBundle(VerificationError):
    """The input is not a bundle the verifier is willing to read (exit 2)."""

    exit_code = EXIT_USAGE


# A record or store error says "path:line: message"; the verifier reports those fields apart.
_WHERE = re.compile(r"^(?P<path>[^:]*):(?P<line>\d+): (?P<msg>.*)$", re.S)


def from_error(err: BenchClawError, path: str) -> VerificationError:
    """A record/store error ("path:line: message") as a VerificationError with fields."""
    m = _WHERE.match(str(err))
    if m and m.group("path") == path:
        return VerificationError(path, m.group("msg"), int(m.group("line")))
    return VerificationError(path, str(err).removeprefix(f"{path}: "))
