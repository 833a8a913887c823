"""Stages 3 and 5 of the build: task pages, then the index, run lists, gallery and verify page.

Task pages are rendered from the task files the runs stored as blobs (the task listing
names every file), so a task page shows exactly the version the runs saw, held-out cases
included. Tasks in ``--tasks`` that no run used yet are shown from their folder.
"""

from __future__ import annotations

import hashlib
import shutil
import tomllib

from ..checks.tasks import find_tasks
from ._exppages import experiment_ids, exploratory_ids, headline
from ._gallery import gallery
from ._render import task_url
from ._runview import TEXT_LIMIT
from ._state import Build, digest_of

__all__ = ["stage_tasks", "stage_lists", "RUNS_PER_PAGE"]

RUNS_PER_PAGE = 100


# ---------------------------------------------------------------------------- 3. tasks

def _collect_tasks(b: Build) -> dict[tuple[str, int], dict]:
    tasks: dict[tuple[str, int], dict] = {}
    for s in b.summaries:
        t = s["task"]
        entry = tasks.setdefault((str(t["id"]), t["version"]), {"digest": t["digest"], "tiers": {}, "files": None})
        tier = entry["tiers"].setdefault(s["tier"], [0, 0])
        tier[0] += 1
        tier[1] += s["passed"]
    if b.tasks_dir is not None:
        for task in find_tasks(b.tasks_dir):
            entry = tasks.setdefault((task.id, task.version), {"digest": task.digest, "tiers": {}, "files": None})
            if entry["digest"] == task.digest:
                entry["files"] = task.files()
    return tasks


def _files_from_listing(store, digest) -> dict[str, bytes] | None:
    try:
        listing = store.get_blob(digest).decode("utf-8")
    except Exception:  # noqa: BLE001 - a missing listing shows as "files not stored"
        return None
    files = {}
    for line in listing.splitlines():
        hexd, _, path = line.partition("  ")
        try:
            files[path] = store.get_blob("sha256:" + hexd)
        except Exception:  # noqa: BLE001
            continue
    return files


def _task_view(key: tuple[str, int], entry: dict, files: dict[str, bytes] | None) -> dict:
    files = files or {}
    meta = _toml(files.get("task.toml"))
    checks = _toml(files.get("checks.toml")).get("checks") or []
    sections = {}
    for folder in ("inputs", "heldout", "reference"):
        sections[folder] = [_file_view(p[len(folder) + 1:], data) for p, data in sorted(files.items())
                            if p.startswith(folder + "/")]
    return {"id": key[0], "version": key[1], "digest": entry["digest"], "stored": bool(files),
            "title": str(meta.get("title") or key[0]), "family": str(meta.get("family") or ""),
            "prompt": str(meta.get("prompt") or ""), "meta": {k: meta.get(k) for k in
                                                           ("readable", "writable", "outputs", "limits", "lures")},
            "checks": [{"id": c.get("id"), "type": c.get("type"), "gate": c.get("gate") is True,
                        "heldout": "heldout" in c,
                        "params": {k: v for k, v in c.items() if k not in ("id", "type", "gate")}}
                       for c in checks if isinstance(c, dict)],
            "sections": sections,
            "tiers": [{"tier": t, "runs": n, "passed": p} for t, (n, p) in sorted(entry["tiers"].items())]}


def _toml(data: bytes | None) -> dict:
    try:
        return tomllib.loads(data.decode("utf-8")) if data else {}
    except (UnicodeDecodeError, tomllib.TOMLDecodeError):
        return {}


def _file_view(path: str, data: bytes) -> dict:
    text = data[:TEXT_LIMIT].decode("utf-8", "replace")
    return {"path": path, "size": len(data), "text": text, "truncated": len(data) > TEXT_LIMIT,
            "digest": "sha256:" + hashlib.sha256(data).hexdigest()}


def stage_tasks(b: Build) -> None:
    tasks = _collect_tasks(b)
    rows, reader = [], b.reader()
    for key in sorted(tasks):
        entry = tasks[key]
        rel = task_url(*key)
        page_key = digest_of({"digest": entry["digest"], "tiers": entry["tiers"], "dir": entry["files"] is not None})
        if not b.pages.unchanged(rel, page_key):
            files = entry["files"] if entry["files"] is not None else _files_from_listing(reader, entry["digest"])
            view = _task_view(key, entry, files)
            for section in view["sections"].values():
                b.objects.update(f["digest"] for f in section if f["truncated"])
            b.pages.render(rel, "task.html", key=page_key, title=f"Task {key[0]}@{key[1]}", simulated=False,
                           task=view)
        rows.append({"id": key[0], "version": key[1], "digest": entry["digest"],
                     "runs": sum(n for n, _ in entry["tiers"].values()),
                     "passed": sum(p for _, p in entry["tiers"].values())})
    b.pages.render("tasks/index.html", "tasks.html", title="Tasks", simulated=False, tasks=rows)


