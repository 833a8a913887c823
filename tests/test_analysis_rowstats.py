"""``analysis.rowstats``: a tier row's health, fed one run at a time, is ``metrics.health_of``
of the same runs, whether their calls are packed (the fold's ``PackedCalls``, read as rows
without making a ``CallView``) or not; and its speeds, sorted from their terms without
making a Fraction, are ``metrics.sorted_exact`` of them, values floats cannot tell apart
included."""

from __future__ import annotations

import random
from array import array
from dataclasses import replace
from decimal import Decimal
from fractions import Fraction

from benchclaw.analysis.inputs import CallView, PackedCalls
from benchclaw.analysis.metrics import health_of, sorted_exact
from benchclaw.analysis.rowstats import _HealthAcc, _sorted_speeds
from tests.test_analysis_golden import random_data


def _call(rng: random.Random, i: int) -> CallView:
    outcome = rng.choice(["stop", "stop", "length", "error", "cut_off"])
    usage = None if rng.random() < 0.2 else tuple(rng.randint(0, 5000) for _ in range(5))
    return CallView(outcome, "timeout" if outcome == "error" and rng.random() < 0.5 else None, usage,
                    Decimal("0.01"), Decimal("0.02"), False, latency_ms=rng.choice([0, 1, 7, 1000, 123457]),
                    ttft_ms=rng.choice([None, 5, 2**40]), at=f"2026-01-01T00:00:{i % 60:02d}.{i:06d}Z")


def test_health_fed_run_by_run_is_health_of_the_runs_packed_or_not():
    rng = random.Random(3)
    runs = [tuple(_call(rng, 40 * k + i) for i in range(rng.randint(0, 6))) for k in range(40)]
    template = next(_views(random_data(5, 1)))
    for simulated in (False, True):
        views = [replace(template, run_id=str(k), calls=calls, simulated=simulated) for k, calls in enumerate(runs)]
        want = health_of(views, 2)
        for packed in (False, True):
            acc = _HealthAcc()
            for v in views:
                acc.add(replace(v, calls=PackedCalls(v.calls)) if packed else v)
            got = acc.result(2)
            assert replace(got, ttfts_ms=tuple(got.ttfts_ms)) == want  # (an array, there a tuple)


def _views(data):
    from benchclaw.analysis.inputs import view_run

    for rid, records in sorted(data.runs.items()):
        try:
            yield view_run(rid, records)
        except Exception:  # noqa: BLE001 - a run the analysis rejects: not a template
            continue


def test_speeds_sorted_from_their_terms_are_sorted_exact():
    rng = random.Random(5)
    for trial in range(200):
        fs = [Fraction(rng.randint(0, 10 ** rng.randint(1, 18)), rng.randint(1, 10 ** rng.randint(1, 18)))
              for _ in range(rng.randint(0, 40))]
        if trial % 3 == 0:  # too close for floats: 1 + 1e-17 and 1 + 1e-17 + 1e-34 round alike
            fs += [Fraction(10**17 + 1, 10**17), Fraction(10**17 + 2, 10**17 + 1), Fraction(1)]
        got = _sorted_speeds(array("q", [f.numerator for f in fs]), array("q", [f.denominator for f in fs]))
        assert tuple(got) == tuple(sorted_exact(fs)) == tuple(sorted(fs))
