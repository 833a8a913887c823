"""Stage 4 of the build: experiment pages, their cell lists and cell pages.

An experiment's analysis is recomputed only when its inputs change: the key is the list of
its run ids and the digests of its journal files (runs are immutable; journals only grow). When the
key matches the previous build, the cached summary renders the experiment page and every
cell page of the previous build is kept as it is.
"""

from __future__ import annotations

import hashlib

from ..analysis import lured_tasks
from ._build import Build, digest_of
from ._charts import pass_vs_cost, throughput_by_quarter, time_per_policy, tokens_per_tier
from ._experiment import analyse, analysis_inputs, journal_facts, load_spec
from ._runpages import render_pages
from ._render import cell_url, cells_list_url, exp_dir, exp_url

__all__ = ["stage_experiments", "CELLS_PER_PAGE", "experiment_ids", "exploratory_ids"]

CELLS_PER_PAGE = 100


def experiment_ids(b: Build) -> list[str]:
    """Pre-registered experiments: every journal but the exploratory ones (the studio's, listed
    apart by the index), and every experiment a run names."""
    seen = {s["policy"]["experiment"] for s in b.summaries if isinstance(s["policy"].get("experiment"), str)}
    return sorted(seen | (set(b.store.experiments()) - set(exploratory_ids(b))))


def exploratory_ids(b: Build) -> list[str]:
    """Journals whose first record in reader order (the earliest of each writer file's first
    line) is an exploratory ``studio.open`` (``verify.exploratory``): they register nothing
    and decide nothing, so they never get an experiment page, a policy table or a place in
    the comparison."""
    from .. import jsonio
    from ..verify.exploratory import is_exploratory

    out = []
    for exp in b.store.experiments():
        heads = []
        for path in b.store.journal_paths(exp):
            with open(path, "rb") as f:
                line = f.readline()
            try:
                rec = jsonio.loads(line)
                heads.append((str(rec["at"]), path.stem, rec["kind"], rec["body"]))
            except (ValueError, KeyError, TypeError):
                continue
        if heads and is_exploratory([min(heads)[2:]]):
            out.append(exp)
    return out
