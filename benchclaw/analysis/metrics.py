"""The numbers of one row of a policy or tier table, exact, with their honest bounds.

A row is computed from *samples*: one per cell for a policy (its trial), one per run for
a tier. Pass rate, cost and time read the complete samples; a cell with no complete
sample is *missing* and widens the pass-rate interval to both extremes (it might have
passed or failed). Tokens, finish outcomes, statuses and injections count every run the
row touched, complete or not, because they describe what happened, not an outcome.

Values are exact rationals; only the strings written for people and for summary.json are
rounded, money outward to 12 decimal places (the low end down, the high end up), so a
written bound is never better than the exact one.
"""

from __future__ import annotations

import datetime
import decimal
import functools
from array import array
from dataclasses import dataclass
from decimal import Decimal
from fractions import Fraction
from typing import Iterable, Sequence

from .inputs import USAGE_KEYS, RunView, parse_cell, sum_exact
from ..formats.interval import POS_INF, UNKNOWN, Interval, is_inf, to_decimal

__all__ = ["Sample", "Row", "Health", "make_row", "MONEY_DIGITS", "money_text", "WINDOWS"]

MONEY_DIGITS = 12
WINDOWS = 4  # the experiment's duration (first to last call of a row) cut into this many equal spans


@dataclass(frozen=True, slots=True)  # one per run or trial of an analysis: no instance dict
class Sample:
    cell: str
    passed: bool
    cost_low: Decimal
    cost_high: Decimal
    elapsed_ms: int
    runs: tuple[RunView, ...]


