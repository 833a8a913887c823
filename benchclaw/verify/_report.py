"""The verifier's report: one section per numbered step, counts and failures, an exit code.

Failures are collected per section rather than stopping at the first, so an auditor sees
every run that does not hold; the stored list is capped (the count is not) so a bundle
with a million broken records cannot exhaust memory through its own report. A step that
takes two checks of a run in one pass (so as to read the run once) keeps the later one's
``outcome_of`` and reports it where its place in the section is (``raised``): the same
failures, in the same order.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from ..errors import EXIT_FAILED, EXIT_OK, EXIT_USAGE
from ._errors import UnreadableBundle, VerificationError

__all__ = ["Section", "VerifyReport", "SECTIONS", "MAX_KEPT", "outcome_of", "raised"]

MAX_KEPT = 200

SECTIONS: tuple[tuple[str, str], ...] = (
    ("container", "every entry listed in the manifest, with its size and SHA-256"),
    ("runs", "run ids, hash chains, referenced objects, task digests"),
    ("checks", "every run replayed from its task and replies; checks re-run on what it wrote"),
    ("costs", "every cost and bound recomputed from usage and catalog prices"),
    ("ledgers", "settled spend equals the recorded calls; no limit passed"),
    ("summary", "every table and decision of summary.json recomputed"),
    ("prereg", "registration (spec, catalog, tasks) before every call, ledger record and run"),
    ("complete", "every planned cell and sealed run accounted for; stops and trials follow"),
)


def outcome_of(check: Callable, *args) -> Exception | None:
    """What ``check(*args)`` raised (None: it held), to be reported later with
    ``section.attempt(raised, it)`` where the check's place in its section is (a step that
    takes two checks of a run in one pass, so as to read the run once); its traceback
    dropped (it would hold the run's values). ``UnreadableBundle`` is raised at once: it
    stops everything, wherever it is."""
    try:
        check(*args)
    except UnreadableBundle:
        raise
    except Exception as e:  # noqa: BLE001 - raised again by ``raised``, and reported as the step reports it
        return e.with_traceback(None)
    return None


def raised(got: Exception | None) -> None:
    """Raise what ``outcome_of`` kept (nothing when the check held)."""
    if got is not None:
        raise got


@dataclass
class Section:
    number: int
    name: str
    title: str
    counts: dict[str, int] = field(default_factory=dict)
    failures: list[VerificationError] = field(default_factory=list)
    failure_count: int = 0
    ran: bool = False

    def count(self, key: str, n: int = 1) -> None:
        self.counts[key] = self.counts.get(key, 0) + n

    def fail(self, err: VerificationError) -> None:
        self.failure_count += 1
        if len(self.failures) < MAX_KEPT:
            self.failures.append(err)

    def attempt(self, fn: Callable, *args) -> bool:
        """Run one raising check; record its VerificationError. True when it held.

        ``UnreadableBundle`` is not caught: it stops the whole verification.
        """
        try:
            fn(*args)
            return True
        except UnreadableBundle:
            raise
        except VerificationError as e:
            self.fail(e)
            return False

    @property
    def ok(self) -> bool:
        return self.ran and self.failure_count == 0

    def to_dict(self) -> dict:
        return {"number": self.number, "name": self.name, "title": self.title, "ok": self.ok,
                "ran": self.ran, "counts": dict(sorted(self.counts.items())),
                "failure_count": self.failure_count,
                "failures": [f.to_dict() for f in self.failures]}


@dataclass
class VerifyReport:
    """What ``verify_bundle`` found. ``exit_code``: 0 verified, 1 evidence does not match,
    2 not a readable bundle."""

    source: str
    sections: list[Section]
    manifest_digest: str | None = None
    experiments: tuple[str, ...] = ()
    fatal: UnreadableBundle | None = None
    registrations: dict = field(default_factory=dict)  # experiment -> registration digest (or None)
    unproven: list = field(default_factory=list)       # [(entry prefix, files, why)] not verified
    notes: list = field(default_factory=list)          # what the auditor must read (a deviation re-pinning prices)
    exploratory: bool = False                          # a studio journal's bundle: no registration, no decisions

    @classmethod
    def empty(cls, source: str) -> "VerifyReport":
        return cls(source, [Section(i, n, t) for i, (n, t) in enumerate(SECTIONS, 1)])

    def section(self, name: str) -> Section:
        return next(s for s in self.sections if s.name == name)

    @property
    def failure_count(self) -> int:
        return sum(s.failure_count for s in self.sections)

    @property
    def exit_code(self) -> int:
        if self.fatal is not None:
            return EXIT_USAGE
        if self.failure_count or not all(s.ran for s in self.sections):
            return EXIT_FAILED
        return EXIT_OK

    @property
    def ok(self) -> bool:
        return self.exit_code == EXIT_OK

    def failures(self) -> list[tuple[Section, VerificationError]]:
        """Every kept failure in section order (the fatal error first, if any)."""
        out = [(self.sections[0], self.fatal)] if self.fatal else []
        return out + [(s, f) for s in self.sections for f in s.failures]

    def to_dict(self) -> dict:
        verdict = {EXIT_OK: "verified", EXIT_FAILED: "mismatch", EXIT_USAGE: "unreadable"}
        return {"v": 1, "source": self.source, "verdict": verdict[self.exit_code],
                "exit_code": self.exit_code, "manifest_digest": self.manifest_digest,
                "experiments": list(self.experiments), "exploratory": self.exploratory,
                "registrations": dict(self.registrations),
                "unproven": [{"prefix": p, "files": n, "why": w} for p, n, w in self.unproven],
                "notes": list(self.notes),
                "fatal": self.fatal.to_dict() if self.fatal else None,
                "sections": [s.to_dict() for s in self.sections]}
