"""Run replay pages, rendered in worker processes when there are many.

A run page depends only on its run id and the renderer (FORMAT.md run ids name immutable
bytes), so pages are independent and render in parallel. Each worker compiles the
templates once (``_init``), reads a run (verifying its hash and chain), writes its page,
copies the blobs the page links into ``site/objects/`` and returns only small facts
(summary, the analysis's view of the run, linked digests) to the parent. Below ``POOL_MIN`` runs the
work is done in-process: starting processes would cost more than it saves.
"""

from __future__ import annotations

import gc
import os
from pathlib import Path
from typing import Iterator

from ..evidence.store import Store
from ._blobs import SharedIndex, WorkerStore
from ._cache import fast_dumps, write_atomic
from ._experiment import run_payload
from ._render import Scrubber, make_env, object_url, run_url
from ._runview import Blobs, run_view, summarise_run

__all__ = ["Workers", "start_workers", "render_runs", "render_pages", "copy_object", "POOL_MIN"]

POOL_MIN = 200
_W: dict = {}


def _init(runs_dir: str, templates: str, out: str, public: bool, scrub: Scrubber,
          renderer: str | None = None) -> None:
    store = WorkerStore(runs_dir, fsync=False) if WorkerStore.shared is not None else Store(runs_dir, fsync=False)
    _W.update(store=store, env=make_env(Path(templates), renderer), out=Path(out),
              public=public, scrub=scrub)


def _init_worker(*args) -> None:
    # A forked worker inherits the parent's paused collector (see _build) and its millions
    # of objects, all still in the young generation: freeze them first, so the worker's
    # collections scan only its own objects (and do not copy every inherited page).
    gc.freeze()
    gc.enable()
    _init(*args)


def copy_object(store: Store, out: Path, digest: str) -> None:
    """Copy one blob to ``site/objects/<aa>/<hex>.txt`` unless it is there already."""
    dest = out / object_url(digest)
    if dest.exists():
        return
    loc = store.find_blob(digest)  # loose or packed
    if loc is None:
        return
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(f".{dest.name}.{os.getpid()}.tmp")
    tmp.write_bytes(loc.read())
    os.replace(tmp, dest)


def _one(run_id: str) -> tuple:
    store, out = _W["store"], _W["out"]
    run = store.read_run(run_id)
    blobs = Blobs(store, public=_W["public"])
    summary = summarise_run(run)
    rel = run_url(run_id)
    html = _W["env"].get_template("run.html").render(
        root="../../", public=_W["public"], simulated=summary["simulated"], title=f"Run {run_id[:12]}",
        summary=summary, view=run_view(run, blobs))
    write_atomic(out / rel, _W["scrub"](html).encode("utf-8"))
    linked = sorted(blobs.linked)
    for digest in linked:
        copy_object(store, out, digest)
    return run_id, {"s": summary, "l": linked}, fast_dumps(run_payload(run))


def _page(job: tuple[str, str, dict]) -> None:
    rel, template, ctx = job
    html = _W["env"].get_template(template).render(root="../" * rel.count("/"), public=_W["public"], **ctx)
    write_atomic(_W["out"] / rel, _W["scrub"](html).encode("utf-8"))


class Workers:
    """The page renderers of one build: a pool of worker processes, or this process.

    The pool is forked once, before the build holds anything per run (``start_workers`` in
    stage 1), and serves the run pages and the cell pages alike: a fork copies the parent's
    page tables, so a pool started after the analysis (as the cell pages' once was) counted
    the whole analysis in each worker's resident memory. Below ``POOL_MIN`` runs there is no
    pool: starting processes would cost more than it saves. ``close()`` ends the pool."""

    def __init__(self, args: tuple, pool=None):
        self._args, self._pool, self._local = args, pool, False

    def map(self, fn, items: list) -> Iterator:
        """``fn`` over ``items``, results as they come (so a caller keeps only what it needs)."""
        if self._pool is not None:
            return self._pool.imap_unordered(fn, items, chunksize=32)
        if not self._local:
            _init(*self._args)
            self._local = True
        return map(fn, items)

    def close(self) -> None:
        if self._pool is not None:
            self._pool.terminate()  # every job's result was read: nothing is left to wait for
            self._pool.join()
            self._pool = None


def start_workers(*, runs_dir: Path, templates: Path, out: Path, public: bool, scrub: Scrubber,
                  workers: int, runs: int, renderer: str | None = None) -> Workers:
    """The build's ``Workers``: a pool of ``workers`` processes when there are ``POOL_MIN``
    runs or more (and more than one worker is asked for)."""
    args = (str(runs_dir), str(templates), str(out), public, scrub, renderer)
    if workers <= 1 or runs < POOL_MIN:
        return Workers(args)
    import multiprocessing

    ctx = multiprocessing.get_context("fork" if hasattr(os, "fork") else "spawn")
    if ctx.get_start_method() == "fork":
        # one index of every packed blob, shared by the forked workers through a file
        # (``SharedIndex``), instead of a whole ``PackIndex`` built in each worker
        WorkerStore.shared = SharedIndex(Store(runs_dir, fsync=False)._objects_dir())
    try:
        return Workers(args, ctx.Pool(workers, initializer=_init_worker, initargs=args))
    finally:
        WorkerStore.shared = None  # the workers have it (a worker started later reads as a Store)


def render_pages(workers: Workers, jobs: list[tuple[str, str, dict]]) -> None:
    """Render many independent pages ``(rel, template, context)`` (cell pages)."""
    for _ in workers.map(_page, jobs):
        pass


def render_runs(workers: Workers, run_ids: list[str]) -> Iterator[tuple[str, dict, bytes]]:
    """Render the replay page of every run in ``run_ids``; yields (run id, cache entry,
    analysis payload (``run_payload``, as JSON bytes)) per run, in no particular order.
    Raises IntegrityError/FormatError (naming the file) for a damaged run log."""
    return workers.map(_one, run_ids)
