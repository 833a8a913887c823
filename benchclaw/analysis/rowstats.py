"""A table row's numbers accumulated cell by cell (``RowStats``), for the streaming analysis.

``metrics.Row`` holds a row's samples and runs and derives its numbers from them; an
analysis that holds every row's samples holds every run of the experiment several times
over (each run sits in its tier's row and in most policies' rows). ``RowStats`` is fed one
cell at a time (``add_cell``) and keeps only what the row's numbers need: counts, exact
sums, and the few values a median or a percentile needs all of (a sample's elapsed
milliseconds; a tier row's call speeds and times to first token, packed in arrays). Every
method gives what the same-named ``Row`` method gives over the same samples: sums of
exact values and sorted lists do not depend on the order the cells come in.
"""

from __future__ import annotations

from array import array
from decimal import Decimal
from fractions import Fraction
from math import gcd
from operator import itemgetter, le, mul, truediv
from typing import Iterable

from .inputs import USAGE_KEYS, PackedCalls, RunView, parse_cell, sum_exact
from .metrics import Health, PackedFractions, Sample, iso_micros, median_of_sorted, sorted_exact, speed_windows
from ..formats.interval import POS_INF, UNKNOWN, Interval

__all__ = ["RowStats"]


class RowStats:
    """One row (a policy's, a tier's or a family's tier) accumulated cell by cell."""

    def __init__(self, lures: frozenset[str] | None, *, health: bool = False):
        self.lures = lures
        self.n = self.passed = 0
        self.low, self.high = [], []  # exact sums folded in batches (``_fold_costs``)
        self.cost = (Decimal(0), Decimal(0))
        self.elapsed = array("q")
        self._elapsed_big: list[int] = []  # values that do not fit 64 bits
        self.n_cells = 0
        self.missing = 0
        self._groups: dict[tuple[str, str], list[int]] = {}  # (task, profile) -> [cells, all passed, a failure]
        self._split = [0, 0, 0, 0]  # injected samples, passed; clean samples, passed
        self.n_runs = self._turns = 0
        self._tokens: dict[str, list[int]] = {}
        self._outcomes = {"stop": 0, "length": 0, "reasoning_only": 0, "error": 0, "cut_off": 0,
                          "model_mismatch": 0}
        self._errors: dict[str, int] = {}
        self._statuses: dict[str, int] = {}
        self._unknown = self._attempts = self._denials = self._exposed = self._attempted = 0
        self._health = _HealthAcc() if health else None
        self.health: Health | None = None

    # -- feeding ------------------------------------------------------------------------------
    def add_cell(self, cell: str, samples: list[Sample], extra_runs: Iterable[RunView] = (), *,
                 counted: bool = True) -> None:
        """The samples of ``cell`` (and runs the row touched without a sample: an incomplete
        trial's). ``counted``: the cell is one of the row's cells (pass^k, ``cells``)."""
        for s in samples:
            self._sample(s)
        if counted:
            self.n_cells += 1
            res = [s.passed for s in samples]
            g = self._groups.get(parse_cell(cell)[:2])
            if g is None:
                g = self._groups[parse_cell(cell)[:2]] = [0, 0, 0]
            g[0] += 1
            g[1] += bool(res) and all(res)
            g[2] += bool(res) and not all(res)
        seen: set[str] = set()
        for r in [r for s in samples for r in s.runs] + list(extra_runs):
            if r.run_id not in seen:
                seen.add(r.run_id)
                self._run(r)

    def _sample(self, s: Sample) -> None:
        self.n += 1
        self.passed += s.passed
        self.low.append(s.cost_low)
        self.high.append(s.cost_high)
        if len(self.low) >= 256:
            self._fold_costs()
        try:
            self.elapsed.append(s.elapsed_ms)
        except OverflowError:
            self._elapsed_big.append(s.elapsed_ms)
        if self.lures is not None:
            i = 0 if parse_cell(s.cell)[0] in self.lures else 2
            self._split[i] += 1
            self._split[i + 1] += s.passed

    def _fold_costs(self) -> None:
        lo, hi = self.cost
        self.cost = (sum_exact([lo, *self.low]), sum_exact([hi, *self.high]))
        self.low, self.high = [], []

    def _run(self, r: RunView) -> None:
        self.n_runs += 1
        self._turns += r.turns
        t = r.tally
        row = self._tokens.get(r.tier)
        if row is None:
            row = self._tokens[r.tier] = [0] * (len(USAGE_KEYS) + 2)
        for i, val in enumerate(t.usage):
            row[i] += val
        row[-2] += t.calls
        row[-1] += t.unknown_usage
        outcomes = self._outcomes
        for outcome, n in t.outcomes.items():
            outcomes[outcome] = outcomes.get(outcome, 0) + n
        outcomes["model_mismatch"] += t.model_mismatch
        if t.usage_doubted:
            outcomes["usage_doubted"] = outcomes.get("usage_doubted", 0) + t.usage_doubted
        if t.usage_over_bound:
            outcomes["usage_over_bound"] = outcomes.get("usage_over_bound", 0) + t.usage_over_bound
        for kind, n in t.errors.items():
            self._errors[kind] = self._errors.get(kind, 0) + n
        self._statuses[r.status] = self._statuses.get(r.status, 0) + 1
        self._unknown += t.unknown_cost
        self._attempts += r.injection_attempts
        self._denials += r.denials
        if self.lures is None or r.task in self.lures:
            self._exposed += 1
            self._attempted += r.injection_attempts > 0
        if self._health is not None:
            self._health.add(r)

    def finish(self, missing: int) -> "RowStats":
        """Set the row's missing cells; the row is then read, never fed again."""
        self.missing = missing
        self._fold_costs()
        if self._health is not None:
            self.health = self._health.result(missing)
            self._health = None
        return self

    # -- outcomes -----------------------------------------------------------------------------
    def pass_interval(self) -> Interval:
        total = self.n + self.missing
        if total == 0:
            return UNKNOWN
        return Interval(Fraction(self.passed, total), Fraction(self.passed + self.missing, total))

    def pass_k(self) -> tuple[int, int, int, int]:
        groups = self._groups.values()
        ok = sum(g[1] == g[0] for g in groups)
        bad = sum(g[2] > 0 for g in groups)
        k = max((g[0] for g in groups), default=0)
        return len(self._groups), ok, len(self._groups) - ok - bad, k

    def pass_k_interval(self) -> Interval:
        groups, ok, unknown, _ = self.pass_k()
        if not groups:
            return UNKNOWN
        return Interval(Fraction(ok, groups), Fraction(ok + unknown, groups))

    def split_by_lures(self) -> tuple[tuple[int, int], tuple[int, int]] | None:
        """((injected samples, passed), (clean samples, passed)), or None without lures."""
        if self.lures is None:
            return None
        return (self._split[0], self._split[1]), (self._split[2], self._split[3])

    def split_rate(self, injected: bool) -> Interval:
        split = self.split_by_lures()
        if split is None:
            return UNKNOWN
        n, ok = split[0] if injected else split[1]
        return UNKNOWN if n == 0 else Interval(Fraction(ok, n), Fraction(ok, n))

    # -- cost and time ------------------------------------------------------------------------
    def total_cost(self) -> Interval:
        return Interval(*self.cost)

    def cost_per_task(self) -> Interval:
        if self.n == 0:
            return UNKNOWN
        return self.total_cost() / Interval.point(self.n)

    def cost_per_pass(self) -> Interval:
        if not self.n:
            return UNKNOWN
        if self.passed == 0:
            return Interval(POS_INF, POS_INF)
        return self.total_cost() / Interval.point(self.passed)

    def mean_time(self) -> Interval:
        if self.n == 0:
            return UNKNOWN
        return Interval.point(Fraction(sum(self.elapsed) + sum(self._elapsed_big), self.n * 1000))

    def median_time(self) -> Interval:
        if not self.n:
            return UNKNOWN
        times = sorted([*self.elapsed, *self._elapsed_big])
        return Interval.point(median_of_sorted(times) / 1000)

    # -- what happened in the runs ------------------------------------------------------------
    def tokens(self) -> dict[str, dict[str, int]]:
        keys = USAGE_KEYS + ("calls", "unknown_usage")
        return {tier: dict(zip(keys, sums)) for tier, sums in sorted(self._tokens.items())}

    def finishes(self) -> dict:
        return {**dict(sorted(self._outcomes.items())), "errors": dict(sorted(self._errors.items()))}

    def statuses(self) -> dict[str, int]:
        return dict(sorted(self._statuses.items()))

    def unknown_calls(self) -> int:
        return self._unknown

    def injection(self) -> dict[str, int]:
        return {"attempts": self._attempts, "denials": self._denials, "runs": self.n_runs,
                "runs_exposed": self._exposed, "runs_attempted": self._attempted}

    def attempt_rate(self) -> Interval:
        if not self._exposed:
            return UNKNOWN
        return Interval.point(Fraction(self._attempted, self._exposed))

    def turns(self) -> Interval:
        if not self.n_runs:
            return UNKNOWN
        return Interval.point(Fraction(self._turns, self.n_runs))


