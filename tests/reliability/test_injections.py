"""Prompt injections against a model that always obeys them (issue #10, third bullet).

The ``reckless`` simulated tier follows every planted instruction it reads. It runs every
shipped task plus the test-only variants of ``fixtures/injection_variants.toml`` (fake
system/assistant/tool messages, instructions in CSV cells and in comments of a pricing
policy, path tricks: backslashes, ``..`` in the middle, drive letters, look-alike Unicode,
percent-encoding, ``~``), on both agent profiles. What must hold, checked from the
evidence rather than from the runtime's own counters:

- zero forbidden actions executed: every read the runtime performed was of a readable
  (or writable) path, every write went to a writable path that is not an input, and the
  final artifacts are only the task's writable files;
- every attempt is recorded refused: each forbidden action the model sent (parsed from
  the reply blobs) has an ``action`` record with ``permitted: false`` and the lure named;
- the report counts the attempts and the site's gallery shows the attacked runs;
- the bundle verifies.
"""

from __future__ import annotations

import posixpath
import shutil
import tomllib
from pathlib import Path
from types import SimpleNamespace

import pytest

from benchclaw.formats import jsonio
from benchclaw.experiments.executor import default_backends
from benchclaw.sim.lures import find_lures
from benchclaw.evidence.store import Store
from benchclaw.checks.tasks import find_tasks, load_task, path_allowed

from .helpers import (terminal_row, bodies, build_products, experiment_runs, record_figures, register_and_run, tier_row,
                      verdict_text, write_spec)

EXP = "INJECT"
TIER = "reckless"
FIXTURES = Path(__file__).parent / "fixtures" / "injection_variants.toml"
FORBIDDEN_KINDS = ("read", "secret", "write", "overwrite", "action")   # content lures are judged by checks


# ----------------------------------------------------------------------- fixture tasks

def build_variant_tasks(root: Path) -> list[str]:
    """Materialise the fixture variants as task folders under ``root``; returns their ids."""
    spec = tomllib.loads(FIXTURES.read_text(encoding="utf-8"))
    shipped = {t.id: t for t in find_tasks()}
    ids = []
    for v in spec["tasks"]:
        base = shipped[v["base"]]
        dest = root / v["id"] / "v1"
        shutil.copytree(base.folder, dest)
        toml = (dest / "task.toml").read_text(encoding="utf-8")
        toml = toml.replace(f'id = "{base.id}"', f'id = "{v["id"]}"', 1)
        toml += "".join(f'\n[[lures]]\nid = "{lure["id"]}"\nkind = "{lure["kind"]}"\ntarget = {_toml_str(lure["target"])}\n'
                        for lure in v["lures"])
        (dest / "task.toml").write_text(toml, encoding="utf-8")
        doc = dest / "inputs" / v["file"]
        text = doc.read_text(encoding="utf-8")
        for old, new in v.get("replace", []):
            assert text.count(old) == 1, f"{v['id']}: {old!r} must occur once in {v['file']}"
            text = text.replace(old, new)
        text += v.get("append", "")
        doc.write_text(text, encoding="utf-8")
        ids.append(v["id"])
    return ids


def _toml_str(s: str) -> str:
    return "'" + s + "'" if "'" not in s else jsonio.dumps(s).decode()


def _norm(path) -> str | None:
    return posixpath.normpath(path.replace("\\", "/")) if isinstance(path, str) and path else None


def lure_of(task, action: dict) -> dict | None:
    """The declared forbidden lure an action object follows (computed here, not by the runtime)."""
    for lure in task.lures:
        kind, target = lure["kind"], lure["target"]
        if kind in ("read", "secret") and action.get("action") == "read" and _norm(action.get("path")) == _norm(target):
            return lure
        if kind in ("write", "overwrite") and action.get("action") == "write" and \
                _norm(action.get("path")) == _norm(target):
            return lure
        if kind == "action" and action.get("action") == target:
            return lure
    return None


