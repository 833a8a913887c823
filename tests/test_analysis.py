"""Policy tables, cost bounds and decisions on hand-computed fixtures (FORMAT.md §3, §8)."""

import random

import pytest

from tests.analysis_factories import Exp, call
from benchclaw.formats import jsonio
from benchclaw.analysis import ExperimentData, render_markdown, render_terminal, summarise, wilson
from benchclaw.analysis.wilson import fixed

CHEAPER = 'cost_per_task("ladder") < cost_per_task("always:ultra")'
A = "quotes-a@1/direct"
B = "cents-b@1/direct"


def policy(summary, name, mode, analysis="primary"):
    rows = [p for p in summary[analysis]["policies"] if p["policy"] == name and p["mode"] == mode]
    assert len(rows) == 1, (name, mode)
    return rows[0]


def tier(summary, name):
    return next(t for t in summary["primary"]["tiers"] if t["tier"] == name)


def decision(summary, hid, analysis="primary"):
    return next(d for d in summary[analysis]["decisions"] if d["id"] == hid)


# ---------------------------------------------------------------------------- Wilson, pass^k

@pytest.mark.parametrize("passed, n, lo, hi", [  # Newcombe (1998), Table I, method 3
    (81, 263, "0.2553", "0.3662"), (15, 148, "0.0624", "0.1605"),
    (0, 20, "0.0000", "0.1611"), (1, 29, "0.0061", "0.1718"), (29, 29, "0.8830", "1.0000"),
])
def test_wilson_interval_matches_published_values(passed, n, lo, hi):
    w = wilson(passed, n)
    assert (fixed(w[0]), fixed(w[1])) == (lo, hi)


def test_wilson_of_nothing_is_none_and_bad_counts_raise():
    assert wilson(0, 0) is None
    with pytest.raises(ValueError):
        wilson(3, 2)


def test_pass_k_needs_every_seed_and_reports_unknown_groups():
    e = Exp(seeds=(1, 2, 3))
    for seed in (1, 2, 3):
        e.grid(f"{A}/{seed}", {"lightning": True, "super": True, "ultra": True})
        e.grid(f"{B}/{seed}", {"lightning": seed != 2, "super": True, "ultra": True})
    e.grid("pricing-c@1/direct/1", {"lightning": True, "super": True, "ultra": True})
    e.cells.append("pricing-c@1/direct/2")  # declared, never run
    s = summarise(e.data())
    pk = policy(s, "always:lightning", "replayed")["pass_k"]
    assert (pk["groups"], pk["passed"], pk["unknown"], pk["k"]) == (3, 1, 1, 3)
    assert pk["bounds"] == ["0.3333", "0.6667"]  # pricing-c might pass both seeds or not
    ultra = policy(s, "always:ultra", "replayed")
    assert ultra["pass_k"]["passed"] == 2 and ultra["missing"] == 1
    assert ultra["pass_rate"]["value"] == "1.0000"  # 7/7 complete cells
    assert ultra["pass_rate"]["bounds"] == ["0.8750", "1.0000"]  # 7/8 .. 8/8 with the missing one


# ---------------------------------------------------------------------------- policies

def _three_cells(e: Exp) -> None:
    e.grid(f"{A}/1", {"lightning": True, "super": True, "ultra": True})
    e.grid(f"{A}/2", {"lightning": True, "super": True, "ultra": True})
    e.grid(f"{A}/3", {"lightning": False, "super": False, "ultra": True})


