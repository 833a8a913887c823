"""The built-in deterministic simulator: the embedded default provider (no key, no network).

Its tiers are SIMULATED stand-ins: they see only the messages they are sent, answer with
the same JSON actions a real model would, spend reasoning tokens, run out of tokens at a
small ``max_tokens``, make family-specific mistakes at tier-dependent rates, sometimes
follow planted injections, report usage in the differing shapes real providers use, and
inject faults on request. Behaviour is data (``benchclaw/data/sim_profiles.toml``).

Parts: ``state`` (what the messages tell the model), ``engine`` (the policy and the
reply), ``profiles`` (the data), ``backend`` (an HTTP-shaped endpoint with faults),
``provider`` (in-process), ``server`` (loopback HTTP). ``solvers`` and ``lures`` (the task
knowledge) are separate modules. Names are re-exported lazily so importing
``benchclaw.sim`` stays cheap.
"""

from __future__ import annotations

import importlib

__all__ = ["SimOptions", "SimProvider", "SimFaults", "SimBackend", "SimServer", "serve_in_thread",
           "load_profiles", "make_sim_provider"]

_WHERE = {
    "SimOptions": "provider", "SimProvider": "provider", "make_sim_provider": "provider",
    "SimFaults": "backend", "SimBackend": "backend",
    "SimServer": "server", "serve_in_thread": "server",
    "load_profiles": "profiles",
}


def __getattr__(name: str):
    if name in _WHERE:
        return getattr(importlib.import_module(f"{__name__}.{_WHERE[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
