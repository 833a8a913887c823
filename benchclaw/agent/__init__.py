"""The agent runtime: model-chosen actions, permissions enforced on every action, bounds.

``run_agent`` runs one agent on one task on one tier and writes one sealed run;
``load_profile`` loads an agent profile (a data file). The pure pieces live in their own
modules so they can be tested and read alone: ``paths`` (normalisation and the permission
decision), ``protocol`` (a model reply -> an action or an error), ``workspace`` (the
in-memory files), ``profiles``; ``runtime`` is the loop, ``evidence`` the record bodies,
``testing`` a scripted provider and a fake clock for tests.

Importing this package is cheap: nothing here imports a provider SDK.
"""

from __future__ import annotations

from .profiles import Profile, load_profile, shipped_profiles
from .runtime import STATUSES, AgentResult, Limits, MonotonicClock, run_agent

__all__ = ["run_agent", "load_profile", "shipped_profiles", "Profile", "AgentResult", "Limits",
           "MonotonicClock", "STATUSES"]
