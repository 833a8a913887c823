"""`benchclaw try`: one run from the command line, its output, and its errors."""

import json

import pytest
from click.testing import CliRunner

from benchclaw.cli import cli, run_cli
from benchclaw.evidence.store import Store


def invoke(*args):
    runner = CliRunner()
    return runner.invoke(cli, list(args), catch_exceptions=False)


def test_a_run_that_did_not_pass_exits_1_and_says_so(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("BENCHCLAW_SIM_LATENCY_SCALE", "0")
    code = run_cli(cli, ["try", "pricing-seats", "--tier", "lightning", "--runs", str(tmp_path / "runs")])
    out, err = capsys.readouterr()
    assert code == 1 and "status: failed" in out and "the run did not pass" in err
    assert len(list(Store(tmp_path / "runs").iter_runs())) == 1


def test_help_has_an_example():
    res = invoke("try", "--help")
    assert res.exit_code == 0 and "Example: benchclaw try" in res.output and "--max-tokens" in res.output


@pytest.mark.parametrize("args, says", [
    (["no-such-task", "--tier", "ultra"], "unknown task"),
    (["quotes-incident", "--tier", "nosuch"], "has no tier 'nosuch'"),
    (["quotes-incident", "--tier", "ultra", "--provider", "openai"], "uses provider 'sim', not 'openai'"),
    (["quotes-incident", "--tier", "ultra", "--profile", "nosuch"], "no agent profile named 'nosuch'"),
])
def test_bad_arguments_exit_2_with_a_message_and_write_no_run(tmp_path, capsys, args, says):
    code = run_cli(cli, ["try", *args, "--runs", str(tmp_path / "runs")])
    err = capsys.readouterr().err
    assert code == 2 and says in err and "Traceback" not in err
    assert not (tmp_path / "runs" / "runs").exists()


def test_try_on_the_simulator_prints_status_and_where_the_evidence_is(tmp_path, monkeypatch):
    monkeypatch.setenv("BENCHCLAW_SIM_LATENCY_SCALE", "0")
    runs = tmp_path / "runs"
    res = invoke("try", "quotes-incident", "--tier", "ultra", "--profile", "checker", "--runs", str(runs), "--json")
    out = json.loads(res.output)
    run = Store(runs).read_run(out["run_id"])
    assert out["status"] == run.end["status"] == "passed" and out["simulated"] is True and res.exit_code == 0
    assert run.start["task"]["id"] == "quotes-incident" and run.start["profile"]["name"] == "checker"
    assert run.start["tier"] == "ultra" and run.start["policy"] is None
    text = invoke("try", "quotes-incident", "--tier", "ultra", "--runs", str(runs))
    assert "status: " in text.output and "evidence: " in text.output and "SIMULATED" in text.output
    assert "benchclaw runs show" in text.output  # CliRunner mixes stderr in


def test_try_on_a_terminal_streams_each_reply_escaped(tmp_path, monkeypatch, capsys):
    import sys

    from benchclaw.cli.try_ import printable

    monkeypatch.setenv("BENCHCLAW_SIM_LATENCY_SCALE", "0")
    catalog = tmp_path / "streamed.toml"
    catalog.write_text('v = 1\nname = "streamed"\nextends = "sim"\n[tiers.ultra]\nstream = true\n')
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True, raising=False)
    code = run_cli(cli, ["try", "quotes-incident", "--tier", "ultra", "--catalog", str(catalog),
                         "--runs", str(tmp_path / "runs")])
    out, err = capsys.readouterr()
    run = next(Store(tmp_path / "runs").iter_runs())
    replies = [Store(tmp_path / "runs").get_blob(c.body["reply"]).decode() for c in run.records
               if c.kind == "call" and c.body["reply"]]
    assert code in (0, 1) and replies and all(c.body["stream"]["end"] == "done" for c in run.records if c.kind == "call")
    assert all(f"> {r}" in err for r in replies if r)  # each reply, as it streamed, on its own line
    assert "status: " in out and "> " not in out       # stdout keeps only the result
    assert printable("ok\x1b[2J\rgone\u202e\tend\n") == "ok\\x1b[2J\\x0dgone\\u202e\tend\n"
