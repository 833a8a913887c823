"""Consistent forgeries of every kind issue 15 lists, each refused with exit 1 naming what
does not follow. Built with ``tests/forgery_kit.py`` the way an outsider reading FORMAT.md
would: chains re-linked, run ids renamed, the journal, ledgers, summary and manifest redone.
The kit's own re-derivation is proven first: an edit-free pass through it still verifies,
so each refusal below is the verifier's recomputation, not a slip of the forger."""

from decimal import Decimal

import pytest

from benchclaw.formats import jsonio
from benchclaw.bundle import export_bundle
from benchclaw.verify import verify_bundle
from benchclaw.verify.cli import render_text

from tests.forgery_kit import of
from tests.test_bundle_support import EXP, eventful_runs


@pytest.fixture(scope="module")
def genuine(tmp_path_factory):
    root = tmp_path_factory.mktemp("forge")
    runs = eventful_runs(root / "runs")
    export_bundle(runs, EXP, root / "b.zip")
    data = (root / "b.zip").read_bytes()
    rep = verify_bundle(data)
    assert rep.exit_code == 0, [str(f) for _, f in rep.failures()]
    return data, rep.registrations[EXP]


def refused(data: bytes, section: str, *words: str, registered=None) -> None:
    rep = verify_bundle(data, registered=registered)
    assert rep.exit_code == 1, render_text(rep)
    texts = [str(f) for f in rep.section(section).failures]
    assert any(all(w in t for w in words) for t in texts), (section, words, render_text(rep, 20))


def failed_with_write(recs) -> bool:
    return recs[-1]["body"]["status"] == "failed" and any(
        o["kind"] == "action" and o["body"]["name"] == "write" and o["body"]["permitted"] for o in recs)


def test_the_kit_redoing_everything_without_an_edit_still_verifies(genuine, tmp_path):
    f = of(genuine[0])
    data = f.finish(tmp_path, costs=True)
    rep = verify_bundle(data, registered=genuine[1])
    assert rep.exit_code == 0, render_text(rep, 20)


# -- 1. a write not tied to the reply that asked for it ---------------------------------------

def test_a_failed_runs_file_swapped_for_the_reference_answer(genuine, tmp_path):
    f = of(genuine[0])
    rid = f.find_run(failed_with_write)
    prefix, task = f.task(f.records(rid))
    new = f.swap_written_files(rid, {p: task.reference[p] for p in f.written_paths(rid) if p in task.reference})
    assert f.records(new)[-1]["body"]["passed"] is True  # the forger's re-judged claim
    refused(f.finish(tmp_path), "checks", "the written content is not the content of the reply")


def test_a_reply_rewritten_to_ask_for_the_reference_answer_breaks_the_conversation(genuine, tmp_path):
    f = of(genuine[0])
    rid = f.find_run(failed_with_write)
    recs = f.records(rid)
    _, task = f.task(recs)
    wline = max(i for i, o in enumerate(recs) if o["kind"] == "action" and o["body"]["name"] == "write")
    w = recs[wline]["body"]
    path = w["args"].get("resolved", w["args"]["path"])
    good = task.reference[path]
    reply_line = max(i for i in range(wline) if recs[i]["kind"] == "call")
    reply = jsonio.dumps({"action": "write", "content": good.decode(), "path": w["args"]["path"]})
    digest = f.put_blob(reply)

    def edit(objs):
        objs[reply_line]["body"]["reply"] = digest
        return objs
    f.edit_run(rid, edit)
    new = f.renamed[rid]
    f.swap_written_files(new, {path: good})
    refused(f.finish(tmp_path), "checks", "does not hold the conversation")


# -- 2. task inputs: reads tied to the input bytes, versions pinned by the registration --------

def test_a_task_input_changed_and_its_digest_rewritten_in_every_run(genuine, tmp_path):
    f = of(genuine[0])
    rid = f.find_run(lambda r: any(o["kind"] == "action" and o["body"]["name"] == "read"
                                   and o["body"]["permitted"] for o in r))
    recs = f.records(rid)
    prefix, task = f.task(recs)
    read = next(o["body"] for o in recs if o["kind"] == "action" and o["body"]["name"] == "read" and o["body"]["permitted"])
    path = read["args"].get("resolved", read["args"]["path"])
    f.change_task_input(prefix, "inputs/" + path, task.inputs[path] + b"\nappended by the forger\n")
    data = f.finish(tmp_path)
    refused(data, "checks", "read observation is not what the runtime sends")
    refused(data, "prereg", "which the registration", "did not pin")


