"""Providers: one async interface, a registry of implementations, tier catalogs, the key vault.

Importing this package is cheap on purpose: ``openai`` is imported only by
``providers.openai_provider`` when an ``openai`` tier is first used, and the simulator only
when a ``sim`` tier is. ``make_provider`` looks the tier's provider up in ``PROVIDERS``
(name -> "module:factory"), so adding a provider is one entry.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from ..errors import ProviderConfigError
from .base import CallError, ChatRequest, ChatResponse, Provider

if TYPE_CHECKING:  # pragma: no cover
    from .catalog import Tier
    from .vault import Secret

__all__ = ["make_provider", "PROVIDERS", "ChatRequest", "ChatResponse", "CallError", "Provider"]

# provider name -> "module:factory"; factory(tier, *, sim_options, key) -> Provider
PROVIDERS: dict[str, str] = {
    "openai": "benchclaw.providers.openai_provider:make_openai_provider",
    "sim": "benchclaw.sim.provider:make_sim_provider",
}


def make_provider(tier: "Tier", *, sim_options: Any = None, key: "Secret | str | None" = None) -> Provider:
    """A provider for ``tier``. ``sim_options`` (a ``benchclaw.sim.SimOptions`` or dict)
    configures the simulator; ``key`` overrides the tier's key source (a ``Secret`` or a
    plain string, which is wrapped at once). Raises ``ProviderConfigError`` for an unknown
    provider or a missing key."""
    spec = PROVIDERS.get(tier.provider)
    if spec is None:
        raise ProviderConfigError(f"tier {tier.name!r}: unknown provider {tier.provider!r} "
                                  f"(known: {', '.join(sorted(PROVIDERS))})")
    module, factory = spec.split(":")
    return getattr(importlib.import_module(module), factory)(tier, sim_options=sim_options, key=key)

