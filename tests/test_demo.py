"""`benchclaw demo` end to end in an empty directory (simulator latency off for speed)."""

import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from benchclaw.evidence.check import check_store
from benchclaw.cli import cli
from benchclaw.errors import InputError
from benchclaw.demo import run_demo
from benchclaw.experiments.ledger import read_ledger
from benchclaw.evidence.store import Store
from benchclaw.checks.tasks import FAMILIES


def test_demo_in_an_empty_directory_ends_with_a_policy_table(tmp_path, monkeypatch):
    monkeypatch.setenv("BENCHCLAW_SIM_LATENCY_SCALE", "0")
    monkeypatch.chdir(tmp_path)
    res = CliRunner().invoke(cli, ["demo"])
    assert res.exit_code == 0, (res.output, res.exception)
    out = res.stdout
    assert "SIMULATED" in out and "ladder (live)" in out and "always:ultra (replayed)" in out
    # the README's demo excerpt is what the demo prints (the simulator is deterministic)
    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text(encoding="utf-8")
    excerpt = readme.split("<!-- demo-output -->\n```\n", 1)[1].split("\n```", 1)[0]
    lines = out.splitlines()
    for line in (ln for ln in excerpt.splitlines() if ln.strip()):
        assert line in lines, f"README's demo excerpt line not printed by the demo: {line!r}"
    assert max(len(ln) for ln in lines if not ln.startswith("  /")) <= 100  # paths vary in length
    # a comparison across the two demo experiments: the claim that moved is shown moving
    assert "Comparison of DEMO-2K, DEMO" in out and "FLIPPED" in out
    assert (tmp_path / "site" / "compare.html").is_file()
    assert (tmp_path / "experiments" / "DEMO.toml").is_file()
    assert (tmp_path / "runs" / "journals" / "DEMO").is_dir()
    for product in ("site/index.html", "bundle.zip"):
        assert (tmp_path / product).is_file(), product
    store = Store(tmp_path / "runs")
    journal = store.read_journal("DEMO")
    assert [e.kind for e in journal][0] == "prereg"
    end = [e.body for e in journal if e.kind == "grid.end"][-1]
    assert end["status"] == "complete" and end["runs"] > 100
    ledger = read_ledger(store, [e.body for e in journal if e.kind == "grid.start"][-1]["ledger"])
    assert ledger.closed and not ledger.open and ledger.unknown_calls == 0
    assert check_store(store).ok
    families = out.split("== Families ==")[1].split("== Tokens ==")[0]
    for fam in FAMILIES:  # every family is in the demo and in its per-family table
        assert re.search(rf"^{fam}\s+16\s", families, re.M), (fam, families)
    _verifier_recomputes_sql_and_api_checks((tmp_path / "bundle.zip").read_bytes(), tmp_path)

    # Run again in the same place: everything is done, nothing is re-run, still exit 0.
    again = run_demo(tmp_path, say=lambda s: None, note=lambda s: None, latency_scale=0)
    assert again.status == "complete"
    last = [e.body for e in store.read_journal("DEMO") if e.kind == "grid.end"][-1]
    assert last["runs"] == 0


def _verifier_recomputes_sql_and_api_checks(bundle: bytes, tmp_path) -> None:
    """benchclaw-verify re-runs the sql and api checks of the demo bundle: it accepts the
    honest bundle, and a run whose failed check is forged into a pass is caught."""
    from benchclaw.verify import verify_bundle
    from tests.test_bundle_support import Forger

    rep = verify_bundle(bundle)
    assert rep.exit_code == 0 and rep.section("checks").ok
    f = Forger.of(bundle)
    for family, check_type in (("sql", "sql_migration"), ("api", "api_contract")):
        run_id = next(r for r in f.run_ids() if f.records(r)[0]["body"]["task"]["family"] == family and
                      any(o["kind"] == "check" and o["body"]["type"] == check_type and not o["body"]["passed"]
                          for o in f.records(r)))

        def forge(objs, check_type=check_type):
            for o in objs:
                if o["kind"] == "check" and o["body"]["type"] == check_type:
                    o["body"].update(passed=True, detail="forged")
            return objs
        forger = Forger.of(bundle)
        forger.edit_run(run_id, forge)
        (tmp_path / family).mkdir()
        forged = verify_bundle(forger.pack(tmp_path / family, resummarise=False))
        assert forged.exit_code == 1
        assert any("recomputed" in str(x) for x in forged.section("checks").failures), family


def test_demo_refuses_a_directory_holding_another_demo_spec(tmp_path):
    (tmp_path / "experiments").mkdir()
    (tmp_path / "experiments" / "DEMO.toml").write_text("v = 1\n")
    with pytest.raises(InputError, match="differs from the shipped demo spec"):
        run_demo(tmp_path, say=lambda s: None, note=lambda s: None, latency_scale=0)
