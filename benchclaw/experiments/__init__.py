"""Experiments: specs (FORMAT.md §9), pre-registration and deviations and corrections (§8).

``load_spec`` validates a spec file; ``prereg`` records its digest in the experiment
journal before any call; ``deviate`` records a changed digest and its reason before the
runs it affects; ``require_registered`` is what ``benchclaw run`` calls first.
"""

from .corrections import correct
from .prereg import (Registration, deviate, locate_spec, prereg, registered_digests, registration,
                     require_registered)
from ..formats.spec import (STOP_RULES, Budget, Grid, Hypothesis, Settings, Spec, StopRule,
                            load_spec, parse_spec)

__all__ = ["Spec", "Grid", "Settings", "Budget", "Hypothesis", "StopRule", "STOP_RULES", "load_spec",
           "parse_spec", "Registration", "prereg", "deviate", "registration", "require_registered",
           "locate_spec", "registered_digests", "correct"]
