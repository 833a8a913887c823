"""The tamper suite on a real grid (runner + simulator, ledger, live ladder trials).

Every case edits the honest bundle one way, and states the exit code and the section and
words an auditor gets. "Forged" cases are consistent forgeries: the ``Forger`` redoes
every digest, chain link, run id, journal reference, manifest entry and the claimed
summary, so only recomputation (checks, costs, ledger, policies, registration order,
completeness) can catch them.
"""

import json

import pytest

from benchclaw.bundle import export_bundle
from benchclaw.verify import verify_bundle
from benchclaw.verify.manifest import run_path

from tests.test_bundle_support import EXP, Forger, entries, grid_runs, pack

JOURNAL = f"journals/{EXP}/"


@pytest.fixture(scope="module")
def bundle(tmp_path_factory) -> bytes:
    root = tmp_path_factory.mktemp("grid")
    grid_runs(root / "runs")
    export_bundle(root / "runs", EXP, root / "b.zip")
    return (root / "b.zip").read_bytes()


def test_the_honest_grid_bundle_verifies_in_every_section(bundle):
    rep = verify_bundle(bundle)
    assert rep.exit_code == 0, [str(f) for _, f in rep.failures()]
    assert all(s.ok for s in rep.sections)
    assert rep.section("ledgers").counts["calls tied"] == rep.section("costs").counts["calls"]


def caught(data: bytes, section: str, *words: str, code: int = 1) -> None:
    rep = verify_bundle(data)
    assert rep.exit_code == code, rep.to_dict()
    texts = [str(f) for f in rep.section(section).failures]
    assert any(all(w in t for w in words) for t in texts), (section, words, [str(f) for _, f in rep.failures()])


def _run(f: Forger, pred) -> str:
    return next(r for r in f.run_ids() if pred(f.records(r)))


def _journal_name(f: Forger) -> str:
    return next(n for n in f.files if n.startswith(JOURNAL))


def _ledger_name(f: Forger) -> str:
    return next(n for n in f.files if n.startswith("ledgers/"))


def failing(recs):
    return recs[-1]["body"]["status"] == "failed"


def with_calls(recs):
    return recs[-1]["body"]["calls"] >= 2


# -- consistent forgeries of runs: recomputation catches them ---------------------------------

def test_forged_pass_of_a_failed_run(bundle, tmp_path):
    f = Forger.of(bundle)

    def edit(objs):
        for o in objs:
            if o["kind"] == "check" and not o["body"]["passed"]:
                o["body"]["passed"] = True
            if o["kind"] == "run.end":
                o["body"].update(passed=True, gate_passed=True, status="passed", reason="every check passed")
        return objs
    new = f.edit_run(_run(f, failing), edit)
    f.edit_journal(lambda objs: [_restatus(o, new) for o in objs])
    caught(f.pack(tmp_path), "checks", run_path(new), "recomputed passed=False")


def _restatus(o, run_id):
    if o["kind"] == "run" and o["body"]["run_id"] == run_id:
        o["body"].update(status="passed", passed=True, gate_passed=True)
    return o


def test_forged_call_cost_and_totals(bundle, tmp_path):
    f = Forger.of(bundle)

    def edit(objs):
        for o in objs:
            if o["kind"] == "call":
                o["body"]["cost"] = {"known": True, "low": "0", "high": "0"}
            if o["kind"] == "run.end":
                o["body"]["cost"] = {"known": True, "low": "0", "high": "0"}
        return objs
    new = f.edit_run(_run(f, with_calls), edit)
    caught(f.pack(tmp_path), "costs", run_path(new) + ":", "differs from the recomputed")


def test_forged_record_removed_and_rechained(bundle, tmp_path):
    f = Forger.of(bundle)

    def edit(objs):
        i = max(i for i, o in enumerate(objs) if o["kind"] == "call")
        return objs[:i] + objs[i + 1:]
    new = f.edit_run(_run(f, with_calls), edit)
    caught(f.pack(tmp_path), "costs", run_path(new), "run.end calls=")


def test_forged_records_swapped_and_rechained(bundle, tmp_path):
    f = Forger.of(bundle)

    def edit(objs):
        i, j = [k for k, o in enumerate(objs) if o["kind"] == "action"][:2]
        objs[i], objs[j] = objs[j], objs[i]
        return objs
    new = f.edit_run(_run(f, with_calls), edit)
    caught(f.pack(tmp_path), "prereg", run_path(new), "time goes backwards")


# -- the ledger ---------------------------------------------------------------------------------