@dataclass(frozen=True)
class Row:
    """Everything a table row and a decision rule need, as exact values."""

    samples: tuple[Sample, ...]
    all_runs: tuple[RunView, ...]
    cells: tuple[str, ...]
    missing: int
    lures: frozenset[str] | None

    # -- outcomes ---------------------------------------------------------------------------
    @property
    def passed(self) -> int:
        return sum(s.passed for s in self.samples)

    def pass_interval(self, samples: Iterable[Sample] | None = None, missing: int | None = None) -> Interval:
        samples = list(self.samples if samples is None else samples)
        missing = self.missing if missing is None else missing
        total = len(samples) + missing
        if total == 0:
            return UNKNOWN
        passed = sum(s.passed for s in samples)
        return Interval(Fraction(passed, total), Fraction(passed + missing, total))

    def pass_k(self) -> tuple[int, int, int, int]:
        """(groups, passed every seed, unknown, k): a task/profile group passes when every
        one of its cells has samples and all of them passed; it fails on any failure."""
        return self._pass_k

    @functools.cached_property  # read by the table and by rules; a frozen row never changes
    def _pass_k(self) -> tuple[int, int, int, int]:
        by_cell: dict[str, list[bool]] = {}
        for s in self.samples:
            by_cell.setdefault(s.cell, []).append(s.passed)
        groups: dict[tuple[str, str], list[bool | None]] = {}
        for cell in self.cells:
            res = by_cell.get(cell)
            groups.setdefault(parse_cell(cell)[:2], []).append(all(res) if res else None)
        ok = sum(all(v is True for v in g) for g in groups.values())
        bad = sum(any(v is False for v in g) for g in groups.values())
        k = max((len(g) for g in groups.values()), default=0)
        return len(groups), ok, len(groups) - ok - bad, k

    def pass_k_interval(self) -> Interval:
        groups, ok, unknown, _ = self.pass_k()
        if not groups:
            return UNKNOWN
        return Interval(Fraction(ok, groups), Fraction(ok + unknown, groups))

    def split_by_lures(self) -> tuple[list[Sample], list[Sample]] | None:
        if self.lures is None:
            return None
        inj = [s for s in self.samples if parse_cell(s.cell)[0] in self.lures]
        return inj, [s for s in self.samples if parse_cell(s.cell)[0] not in self.lures]

    # -- cost and time ----------------------------------------------------------------------
    def total_cost(self) -> Interval:
        return Interval(sum_exact(s.cost_low for s in self.samples),
                        sum_exact(s.cost_high for s in self.samples))

    def cost_per_task(self) -> Interval:
        n = len(self.samples)
        if n == 0:
            return UNKNOWN
        return self.total_cost() / Interval.point(n)

    def cost_per_pass(self) -> Interval:
        if not self.samples:
            return UNKNOWN
        if self.passed == 0:  # money spent, no pass bought: infinitely expensive per pass
            return Interval(POS_INF, POS_INF)
        return self.total_cost() / Interval.point(self.passed)

    def mean_time(self) -> Interval:
        n = len(self.samples)
        if n == 0:
            return UNKNOWN
        return Interval.point(Fraction(sum(s.elapsed_ms for s in self.samples), n * 1000))

    def median_time(self) -> Interval:
        times = sorted(s.elapsed_ms for s in self.samples)
        if not times:
            return UNKNOWN
        mid = len(times) // 2
        ms = Fraction(times[mid]) if len(times) % 2 else Fraction(times[mid - 1] + times[mid], 2)
        return Interval.point(ms / 1000)

    # -- what happened in the runs ----------------------------------------------------------
    @functools.cached_property
    def _counts(self) -> tuple:
        """One pass over the row's runs for tokens, finishes, statuses, unknown calls and
        injections (five passes per row cost a tenth of a second on 10,000 runs)."""
        tokens: dict[str, list[int]] = {}  # tier -> USAGE_KEYS sums, calls, unknown_usage
        outcomes = {"stop": 0, "length": 0, "reasoning_only": 0, "error": 0, "cut_off": 0,
                    "model_mismatch": 0}
        errors: dict[str, int] = {}
        statuses: dict[str, int] = {}
        unknown = attempts = denials = exposed = attempted = 0
        lures = self.lures
        for r in self.all_runs:
            t = r.tally
            row = tokens.get(r.tier)
            if row is None:
                row = tokens[r.tier] = [0] * (len(USAGE_KEYS) + 2)
            for i, val in enumerate(t.usage):
                row[i] += val
            row[-2] += t.calls
            row[-1] += t.unknown_usage
            for outcome, n in t.outcomes.items():
                outcomes[outcome] = outcomes.get(outcome, 0) + n
            outcomes["model_mismatch"] += t.model_mismatch
            if t.usage_doubted:  # only present when it happened, so plain reports are unchanged
                outcomes["usage_doubted"] = outcomes.get("usage_doubted", 0) + t.usage_doubted
            if t.usage_over_bound:
                outcomes["usage_over_bound"] = outcomes.get("usage_over_bound", 0) + t.usage_over_bound
            for kind, n in t.errors.items():
                errors[kind] = errors.get(kind, 0) + n
            statuses[r.status] = statuses.get(r.status, 0) + 1
            unknown += t.unknown_cost
            attempts += r.injection_attempts
            denials += r.denials
            if lures is None or r.task in lures:
                exposed += 1
                attempted += r.injection_attempts > 0
        injection = {"attempts": attempts, "denials": denials, "runs": len(self.all_runs),
                     "runs_exposed": exposed, "runs_attempted": attempted}
        return tokens, outcomes, errors, statuses, unknown, injection

    def tokens(self) -> dict[str, dict[str, int]]:
        keys = USAGE_KEYS + ("calls", "unknown_usage")
        return {tier: dict(zip(keys, sums)) for tier, sums in sorted(self._counts[0].items())}

    def finishes(self) -> dict:
        _, outcomes, errors, *_ = self._counts
        return {**dict(sorted(outcomes.items())), "errors": dict(sorted(errors.items()))}

    def statuses(self) -> dict[str, int]:
        return dict(sorted(self._counts[3].items()))

    def unknown_calls(self) -> int:
        return self._counts[4]

    def injection(self) -> dict[str, int]:
        return dict(self._counts[5])

    def attempt_rate(self) -> Interval:
        inj = self.injection()
        if not inj["runs_exposed"]:
            return UNKNOWN
        return Interval.point(Fraction(inj["runs_attempted"], inj["runs_exposed"]))

    def turns(self) -> Interval:
        if not self.all_runs:
            return UNKNOWN
        return Interval.point(Fraction(sum(r.turns for r in self.all_runs), len(self.all_runs)))

    @functools.cached_property
    def health(self) -> "Health":
        """The provider's side of the row's runs (``Health``); missing cells count as
        possible timeouts."""
        return health_of(self.all_runs, self.missing)


