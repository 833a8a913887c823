"""Simulator tier profiles: behaviour as data (``benchclaw/data/sim_profiles.toml``).

A profile says how a simulated tier behaves: how much it reasons per turn, how fast it
produces tokens, how it caches, which usage shape it reports, how often it gets each task
family right, how easily planted injections sway it. Keeping this in a TOML file (format
in docs/FORMAT.md, "Simulator profiles") means tuning the simulator never touches the
engine, and a test or a user can load another file.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping

from ..errors import InputError
from ..paths import package_data_dir
from ..formats.sim_rules import TURN_KINDS, USAGE_SHAPES, Profile, effort_for, parse_profiles

__all__ = ["Profile", "Profiles", "load_profiles", "USAGE_SHAPES", "TURN_KINDS", "default_profiles_path"]


@dataclass(frozen=True)
class Profiles:
    """All profiles of a file, with the family effort table and the file's bytes (the
    runtime stores them as a blob so a run's usage can be recomputed: FORMAT.md §6)."""

    by_name: dict[str, Profile]
    effort: Mapping[str, float]
    path: Path | None = None
    source: bytes = b""

    def resolve(self, model: str) -> Profile | None:
        """The profile whose model id (or name) is ``model``."""
        for p in self.by_name.values():
            if p.model == model:
                return p
        return self.by_name.get(model)

    def effort_for(self, family: str | None) -> float:
        return effort_for(self.effort, family)

    @property
    def models(self) -> list[str]:
        return [p.model for p in self.by_name.values()]

    @property
    def digest(self) -> str:
        """``sha256:`` of the file's bytes: what ``run.start.sim.profiles`` records."""
        return "sha256:" + hashlib.sha256(self.source).hexdigest()


def default_profiles_path() -> Path:
    return package_data_dir() / "sim_profiles.toml"


def load_profiles(path: str | Path | None = None) -> Profiles:
    """Load and validate a profiles file (default: the shipped one). Raises
    ``InputError`` when unreadable, ``FormatError`` naming the profile and field
    (the parser is ``benchclaw.formats.sim_rules.parse_profiles``, which the verifier uses too)."""
    p = Path(path) if path is not None else default_profiles_path()
    try:
        data = p.read_bytes()
    except OSError as e:
        raise InputError(f"{p}: cannot read simulator profiles ({e.strerror or e})") from None
    profiles, effort = parse_profiles(data, str(p))
    return Profiles(by_name=profiles, effort=effort, path=p, source=data)