def test_the_changed_task_also_re_pinned_in_the_registration_changes_its_digest(genuine, tmp_path):
    f = of(genuine[0])
    rid = f.find_run(lambda r: True)
    prefix, task = f.task(f.records(rid))
    path = sorted(task.inputs)[0]
    old = f.records(rid)[0]["body"]["task"]["digest"]
    new = f.change_task_input(prefix, "inputs/" + path, task.inputs[path] + b" ")

    def repin(objs):
        for o in objs:
            for t in o["body"].get("tasks") or []:
                if t["digest"] == old:
                    t["digest"] = new
        return objs
    f.edit_journal(repin)
    data = f.finish(tmp_path)
    rep = verify_bundle(data)
    assert rep.registrations[EXP] != genuine[1]  # what the auditor compares by eye
    assert f"REGISTRATION {EXP}  {rep.registrations[EXP]}" in render_text(rep)
    refused(data, "prereg", "not the one you hold", registered=genuine[1])


# -- 3. prices: certified by the registration, not by the bundle alone -------------------------

def test_catalog_prices_halved_with_every_cost_ledger_and_journal_redone(genuine, tmp_path):
    f = of(genuine[0])
    f.scale_prices(Decimal("0.5"))
    data = f.finish(tmp_path)
    refused(data, "prereg", "ran with catalog", "pinned")
    # the only remaining ties are the registration and, when the grid stopped on spend, the
    # stop (half the prices may no longer reach its threshold): nothing else disagrees
    rep = verify_bundle(data)
    assert _only_a_spend_stop_besides(rep, "prereg"), render_text(rep, 20)


def _only_a_spend_stop_besides(rep, section: str) -> bool:
    others = [str(x) for s in rep.sections if s.name != section for x in s.failures]
    return all("stop 'spend' does not follow" in t for t in others)


def test_halved_prices_re_pinned_in_the_registration_fail_against_the_held_digest(genuine, tmp_path):
    f = of(genuine[0])
    f.scale_prices(Decimal("0.5"))
    cat = f.records(f.run_ids()[0])[0]["body"]["catalog"]

    def repin(objs):
        for o in objs:
            if "catalog" in o["body"] and o["kind"] in ("prereg", "deviation"):
                o["body"]["catalog"] = cat
        return objs
    f.edit_journal(repin)
    data = f.finish(tmp_path)
    # self-consistent, but for a spend stop half the prices may no longer justify: only the
    # held digest tells
    assert _only_a_spend_stop_besides(verify_bundle(data), "")
    refused(data, "prereg", "not the one you hold", registered=genuine[1])


# -- 4. a dropped run excused by a fabricated stop ---------------------------------------------

def _complete_invocation(f):
    ends = [o["body"] for o in f.journal() if o["kind"] == "grid.end" and o["body"]["status"] == "complete"]
    return ends[0]["invocation"]


def _drop_and_excuse(f, rule: str, status: str):
    inv = _complete_invocation(f)
    named = {o["body"]["run_id"]: o["body"] for o in f.journal() if o["kind"] == "run"}
    mine = [r for r in f.run_ids() if named.get(r, {}).get("invocation") == inv and named[r]["policy"] == "grid"]
    rid = sorted(mine, key=lambda r: named[r]["status"] != "failed")[0]  # a failed one if any
    start = f.drop_run(rid)
    f.add_journal_record("stop", {"invocation": inv, "rule": rule, "detail": "forged",
                                  "cells_left": [start["policy"]["cell"]]}, before_kind="grid.end", invocation=inv)

    def restatus(objs):
        for o in objs:
            if o["kind"] == "grid.end" and o["body"]["invocation"] == inv:
                o["body"]["status"] = status
        return objs
    f.edit_journal(restatus)
    lname = f"ledgers/{next(o['body']['ledger'] for o in f.journal() if o['kind'] == 'grid.start' and o['body']['invocation'] == inv)}.jsonl"
    f.edit_chain(lname, lambda objs: [{**o, "body": {**o["body"], "status": status}} if o["kind"] == "ledger.close" else o
                                      for o in objs])
    return inv


