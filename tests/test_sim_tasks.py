"""The default simulator on the shipped tasks, through the real agent runtime.

What the demo shows a user must hold: the cheap tier spends several times the tokens and
more turns yet costs less per run; some cells pass only on the middle or top tier; the
middle and top tiers fail on different cells; a small output budget breaks the cheap
reasoning tier. Aggregates over a small grid, so no single seed decides.
"""

from __future__ import annotations

import asyncio
from statistics import mean

import pytest

pytest.importorskip("benchclaw.sim.solvers", reason="the shipped solvers have not landed yet")

from benchclaw.agent import load_profile, run_agent  # noqa: E402
from benchclaw.providers import make_provider  # noqa: E402
from benchclaw.providers.catalog import load_catalog  # noqa: E402
from benchclaw.sim.backend import SimBackend  # noqa: E402
from benchclaw.sim.provider import SimOptions  # noqa: E402
from benchclaw.evidence.store import Store  # noqa: E402
from benchclaw.checks.tasks import find_tasks  # noqa: E402

TIERS = ("lightning", "super", "ultra")
SEEDS = range(3)


def _grid(root, max_tokens=8192, profiles=("direct", "checker"), tiers=TIERS):
    store, cat, backend = Store(root), load_catalog("sim"), SimBackend(latency_scale=0)
    results = {}

    async def go():
        for name in profiles:
            profile = load_profile(name)
            for task in find_tasks():
                for tier in tiers:
                    provider = make_provider(cat.tier(tier), sim_options=SimOptions(backend=backend))
                    for seed in SEEDS:
                        r = await run_agent(store=store, task=task, tier=tier, catalog=cat, profile=profile,
                                            seed=seed, provider=provider, max_tokens=max_tokens)
                        end = store.read_run(r.run_id).end
                        results[(name, task.id, seed, tier)] = (r, end["usage"]["completion"])

    asyncio.run(go())
    return results


@pytest.fixture(scope="module")
def grid(tmp_path_factory):
    return _grid(tmp_path_factory.mktemp("runs"))


def _per_tier(grid, f):
    return {t: mean(f(r, tok) for (_, _, _, tier), (r, tok) in grid.items() if tier == t) for t in TIERS}


def test_cheap_tier_uses_more_tokens_and_turns_yet_costs_less(grid):
    tokens = _per_tier(grid, lambda r, tok: tok)
    turns = _per_tier(grid, lambda r, tok: r.turns)
    cost = _per_tier(grid, lambda r, tok: r.cost_high)
    assert tokens["lightning"] > 3 * tokens["ultra"]
    assert turns["lightning"] > turns["ultra"]
    assert cost["lightning"] < cost["super"] < cost["ultra"]


def test_cells_that_only_stronger_tiers_pass_and_different_failures(grid):
    cells = {k[:3] for k in grid}
    passed = {c: {t for t in TIERS if grid[(*c, t)][0].passed} for c in cells}
    assert any(p and "lightning" not in p for p in passed.values())
    super_fails = {c for c, p in passed.items() if "super" not in p}
    ultra_fails = {c for c, p in passed.items() if "ultra" not in p}
    assert super_fails and ultra_fails and super_fails != ultra_fails
    assert super_fails - ultra_fails and ultra_fails - super_fails
    rate = _per_tier(grid, lambda r, tok: r.passed)
    assert rate["lightning"] < rate["super"] and rate["lightning"] < rate["ultra"]


def test_small_output_budget_breaks_the_cheap_reasoning_tier(tmp_path, grid):
    small = _grid(tmp_path, max_tokens=1024, profiles=("direct",), tiers=("lightning",))
    roomy = mean(r.passed for (p, _, _, t), (r, _) in grid.items() if p == "direct" and t == "lightning")
    assert mean(r.passed for r, _ in small.values()) < roomy
