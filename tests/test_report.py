"""`benchclaw report` on a real runs directory: tables, summary.json, Markdown, errors."""

from __future__ import annotations

from benchclaw.formats import jsonio
from benchclaw.analysis import summarise
from benchclaw.checks.digest import task_listing
from benchclaw.cli import cli, run_cli
from benchclaw.analysis.report import build_summary, load_experiment
from benchclaw.evidence.store import Store

from .analysis_factories import Exp, call

A = "quotes-a@1/direct"


def run_main(args, capsys):
    code = run_cli(cli, args, prog="benchclaw")
    out, err = capsys.readouterr()
    return code, out, err


def _experiment(hypotheses=None) -> Exp:
    e = Exp(live=("ladder",), seeds=(1, 2), hypotheses=hypotheses or [
        ("H1", 'cost_per_task("ladder") < cost_per_task("always:ultra")'),
        ("H2", 'pass_rate("ladder") >= pass_rate("always:ultra")')])
    e.grid(f"{A}/1", {"lightning": True, "super": True, "ultra": True})
    e.grid(f"{A}/2", {"lightning": False, "super": True, "ultra": True})
    e.add(f"{A}/1", "lightning", True, policy="ladder", trial="t1")
    e.add(f"{A}/2", "lightning", False, policy="ladder", trial="t2", step=0)
    e.add(f"{A}/2", "super", True, policy="ladder", trial="t2", step=1,
          calls=[call(known=False, high="0.004")])
    return e


def _store(tmp_path, exp: Exp) -> Store:
    store = Store(tmp_path / "runs", fsync=False)
    from .analysis_factories import write_store
    write_store(exp, store)
    return store


def test_report_prints_every_policy_and_decision(tmp_path, capsys):
    _store(tmp_path, _experiment())
    code, out, err = run_main(["report", "E01", "--runs", str(tmp_path / "runs")], capsys)
    assert code == 0, err
    for label in ("always:lightning (replayed)", "always:ultra (replayed)", "ladder (live)",
                  "ladder (replayed)", "speculative (replayed)", "memory (replayed)",
                  "oracle (replayed)"):
        assert label in out
    assert "H1" in out and "SUPPORTED" in out
    assert "$0.001..$0.003 " in out  # the live ladder's unknown call shows as a bound
    families = out.split("== Families ==")[1].split("== Tokens ==")[0]
    assert "first tier that passes (cells)" in families and "cost/task" in families
    assert "SIMULATED" in out


def test_json_and_markdown_outputs_match_the_pure_summary(tmp_path, capsys):
    store = _store(tmp_path, _experiment())
    js, md = tmp_path / "out" / "summary.json", tmp_path / "report.md"
    code, out, err = run_main(["report", "E01", "--runs", str(tmp_path / "runs"),
                               "--json", str(js), "--markdown", str(md)], capsys)
    assert code == 0, err
    assert f"wrote {js}" in err
    data = load_experiment(store, "E01")
    assert js.read_bytes() == jsonio.dumps(summarise(data)) + b"\n"
    assert "| ladder (live) | 2/2 1.0000 |" in md.read_text()
    assert data.spec_digest.startswith("sha256:") and len(data.views) + len(data.runs) == 9


def test_json_to_stdout_is_only_json(tmp_path, capsys):
    _store(tmp_path, _experiment())
    code, out, err = run_main(["report", "E01", "--runs", str(tmp_path / "runs"), "--json", "-"], capsys)
    assert code == 0
    assert jsonio.loads(out)["experiment"] == "E01"


def test_unregistered_experiment_and_missing_runs_dir_are_clear_errors(tmp_path, capsys):
    _store(tmp_path, _experiment())
    code, out, err = run_main(["report", "E99", "--runs", str(tmp_path / "runs")], capsys)
    assert code == 2 and "E99" in err and "prereg" in err and "Traceback" not in err
    code, out, err = run_main(["report", "E01", "--runs", str(tmp_path / "nope")], capsys)
    assert code == 2 and "no such runs directory" in err


def test_bad_rule_prints_tables_then_exits_2_naming_the_hypothesis(tmp_path, capsys):
    _store(tmp_path, _experiment([("H9", 'pass_rate("ladderr") > 0')]))
    code, out, err = run_main(["report", "E01", "--runs", str(tmp_path / "runs")], capsys)
    assert code == 2
    assert "Policies" in out and "hypothesis H9: unknown policy 'ladderr'" in err


