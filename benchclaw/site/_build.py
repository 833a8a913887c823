"""``build_site``: the static replay site, built in ordered stages.

1. inputs: the runs directory, templates, the renderer digest, the previous build's cache;
2. run replay pages: only for runs the cache does not know (in worker processes);
3. task pages: one per task version seen in runs or in the tasks folder;
4. experiments: the analysis's summary (recomputed only when the experiment's runs or
   journal changed), the experiment page with its charts, its cell pages; then, when the
   runs hold more than one experiment, the comparison page across them;
5. lists: index, paginated runs, evidence gallery, verify page;
6. static files and the blobs pages link, copied into ``site/``;
7. clean-up: pages and blobs the new build no longer has are removed; the cache is saved.

Same inputs, same bytes: nothing reads a clock or the machine's paths into a page, every
list is sorted, and pages are rewritten only when their bytes change.

Memory: what is kept of every run between stages is small (``RunFacts``); its summary
and its analysis payload wait in a temporary file (``Spill``) until a page or the analysis
reads them, so the build's peak is mostly the analysis of its largest experiment. The
worker processes that render pages are forked in stage 1, before any of that exists
(``_runpages.Workers``), so none of it is counted again in each worker.

Speed: the parent process holds a few million small objects (the analysis's views of
every run), which the cyclic garbage collector would
rescan on every generation-2 collection, costing seconds per build; it is paused in the
parent while the stages run (reference counting still frees everything) and re-enabled in
the worker processes, which render pages and hold little.
"""

from __future__ import annotations

import hashlib
import os
import sys
import time
from typing import Iterator

from pathlib import Path

from ..analysis.summary import gc_paused
from ..errors import InputError
from ..paths import make_output_dir, refuse_evidence_overlap, site_templates_dir
from ..formats import jsonio
from ._blobs import BuildStore
from ._cache import BuildCache, PageWriter, compact_dumps, write_atomic
from ._compare import stage_compare
from ._exppages import stage_experiments
from ._pages import stage_lists, stage_tasks
from ._render import Scrubber, make_env, object_url, renderer_digest, run_url
from ._runpages import copy_object, render_runs, start_workers
from ._state import Build, BuildReport, RunFacts, Summaries

__all__ = ["build_site", "BuildReport"]


def build_site(runs_dir, out_dir, *, tasks_dir=None, public: bool = False, bundle_path=None,
               workers: int | None = None) -> BuildReport:
    """Render the static replay site of ``runs_dir`` into ``out_dir``.

    Raises ``InputError`` when the runs directory, tasks folder or bundle is missing,
    ``UsageError`` when ``out_dir`` is inside the runs directory, and ``IntegrityError`` /
    ``FormatError`` (naming the file and line) for a damaged run log or journal.
    """
    t0 = time.perf_counter()
    with gc_paused():  # see the module docstring ("Speed"); workers re-enable it
        b = _stage1_inputs(runs_dir, out_dir, tasks_dir, public, bundle_path, workers)
        try:
            report = _stages(b, t0)
        finally:
            b.workers.close()
        del b  # freed now, so the collector does not scan it once resumed
    return report


def _stages(b: Build, t0: float) -> BuildReport:
    b.warnings.extend(f"experiment {e} is being run by another process: the site shows the evidence "
                      "sealed so far (a snapshot); build again when its grid ends"
                      for e in b.store.experiments() if b.store.experiment_live(e))
    _stage2_runs(b)
    stage_tasks(b)
    stage_experiments(b)
    stage_compare(b)
    stage_lists(b)
    _stage6_static(b)
    _stage7_cleanup(b)
    return BuildReport(b.pages.written, b.pages.skipped, round(time.perf_counter() - t0, 3),
                       len(b.runs), b.rendered, tuple(b.warnings))


# ---------------------------------------------------------------------------- 1. inputs