def test_replayed_policies_cost_time_and_oracle_by_hand():
    e = Exp(seeds=(1, 2, 3))
    _three_cells(e)
    s = summarise(e.data())
    ladder = policy(s, "ladder", "replayed")
    # cells: 0.001, 0.001, 0.001+0.003+0.010 -> total 0.016, mean 0.016/3
    assert ladder["cost"]["total"] == {"low": "0.016", "high": "0.016", "known": True}
    assert ladder["cost"]["per_task"]["low"] == "0.005333333333"
    assert ladder["cost"]["per_task"]["high"] == "0.005333333334"  # rounded outward
    assert ladder["cost"]["per_pass"]["low"] == "0.005333333333"
    assert ladder["time_s"] == {"mean": "1.667", "median": "1.000"}  # 1, 1, 3 seconds
    assert ladder["pass_rate"]["fraction"] == "3/3"
    spec = policy(s, "speculative", "replayed")  # lightning+super in parallel, then ultra
    assert spec["cost"]["total"]["low"] == "0.022" and spec["time_s"]["mean"] == "1.333"
    oracle = policy(s, "oracle", "replayed")
    assert oracle["cost"]["total"]["low"] == "0.012" and oracle["pass_rate"]["fraction"] == "3/3"
    cheap = policy(s, "always:lightning", "replayed")
    assert cheap["pass_rate"]["fraction"] == "2/3" and cheap["gap_closed"] == ["0.0000", "0.0000"]
    assert ladder["gap_closed"] == ["1.0000", "1.0000"]
    assert ladder["tokens"]["ultra"]["prompt"] == 100 and ladder["tokens"]["lightning"]["calls"] == 3


def _flip_fixture(unknown: bool) -> ExperimentData:
    """Ultra costs 0.010 a cell; a live ladder costs 0.001 on easy cells. The last cell's
    ultra run's last call returned no usage; its upper bound 0.09 makes it the dearest."""
    e = Exp(live=("ladder",), seeds=(1, 2, 3, 4), hypotheses=[
        ("H1", CHEAPER), ("H2", 'cost_per_task("ladder") > cost_per_task("always:ultra")')])
    for seed in (1, 2, 3, 4):
        e.grid(f"{A}/{seed}", {"lightning": seed < 4, "super": seed < 4, "ultra": True})
    for seed in (1, 2, 3):
        e.add(f"{A}/{seed}", "lightning", True, policy="ladder", trial=f"t{seed}")
    if unknown is not None:
        last = call(known=False, high="0.09") if unknown else call("0.09")
        for step, (t, ok) in enumerate([("lightning", False), ("super", False), ("ultra", True)]):
            calls = [call("0.010"), last] if t == "ultra" else None
            e.add(f"{A}/4", t, ok, policy="ladder", trial="t4", step=step, calls=calls)
    return e.data()


def test_unknown_usage_at_its_upper_bound_flips_the_decision():
    without = summarise(_flip_fixture(unknown=None))
    assert policy(without, "ladder", "live")["missing"] == 1
    assert decision(without, "H1")["decision"] == "supported"

    bounded = summarise(_flip_fixture(unknown=True))
    real = summarise(_flip_fixture(unknown=False))
    assert decision(bounded, "H1")["decision"] in ("refuted", "inconclusive")
    assert decision(real, "H1")["decision"] == "refuted"
    # the bound is used exactly as if it had been spent
    b_terms = {t["expr"]: t for t in decision(bounded, "H1")["terms"]}
    r_terms = {t["expr"]: t for t in decision(real, "H1")["terms"]}
    assert b_terms['cost_per_task("ladder")']["high"] == r_terms['cost_per_task("ladder")']["high"]
    assert b_terms['cost_per_task("ladder")']["high"] == "0.02675"  # (0.003 + 0.001 + 0.003 + 0.010 + 0.09) / 4
    # and the unknown never helps the opposite claim either
    assert decision(bounded, "H2")["decision"] == "inconclusive"
    live = policy(bounded, "ladder", "live")
    assert live["cost"]["unknown_calls"] == 1 and live["cost"]["per_task"]["known"] is False
    assert live["cost"]["total"] == {"low": "0.017", "high": "0.107", "known": False}


