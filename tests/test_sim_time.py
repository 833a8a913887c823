"""In-process simulated runs keep simulated time: deterministic, and independent of load."""

from __future__ import annotations

import asyncio

from benchclaw.agent import load_profile, run_agent
from benchclaw.providers import make_provider
from benchclaw.providers.catalog import load_catalog
from benchclaw.evidence.store import Store
from benchclaw.checks.tasks import get_task


def one_run(root, seed=1, scale=0.0):
    catalog = load_catalog("sim")
    tier = catalog.tier("lightning")
    provider = make_provider(tier, sim_options={"latency_scale": scale})
    store = Store(root, fsync=False)
    result = asyncio.run(run_agent(store=store, task=get_task("cents-fees"), tier=tier, catalog=catalog,
                                   profile=load_profile("direct"), seed=seed, provider=provider))
    return store.read_run(result.run_id)


def test_simulated_time_is_the_sum_of_simulated_latencies_and_repeats(tmp_path):
    a = one_run(tmp_path / "a")
    b = one_run(tmp_path / "b", scale=0.001)  # a real (scaled) wait changes nothing recorded
    lat_a = [c.body["latency_ms"] for c in a.of_kind("call")]
    lat_b = [c.body["latency_ms"] for c in b.of_kind("call")]
    assert lat_a == lat_b and sum(lat_a) > 1000  # seconds of simulated model time
    assert a.end["elapsed_ms"] == b.end["elapsed_ms"]
    assert abs(a.end["elapsed_ms"] - sum(lat_a)) <= len(lat_a)  # ms rounding per call only