def _stage1_inputs(runs_dir, out_dir, tasks_dir, public, bundle_path, workers) -> Build:
    store = BuildStore.existing(runs_dir, fsync=False)  # no index of every blob: ``_blobs``
    out = Path(out_dir)
    refuse_evidence_overlap(out, "site", evidence=(store.root, tasks_dir))
    if tasks_dir is not None and not Path(tasks_dir).is_dir():
        raise InputError(f"{tasks_dir}: no such tasks folder")
    if bundle_path is not None and not Path(bundle_path).is_file():
        raise InputError(f"{bundle_path}: no such bundle file")
    templates = site_templates_dir()
    if not (templates / "base.html").is_file():
        raise InputError(f"{templates}: the site templates are missing (base.html)")
    make_output_dir(out, "site")
    renderer = renderer_digest(templates, public)
    scrub = Scrubber([store.root, out, templates, tasks_dir, Path.cwd(),
                      Path(bundle_path).parent if bundle_path else None])
    env = make_env(templates, renderer)
    # The workers are forked now, before anything per run is held (not even the cache).
    pool = start_workers(runs_dir=store.root, templates=templates, out=out, public=public, scrub=scrub,
                         workers=workers if workers is not None else min(2, os.cpu_count() or 1),
                         runs=len(store.run_ids()), renderer=renderer)
    cache = BuildCache.load(out, renderer)
    pages = PageWriter(out, env, scrub, cache.pages, {"public": public})
    return Build(store, out, templates, Path(tasks_dir) if tasks_dir else None, public,
                 Path(bundle_path) if bundle_path else None, pool, cache, pages, scrub)


# ---------------------------------------------------------------------------- 2. run pages

def _stage2_runs(b: Build) -> None:
    todo, base, facts = [], str(b.out) + os.sep, []
    for run_id in b.store.run_ids():
        entry = b.cache.runs.pop(run_id, None)  # kept in the spill, not twice in memory
        if entry is not None and os.path.isfile(base + run_url(run_id)):
            _keep(b, run_id, entry, facts)
            b.pages.record_run(run_id, written=False)
        else:
            todo.append(run_id)
    fresh = render_runs(b.workers, todo)
    for run_id, entry, payload in fresh:  # as they come: the cache and pages are sorted when saved
        _keep(b, run_id, entry, facts, payload)
        b.pages.record_run(run_id, written=True)
    b.rendered = len(todo)
    facts.sort(key=lambda f: (f.at, f.id))
    b.summaries = Summaries(b.runs, facts)


def _keep(b: Build, run_id: str, entry: dict, facts: list[RunFacts], payload: bytes | None = None) -> None:
    """Spill a run's cache entry (``{"s": summary, "l": linked blobs}``) and the analysis
    payload rendering it gave (None: a cached run), keeping in memory only its ``RunFacts``:
    the blobs it links are read back in stage 6. (A summary's ``id`` is its run id.)"""
    s = entry["s"]
    b.runs.put(run_id, compact_dumps(entry), payload)
    exp = s["policy"].get("experiment")  # one string for all its runs (a few experiments), not one per run
    facts.append(RunFacts(s["at"], run_id, sys.intern(exp) if type(exp) is str else exp, s["simulated"]))


# ---------------------------------------------------------------------------- 6. static files and blobs

def _stage6_static(b: Build) -> None:
    static = b.templates / "static"
    for path in sorted(p for p in static.rglob("*") if p.is_file()):
        rel = "static/" + path.relative_to(static).as_posix()
        data = path.read_bytes()
        digest = hashlib.sha256(data).hexdigest()
        if not b.pages.unchanged(rel, digest):
            write_atomic(b.out / rel, data)
            b.pages.record(rel, digest, written=True)
    # The blobs the run pages link, read back from their cache entries: held from stage 2
    # on, about 10 digests a run, they were a large part of the analysis's peak.
    for run_id in b.runs:
        b.objects.update(jsonio.loads(b.runs[run_id])["l"])
    # Earlier builds copied the rest. (Filtered, not ``b.objects - set(...)``: on a first build
    # that difference was a second set of every linked blob, about 4 MB at 20,000 runs.)
    copied = set(b.cache.objects)
    for digest in b.objects.sorted():
        if digest not in copied:
            copy_object(b.store, b.out, digest)


# ---------------------------------------------------------------------------- 7. clean-up

def _stage7_cleanup(b: Build) -> None:
    for rel in _not_in(sorted(b.cache.previous_pages), (rel for rel, _ in b.pages.items())):
        _unlink(b.out / rel)
    for digest in _not_in(sorted(set(b.cache.objects)), b.objects.sorted()):
        _unlink(b.out / object_url(digest))
    keep = b.objects.sorted()
    experiments = {k: v for k, v in sorted(b.experiments.items())}
    b.cache.save(b.pages.items(), b.runs, experiments, keep, b.new_records)
    b.runs.close()


def _not_in(old: list[str], new) -> Iterator[str]:
    """The strings (digests, page paths) of sorted ``old`` that sorted iterator ``new`` does
    not give."""
    new = iter(new)
    cur = next(new, None)
    for d in old:
        while cur is not None and cur < d:
            cur = next(new, None)
        if cur != d:
            yield d


def _unlink(path: Path) -> None:
    try:
        path.unlink()
    except FileNotFoundError:
        pass