def test_forged_ledger_settlement_disagrees_with_the_call(bundle, tmp_path):
    f = Forger.of(bundle)

    def edit(objs):
        s = next(o for o in objs if o["kind"] == "settle" and o["body"]["known"])
        s["body"]["usd"] = "0.000001"
        return objs
    f.edit_chain(_ledger_name(f), edit)
    caught(f.pack(tmp_path), "ledgers", "ledger", "settled")


def test_ledger_limit_passed(bundle, tmp_path):
    f = Forger.of(bundle)

    def edit(objs):
        objs[0]["body"]["limits"]["usd"] = "0.0001"
        return objs
    f.edit_chain(_ledger_name(f), edit)
    caught(f.pack(tmp_path), "ledgers", _ledger_name(f), "past the limit $0.0001")


def test_ledger_close_totals_edited(bundle, tmp_path):
    f = Forger.of(bundle)

    def edit(objs):
        objs[-1]["body"]["spent"]["usd"] = "0"
        return objs
    f.edit_chain(_ledger_name(f), edit)
    caught(f.pack(tmp_path), "ledgers", "ledger.close spent")



def test_ledger_reservation_id_reused_after_its_settlement(bundle, tmp_path):
    """A reservation naming the id of one settled before is reported at its own line, not
    at a later error of the ledger (the check is made once the ledger is read)."""
    f = Forger.of(bundle)
    at = {}

    def edit(objs):
        first = next(o for o in objs if o["kind"] == "settle")["body"]["id"]
        settled = next(i for i, o in enumerate(objs) if o["kind"] == "settle")
        i = next(i for i, o in enumerate(objs) if i > settled and o["kind"] == "reserve")
        objs[i]["body"]["id"] = first
        at["line"] = i + 1
        objs[-1]["body"]["spent"]["usd"] = "0"  # a later error
        return objs
    f.edit_chain(_ledger_name(f), edit)
    rep = verify_bundle(f.pack(tmp_path))
    texts = [str(e) for e in rep.section("ledgers").failures]
    assert rep.exit_code == 1 and any(t.startswith(f"{_ledger_name(f)}:{at['line']}: reservation id ")
                                      and t.endswith("is not new") for t in texts), texts
    assert not any("ledger.close" in t for t in texts)

# -- the summary --------------------------------------------------------------------------------

def test_summary_cell_edited(bundle, tmp_path):
    files = entries(bundle)
    s = json.loads(files["summary.json"])
    s["primary"]["decisions"][0]["decision"] = "refuted"
    files["summary.json"] = json.dumps(s).encode()
    caught(pack(files, tmp_path), "summary", "primary.decisions[0].decision", "claimed 'refuted'",
           "recomputed 'supported'")


def test_summary_table_number_edited(bundle, tmp_path):
    files = entries(bundle)
    s = json.loads(files["summary.json"])
    s["primary"]["policies"][0]["cost"]["total"]["low"] = "0.000001"
    files["summary.json"] = json.dumps(s).encode()
    caught(pack(files, tmp_path), "summary", "primary.policies[0].cost.total.low", "claimed")


# -- pre-registration ---------------------------------------------------------------------------

def test_registration_moved_after_the_calls(bundle, tmp_path):
    f = Forger.of(bundle)

    def edit(objs):
        for o in objs:  # every journal time moved past every run: the chain and order still hold
            o["at"] = "2099" + o["at"][4:]
        return objs
    f.edit_journal(edit)
    caught(f.pack(tmp_path), "prereg", "before the experiment was registered")


def test_registration_record_moved_alone_breaks_the_time_order(bundle, tmp_path):
    f = Forger.of(bundle)

    def edit(objs):
        objs[0]["at"] = "2099" + objs[0]["at"][4:]
        return objs
    f.edit_journal(edit)
    data = f.pack(tmp_path)
    caught(data, "prereg", _journal_name(f) + ":2", "time goes backwards")
    caught(data, "prereg", _journal_name(f) + ":2", "grid.start at", "precedes the registration")


def test_spec_edited_after_registration(bundle, tmp_path):
    files = entries(bundle)
    files["experiments/E01.toml"] = files["experiments/E01.toml"].replace(b'usd = "5.00"', b'usd = "50.00"')
    caught(pack(files, tmp_path), "prereg", "experiments/E01.toml", "the last registered spec is")


# -- nothing dropped ------------------------------------------------------------------------------

def test_run_dropped_from_the_bundle(bundle, tmp_path):
    f = Forger.of(bundle)
    victim = f.run_ids()[0]
    f.drop_run(victim)
    caught(f.pack(tmp_path), "complete", f"names run {victim}, which the bundle lacks")


