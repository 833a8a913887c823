"""Gather the files of one experiment's bundle from a runs directory.

Everything is read through the store's verifying readers (run ids re-hashed, chains
re-checked, blobs re-hashed), so an export never packs evidence that is already broken:
it stops with an error naming the damaged file instead. Task versions, catalogs and
experiment specs are rebuilt from the blobs the runs reference (FORMAT.md §3), not from
whatever the working tree holds today, so the bundle shows exactly what the runs used.

An exploratory journal (the studio's) is collected by ``collect_exploratory``: its runs are
the ones its ``studio.run`` records name or whose ``run.start.policy.studio`` is it, and its
ledgers are every session and day ledger opened under its name (the day ledgers are named
by no run, so they are found by name and by their ``ledger.open``). It has no spec.
"""

from __future__ import annotations

from pathlib import Path

from ..errors import InputError, IntegrityError
from ..records import blob_refs
from ..store import VERSION_TEXT, SealedRun, Store, safe_name
from ..verify.layout import (catalog_entry, ledger_ids, parse_listing, spec_entry,
                             task_entry)
from ..verify.exploratory import is_exploratory, studio_ledger
from ..verify.manifest import object_path, run_path

__all__ = ["collect", "collect_exploratory", "journal_is_exploratory"]


def collect(store: Store, experiment: str, include_site: Path | None = None) -> dict[str, bytes]:
    """Every file of the bundle except the manifest and ``summary.json``: path -> bytes.

    Raises InputError when the experiment has no journal or a named run or blob is
    missing, IntegrityError when a run, journal or blob is damaged.
    """
    safe_name(experiment, "experiment id")
    files: dict[str, bytes] = {"VERSION": VERSION_TEXT}
    journal_bodies = _journals(store, experiment, files)
    runs = _runs(store, experiment, journal_bodies)
    # every registered spec is a blob the journal names (a registration's catalog and task
    # pins are packed from the runs that used them: a pinned task no run reached has none)
    bodies = [{"spec_digest": body.get("spec_digest")} for _, body in journal_bodies]
    for run in runs:
        files[run_path(run.run_id)] = run.path.read_bytes()
        bodies.extend(r.body for r in run.records)
    bodies.extend(_ledgers(store, runs, journal_bodies, files))
    _objects(store, bodies, files)
    _tasks(store, runs, files)
    _catalogs(store, runs, files)
    _spec(store, experiment, journal_bodies, files)
    if include_site is not None:
        _site(Path(include_site), files)
    return files


def _journals(store: Store, experiment: str, files: dict[str, bytes]) -> list[tuple[str, dict]]:
    paths = store.journal_paths(experiment)
    if not paths:
        raise InputError(f"{store.root}/journals/{experiment}: experiment {experiment!r} has no "
                         "journal (register it with `benchclaw prereg` and run it first)")
    out = []
    for entry in store.read_journal(experiment):  # verifies every writer's chain
        out.append((entry.kind, entry.body))
    for path in paths:
        files[f"journals/{experiment}/{path.name}"] = path.read_bytes()
    return out


def _runs(store: Store, experiment: str, journal: list[tuple[str, dict]]) -> list[SealedRun]:
    named = {b.get("run_id") for k, b in journal if k == "run"}
    named.discard(None)
    have = set(store.run_ids())
    missing = sorted(r for r in named if r not in have)
    if missing:
        raise InputError(f"{store.root}: the journal of {experiment} names run {missing[0]} "
                         f"which is not in runs/ ({len(missing)} missing)")
    runs = []
    for run_id in sorted(have):
        run = store.read_run(run_id)
        policy = run.start.get("policy") or {}
        if run_id in named or (isinstance(policy, dict) and policy.get("experiment") == experiment):
            runs.append(run)
    return runs


def _ledgers(store: Store, runs: list[SealedRun], journal: list[tuple[str, dict]],
             files: dict[str, bytes]) -> list[dict]:
    from ..store import ChainFile

    bodies = []
    for lid in ledger_ids([r.start for r in runs], [b for _, b in journal]):
        path = store.root / "ledgers" / f"{lid}.jsonl"
        if not path.is_file():
            raise InputError(f"{path}: ledger {lid} named by the runs is missing")
        bodies.extend(r.body for r in ChainFile(path).read())
        files[f"ledgers/{lid}.jsonl"] = path.read_bytes()
    return bodies


def _objects(store: Store, bodies: list[dict], files: dict[str, bytes]) -> None:
    for body in bodies:
        for digest in blob_refs(body):
            name = object_path(digest)
            if name not in files:
                files[name] = store.get_blob(digest)