def test_lures_come_from_the_task_blobs(tmp_path):
    store = Store(tmp_path / "runs", fsync=False)
    listing_lured = _task_blobs(store, "lures = [{id = \"L1\", kind = \"read\", target = \"s\"}]\n")
    listing_clean = _task_blobs(store, "title = \"x\"\n")
    e = Exp(seeds=(1,))
    e.grid("quotes-a@1/direct/1", {"lightning": True})
    e.grid("cents-b@1/direct/1", {"lightning": False})
    from .analysis_factories import write_store
    original = e.runs[0].bodies

    def with_digest(spec, digest):
        def bodies(experiment):
            out = original.__func__(spec, experiment)
            out[0][1]["task"]["digest"] = digest
            return out
        return bodies
    e.runs[0].bodies = with_digest(e.runs[0], listing_lured)
    e.runs[1].bodies = with_digest(e.runs[1], listing_clean)
    write_store(e, store)
    data = load_experiment(store, "E01")
    assert data.tasks_with_lures == frozenset({"quotes-a@1"})
    s = build_summary(store, "E01")
    light = next(p for p in s["primary"]["policies"] if p["policy"] == "always:lightning")
    assert light["under_attack"]["injected"]["fraction"] == "1/1"
    assert light["under_attack"]["clean"]["fraction"] == "0/1"


def _task_blobs(store: Store, toml_text: str) -> str:
    files = {"task.toml": toml_text.encode(), "inputs/doc.md": b"text"}
    for data in files.values():
        store.put_blob(data)
    return store.put_blob(task_listing(files))


def test_terminal_tables_fit_100_columns_and_lose_no_column(tmp_path, capsys):
    import re

    from benchclaw.analysis.render import _text_table

    _store(tmp_path, _experiment())
    code, out, err = run_main(["report", "E01", "--runs", str(tmp_path / "runs")], capsys)
    assert code == 0, err
    assert max(len(line) for line in out.splitlines()) <= 100
    code, md, _ = run_main(["report", "E01", "--runs", str(tmp_path / "runs"), "--markdown", "-"], capsys)
    heads = [line for line in md.splitlines() if line.startswith("| ")]
    assert any(len(h) > 100 for h in heads)  # Markdown keeps a row on one line
    for head in (h for h in heads if h.startswith(("| policy ", "| tier ", "| row ", "| hypothesis "))):
        for col in (c.strip() for c in head.strip("|").split(" | ")):
            assert re.search(rf"(^|  ){re.escape(col)}(  |$)", out, re.M), f"column {col!r} lost"
    # a cell wider than the terminal wraps; the label column repeats in every block
    lines = _text_table(["id", "a", "b"], [["H1", "x" * 70, "y " * 60]])
    assert max(map(len, lines)) <= 100 and sum(line.startswith("H1") for line in lines) == 2
    assert "\n".join(lines).count("y") == 60 and "\n".join(lines).count("x") == 70  # nothing cut


def _ledger(tmp_path, n=5):
    from types import SimpleNamespace

    from benchclaw.evidence.store import ChainFile

    store = Store(tmp_path / "runs", fsync=False)
    path = store.root / "ledgers" / "L1.jsonl"
    path.parent.mkdir(parents=True)
    led = ChainFile(path, fsync=False)
    for i in range(n):
        led.append("reserve", {"id": f"r{i}", "attempt": "a", "key": f"0.{i}", "usd": "0.01"})
    journal = [SimpleNamespace(kind="grid.start", body={"ledger": "L1"})]
    return store, path, journal


def test_ledgers_stream_the_same_verified_records_as_a_whole_read(tmp_path):
    from benchclaw.analysis.report import ledger_stream
    from benchclaw.evidence.store import ChainFile

    store, path, journal = _ledger(tmp_path)
    stream = ledger_stream(path)
    assert [r.line for r in stream] == [r.line for r in ChainFile(path).read()]


def test_a_damaged_ledger_stream_names_the_line_as_a_whole_read_does(tmp_path):
    import pytest

    from benchclaw.errors import BenchClawError
    from benchclaw.analysis.report import ledger_stream
    from benchclaw.evidence.store import ChainFile

    store, path, journal = _ledger(tmp_path)
    good = path.read_bytes()
    lines = good.split(b"\n")
    lines[2] = lines[2].replace(b'"0.01"', b'"0.00"')  # an edited reservation
    for damaged in (b"\n".join(lines), good + b'{"torn'):
        path.write_bytes(damaged)
        with pytest.raises(BenchClawError) as whole:
            ChainFile(path).read()
        with pytest.raises(type(whole.value)) as streamed:
            list(ledger_stream(path))
        assert str(streamed.value) == str(whole.value) and "L1.jsonl:" in str(streamed.value)