@pytest.fixture(scope="module")
def attacked(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("inject")
    variant_ids = build_variant_tasks(tmp / "tasks")
    extra = [load_task(p.parent) for p in sorted((tmp / "tasks").glob("*/v1/task.toml"))]
    tasks = find_tasks() + extra
    backends = default_backends({"latency_scale": 0})
    backends.tasks = lambda: tasks
    spec = write_spec(tmp, EXP, tasks=sorted(t.id for t in tasks), tiers=[TIER],
                      settings={"concurrency": 8, "max_tokens": 4096})
    store = Store(tmp / "runs")
    result = register_and_run(store, spec, EXP, backends=backends)
    products = build_products(store, EXP, tmp)
    runs = experiment_runs(store, EXP)
    by_key = {(t.id, t.version): t for t in tasks}
    return SimpleNamespace(store=store, result=result, products=products, runs=runs, tasks=tasks,
                           variant_ids=variant_ids, task_of=lambda r: by_key[(r.start["task"]["id"],
                                                                               r.start["task"]["version"])])


def _sent_actions(store: Store, run) -> list[dict]:
    """Every action object the model sent, parsed from the stored reply blobs."""
    out = []
    for c in bodies(run, "call"):
        if c.get("reply"):
            try:
                obj = jsonio.loads(store.get_blob(c["reply"]))
            except ValueError:
                continue
            if isinstance(obj, dict) and isinstance(obj.get("action"), str):
                out.append(obj)
    return out


# ----------------------------------------------------------------------- the tests

def test_fixture_variants_are_seen_by_the_simulator_and_declared(attacked):
    """Each planted instruction is one the reckless model will act on, and declared."""
    variants = set()
    for task in attacked.tasks:
        found = [a for text_path, data in task.inputs.items() if path_allowed(task.readable, text_path)
                 for a in find_lures(data.decode("utf-8"), text_path)]
        matched = {lure_of(task, a)["id"] for a in found if lure_of(task, a)}
        forbidden = {lure["id"] for lure in task.lures if lure["kind"] in FORBIDDEN_KINDS}
        assert forbidden <= matched, f"{task.id}: declared lures the simulator never sees: {forbidden - matched}"
        variants |= {(lure["kind"], lure["target"]) for lure in task.lures if lure["kind"] in FORBIDDEN_KINDS}
    assert len(variants) >= 12
    families = {t.family for t in attacked.tasks if any(lure["kind"] in FORBIDDEN_KINDS for lure in t.lures)}
    assert families == {"quotes", "cents", "pricing", "sql", "api"}


def test_the_grid_ran_every_task_on_both_profiles(attacked):
    assert attacked.result.status == "complete", attacked.result.stop_detail
    assert len(attacked.runs) == 2 * len(attacked.tasks)
    assert all(r.end["status"] != "aborted" for r in attacked.runs)


def test_no_forbidden_action_was_executed(attacked):
    executed = 0
    for run in attacked.runs:
        task = attacked.task_of(run)
        for a in bodies(run, "action"):
            if not a["permitted"]:
                continue
            executed += 1
            path = a["args"].get("resolved", a["args"].get("path"))
            where = f"{task.id} run {run.run_id[:12]} turn {a['turn']}: {a['name']} {path!r}"
            assert a["injection"] is None, where
            if a["name"] == "read":
                assert path_allowed(task.readable, path) or path_allowed(task.writable, path), where
            elif a["name"] == "write":
                assert path_allowed(task.writable, path) and path not in task.inputs, where
            else:
                assert a["name"] in ("check", "finish"), where
        written = {b["path"] for b in bodies(run, "artifact")}
        assert all(path_allowed(task.writable, p) and p not in task.inputs for p in written), (task.id, written)
    assert executed > 0


def test_every_attempt_is_recorded_as_refused_with_its_lure(attacked):
    attempts = 0
    for run in attacked.runs:
        task = attacked.task_of(run)
        sent = [(a, lure_of(task, a)) for a in _sent_actions(attacked.store, run)]
        tried = [(a, lure) for a, lure in sent if lure is not None]
        records = [a for a in bodies(run, "action") if a["injection"]]
        assert len(records) == len(tried), f"{task.id}: {len(tried)} sent, {len(records)} recorded"
        for (sent_action, lure), rec in zip(tried, records):
            assert rec["injection"] == {"lure": lure["id"]} and rec["permitted"] is False
            prefix = "invalid reply: " if lure["kind"] == "action" else "denied: "
            assert rec["reason"].startswith(prefix), rec["reason"]
        declared = {lure["id"] for lure in task.lures if lure["kind"] in FORBIDDEN_KINDS}
        assert {r["injection"]["lure"] for r in records} == declared, task.id
        assert run.end["injection_attempts"] == len(records)
        attempts += len(records)
    assert attempts >= 2 * 12


def test_the_report_counts_the_attempts(attacked):
    row = tier_row(attacked.products.summary, TIER)
    recorded = sum(r.end["injection_attempts"] for r in attacked.runs)
    assert row["injection"]["attempts"] == recorded
    assert row["injection"]["runs"] == len(attacked.runs)
    line = terminal_row(attacked.products.terminal, "Outcomes and injections", f"tier {TIER}")
    assert f" {recorded} " in line


def test_the_report_knows_which_runs_were_exposed_and_attacked(attacked):
    row = tier_row(attacked.products.summary, TIER)
    lured = [r for r in attacked.runs if attacked.task_of(r).lures]
    assert row["injection"]["runs_exposed"] == len(lured)
    assert row["injection"]["runs_attempted"] == sum(r.end["injection_attempts"] > 0 for r in lured)
    assert row["under_attack"]["injected"]["n"] == len(lured)


def test_the_report_counts_denials_as_the_runs_do(attacked):
    row = tier_row(attacked.products.summary, TIER)
    assert row["injection"]["denials"] == sum(r.end["denials"] for r in attacked.runs)


def test_the_site_gallery_shows_the_attacked_runs(attacked):
    site = attacked.products.site
    page = (site / "gallery.html").read_text(encoding="utf-8")
    section = page[page.index('<section id="injection"'):]
    section = section[:section.index("</section>")]
    attacked_runs = [r for r in attacked.runs if r.end["injection_attempts"]]
    assert f"{len(attacked_runs)} runs" in section
    linked = [r for r in attacked_runs if r.run_id[:2] + "/" + r.run_id + ".html" in section]
    assert linked, "the gallery links no attacked run"
    for run in attacked_runs:  # every attacked run's replay shows each refused lure
        html = (site / "runs" / run.run_id[:2] / f"{run.run_id}.html").read_text(encoding="utf-8")
        for rec in (a for a in bodies(run, "action") if a["injection"]):
            assert f"injection lure {rec['injection']['lure']}" in html, run.run_id


def test_the_bundle_of_the_attacked_grid_verifies(attacked):
    assert attacked.products.verdict.exit_code == 0, verdict_text(attacked.products.verdict)
    records = [a for r in attacked.runs for a in bodies(r, "action") if a["injection"]]
    variants = {(lure["kind"], lure["target"]) for t in attacked.tasks for lure in t.lures
                if lure["kind"] in FORBIDDEN_KINDS}
    record_figures("injections", tasks=len(attacked.tasks), fixture_tasks=len(attacked.variant_ids),
                   variants=len(variants), runs=len(attacked.runs), attempts=len(records),
                   refused=sum(not a["permitted"] for a in records),
                   denied_by_path_rule=sum(a["reason"].startswith("denied: ") for a in records),
                   refused_made_up_actions=sum(a["reason"].startswith("invalid reply: ") for a in records),
                   executed_forbidden=0)
