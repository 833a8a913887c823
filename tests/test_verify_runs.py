"""Steps 2-4 on a real (scripted) experiment: tampering is caught where it happened.

Two kinds of tampering: a plain edit (the bundle is re-zipped with a corrected manifest,
so step 1 passes and the run-level digests must catch it), and a consistent forgery (the
``Forger`` redoes run ids, chains, journal references, manifest and summary), which only
recomputation can catch.
"""

import hashlib

import pytest

from benchclaw.formats import jsonio
from benchclaw.bundle import export_bundle
from benchclaw.verify import verify_bundle
from benchclaw.verify.manifest import object_path, run_path

from tests.test_bundle_support import Forger, entries, honest_runs, pack, rewrite_lines


@pytest.fixture(scope="module")
def bundle(tmp_path_factory) -> bytes:
    root = tmp_path_factory.mktemp("honest")
    honest_runs(root / "runs")
    export_bundle(root / "runs", "E01", root / "b.zip")
    return (root / "b.zip").read_bytes()


def failures(rep, section: str) -> list[str]:
    return [str(f) for f in rep.section(section).failures]


def assert_caught(rep, section: str, *words: str) -> None:
    assert rep.exit_code == 1, rep.to_dict()
    text = failures(rep, section)
    assert any(all(w in f for w in words) for f in text), (section, text)


def test_honest_runs_pass_steps_one_to_four(bundle):
    rep = verify_bundle(bundle)
    for name in ("container", "runs", "checks", "costs"):
        assert rep.section(name).ok, (name, rep.section(name).failures)
    assert rep.section("runs").counts["runs"] == 4
    assert rep.section("checks").counts["results"] == 8
    assert rep.section("costs").counts["calls"] == 12


def _first_run(files):
    return sorted(n for n in files if n.startswith("runs/"))[0]


def _artifact_digest(f: Forger, run_id: str) -> str:
    return next(r["body"]["digest"] for r in f.records(run_id) if r["kind"] == "artifact")


# -- plain edits: the manifest is corrected, run-level digests catch them ----------------------

def test_one_byte_in_a_run_log_breaks_its_run_id(bundle, tmp_path):
    files = entries(bundle)
    name = _first_run(files)
    data = bytearray(files[name])
    data[data.index(b'"seed":') + 7] ^= 0x01
    files[name] = bytes(data)
    rep = verify_bundle(pack(files, tmp_path))
    assert_caught(rep, "runs", name, "do not hash to the run id")


def test_one_byte_in_an_artifact_blob_is_caught(bundle, tmp_path):
    f = Forger.of(bundle)
    run_id = f.run_ids()[0]
    obj = object_path(_artifact_digest(f, run_id))
    f.files[obj] = f.files[obj][:-2] + b"X" + f.files[obj][-1:]
    rep = verify_bundle(pack(f.files, tmp_path))
    assert_caught(rep, "runs", obj, "not to its name")


def test_removed_record_breaks_the_chain(bundle, tmp_path):
    f = Forger.of(bundle)
    run_id = f.run_ids()[0]
    new = f.edit_run(run_id, lambda objs: objs[:1] + objs[2:], rechain=False)
    rep = verify_bundle(pack(f.files, tmp_path))
    assert_caught(rep, "runs", run_path(new) + ":2", "seq is 2, expected 1")


def test_swapped_records_break_the_chain(bundle, tmp_path):
    f = Forger.of(bundle)
    run_id = f.run_ids()[1]
    new = f.edit_run(run_id, lambda o: [o[0], o[2], o[1], *o[3:]], rechain=False)
    rep = verify_bundle(pack(f.files, tmp_path))
    assert_caught(rep, "runs", run_path(new) + ":2", "inserted, removed or reordered")


def test_changed_record_with_kept_seq_breaks_prev(bundle, tmp_path):
    f = Forger.of(bundle)

    def edit(objs):
        objs[1]["body"]["latency_ms"] += 1
        return objs
    new = f.edit_run(f.run_ids()[0], edit, rechain=False)
    rep = verify_bundle(pack(f.files, tmp_path))
    assert_caught(rep, "runs", run_path(new) + ":2", "line 2 was altered")


def test_missing_object_is_named(bundle, tmp_path):
    f = Forger.of(bundle)
    digest = _artifact_digest(f, f.run_ids()[0])
    del f.files[object_path(digest)]
    rep = verify_bundle(pack(f.files, tmp_path))
    assert_caught(rep, "runs", digest, "which the bundle lacks")