# ---------------------------------------------------------------------------- 5. lists

def stage_lists(b: Build) -> None:
    _runs_pages(b)
    facts = b.summaries.facts  # (every run's summary is read only where a page shows it)
    b.pages.render("gallery.html", "gallery.html", title="Evidence gallery",
                   simulated=any(f.simulated for f in facts), sections=gallery(b))
    _verify_page(b)
    exps = []
    for exp in experiment_ids(b):
        summary = b.experiments.get(exp, {}).get("summary") or {}
        runs = [f for f in facts if f.experiment == exp]
        exps.append({"id": exp, "title": summary.get("title") or exp, "runs": len(runs),
                     "simulated": bool(summary.get("simulated")) or any(f.simulated for f in runs),
                     "policies": headline(summary),
                     "decisions": (summary.get("primary") or {}).get("decisions") or []})
    other = [f for f in facts if not f.experiment]
    b.pages.render("index.html", "index.html", title="Experiments", experiments=exps, comparison=b.comparison,
                   exploratory=[_exploratory(b, j) for j in exploratory_ids(b)],
                   simulated=any(e["simulated"] for e in exps) or any(f.simulated for f in other),
                   total_runs=len(b.summaries), other_runs=len(other),
                   last_page=max(1, -(-len(b.summaries) // RUNS_PER_PAGE)))


def _exploratory(b: Build, journal_id: str, latest: int = 20) -> dict:
    """An exploratory journal (the studio's) as the index lists it: counts and its latest runs,
    labelled, never a table or a decision."""
    runs, jobs, sessions = [], set(), set()
    for e in b.store.read_journal(journal_id):
        if e.kind == "studio.run" and isinstance(e.body.get("run_id"), str) and e.body["run_id"] in b.runs:
            runs.append({k: e.body.get(k) for k in ("run_id", "task", "tier", "status", "passed")})
        if e.kind == "studio.job":
            jobs.add(e.body.get("job"))
            sessions.add(e.body.get("session"))
    ids = {r["run_id"] for r in runs}
    return {"id": journal_id, "runs": len(runs), "jobs": len(jobs), "sessions": len(sessions),
            "simulated": any(f.simulated for f in b.summaries.facts if f.id in ids),
            "latest": list(reversed(runs[-latest:]))}


def _runs_pages(b: Build) -> None:
    runs = b.summaries
    pages = max(1, -(-len(runs) // RUNS_PER_PAGE))
    for i in range(pages):
        ids = [f.id for f in runs.facts[i * RUNS_PER_PAGE:(i + 1) * RUNS_PER_PAGE]]
        key = digest_of({"ids": ids, "pages": pages})
        if b.pages.unchanged(f"runs/page-{i + 1}.html", key):
            continue
        chunk = runs[i * RUNS_PER_PAGE:(i + 1) * RUNS_PER_PAGE]  # read only for a page to write
        b.pages.render(f"runs/page-{i + 1}.html", "runs.html", key=key, title=f"Runs, page {i + 1}",
                       simulated=any(s["simulated"] for s in chunk), runs=chunk, page=i + 1, pages=pages,
                       first=i * RUNS_PER_PAGE + 1)


def _verify_page(b: Build) -> None:
    bundle = None
    if b.bundle is not None:
        data = b.bundle.read_bytes()
        name = "".join(c if c.isalnum() or c in "-_." else "_" for c in b.bundle.name).lstrip(".") or "bundle.zip"
        digest = hashlib.sha256(data).hexdigest()
        dest = b.out / name
        if not dest.is_file() or hashlib.sha256(dest.read_bytes()).hexdigest() != digest:
            shutil.copyfile(b.bundle, dest)
        b.pages.record(name, digest, written=False)
        bundle = {"name": name, "sha256": digest, "size": len(data)}
    b.pages.render("verify.html", "verify.html", title="Verify", simulated=False, bundle=bundle,
                   runs=len(b.summaries), experiments=experiment_ids(b))
