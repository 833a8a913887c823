"""`benchclaw demo` end to end in an empty directory (simulator latency off for speed)."""

from pathlib import Path

import pytest
from click.testing import CliRunner

from benchclaw.cli import cli
from benchclaw.errors import InputError
from benchclaw.demo import run_demo
from benchclaw.ledger import read_ledger
from benchclaw.store import Store


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
    assert store.check().ok

    # Run again in the same place: everything is done, nothing is re-run, still exit 0.
    again = run_demo(tmp_path, say=lambda s: None, note=lambda s: None, latency_scale=0)
    assert again.status == "complete"
    last = [e.body for e in store.read_journal("DEMO") if e.kind == "grid.end"][-1]
    assert last["runs"] == 0


def test_demo_refuses_a_directory_holding_another_demo_spec(tmp_path):
    (tmp_path / "experiments").mkdir()
    (tmp_path / "experiments" / "DEMO.toml").write_text("v = 1\n")
    with pytest.raises(InputError, match="differs from the shipped demo spec"):
        run_demo(tmp_path, say=lambda s: None, note=lambda s: None, latency_scale=0)
