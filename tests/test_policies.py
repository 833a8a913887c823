"""Policies on scripted outcomes: which tiers run, which artifact is taken, what it costs."""

from decimal import Decimal as D

import pytest

from benchclaw.formats.policies import Attempt, PolicyError, next_batch, replay

TIERS = ["lightning", "super", "ultra"]


def att(tier, gate, passed=None, low="0.001", high=None, ms=1000):
    return Attempt(tier, gate, gate if passed is None else passed, D(low), D(high or low), ms)


def grid(**gates):
    costs = {"lightning": "0.001", "super": "0.003", "ultra": "0.008"}
    ms = {"lightning": 30000, "super": 10000, "ultra": 5000}
    return {t: att(t, g, low=costs[t], ms=ms[t]) for t, g in gates.items()}


def test_ladder_stops_at_first_gate_pass_and_pays_for_every_attempt():
    out = replay("ladder", TIERS, grid(lightning=False, super=True, ultra=True))
    assert [a.tier for a in out.attempts] == ["lightning", "super"]
    assert out.taken.tier == "super" and out.passed
    assert out.cost_low == D("0.004")
    assert out.elapsed_ms == 40000


def test_ladder_all_fail_takes_top_tier_and_fails():
    out = replay("ladder", TIERS, grid(lightning=False, super=False, ultra=False))
    assert out.taken.tier == "ultra" and not out.passed
    assert out.cost_low == D("0.012")


def test_speculative_runs_two_at_once_time_is_the_slower():
    out = replay("speculative", TIERS, grid(lightning=False, super=True, ultra=True))
    assert [a.tier for a in out.attempts] == ["lightning", "super"]
    assert out.elapsed_ms == 30000  # max of the parallel pair, not the sum
    assert out.taken.tier == "super"


def test_speculative_prefers_cheaper_passing_tier_then_escalates():
    both = replay("speculative", TIERS, grid(lightning=True, super=True, ultra=True))
    assert both.taken.tier == "lightning"
    neither = replay("speculative", TIERS, grid(lightning=False, super=False, ultra=True))
    assert [a.tier for a in neither.attempts] == ["lightning", "super", "ultra"]
    assert neither.elapsed_ms == 30000 + 5000


def test_memory_starts_where_the_task_last_passed_and_falls_back_to_ladder():
    g = grid(lightning=True, super=True, ultra=True)
    assert replay("memory", TIERS, g, memory_start="super").attempts[0].tier == "super"
    assert replay("memory", TIERS, g, memory_start=None).attempts[0].tier == "lightning"


def test_gate_pass_but_heldout_fail_counts_as_failed_trial():
    g = {"lightning": att("lightning", True, passed=False), "super": att("super", True)}
    out = replay("ladder", TIERS, g)
    assert out.taken.tier == "lightning" and not out.passed


def test_oracle_is_cheapest_passing_tier():
    out = replay("oracle", TIERS, grid(lightning=False, super=False, ultra=True))
    assert [a.tier for a in out.attempts] == ["ultra"]
    assert out.cost_low == D("0.008")


def test_unknown_cost_bounds_add_up():
    g = {"lightning": att("lightning", False, low="0.001", high="0.05"), "super": att("super", True, low="0.003")}
    out = replay("ladder", TIERS, g)
    assert (out.cost_low, out.cost_high) == (D("0.004"), D("0.053"))


def test_unknown_policy_and_tier_are_errors():
    with pytest.raises(PolicyError, match="unknown policy"):
        next_batch("cheapest", TIERS, [])
    with pytest.raises(PolicyError, match="not in the grid"):
        next_batch("always:mega", TIERS, [])