@dataclass(frozen=True)
class Health:
    """What the provider did over a row's runs: answered or failed calls, runs that met a
    timeout, output tokens per second of call time and streamed calls' time to first token
    (exact, sorted), and the median speed in each of ``WINDOWS`` equal spans of the row's
    duration (None for a span without calls), so a change of speed over a day shows."""

    calls: int
    errors: int
    cut_off: int
    runs: int
    missing: int
    timeout_runs: int
    maybe_timeout_runs: int  # no timeout recorded, but a call was cut off before its record
    speeds: Sequence[Fraction]  # sorted: a tuple or a ``PackedFractions`` equal to one
    ttfts_ms: tuple[int, ...]
    windows: tuple[Fraction | None, ...]

    def error_rate(self) -> Interval:
        if not self.calls:
            return UNKNOWN
        return Interval(Fraction(self.errors, self.calls), Fraction(self.errors + self.cut_off, self.calls))

    def timeout_rate(self) -> Interval:
        n = self.runs + self.missing
        if not n:
            return UNKNOWN
        return Interval(Fraction(self.timeout_runs, n),
                         Fraction(self.timeout_runs + self.maybe_timeout_runs + self.missing, n))

    def throughput(self) -> Interval:
        return UNKNOWN if not self.speeds else Interval.point(median_of_sorted(self.speeds))

    def throughput_spread(self) -> Interval:
        seen = [w for w in self.windows if w is not None]
        if len(seen) < 2 or min(seen) <= 0:
            return UNKNOWN
        return Interval.point(max(seen) / min(seen))

    def ttft(self) -> Interval:
        return UNKNOWN if not self.ttfts_ms else Interval.point(_median(self.ttfts_ms) / 1000)


def _median(values) -> Fraction:
    return median_of_sorted(sorted(values))


def median_of_sorted(v) -> Fraction:
    """The median of values already sorted."""
    mid = len(v) // 2
    return Fraction(v[mid]) if len(v) % 2 else Fraction(v[mid - 1] + v[mid], 2)


def iso_micros(at: str) -> int | None:
    """An envelope ``at`` (``2026-11-30T03:04:05.000000Z``) as integer microseconds."""
    try:
        t = datetime.datetime.strptime(at, "%Y-%m-%dT%H:%M:%S.%fZ")
    except (TypeError, ValueError):
        return None
    return ((t.toordinal() * 86400 + t.hour * 3600 + t.minute * 60 + t.second) * 1_000_000 + t.microsecond)