@pytest.mark.parametrize("rule,status,words", [
    ("spend", "stopped", ("stop 'spend' does not follow", "threshold is $4")),
    ("interrupted", "interrupted", ("stop 'interrupted' does not follow", "cut off")),
    ("provider_errors", "stopped", ("stop 'provider_errors' does not follow",)),
    ("incomplete", "stopped", ("stop 'incomplete' does not follow", "stopped short of the model")),
    ("error", "complete", ("stop 'error' does not follow", "grid.end says 'complete'")),
    ("maintenance", "stopped", ("stop rule 'maintenance' is not one FORMAT.md defines",)),
], ids=["spend", "interrupted", "provider_errors", "incomplete", "error-grid-end-changed", "unknown-rule"])
def test_a_dropped_run_excused_by_a_fabricated_stop(genuine, tmp_path, rule, status, words):
    f = of(genuine[0])
    _drop_and_excuse(f, rule, status)
    refused(f.finish(tmp_path), "complete", *words)


def test_a_dropped_run_excused_by_a_fabricated_error_is_named_on_a_note(genuine, tmp_path):
    # an error outside any run (a full disk) leaves no run cut off, so this cannot be refused;
    # it must not pass silently
    f = of(genuine[0])
    inv = _drop_and_excuse(f, "error", "stopped")
    rep = verify_bundle(f.finish(tmp_path))
    assert any(f"stop 'error' of {inv} (1 cells left) is not shown by the evidence" in n for n in rep.notes)
    assert f"stop 'error' of {inv}" in render_text(rep)


def _resettle_at_bound(f, status_wanted):
    """Settle the first known call of a run ending ``status_wanted`` as unknown, at its bound."""
    rid = f.find_run(lambda r: r[-1]["body"]["status"] == status_wanted
                     and sum(o["kind"] == "call" and o["body"].get("usage") is not None for o in r) >= 2)
    recs = f.records(rid)
    call = next(o["body"] for o in recs if o["kind"] == "call" and o["body"].get("usage") is not None)
    key, attempt = f"{call['turn']}.{call['attempt']}", recs[0]["body"]["policy"]["attempt"]
    lname = f"ledgers/{recs[0]['body']['ledger']}.jsonl"

    def edit(objs):
        res = next(o["body"] for o in objs if o["kind"] == "reserve" and o["body"].get("attempt") == attempt
                   and o["body"]["key"] == key)
        for o in objs:
            if o["kind"] == "settle" and o["body"]["id"] == res["id"]:
                o["body"].update(known=False, tokens=res["tokens"], usd=res["usd"], reason="interrupted")
        return objs
    f.edit_chain(lname, edit)


def test_a_finished_run_s_known_call_resettled_at_its_bound(genuine, tmp_path):
    # worst-case spend inflated (say, to justify a spend stop): only a cut-off run's last
    # call may be settled at its bound although its usage is known
    f = of(genuine[0])
    _resettle_at_bound(f, "passed")
    refused(f.finish(tmp_path), "ledgers", "settled", "the call's usage gives")


def test_a_run_that_called_the_model_journaled_as_if_it_had_not(genuine, tmp_path):
    # a unit whose run "never reached the model" is not done: the run would stop counting
    f = of(genuine[0])
    named = {o["body"]["run_id"]: o["body"] for o in f.journal() if o["kind"] == "run"}
    rid = next(r for r, b in sorted(named.items()) if b["status"] != "passed" and b["called_model"])

    def edit(objs):
        for o in objs:
            if o["kind"] == "run" and o["body"]["run_id"] == rid:
                o["body"]["called_model"] = False
        return objs
    f.edit_journal(edit)
    refused(f.finish(tmp_path), "complete", f"run {rid[:12]}: the journal says called_model=False")


# -- 5. ledgers: after the registration, and closed ------------------------------------------

def test_a_ledger_opened_before_the_registration(genuine, tmp_path):
    f = of(genuine[0])
    reg_at = next(o["at"] for o in f.journal() if o["kind"] == "prereg")
    name = f.ledger_names()[0]
    earlier = reg_at[:-8] + "000000Z" if reg_at[-8:] != "000000Z" else reg_at
    earlier = "2000-01-01T00:00:00.000000Z"

    def move(objs):
        objs[0]["at"] = earlier
        objs[1]["at"] = earlier
        return objs
    f.edit_chain(name, move)
    refused(f.finish(tmp_path), "prereg", "precedes the registration")


def test_a_ledger_whose_close_was_removed(genuine, tmp_path):
    f = of(genuine[0])
    name = f.ledger_names()[-1]
    f.edit_chain(name, lambda objs: [o for o in objs if o["kind"] != "ledger.close"])
    refused(f.finish(tmp_path), "complete", "never closed")


# -- 6. usage: a forged raw blob with its normalised usage ------------------------------------