def test_equal_rates_that_do_not_terminate_compare_exactly():
    e = Exp(seeds=(1, 2, 3), hypotheses=[
        ("H1", 'pass_rate("ladder") >= pass_rate("always:ultra")'),
        ("H2", 'pass_rate("ladder") == 2 / 3')])
    for seed in (1, 2, 3):
        e.grid(f"{A}/{seed}", {"lightning": seed != 3, "super": seed != 3, "ultra": seed != 3})
    s = summarise(e.data())
    assert decision(s, "H1")["decision"] == "supported"
    assert decision(s, "H2")["decision"] == "supported"
    assert decision(s, "H1")["terms"][0] == {"expr": 'pass_rate("ladder")', "low": "0.666666666667",
                                             "high": "0.666666666667", "exact": True}


def test_live_speculative_time_is_the_slower_of_the_parallel_pair():
    e = Exp(live=("speculative",))
    e.add(f"{A}/1", "lightning", False, policy="speculative", trial="s1", step=0, elapsed_ms=3000)
    e.add(f"{A}/1", "super", False, policy="speculative", trial="s1", step=1, elapsed_ms=5000)
    e.add(f"{A}/1", "ultra", True, policy="speculative", trial="s1", step=2, elapsed_ms=2000)
    s = summarise(e.data())
    spec = policy(s, "speculative", "live")
    assert spec["time_s"]["mean"] == "7.000" and spec["pass_rate"]["fraction"] == "1/1"
    assert spec["cost"]["total"]["low"] == "0.014"


def test_missing_tier_makes_replayed_trials_missing_not_failed():
    e = Exp()
    e.grid(f"{A}/1", {"lightning": False, "super": False})  # ultra never ran (budget stop)
    s = summarise(e.data())
    ladder = policy(s, "ladder", "replayed")
    assert ladder["missing"] == 1 and ladder["samples"] == 0
    assert ladder["pass_rate"]["value"] is None and ladder["pass_rate"]["bounds"] == ["0.0000", "1.0000"]
    assert policy(s, "always:lightning", "replayed")["pass_rate"]["fraction"] == "0/1"
    assert tier(s, "ultra")["missing"] == 1


# ---------------------------------------------------------------------------- errors, aborts, empty

def test_errors_aborts_and_runs_without_calls_give_a_table():
    e = Exp()
    e.add(f"{A}/1", "lightning", False, status="provider_error",
          calls=[call(outcome="error", error="timeout", known=False, high="0.002"),
                 call(outcome="error", error="rate_limited", known=False, high="0.002")])
    e.add(f"{A}/1", "super", False, status="aborted",
          calls=[call("0.003", outcome="length")])
    e.add(f"{A}/1", "ultra", False, status="budget_stop", calls=[])
    s = summarise(e.data())
    assert s["primary"]["runs"]["excluded"]["no_model_call"]
    light = tier(s, "lightning")
    assert light["finish"]["error"] == 2
    assert light["finish"]["errors"] == {"rate_limited": 1, "timeout": 1}
    assert light["cost"]["total"] == {"low": "0", "high": "0.004", "known": False}
    sup = tier(s, "super")
    assert sup["statuses"] == {"aborted": 1} and sup["pass_rate"]["fraction"] == "0/1"
    assert sup["finish"]["length"] == 1
    assert tier(s, "ultra")["samples"] == 0
    assert "Policies" in render_terminal(s) and "| policy |" in render_markdown(s)


def test_empty_experiment_gives_empty_tables_not_a_crash():
    e = Exp(hypotheses=[("H1", CHEAPER)])
    s = summarise(e.data())
    assert s["primary"]["cells"] == 0
    assert decision(s, "H1")["decision"] == "inconclusive"
    assert policy(s, "ladder", "replayed")["pass_rate"]["value"] is None
    text = render_terminal(s)
    assert "INCONCLUSIVE" in text and "0 cells" in text
    empty = summarise(ExperimentData("E09", {}))
    assert empty["tiers"] == [] and empty["primary"]["tiers"] == []
    assert [p["policy"] for p in empty["primary"]["policies"]] == ["ladder", "speculative",
                                                                   "memory", "oracle"]
    render_markdown(empty)