def _tasks(store: Store, runs: list[SealedRun], files: dict[str, bytes]) -> None:
    done: set[str] = set()
    for run in runs:
        task = run.start.get("task") or {}
        prefix = task_entry(task)
        if prefix is None or prefix in done:
            continue
        done.add(prefix)
        listing = store.get_blob(task["digest"])
        try:
            rows = parse_listing(listing)
        except ValueError as e:
            raise IntegrityError(f"{store.blob_path(task['digest'])}: task listing: {e}") from None
        for path, digest in rows:
            data = store.get_blob(digest)
            files[f"{prefix}/{path}"] = data
            # the blobs the listing names too: a run "can be rebuilt from objects/ alone"
            # (FORMAT.md §3), and the analysis reads task.toml by digest (lures)
            files[object_path(digest)] = data


def _catalogs(store: Store, runs: list[SealedRun], files: dict[str, bytes]) -> None:
    for run in runs:
        for path, digest in catalog_entry(run.start.get("catalog")):
            if path not in files:
                files[path] = store.get_blob(digest)


def _spec(store: Store, experiment: str, journal: list[tuple[str, dict]], files: dict[str, bytes]) -> None:
    digest = None
    for kind, body in journal:
        if kind in ("prereg", "deviation") and isinstance(body.get("spec_digest"), str):
            digest = body["spec_digest"]
    if digest is None:
        raise InputError(f"experiment {experiment}: the journal holds no registration (prereg)")
    files[spec_entry(experiment)] = store.get_blob(digest)


def _site(site: Path, files: dict[str, bytes]) -> None:
    if not site.is_dir():
        raise InputError(f"{site}: no such site folder (build it with `benchclaw build`)")
    for p in sorted(site.rglob("*")):
        if p.is_symlink():
            raise InputError(f"{p}: a site file is a symbolic link; a bundle holds regular files only")
        if p.is_file():
            files["site/" + p.relative_to(site).as_posix()] = p.read_bytes()


# ---------------------------------------------------------------------------- exploratory form

def journal_is_exploratory(store: Store, journal_id: str) -> bool:
    """True when ``journals/<journal_id>/`` is an exploratory (studio) journal. Raises
    IntegrityError for a damaged journal; False when there is none (``collect`` says so)."""
    safe_name(journal_id, "experiment id")
    if not store.journal_paths(journal_id):
        return False
    return is_exploratory((e.kind, e.body) for e in store.read_journal(journal_id))


def collect_exploratory(store: Store, journal_id: str, include_site: Path | None = None) -> dict[str, bytes]:
    """Every file of an exploratory journal's bundle (no spec, no summary): path -> bytes.

    Raises InputError when the studio left runs unfinished (killed and not restarted: its
    restart recovers and journals them) or a named run or blob is missing, IntegrityError
    when a run, journal, ledger or blob is damaged.
    """
    files: dict[str, bytes] = {"VERSION": VERSION_TEXT}
    journal = _journals(store, journal_id, files)
    _refuse_unfinished(store, journal_id, journal)
    runs = _studio_runs(store, journal_id, journal)
    bodies: list[dict] = []
    for run in runs:
        files[run_path(run.run_id)] = run.path.read_bytes()
        bodies.extend(r.body for r in run.records)
    bodies.extend(_studio_ledgers(store, journal_id, files))
    _objects(store, bodies, files)
    _tasks(store, runs, files)
    _catalogs(store, runs, files)
    if include_site is not None:
        _site(Path(include_site), files)
    return files


def _refuse_unfinished(store: Store, journal_id: str, journal: list[tuple[str, dict]]) -> None:
    started = {b.get("attempt") for k, b in journal if k == "studio.run.start"}
    started -= {b.get("attempt") for k, b in journal if k == "studio.run"}
    if started:
        raise InputError(f"{store.root}/journals/{journal_id}: the studio stopped with {len(started)} run(s) "
                         "unfinished (killed?); start it once more, so that it seals and journals them "
                         "and settles their reservations, then export")


def _studio_runs(store: Store, journal_id: str, journal: list[tuple[str, dict]]) -> list[SealedRun]:
    named = {b.get("run_id") for k, b in journal if k == "studio.run"}
    named.discard(None)
    have = set(store.run_ids())
    missing = sorted(r for r in named if r not in have)
    if missing:
        raise InputError(f"{store.root}: the journal of {journal_id} names run {missing[0]} "
                         f"which is not in runs/ ({len(missing)} missing)")
    runs = []
    for run_id in sorted(have):
        run = store.read_run(run_id)
        policy = run.start.get("policy") or {}
        if run_id in named or (isinstance(policy, dict) and policy.get("studio") == journal_id):
            runs.append(run)
    return runs


def _studio_ledgers(store: Store, journal_id: str, files: dict[str, bytes]) -> list[dict]:
    from ..store import ChainFile

    bodies = []
    for path in sorted((store.root / "ledgers").glob(f"{journal_id}-*.jsonl")):
        if studio_ledger(journal_id, path.stem) is None:
            continue
        records = ChainFile(path).read()
        if not records or records[0].body.get("experiment") != journal_id:
            continue  # another studio's ledger whose label extends this one's
        bodies.extend(r.body for r in records)
        files[f"ledgers/{path.name}"] = path.read_bytes()
    return bodies