def test_a_raw_usage_blob_forged_with_its_normalised_usage(genuine, tmp_path):
    f = of(genuine[0])
    rid = f.find_run(lambda r: any(o["kind"] == "call" and o["body"].get("usage_raw") for o in r))
    recs = f.records(rid)
    line = next(i for i, o in enumerate(recs, 1) if o["kind"] == "call" and o["body"].get("usage_raw"))
    raw = jsonio.loads(f.blob(recs[line - 1]["body"]["usage_raw"]))
    raw["completion_tokens"] = 1  # the forger's cheaper call
    raw["total_tokens"] = raw["prompt_tokens"] + raw["completion_tokens"]
    details = raw.get("completion_tokens_details")
    if isinstance(details, dict) and "reasoning_tokens" in details:
        details["reasoning_tokens"] = 0
    f.set_usage(rid, line, raw)
    refused(f.finish(tmp_path), "costs", "simulated call", "does not fit a reply")


def test_a_raw_prompt_count_lowered_with_its_normalised_usage(genuine, tmp_path):
    f = of(genuine[0])

    def room(o):  # a call whose prompt stays above its cached parts when lowered by 100
        if o["kind"] != "call" or not o["body"].get("usage_raw"):
            return False
        u = o["body"]["usage"]
        return u["prompt"] - u["cached_read"] - u["cache_write"] > 100

    # run ids are content hashes (timestamps included), so which run comes first varies
    rid = f.find_run(lambda r: any(room(o) for o in r))
    recs = f.records(rid)
    line = next(i for i, o in enumerate(recs, 1) if room(o))
    raw = jsonio.loads(f.blob(recs[line - 1]["body"]["usage_raw"]))
    raw["prompt_tokens"] -= 100
    raw["total_tokens"] -= 100
    for k in ("prompt_cache_miss_tokens",):
        if k in raw:
            raw[k] -= 100
    f.set_usage(rid, line, raw)
    refused(f.finish(tmp_path), "costs", "simulated call: usage prompt")


# -- 7. site/: never passes silently ----------------------------------------------------------

def test_replaced_site_pages_are_reported_unproven(genuine, tmp_path):
    f = of(genuine[0])
    f.files["site/index.html"] = b"<h1>ladder: 100% pass, $0.00</h1>"
    rep = verify_bundle(f.finish(tmp_path))
    text = render_text(rep)
    assert "UNPROVEN  site/ (1 files)" in text and "NOT verified" in text
    assert rep.to_dict()["unproven"] == [{"prefix": "site/", "files": 1, "why": rep.unproven[0][2]}]


# -- more of the same spirit: claims about a run that its records must carry -------------------

def test_an_injection_attempt_hidden_from_the_tables(genuine, tmp_path):
    f = of(genuine[0])
    rid = f.find_run(lambda r: any(o["kind"] == "action" and o["body"].get("injection") for o in r))

    def edit(objs):
        hit = next(o for o in objs if o["kind"] == "action" and o["body"].get("injection"))
        hit["body"]["injection"] = None
        objs[-1]["body"]["injection_attempts"] -= 1
        return objs
    f.edit_run(rid, edit)
    refused(f.finish(tmp_path), "checks", "injection None but the refused action follows lure")


def test_a_failed_run_restated_as_a_provider_error(genuine, tmp_path):
    f = of(genuine[0])
    rid = f.find_run(lambda r: r[-1]["body"]["status"] == "failed")

    def edit(objs):
        objs[-1]["body"]["status"] = "provider_error"
        objs[-1]["body"]["reason"] = "provider error: server"
        return objs
    f.edit_run(rid, edit)
    refused(f.finish(tmp_path), "checks", "status 'provider_error' does not follow")


def test_a_run_end_turn_count_lowered(genuine, tmp_path):
    f = of(genuine[0])
    rid = f.find_run(lambda r: r[-1]["body"]["turns"] > 1 and r[-1]["body"]["status"] != "aborted")

    def edit(objs):
        objs[-1]["body"]["turns"] -= 1
        return objs
    f.edit_run(rid, edit)
    refused(f.finish(tmp_path), "checks", "run.end turns=", "the replayed records give")


def test_a_trials_failed_first_attempt_dropped(genuine, tmp_path):
    f = of(genuine[0])
    trial = next(o["body"] for o in f.journal() if o["kind"] == "trial" and len(o["body"]["runs"]) > 1)
    first = trial["runs"][0]
    f.drop_run(first)

    def edit(objs):
        for o in objs:
            if o["kind"] == "trial" and o["body"]["trial"] == trial["trial"]:
                o["body"]["runs"] = o["body"]["runs"][1:]
        return objs
    f.edit_journal(edit)
    refused(f.finish(tmp_path), "complete", f"trial {trial['trial']}", "the policy asks for")