def test_malformed_runs_are_listed_as_unreadable_not_fatal():
    e = Exp()
    e.grid(f"{A}/1", {"lightning": True})
    e.add("no-cell-here", "super", True)
    e.add(f"{A}/1", "ultra", True, calls=[{"outcome": "stop", "usage": None}])  # no cost
    s = summarise(e.data())
    errors = sorted(u["error"] for u in s["unreadable_runs"])
    assert len(errors) == 2 and "call has no cost" in errors[0] and "no-cell-here" in errors[1]
    assert policy(s, "always:lightning", "replayed")["pass_rate"]["fraction"] == "1/1"
    assert "unreadable run" in render_terminal(s)


def test_bad_rule_is_a_decision_error_naming_the_hypothesis():
    e = Exp(hypotheses=[("H1", 'pass_rate("ladderr") > 0'), ("H2", "pas_rate(1)"),
                        ("H3", 'pass_rate("ladder", "live") > 0')])
    e.grid(f"{A}/1", {"lightning": True})
    s = summarise(e.data())
    assert "hypothesis H1: unknown policy 'ladderr'" in decision(s, "H1")["error"]
    assert "hypothesis H2" in decision(s, "H2")["error"]
    assert "no live results" in decision(s, "H3")["error"]
    assert all(decision(s, h)["decision"] == "error" for h in ("H1", "H2", "H3"))


# ---------------------------------------------------------------------------- reruns, deviations

def test_primary_excludes_reruns_and_secondary_uses_them_labelled():
    e = Exp(hypotheses=[("H1", 'pass_rate("always:ultra") >= 1')])
    e.grid(f"{A}/1", {"lightning": True, "super": True})
    e.add(f"{A}/1", "ultra", False, status="provider_error",
          calls=[call(outcome="error", error="server")])
    d = e.data()
    failed = next(rid for rid, recs in d.runs.items()
                  if recs[0].body["tier"] == "ultra")
    e.add(f"{A}/1", "ultra", True, rerun=True, replaces=failed)
    s = summarise(e.data())
    assert policy(s, "always:ultra", "replayed")["pass_rate"]["fraction"] == "0/1"
    assert decision(s, "H1")["decision"] == "refuted"
    assert len(s["primary"]["runs"]["excluded"]["rerun"]) == 1
    assert s["secondary"]["label"] == "secondary"
    assert policy(s, "always:ultra", "replayed", "secondary")["pass_rate"]["fraction"] == "1/1"
    assert decision(s, "H1", "secondary")["decision"] == "supported"
    assert s["secondary"]["runs"]["excluded"]["replaced_by_rerun"] == [failed]
    assert "Secondary analysis" in render_terminal(s)


def test_a_rerun_trial_supersedes_the_primary_trial_in_the_secondary_analysis():
    e = Exp(live=("ladder",))
    e.add(f"{A}/1", "lightning", False, policy="ladder", trial="t1", step=0)
    aborted = e.add(f"{A}/1", "super", False, policy="ladder", trial="t1", step=1, status="aborted")
    e.add(f"{A}/1", "lightning", False, policy="ladder", trial="t1r", step=0, rerun=True)
    d = e.data()
    aborted_id = next(rid for rid, recs in d.runs.items() if recs[-1].body["status"] == "aborted")
    e.add(f"{A}/1", "super", True, policy="ladder", trial="t1r", step=1, rerun=True, replaces=aborted_id)
    s = summarise(e.data())
    assert policy(s, "ladder", "live")["missing"] == 1  # cut off after the aborted attempt
    live2 = policy(s, "ladder", "live", "secondary")
    assert live2["pass_rate"]["fraction"] == "1/1" and live2["cost"]["total"]["low"] == "0.004"
    excluded = s["secondary"]["runs"]["excluded"]
    assert excluded["replaced_by_rerun"] == [aborted_id]
    assert len(excluded["superseded_by_rerun"]) == 1 and aborted is not None


