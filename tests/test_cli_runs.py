"""`benchclaw runs ...` as a user runs it: exit codes and messages, never a traceback."""

from __future__ import annotations

from click.testing import CliRunner

from benchclaw.cli import cli, run_cli
from benchclaw.evidence.store import Store

from .test_store import write_run


def invoke(args):
    runner = CliRunner()
    result = runner.invoke(cli, args, standalone_mode=False, catch_exceptions=True)
    return result


def run_main(args, capsys):
    code = run_cli(cli, args, prog="benchclaw")
    out, err = capsys.readouterr()
    return code, out, err


def test_check_ok_counts_everything(tmp_path, capsys):
    store = Store(tmp_path / "runs")
    write_run(store)
    write_run(store, n_calls=2)
    code, out, err = run_main(["runs", "check", "--runs", str(tmp_path / "runs")], capsys)
    assert code == 0
    assert out.startswith("ok: 2 runs, 3 blobs")  # replies "reply 0..1" are shared


def test_check_flipped_byte_exits_1_naming_file_and_line(tmp_path, capsys):
    store = Store(tmp_path / "runs")
    run_id = write_run(store)
    path = store.run_path(run_id)
    data = bytearray(path.read_bytes())
    data[data.rindex(b"passed")] ^= 0x01  # in the last line: only the run id can catch it
    path.write_bytes(bytes(data))
    code, out, err = run_main(["runs", "check", "--runs", str(tmp_path / "runs")], capsys)
    assert code == 1
    assert f"{path}:5:" in err and "hash to its run id" in err
    assert "Traceback" not in err


def test_check_missing_directory_exits_2(tmp_path, capsys):
    code, out, err = run_main(["runs", "check", "--runs", str(tmp_path / "missing")], capsys)
    assert code == 2
    assert "no such runs directory" in err and "Traceback" not in err


def test_check_reports_open_runs_and_torn_journal(tmp_path, capsys):
    store = Store(tmp_path / "runs")
    store.journal("E01", writer="w").append("prereg", {})
    with open(store.journal_paths("E01")[0], "ab") as f:
        f.write(b'{"torn":')
    w = store.open_run()
    w.append("run.start", {})
    w.close_unsealed()
    code, out, err = run_main(["runs", "check", "--runs", str(tmp_path / "runs")], capsys)
    assert code == 1
    assert "1 open run(s)" in err
    assert "w.jsonl:2: torn last line" in err


def test_ls_and_show(tmp_path, capsys):
    store = Store(tmp_path / "runs")
    run_id = write_run(store)
    code, out, _ = run_main(["runs", "ls", "--runs", str(tmp_path / "runs")], capsys)
    assert code == 0 and run_id[:12] in out and "passed" in out
    code, out, _ = run_main(["runs", "show", run_id[:8], "--runs", str(tmp_path / "runs")], capsys)
    assert code == 0
    assert "reply: reply 2" in out
    assert "status passed" in out


def test_show_unknown_prefix_is_a_clear_error(tmp_path, capsys):
    write_run(Store(tmp_path / "runs"))
    code, _, err = run_main(["runs", "show", "ffffffff", "--runs", str(tmp_path / "runs")], capsys)
    assert code == 2 and "no sealed run starts with" in err


def test_recover_seals_open_runs(tmp_path, capsys):
    store = Store(tmp_path / "runs")
    w = store.open_run()
    w.append("run.start", {})
    w.close_unsealed()
    code, out, _ = run_main(["runs", "recover", "--runs", str(tmp_path / "runs")], capsys)
    assert code == 0 and "sealed as aborted" in out
    assert len(store.run_ids()) == 1


def test_ctx_exit_code_reaches_the_shell(capsys):
    import click

    @click.command()
    @click.pass_context
    def failing(ctx):
        ctx.exit(1)

    assert run_cli(failing, [], prog="x") == 1