def test_a_whole_cell_dropped_from_the_plan(genuine, tmp_path):
    f = of(genuine[0])
    cell = sorted({f.records(r)[0]["body"]["policy"]["cell"] for r in f.run_ids()})[0]
    for rid in [r for r in f.run_ids() if f.records(r)[0]["body"]["policy"]["cell"] == cell]:
        f.drop_run(rid)

    def edit(objs):
        out = []
        for o in objs:
            b = o["body"]
            if o["kind"] == "trial" and b.get("cell") == cell:
                continue
            if o["kind"] == "grid.start":
                b["cells"] = [c for c in b["cells"] if c != cell]
            if o["kind"] == "stop":
                b["cells_left"] = [c for c in b["cells_left"] if c != cell]
            out.append(o)
        return out
    f.edit_journal(edit)
    refused(f.finish(tmp_path), "prereg", "grid.start cells differ from the registered grid", cell)


def test_an_unknown_calls_max_tokens_lowered_to_shrink_its_upper_bound(genuine, tmp_path):
    f = of(genuine[0])
    rid = f.find_run(lambda r: any(o["kind"] == "call" and o["body"]["usage"] is None for o in r))
    recs = f.records(rid)
    line = next(i for i, o in enumerate(recs, 1) if o["kind"] == "call" and o["body"]["usage"] is None)
    req = jsonio.loads(f.blob(recs[line - 1]["body"]["request"]))
    req["max_tokens"] = 16
    digest = f.put_blob(jsonio.dumps(req))

    def edit(objs):
        b = objs[line - 1]["body"]
        b["request"], b["params"]["max_tokens"] = digest, 16
        return objs
    f.edit_run(rid, edit)
    refused(f.finish(tmp_path, costs=True), "prereg", "params.max_tokens=16")


def test_a_run_relabelled_to_a_cheaper_tier(genuine, tmp_path):
    f = of(genuine[0])
    rid = f.find_run(lambda r: r[0]["body"]["tier"] == "ultra")

    from benchclaw.formats.catalog import parse_catalog

    cat = parse_catalog(next(v for n, v in f.files.items() if n.startswith("catalogs/")), "catalog")

    def edit(objs):
        objs[0]["body"]["tier"] = "lightning"
        objs[0]["body"]["prices"] = cat.tier("lightning").prices.to_dict()
        return objs
    f.edit_run(rid, edit)
    f.costs_dirty = True
    refused(f.finish(tmp_path), "costs", "run.start model/provider 'sim/ultra'", "tier 'lightning' of the catalog is")


def test_prices_re_pinned_by_a_forged_deviation_are_shown_to_the_auditor(genuine, tmp_path):
    """The registration digest covers the first prereg; a deviation may change the pins
    (a real spec change can), so the verifier names every deviation that does."""
    f = of(genuine[0])
    f.scale_prices(Decimal("0.5"))
    cat = f.records(f.run_ids()[0])[0]["body"]["catalog"]

    def repin(objs):
        for o in objs:
            if o["kind"] == "deviation":
                o["body"]["catalog"] = cat
        return objs
    f.edit_journal(repin)
    rep = verify_bundle(f.finish(tmp_path), registered=genuine[1])
    text = render_text(rep)
    assert "re-pins the catalog (prices)" in text and "does not cover it" in text, text
    assert rep.registrations[EXP] == genuine[1]


def test_a_ledger_that_forgets_an_earlier_invocations_spend(genuine, tmp_path):
    f = of(genuine[0])
    name = next(n for n in f.ledger_names() if (f.ledger(n)[0]["body"].get("carried") or {}).get("ledgers"))

    def forget(objs):
        objs[0]["body"]["carried"]["ledgers"] = objs[0]["body"]["carried"]["ledgers"][1:]
        return objs
    f.edit_chain(name, forget)
    refused(f.finish(tmp_path), "prereg", "ledger.open carries the ledgers", "the earlier invocations opened")


def test_a_ledger_whose_limit_was_raised(genuine, tmp_path):
    f = of(genuine[0])
    name = f.ledger_names()[0]

    def raise_it(objs):
        objs[0]["body"]["limits"]["usd"] = "500"
        return objs
    f.edit_chain(name, raise_it)
    refused(f.finish(tmp_path), "prereg", "ledger.open limits", "the registered budget")