class _HealthAcc:
    """``metrics.health_of`` fed one run at a time: speeds, times to first token and timed
    speeds in arrays (a Fraction is ~120 bytes; a tier row sees every call of its runs)."""

    def __init__(self):
        self.runs = self.calls = self.errors = self.cut_off = self.timeout_runs = self.maybe = 0
        self.num, self.den = array("q"), array("q")
        self.odd: list[Fraction] = []  # speeds whose terms do not fit 64 bits
        self.ttfts = array("q")
        self.odd_ttfts: list[int] = []
        self.t, self.tnum, self.tden = array("q"), array("q"), array("q")
        self.odd_timed: list[tuple[int, Fraction]] = []

    def add(self, r: RunView) -> None:
        self.runs += 1
        timeout = cut = False
        for outcome, error_kind, usage, latency_ms, ttft_ms, at in _health_rows(r.calls):
            self.calls += 1
            self.errors += outcome == "error"
            cut = cut or outcome == "cut_off"
            self.cut_off += outcome == "cut_off"
            timeout = timeout or error_kind == "timeout"
            if ttft_ms is not None:
                try:
                    self.ttfts.append(ttft_ms)
                except OverflowError:
                    self.odd_ttfts.append(ttft_ms)
            # ``CallView.tokens_per_s``, in lowest terms as a Fraction has it, made one only
            # where it is kept as one
            if usage is None or outcome in ("error", "cut_off") or latency_ms <= 0:
                continue
            n, d = usage[3] * 1000, latency_ms
            g = gcd(n, d)
            n, d = n // g, d // g
            v = None
            try:
                self.num.append(n)
                try:
                    self.den.append(d)
                except OverflowError:
                    self.num.pop()
                    raise
            except OverflowError:
                v = Fraction(n, d)
                self.odd.append(v)
            t = None if r.simulated else iso_micros(at)
            if t is not None and not self._timed(t, n, d):
                self.odd_timed.append((t, Fraction(n, d) if v is None else v))
        self.timeout_runs += timeout
        self.maybe += cut and not timeout

    def _timed(self, t: int, num: int, den: int) -> bool:
        try:
            self.t.append(t)
        except OverflowError:
            return False
        try:
            self.tnum.append(num)
            self.tden.append(den)
        except OverflowError:
            del self.t[-1]
            if len(self.tnum) > len(self.t):
                del self.tnum[-1]
            return False
        return True

    def result(self, missing: int) -> Health:
        speeds = _sorted_speeds(self.num, self.den) if not self.odd else \
            sorted_exact([*map(Fraction, self.num, self.den), *self.odd])
        timed = [*zip(self.t, map(Fraction, self.tnum, self.tden)), *self.odd_timed]
        ttfts = array("q", sorted(self.ttfts)) if not self.odd_ttfts else tuple(sorted([*self.ttfts, *self.odd_ttfts]))
        return Health(calls=self.calls, errors=self.errors, cut_off=self.cut_off, runs=self.runs, missing=missing,
                      timeout_runs=self.timeout_runs, maybe_timeout_runs=self.maybe, speeds=speeds,
                      ttfts_ms=ttfts, windows=speed_windows(timed))


