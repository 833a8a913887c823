"""Simulated usage is recomputed, not trusted (issue #15 item 2): forgeries of the built-in
simulator's reasoning and cache numbers, each made the way a consistent forger would
(``tests/forgery_kit.py``: usage and normalised usage edited together, every cost, ledger,
journal record, summary and the manifest redone, runs re-chained and renamed), must be
refused with exit 1 and a message naming what does not follow; the genuine bundle verifies.
"""

from __future__ import annotations

import pytest

from benchclaw.formats import jsonio, sim_rules
from benchclaw.bundle import export_bundle
from benchclaw.sim.profiles import load_profiles
from benchclaw.verify import verify_bundle
from benchclaw.verify.cli import render_text

from tests.forgery_kit import of
from tests.test_bundle_support import EXP, eventful_runs
from tests.test_verify_consistent_forgeries import refused


@pytest.fixture(scope="module")
def genuine(tmp_path_factory):
    root = tmp_path_factory.mktemp("simusage")
    runs = eventful_runs(root / "runs")
    export_bundle(runs, EXP, root / "b.zip")
    data = (root / "b.zip").read_bytes()
    rep = verify_bundle(data)
    assert rep.exit_code == 0, render_text(rep, 20)
    return data, rep.registrations[EXP]


def _calls(f, pred):
    """(run id, line, call body, raw usage) of every simulated call with usage where ``pred``."""
    for rid in f.run_ids():
        for line, o in enumerate(f.records(rid), 1):
            b = o["body"]
            if o["kind"] == "call" and b.get("usage_raw") and str(b.get("response_id")).startswith("chatcmpl-sim-"):
                raw = jsonio.loads(f.blob(b["usage_raw"]))
                if pred(b, raw):
                    yield rid, line, b, raw


def test_genuine_runs_record_the_profile_and_the_registration_pins_the_file(genuine):
    f = of(genuine[0])
    digest = load_profiles().digest
    starts = [f.records(r)[0]["body"] for r in f.run_ids()]
    assert starts and all(s["sim"]["profiles"] == digest and s["sim"]["profile"] == s["tier"] for s in starts)
    assert f.blob(digest) == load_profiles().source  # packed with the runs
    regs = [o for o in f.journal() if o["kind"] in ("prereg", "deviation")]
    assert regs and all(o["body"]["sim_profiles"] == digest for o in regs)


def test_reasoning_and_completion_lowered_together(genuine, tmp_path):
    # what the token rule alone let through: completion - reasoning still equals the reply's tokens
    f = of(genuine[0])
    rid, line, body, raw = next(_calls(f, lambda b, raw: b["finish_reason"] == "stop" and b["usage"]["reasoning"] > 200))
    details = raw["completion_tokens_details"]
    details["reasoning_tokens"] -= 200
    raw["completion_tokens"] -= 200
    raw["total_tokens"] -= 200
    f.set_usage(rid, line, raw)
    refused(f.finish(tmp_path), "costs", "simulated call (profile", f"usage reasoning {body['usage']['reasoning'] - 200}",
            "the simulator draws for this request")


def test_completion_lowered_where_the_shape_hides_reasoning(genuine, tmp_path):
    # null_details reports no reasoning: the token rule could only ask completion >= the reply's tokens
    f = of(genuine[0])
    rid, line, body, raw = next(_calls(f, lambda b, raw: raw.get("completion_tokens_details", 0) is None
                                       and b["finish_reason"] == "stop" and raw["completion_tokens"] > 300))
    raw["completion_tokens"] -= 100
    raw["total_tokens"] -= 100
    f.set_usage(rid, line, raw)
    refused(f.finish(tmp_path), "costs", "reasoning not reported", f"completion {body['usage']['completion'] - 100}",
            "the simulator draws for this request")


def test_a_profiles_blob_that_is_not_toml_is_named(genuine, tmp_path):
    f = of(genuine[0])
    bad = f.put_blob(b"v = [1\n")
    rid, *_ = next(_calls(f, lambda b, raw: True))

    def edit(objs):
        objs[0]["body"]["sim"]["profiles"] = bad
        return objs
    f.edit_run(rid, edit)
    refused(f.finish(tmp_path), "costs", "not valid TOML")


def test_cached_read_raised(genuine, tmp_path):
    f = of(genuine[0])
    rid, line, body, raw = next(_calls(f, lambda b, raw: "prompt_cache_hit_tokens" in raw
                                       and raw["prompt_cache_miss_tokens"] >= 256))
    raw["prompt_cache_hit_tokens"] += 128  # the cache_hit shape: cheaper input, same prompt
    raw["prompt_cache_miss_tokens"] -= 128
    f.set_usage(rid, line, raw)
    refused(f.finish(tmp_path), "costs", "simulated call (profile",
            f"usage cached_read {body['usage']['cached_read'] + 128}", "the profile's cache rule gives")