def test_edited_task_file_breaks_the_task_digest(bundle, tmp_path):
    files = entries(bundle)
    name = next(n for n in files if n.startswith("tasks/") and n.endswith("checks.toml"))
    files[name] = files[name].replace(b"gate = false", b"gate = true")
    rep = verify_bundle(pack(files, tmp_path))
    assert_caught(rep, "runs", "the task files under tasks/quotes-agenttest/v1/ hash to")


# -- consistent forgeries: only recomputation catches them ------------------------------------

def _set(kind: str, key: str, value, *, which: int = 0):
    def edit(objs):
        hits = [o for o in objs if o["kind"] == kind]
        hits[which]["body"][key] = value
        return objs
    return edit


def _forge(bundle, tmp_path, edit, run_index=0):
    f = Forger.of(bundle)
    new = f.edit_run(f.run_ids()[run_index], edit)
    data = f.pack(tmp_path)
    rep = verify_bundle(data)
    assert rep.section("container").ok and rep.section("runs").ok, rep.to_dict()
    return rep, new


def _failing_run_index(bundle) -> int:
    f = Forger.of(bundle)
    return next(i for i, r in enumerate(f.run_ids()) if f.records(r)[-1]["body"]["passed"] is False)


def test_forged_check_result_is_recomputed(bundle, tmp_path):
    i = _failing_run_index(bundle)

    def edit(objs):
        for o in objs:
            if o["kind"] == "check":
                o["body"]["passed"] = True
            if o["kind"] == "run.end":
                o["body"].update(passed=True, gate_passed=True, status="passed")
        return objs
    rep, new = _forge(bundle, tmp_path, edit, i)
    assert_caught(rep, "checks", run_path(new), "recorded passed=True, recomputed passed=False")


def test_forged_pass_claim_in_run_end_is_recomputed(bundle, tmp_path):
    i = _failing_run_index(bundle)
    rep, new = _forge(bundle, tmp_path, _set("run.end", "passed", True), i)
    assert_caught(rep, "checks", run_path(new), "run.end passed=True, the recomputed checks give False")


def test_swapped_artifact_disagrees_with_the_write_actions(bundle, tmp_path):
    f = Forger.of(bundle)
    run_id = f.run_ids()[_failing_run_index(bundle)]
    good = f.put_blob(b'{"answer": "forty-two, from docs/a.md"}')

    def edit(objs):
        art = next(o for o in objs if o["kind"] == "artifact")
        art["body"].update(digest=good, size=len(f.blob(good)))
        return objs
    new = f.edit_run(run_id, edit)
    rep = verify_bundle(f.pack(tmp_path))
    assert_caught(rep, "checks", run_path(new), "differs from what the run's write actions left")


def test_forged_call_cost_is_recomputed(bundle, tmp_path):
    def edit(objs):
        call = next(o for o in objs if o["kind"] == "call")
        call["body"]["cost"] = {"known": True, "low": "0.000001", "high": "0.000001"}
        return objs
    rep, new = _forge(bundle, tmp_path, edit)
    assert_caught(rep, "costs", run_path(new) + ":2", "call cost", "differs from the recomputed")


def test_forged_run_total_is_recomputed(bundle, tmp_path):
    def edit(objs):
        objs[-1]["body"]["cost"] = {"known": True, "low": "0", "high": "0"}
        return objs
    rep, new = _forge(bundle, tmp_path, edit)
    assert_caught(rep, "costs", run_path(new), "run.end cost", "differs from the sum over calls")


def test_forged_usage_disagrees_with_the_raw_usage(bundle, tmp_path):
    def edit(objs):
        call = next(o for o in objs if o["kind"] == "call")
        call["body"]["usage"]["completion"] = 1
        return objs
    rep, new = _forge(bundle, tmp_path, edit)
    assert_caught(rep, "costs", run_path(new) + ":2", "differs from the raw usage normalised")


def test_forged_prices_disagree_with_the_catalog(bundle, tmp_path):
    def edit(objs):
        objs[0]["body"]["prices"] = {**objs[0]["body"]["prices"], "output": "0.01"}
        return objs
    rep, new = _forge(bundle, tmp_path, edit)
    assert_caught(rep, "costs", run_path(new) + ":1", "differ from tier")


def test_forged_prompt_estimate_is_recomputed_from_the_request(bundle, tmp_path):
    rep, new = _forge(bundle, tmp_path, _set("call", "prompt_estimate", 1))
    assert_caught(rep, "costs", run_path(new) + ":2", "prompt_estimate 1, recomputed from the request")


def test_rewrite_lines_roundtrips_an_honest_run(bundle):
    files = entries(bundle)
    name = _first_run(files)
    lines = files[name].split(b"\n")[:-1]
    assert rewrite_lines(lines) == files[name]
    assert hashlib.sha256(files[name]).hexdigest() in name
    assert jsonio.loads(lines[0])["kind"] == "run.start"