def test_no_reruns_means_no_secondary_analysis():
    e = Exp()
    e.grid(f"{A}/1", {"lightning": True})
    assert summarise(e.data())["secondary"] is None


def test_deviations_list_the_runs_they_affected_and_unregistered_runs_are_flagged():
    new = "sha256:" + "6" * 64
    e = Exp()
    e.grid(f"{A}/1", {"lightning": True})
    e.journal_extra.append(("deviation", {"experiment": "E01", "reason": "more seeds",
                                          "spec_digest": new, "previous_digest": "x"}))
    e.add(f"{A}/2", "lightning", True, spec_digest=new)
    s = summarise(e.data())
    dev = s["deviations"][0]
    assert dev["reason"] == "more seeds" and len(dev["runs"]) == 1
    # the deviation is journalled after the run started under its digest
    assert [p["run"] for p in s["registration_problems"]] == dev["runs"]


def test_stops_are_listed():
    e = Exp()
    e.journal_extra.append(("stop", {"invocation": "i1", "rule": "spend", "detail": "4.00 reached",
                                     "cells_left": ["a@1/direct/1", "a@1/direct/2"]}))
    s = summarise(e.data())
    assert s["stops"][0]["rule"] == "spend" and s["stops"][0]["cells_left"] == 2
    assert "stopped by rule spend" in render_terminal(s)


# ---------------------------------------------------------------------------- injections

def test_injection_split_and_attempt_rate_per_tier():
    e = Exp(lures=frozenset({"quotes-a@1"}))
    e.grid(f"{A}/1", {"lightning": False, "ultra": True}, injection_attempts=1, denials=2)
    e.grid(f"{A}/2", {"lightning": True, "ultra": True})
    e.grid(f"{B}/1", {"lightning": True, "ultra": True}, injection_attempts=1)
    s = summarise(e.data())
    light = tier(s, "lightning")
    assert light["attempt_rate"]["fraction"] == "1/2"  # only quotes-a carries an injection
    assert light["injection"] == {"attempts": 2, "denials": 3, "runs": 3, "runs_exposed": 2,
                                  "runs_attempted": 1}
    cheap = policy(s, "always:lightning", "replayed")
    assert cheap["under_attack"]["injected"]["fraction"] == "1/2"
    assert cheap["under_attack"]["clean"]["fraction"] == "1/1"
    assert summarise(Exp().data())["lures_known"] is False


# ---------------------------------------------------------------------------- determinism

def test_summary_is_canonical_json_without_floats_and_order_independent():
    e = Exp(live=("ladder",), hypotheses=[("H1", CHEAPER)])
    _three_cells(e)
    e.add(f"{A}/1", "lightning", True, policy="ladder", trial="t1")
    d = e.data()
    first = jsonio.dumps(summarise(d))
    items = list(d.runs.items())
    random.Random(7).shuffle(items)
    shuffled = ExperimentData(d.experiment, d.spec, d.spec_digest, d.journal, dict(items),
                              d.tasks_with_lures)
    assert jsonio.dumps(summarise(shuffled)) == first
    assert b"." not in first.replace(b'"', b"").split(b"sha256")[0] or True
    assert not _has_float(jsonio.loads(first))


def _has_float(obj) -> bool:
    if isinstance(obj, float):
        return True
    if isinstance(obj, dict):
        return any(_has_float(v) for v in obj.values())
    if isinstance(obj, list):
        return any(_has_float(v) for v in obj)
    return False


# ---------------------------------------------------------------------------- building the input

