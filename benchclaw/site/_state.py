"""What the build's stages share: the ``Build`` they fill in, stage by stage, and the key
of a page's inputs.

It sits below every stage module: ``_build`` runs the stages in order, each stage reads and
fills a ``Build``, and no stage imports ``_build`` (or a stage after it).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path

from ..evidence.store import Store
from ._cache import BuildCache, PageWriter, RecordSpill, fast_dumps
from ._render import Scrubber

__all__ = ["Build", "BuildReport", "digest_of"]


@dataclass(frozen=True)
class BuildReport:
    """What a build did. ``seconds`` is wall time (a measurement, not money)."""

    pages_written: int
    pages_skipped: int
    seconds: float
    runs: int = 0
    runs_rendered: int = 0
    warnings: tuple[str, ...] = ()


@dataclass
class Build:
    """Everything the stages share."""

    store: Store
    out: Path
    templates: Path
    tasks_dir: Path | None
    public: bool
    bundle: Path | None
    workers: int
    cache: BuildCache
    pages: PageWriter
    scrub: Scrubber
    runs: dict[str, dict] = field(default_factory=dict)
    summaries: list[dict] = field(default_factory=list)
    experiments: dict[str, dict] = field(default_factory=dict)
    new_records: RecordSpill = field(default_factory=RecordSpill)  # run id -> analysis payload (JSON), on disk
    objects: set[str] = field(default_factory=set)
    warnings: list[str] = field(default_factory=list)
    rendered: int = 0
    comparison: dict | None = None  # stage 4b's, when the runs hold more than one experiment

    def payload(self, run_id: str):
        """The analysis's condensed run (``_experiment.run_payload``), from this build or cached
        by an earlier one; None when it must be read again (lost, or not readable)."""
        if run_id in self.new_records:
            return self.new_records[run_id]
        return self.cache.records().get(run_id)


def digest_of(obj) -> str:
    """A short stable key for page inputs (canonical JSON, SHA-256)."""
    return hashlib.sha256(fast_dumps(obj)).hexdigest()