def test_cache_split_changed_on_a_tier_that_writes_caches(genuine, tmp_path):
    f = of(genuine[0])
    rid, line, body, raw = next(_calls(f, lambda b, raw: (raw.get("prompt_tokens_details") or {}).get(
        "created_cache_tokens", 0) >= 128))
    raw["prompt_tokens_details"]["created_cache_tokens"] -= 128  # fewer writes at the dearer price
    f.set_usage(rid, line, raw)
    refused(f.finish(tmp_path), "costs", "usage cache_write", "the profile's cache rule gives")


def _cheaper_profiles(f) -> tuple[str, str]:
    """A profiles file with every reasoning median halved; (old digest, new digest)."""
    old = load_profiles().digest
    text = f.blob(old).decode()
    import re

    new_text = re.sub(r"\[(\d+), ", lambda m: f"[{int(m.group(1)) // 2}, ", text)
    assert new_text != text
    return old, f.put_blob(new_text.encode())


def _swap_profiles(f, new: str) -> None:
    for rid in f.each_run():
        def edit(objs):
            objs[0]["body"]["sim"]["profiles"] = new
            return objs
        f.edit_run(rid, edit)


def test_profiles_file_swapped_for_a_cheaper_one_fails_on_the_registration_pin(genuine, tmp_path):
    f = of(genuine[0])
    old, new = _cheaper_profiles(f)
    _swap_profiles(f, new)
    refused(f.finish(tmp_path), "prereg", f"ran with simulator profiles {new}", f"pinned {old}")


def test_the_cheaper_profiles_also_re_pinned_fail_against_the_held_digest(genuine, tmp_path):
    f = of(genuine[0])
    old, new = _cheaper_profiles(f)
    _swap_profiles(f, new)

    def repin(objs):
        for o in objs:
            if o["body"].get("sim_profiles") == old:
                o["body"]["sim_profiles"] = new
        return objs
    f.edit_journal(repin)
    data = f.finish(tmp_path)
    assert verify_bundle(data).registrations[EXP] != genuine[1]
    refused(data, "prereg", "not the one you hold", registered=genuine[1])


def test_the_profile_record_dropped_fails_on_the_registration_pin(genuine, tmp_path):
    f = of(genuine[0])
    for rid in f.each_run():
        def edit(objs):
            del objs[0]["body"]["sim"]
            return objs
        f.edit_run(rid, edit)
    refused(f.finish(tmp_path), "prereg", "ran with simulator profiles None", "pinned")


def test_a_run_claiming_another_tiers_profile(genuine, tmp_path):
    f = of(genuine[0])
    rid = f.find_run(lambda r: r[0]["body"]["tier"] == "ultra")

    def edit(objs):
        objs[0]["body"]["sim"]["profile"] = "lightning"
        return objs
    f.edit_run(rid, edit)
    refused(f.finish(tmp_path), "costs", "run.start.sim.profile 'lightning' is not the profile", "(ultra)")


# -- the rules themselves ----------------------------------------------------------------------

def test_the_kind_of_a_turn_is_read_from_the_reply_and_a_lure_is_always_a_read():
    assert sim_rules.action_kinds('{"action": "write", "path": "a", "content": "x"}') == ("read", "write")
    assert sim_rules.action_kinds('{"action": "read", "path": "a"}') == ("read",)
    assert sim_rules.action_kinds('{"action": "exfiltrate"}') == ("read",)  # only a lure names it
    wrapped = 'Next I will check. Here is the action:\n```json\n{"action": "check"}\n```'
    assert sim_rules.action_kinds(wrapped) == ("read", "check")
    assert sim_rules.action_kinds("") == sim_rules.TURN_KINDS  # reasoning only: unknown


def test_the_engine_reports_what_the_rules_recompute():
    from benchclaw.sim.engine import respond, usage_raw

    profiles = load_profiles()
    msgs = [{"role": "system", "content": "You act with JSON actions."},
            {"role": "user", "content": "**Rounding rule:** half up\n" + "x" * 6000},
            {"role": "assistant", "content": '{"action": "read", "path": "a.csv"}'},
            {"role": "user", "content": "y" * 900}]
    body = {"model": "sim/ultra", "messages": msgs, "seed": 4, "max_tokens": 8192}
    turn = respond(body, profiles)
    p = profiles.by_name["ultra"]
    prompt = sim_rules.prompt_tokens(msgs)
    cached, written = sim_rules.cache_split(p, msgs, prompt)
    z = sim_rules.turn_noise(4, "sim/ultra", msgs).gauss(0.0, 1.0)
    kinds = sim_rules.action_kinds(turn.content)
    family = sim_rules.detect_family(sim_rules.first_prompt(msgs))
    assert family == "cents"
    draws = {sim_rules.reasoning_tokens(p, k, profiles.effort_for(family) if k == "write" else 1.0, z) for k in kinds}
    assert (turn.prompt, turn.cached_read, turn.cache_write) == (prompt, cached, written) and cached > 0
    assert turn.reasoning in draws
    r = turn.reasoning
    assert usage_raw(turn) == sim_rules.usage_raw(p.usage_shape, prompt, cached, written,
                                                  r + sim_rules.sim_tokens(turn.content), r)