def test_run_dropped_with_its_journal_record(bundle, tmp_path):
    f = Forger.of(bundle)
    victim = _run(f, failing)
    f.drop_run(victim)
    f.edit_journal(lambda objs: [o for o in objs if o["body"].get("run_id") != victim])
    data = f.pack(tmp_path)
    caught(data, "ledgers", "no run in the bundle carries that attempt")


def test_journal_forgets_a_sealed_run(bundle, tmp_path):
    f = Forger.of(bundle)
    victim = f.run_ids()[1]
    f.edit_journal(lambda objs: [o for o in objs if not (o["kind"] == "run" and o["body"]["run_id"] == victim)])
    caught(f.pack(tmp_path), "complete", run_path(victim), "the journal does not name")


def test_journal_run_status_edited(bundle, tmp_path):
    f = Forger.of(bundle)
    victim = _run(f, failing)
    f.edit_journal(lambda objs: [_restatus(o, victim) for o in objs])
    caught(f.pack(tmp_path), "complete", "the journal says status='passed', the run says 'failed'")


def test_trial_outcome_edited(bundle, tmp_path):
    f = Forger.of(bundle)

    def edit(objs):
        t = next(o for o in objs if o["kind"] == "trial")
        t["body"]["tier"] = "ultra" if t["body"]["tier"] != "ultra" else "lightning"
        return objs
    f.edit_journal(edit)
    caught(f.pack(tmp_path), "complete", "recorded tier=", "recomputed from its runs")


def test_a_planned_cell_with_no_run_and_no_stop(bundle, tmp_path):
    f = Forger.of(bundle)
    cell = f.records(f.run_ids()[0])[0]["body"]["policy"]["cell"]
    gone = [r for r in f.run_ids() if f.records(r)[0]["body"]["policy"]["cell"] == cell]
    for r in gone:
        f.drop_run(r)

    def edit(objs):
        return [o for o in objs if not (o["kind"] in ("run", "trial") and o["body"].get("cell") == cell)]
    f.edit_journal(edit)
    f.edit_chain(_ledger_name(f), lambda objs: objs)  # the ledger is left as it was
    rep = verify_bundle(f.pack(tmp_path))
    texts = [str(x) for x in rep.section("complete").failures]
    assert rep.exit_code == 1 and any(f"planned cell {cell}" in t and "no recorded stop" in t for t in texts), texts


# -- crash-recovered runs are evidence too ---------------------------------------------------------

def _as_recovered(objs, keep_checks: int):
    """A run cut off after ``keep_checks`` check records, sealed aborted by recovery."""
    first_check = next(i for i, o in enumerate(objs) if o["kind"] == "check")
    end = dict(objs[-1])
    end["body"] = {**end["body"], "status": "aborted", "passed": False, "gate_passed": False,
                   "recovered": True, "reason": "recovered after crash"}
    return objs[:first_check + keep_checks] + [end]


@pytest.mark.parametrize("keep", [0, 1, 3])
def test_a_crash_recovered_run_with_some_checks_verifies(bundle, tmp_path, keep):
    f = Forger.of(bundle)
    victim = _run(f, lambda r: r[-1]["body"]["status"] == "passed")
    new = f.edit_run(victim, lambda objs: _as_recovered(objs, keep))
    f.edit_journal(lambda objs: [_abort_in_journal(o, new) for o in objs])
    rep = verify_bundle(f.pack(tmp_path))
    assert rep.section("checks").ok and rep.section("costs").ok, [str(x) for _, x in rep.failures()]


def test_a_crash_recovered_run_cannot_claim_a_pass(bundle, tmp_path):
    f = Forger.of(bundle)
    victim = _run(f, lambda r: r[-1]["body"]["status"] == "passed")

    def edit(objs):
        objs = _as_recovered(objs, 1)
        objs[-1]["body"]["passed"] = True
        return objs
    new = f.edit_run(victim, edit)
    caught(f.pack(tmp_path), "checks", run_path(new), "an aborted run claims a pass")


def _abort_in_journal(o, run_id):
    if o["kind"] == "run" and o["body"]["run_id"] == run_id:
        o["body"].update(status="aborted", passed=False, gate_passed=False)
    return o


def test_a_summary_of_another_format_version_is_named_as_such(bundle, tmp_path):
    files = entries(bundle)
    s = json.loads(files["summary.json"])
    s["v"] = 999
    files["summary.json"] = json.dumps(s).encode()
    caught(pack(files, tmp_path), "summary", "v999", "verify with the BenchClaw version that exported")