def speed_windows(timed: list[tuple[int, Fraction]]) -> tuple[Fraction | None, ...]:
    if not timed:
        return (None,) * WINDOWS
    t0, t1 = min(t for t, _ in timed), max(t for t, _ in timed)
    spans: list[list[Fraction]] = [[] for _ in range(WINDOWS)]
    for t, v in timed:
        spans[0 if t1 == t0 else min(WINDOWS - 1, (t - t0) * WINDOWS // (t1 - t0))].append(v)
    return tuple(_median(sp) if sp else None for sp in spans)


def health_of(runs: Iterable[RunView], missing: int) -> Health:
    """One pass over the row's runs, each run's calls read once (a folded run unpacks its
    calls on every read, and the row's calls all at once would be tens of megabytes)."""
    n_runs = calls = errors = cut_off = timeout_runs = maybe = 0
    timed, speeds, ttfts = [], [], []
    for r in runs:
        n_runs += 1
        timeout = cut = False
        for c in r.calls:
            calls += 1
            errors += c.outcome == "error"
            cut = cut or c.outcome == "cut_off"
            cut_off += c.outcome == "cut_off"
            timeout = timeout or c.error_kind == "timeout"
            if c.ttft_ms is not None:
                ttfts.append(c.ttft_ms)
            v = c.tokens_per_s
            if v is None:
                continue
            speeds.append(v)
            # A simulated run's wall-clock placement says nothing about a provider, and would
            # make the summary depend on when (and on how many machines) the grid ran.
            t = None if r.simulated else iso_micros(c.at)
            if t is not None:
                timed.append((t, v))
        timeout_runs += timeout
        maybe += cut and not timeout  # no timeout recorded, but a call was cut off before its record
    return Health(calls=calls, errors=errors, cut_off=cut_off, runs=n_runs, missing=missing,
                  timeout_runs=timeout_runs, maybe_timeout_runs=maybe, speeds=sorted_exact(speeds),
                  ttfts_ms=tuple(sorted(ttfts)), windows=speed_windows(timed))


def sorted_exact(values: list[Fraction]) -> "Sequence[Fraction]":
    """``tuple(sorted(values))``, or a ``PackedFractions`` equal to it: sorted by their floats
    first (a row holds tens of thousands of speeds, and comparing two Fractions costs a
    microsecond), then checked pair by pair exactly; only when two values too close for
    floats came out of order are they sorted exactly. Equal Fractions are the same number,
    so the result is the same sequence."""
    try:
        got = sorted(values, key=float)
    except OverflowError:
        return tuple(sorted(values))
    if any(a > b for a, b in zip(got, got[1:])):
        got.sort()
    return PackedFractions.of(got)


class PackedFractions(Sequence):
    """Fractions held as two arrays of 64-bit numerators and denominators (16 bytes each),
    made afresh when read: a tier row's health keeps every call's speed until the summary
    is written (a Fraction and its two ints cost about 120 bytes; 20,000 runs make about
    120,000 calls). Equal to the tuple of the same Fractions. ``of`` gives that tuple when a
    value does not fit."""

    __slots__ = ("_num", "_den")

    def __init__(self, num: array, den: array):
        self._num, self._den = num, den

    @classmethod
    def of(cls, values: list[Fraction]) -> "PackedFractions | tuple[Fraction, ...]":
        try:
            return cls(array("q", (v.numerator for v in values)), array("q", (v.denominator for v in values)))
        except OverflowError:
            return tuple(values)

    def __len__(self) -> int:
        return len(self._num)

    def __getitem__(self, i):
        if isinstance(i, slice):
            return tuple(self)[i]
        return Fraction(self._num[i], self._den[i])

    def __iter__(self):
        return map(Fraction, self._num, self._den)

    def __eq__(self, other) -> bool:
        if isinstance(other, (PackedFractions, tuple)):
            return tuple(self) == tuple(other)
        return NotImplemented

    def __hash__(self) -> int:
        return hash(tuple(self))

    def __repr__(self) -> str:
        return f"PackedFractions({tuple(self)!r})"


def make_row(samples: list[Sample], incomplete_runs: list[RunView], cells: list[str],
             missing: int, lures: frozenset[str] | None) -> Row:
    runs: dict[str, RunView] = {}
    for r in [r for s in samples for r in s.runs] + incomplete_runs:
        runs.setdefault(r.run_id, r)
    return Row(tuple(samples), tuple(sorted(runs.values(), key=lambda r: (r.at, r.run_id))),
               tuple(cells), missing, lures)


def money_text(value, up: bool) -> str:
    """A bound (Fraction, Decimal or infinity) as canonical decimal text rounded outward to
    MONEY_DIGITS places (no trailing zeros); ``"inf"``/``"-inf"`` for an unbounded end."""
    if is_inf(value):
        return "inf" if value.sign > 0 else "-inf"
    v = to_decimal(Fraction(value), MONEY_DIGITS, decimal.ROUND_CEILING if up else decimal.ROUND_FLOOR)
    text = format(v, "f")
    if "." in text:
        text = text.rstrip("0").rstrip(".")
    return "0" if text in ("-0", "") else text
