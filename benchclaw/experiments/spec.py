"""Experiment specs (FORMAT.md §9): ``load_spec`` reads and validates ``experiments/<id>.toml``.

The parser itself lives in the pure ``benchclaw.spec_format`` (the offline verifier and the
analysis use it on bundle bytes, and this package also holds pre-registration, which imports
the store); this module re-exports it, so ``benchclaw.experiments.spec`` keeps its API.
"""

from __future__ import annotations

from pathlib import Path

from ..errors import InputError
from ..spec_format import (SPEC_VERSION, STOP_RULES, Budget, Grid, Hypothesis, Settings, Spec,
                           StopRule, parse_spec, spec_digest)

__all__ = ["Spec", "Grid", "Settings", "Budget", "Hypothesis", "StopRule", "load_spec",
           "parse_spec", "STOP_RULES", "spec_digest", "SPEC_VERSION"]


def load_spec(path: Path | str) -> Spec:
    """Read and validate a spec file. Raises InputError when unreadable, FormatError
    naming the file and key when invalid."""
    path = Path(path)
    try:
        data = path.read_bytes()
    except OSError as e:
        raise InputError(f"{path}: cannot read the experiment spec ({e.strerror or e})") from None
    return parse_spec(data, path)