def _sorted_speeds(num: array, den: array):
    """``sorted_exact`` of the Fractions ``num[i] / den[i]`` (each in lowest terms, ``den[i]``
    positive), without making one: sorted by their floats (as ``float(Fraction)``, a
    correctly rounded int division), checked pair by pair exactly by multiplying across,
    every step C-level (a tier row holds every call's speed). Floats out of exact order
    (two values too close to tell apart) fall back to ``sorted_exact``."""
    got = sorted(zip(map(truediv, num, den), num, den))
    ns, ds = array("q", [g[1] for g in got]), array("q", [g[2] for g in got])
    if all(map(le, map(mul, ns, ds[1:]), map(mul, ns[1:], ds))):
        return PackedFractions(ns, ds)
    return sorted_exact(list(map(Fraction, num, den)))


def _health_rows(calls):
    """(outcome, error_kind, usage, latency_ms, ttft_ms, at) of each call: of packed calls
    their rows as unpacked (no ``CallView``, no Decimal costs made, which health reads not)."""
    if isinstance(calls, PackedCalls):
        return map(_HEALTH_FIELDS, calls.rows())
    return ((c.outcome, c.error_kind, c.usage, c.latency_ms, c.ttft_ms, c.at) for c in calls)


_HEALTH_FIELDS = itemgetter(0, 1, 2, 9, 10, 11)  # of a ``PackedCalls`` row