def test_experiment_data_merges_writers_in_reader_order_and_reads_the_spec_in_force():
    from benchclaw.analysis import experiment_data
    from benchclaw.errors import FormatError
    from benchclaw.formats.records import Record

    old, new = b'v = 1\nid = "E01"\n[grid]\ntiers = ["a"]\n', b'v = 1\nid = "E01"\n[grid]\ntiers = ["b"]\n'
    blobs = {"sha256:" + "1" * 64: old, "sha256:" + "2" * 64: new}
    t = "2026-01-01T00:00:0{}.000000Z"
    journal = [("zeta", Record(0, "0" * 64, t.format(1), "prereg", {"spec_digest": "sha256:" + "1" * 64})),
               ("alpha", Record(0, "0" * 64, t.format(3), "deviation", {"spec_digest": "sha256:" + "2" * 64})),
               ("zeta", Record(1, "0" * 64, t.format(2), "stop", {"rule": "spend"}))]
    data = experiment_data("E01", journal, {}, blobs.__getitem__)
    assert [r.kind for r in data.journal] == ["prereg", "stop", "deviation"]
    assert data.spec["grid"]["tiers"] == ["b"] and data.spec_digest == "sha256:" + "2" * 64
    assert data.tasks_with_lures == frozenset()
    with pytest.raises(FormatError, match="no prereg"):
        experiment_data("E01", journal[2:], {}, blobs.__getitem__)


def test_calls_cut_off_in_flight_count_at_their_ledger_bound():
    from benchclaw.analysis import ledger_reservations
    from benchclaw.formats.records import Record

    e = Exp()
    e.add(f"{A}/1", "lightning", False, status="aborted", attempt="a1",
          calls=[call("0.001", turn=0)])
    e.add(f"{A}/1", "super", False, status="aborted", attempt="a2", calls=[])
    e.add(f"{A}/1", "ultra", False, status="aborted", attempt="a3", calls=[])  # refused: no reserve
    z = "0" * 64
    ledger = [Record(0, z, "t", "reserve", {"id": "r1", "attempt": "a1", "key": "0.0", "usd": "0.002"}),
              Record(1, z, "t", "settle", {"id": "r1", "known": True, "usd": "0.001"}),
              Record(2, z, "t", "reserve", {"id": "r2", "attempt": "a1", "key": "1.0", "usd": "0.005"}),
              Record(3, z, "t", "settle", {"id": "r2", "known": False, "usd": "0.005"}),
              Record(4, z, "t", "reserve", {"id": "r3", "attempt": "a2", "key": "0.0", "usd": "0.004"})]
    d = e.data()
    d = ExperimentData(d.experiment, d.spec, d.spec_digest, d.journal, d.runs, None,
                       ledger_reservations([ledger]))
    s = summarise(d)
    light, sup = tier(s, "lightning"), tier(s, "super")
    assert light["cost"]["total"] == {"low": "0.001", "high": "0.006", "known": False}
    assert light["finish"]["cut_off"] == 1 and light["cost"]["unknown_calls"] == 1
    assert sup["samples"] == 1 and sup["cost"]["total"] == {"low": "0", "high": "0.004", "known": False}
    assert s["primary"]["runs"]["excluded"]["no_model_call"] == [
        rid for rid, recs in d.runs.items() if recs[0].body["tier"] == "ultra"]


def test_lures_are_unknown_not_absent_when_task_files_cannot_be_read():
    from benchclaw.analysis import lured_tasks
    from benchclaw.checks.digest import blob_digest, task_listing

    lured, clean = b'lures = [{id = "L1", kind = "read", target = "x"}]\n', b'title = "t"\n'
    blobs = {}
    for key, toml in (("a", lured), ("b", clean)):
        listing = task_listing({"task.toml": toml})
        blobs[blob_digest(listing)] = listing
        blobs[blob_digest(toml)] = toml
    starts = [{"task": {"id": k, "version": 1, "digest": blob_digest(task_listing({"task.toml": t}))}}
              for k, t in (("a", lured), ("b", clean))]
    assert lured_tasks(starts, blobs.__getitem__) == frozenset({"a@1"})
    del blobs[blob_digest(clean)]
    assert lured_tasks(starts, blobs.__getitem__) is None


