"""One agent run from names: what ``benchclaw try`` does, as one library call.

Resolves a task id, a catalog and tier, a profile and a provider, runs ``run_agent`` once
outside any experiment (``policy`` is ``null``, no ledger) and closes the provider. The CLI
only parses options and prints the result, so tests and notebooks get the same behaviour
with one import.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from ..errors import UsageError
from ..evidence.store import Store
from .profiles import load_profile
from .runtime import AgentResult, Limits, run_agent

__all__ = ["try_task"]


def try_task(task_id: str, *, tier: str, runs_dir: str | Path = "runs", profile: str | Path = "direct",
             catalog: str | Path = "sim", provider: str | None = None, seed: int = 1, max_tokens: int = 8192,
             tasks_root: str | Path | None = None, limits: Limits | dict | None = None,
             sim_options=None, on_text=None) -> AgentResult:
    """Run ``task_id`` (``id`` or ``id@N``) once on ``tier`` of ``catalog``; returns the result.

    ``provider``, when given, must be the tier's provider (``sim`` or ``openai``): it guards
    against running a real endpoint by mistake, never swaps one in silently. ``on_text(text,
    first)`` sees a streamed tier's replies as they arrive (``Provider.on_text``). Raises
    ``InputError`` (unknown task, profile or catalog), ``ProviderConfigError`` (unknown tier,
    missing key, unknown price) and ``UsageError`` (a provider that does not match the tier).
    """
    from ..providers import make_provider
    from ..providers.catalog import load_catalog
    from ..checks.tasks import get_task

    task = get_task(task_id, tasks_root)
    cat = load_catalog(catalog)
    t = cat.tier(tier)
    if provider is not None and provider != t.provider:
        raise UsageError(f"tier {tier!r} of catalog {cat.name!r} uses provider {t.provider!r}, not {provider!r} "
                         f"(pick a catalog whose tiers use {provider!r}, e.g. --catalog sim)")
    prof = load_profile(profile)
    store = Store(runs_dir)
    prov = make_provider(t, sim_options=sim_options)
    prov.on_text = on_text

    async def go() -> AgentResult:
        try:
            return await run_agent(store=store, task=task, tier=t, catalog=cat, profile=prof, seed=seed,
                                   provider=prov, limits=limits, policy_context=None, max_tokens=max_tokens)
        finally:
            await prov.aclose()

    return asyncio.run(go())