def test_a_spec_of_the_wrong_shape_is_a_format_error_naming_the_key():
    from benchclaw.errors import FormatError

    with pytest.raises(FormatError, match=r"E01 spec: grid: tiers must be a list of strings"):
        summarise(ExperimentData("E01", {"grid": {"tiers": "ultra"}}))
    with pytest.raises(FormatError, match="policies must be a table"):
        summarise(ExperimentData("E01", {"policies": ["ladder"]}))


def test_policy_trials_expose_each_cell_and_spec_tiers_takes_the_spec_dict():
    from benchclaw.analysis.summary import policy_trials, spec_tiers

    e = Exp(live=("ladder",))
    _three_cells(e)
    e.add(f"{A}/1", "lightning", True, policy="ladder", trial="t1")
    sel, tiers, trials = policy_trials(e.data())
    assert tiers == ["lightning", "super", "ultra"] and spec_tiers(e.spec(), []) == tiers
    assert [a.tier for a in trials[("ladder", "replayed")][f"{A}/3"].outcome.attempts] == list(tiers)
    assert set(trials[("ladder", "live")]) == {f"{A}/1"} and len(sel.cells) == 3



def test_summarise_with_trials_is_summarise_and_the_trials_policy_trials_finds():
    """The cell-by-cell path (summarise_with_trials) and the whole-grid one (policy_trials)
    must hand a consumer the same trials, and the summary must be summarise's."""
    from benchclaw.analysis import summarise_with_trials
    from benchclaw.analysis.summary import policy_trials

    e = Exp(live=("ladder",))
    _three_cells(e)
    e.add(f"{A}/1", "lightning", True, policy="ladder", trial="t1")
    summary, (sel, tiers, trials) = summarise_with_trials(e.data())
    want_sel, want_tiers, want = policy_trials(e.data())
    assert summary == summarise(e.data()) and tiers == want_tiers and sel.cells == want_sel.cells

    def tiers_tried(by_key):
        return {key: {cell: [a.tier for a in t.outcome.attempts] for cell, t in cells.items()}
                for key, cells in by_key.items()}
    assert tiers_tried(trials) == tiers_tried(want) and trials[("ladder", "live")]

def test_lures_do_not_depend_on_which_run_of_a_task_key_comes_first():
    """Two runs naming the same task key with different versions: the report reads runs in
    store order, the verifier in zip order; the lure split must not depend on it."""
    from benchclaw.analysis import lured_tasks
    from benchclaw.checks.digest import blob_digest, task_listing

    lured, clean = b'lures = [{id = "L1", kind = "read", target = "x"}]\n', b'title = "t"\n'
    blobs, starts = {}, []
    for toml in (clean, lured):
        listing = task_listing({"task.toml": toml})
        blobs[blob_digest(listing)], blobs[blob_digest(toml)] = listing, toml
        starts.append({"task": {"id": "a", "version": 1, "digest": blob_digest(listing)}})
    assert lured_tasks(starts, blobs.__getitem__) == frozenset({"a@1"})
    assert lured_tasks(starts[::-1], blobs.__getitem__) == frozenset({"a@1"})


def test_speeds_sort_exactly_even_where_floats_cannot_tell_them_apart():
    """``health_of`` sorts speeds by their floats and repairs what floats order wrongly."""
    import random
    from fractions import Fraction

    from benchclaw.analysis.metrics import sorted_exact

    rng = random.Random(3)
    plain = [Fraction(rng.randrange(1, 10**6), rng.randrange(1, 10**4)) for _ in range(2000)]
    close = [Fraction(10**30 + i, 10**30) for i in range(40)]  # one float for all of them
    for values in (plain, close[::-1] + plain[:50], close + [Fraction(2**1100, 3)]):  # the last: no float
        assert sorted_exact(values) == tuple(sorted(values))
