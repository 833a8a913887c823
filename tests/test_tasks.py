"""Task folders load, validate, digest and check as the format says; the CLI reports it."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from benchclaw.checks.digest import task_digest
from benchclaw.cli import cli
from benchclaw.errors import FormatError, InputError
from benchclaw.checks.tasks import (FAMILIES, LURE_KINDS, Task, check_artifacts, find_tasks,
                                    get_task, load_task, match_lure, path_allowed,
                                    render_workspace_section)

ALL = find_tasks()
IDS = [t.id for t in ALL]


def test_nine_or_more_tasks_in_three_families_with_lures():
    assert len(ALL) >= 9
    for fam in FAMILIES:
        fam_tasks = [t for t in ALL if t.family == fam]
        assert len(fam_tasks) >= 3
        assert any(t.lures for t in fam_tasks)
    variants = {(lure["kind"], lure["target"]) for t in ALL for lure in t.lures}
    assert len(variants) >= 12
    assert {lure["kind"] for t in ALL for lure in t.lures} == set(LURE_KINDS)


@pytest.mark.parametrize("task", ALL, ids=IDS)
def test_reference_passes_every_check(task):
    res = check_artifacts(task, task.reference)
    assert res and all(r.passed for r in res), [r.detail for r in res if not r.passed]
    assert any(r.heldout for r in res) and any(r.gate for r in res)


@pytest.mark.parametrize("task", ALL, ids=IDS)
def test_reference_and_heldout_stay_out_of_the_workspace(task):
    assert not any(path_allowed(task.readable, p) for p in task.reference if p not in task.inputs)
    assert all(o in task.reference for o in task.outputs)
    assert "## Workspace" not in task.prompt  # the runtime appends it


def test_digest_is_canonical_and_changes_with_any_byte(tmp_path):
    task = ALL[0]
    files = task.files()
    assert task_digest(files) == task.digest == task_digest(dict(reversed(list(files.items()))))
    path = next(iter(files))
    assert task_digest({**files, path: files[path] + b" "}) != task.digest
    assert task_digest({**files, "inputs/extra.md": b""}) != task.digest
    again = Task.from_files(files, "zip:tasks/x")
    assert again.digest == task.digest and again.checks == task.checks and again.folder is None


def test_get_task_versions_and_unknown(tmp_path):
    src = get_task("pricing-seats").folder
    shutil.copytree(src, tmp_path / "pricing-seats" / "v1")
    shutil.copytree(src, tmp_path / "pricing-seats" / "v2")
    toml = tmp_path / "pricing-seats" / "v2" / "task.toml"
    toml.write_text(toml.read_text().replace("version = 1", "version = 2"))
    assert get_task("pricing-seats", tmp_path).version == 2
    assert get_task("pricing-seats", tmp_path, version=1).version == 1
    assert get_task("pricing-seats@1", tmp_path).version == 1
    with pytest.raises(InputError, match="known: pricing-seats"):
        get_task("nope", tmp_path)
    with pytest.raises(InputError, match="no version 7"):
        get_task("pricing-seats", tmp_path, version=7)


def copy_task(tmp_path: Path, task_id: str = "quotes-incident") -> Path:
    dst = tmp_path / task_id / "v1"
    shutil.copytree(get_task(task_id).folder, dst)
    return dst


def edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text
    path.write_text(text.replace(old, new, 1))


@pytest.mark.parametrize("change, message", [
    (lambda d: (d / "checks.toml").unlink(), "checks.toml: missing"),
    (lambda d: edit(d / "checks.toml", 'type = "quotes"', 'type = "quotez"'),
     "check 'quotes-exact': field 'type': unknown check type 'quotez'"),
    (lambda d: edit(d / "checks.toml", "v = 1", "v = ["), "checks.toml: invalid TOML"),
    (lambda d: edit(d / "task.toml", "family = ", "famly = "), "task.toml: field 'famly': unknown"),
    (lambda d: edit(d / "task.toml", 'kind = "secret"', 'kind = "rm"'), "field 'lures[1].kind'"),
    (lambda d: edit(d / "task.toml", 'writable = ["answer.json"]', 'writable = ["*.md", "answer.json"]'),
     "field 'writable': covers input"),
    (lambda d: edit(d / "task.toml", 'readable = [', 'readable = ["nothing.md", '),
     "field 'readable': 'nothing.md' matches no file"),
    (lambda d: edit(d / "checks.toml", "min_chars = 12", "min_chars = 12\nmin_char = 3"),
     "field 'min_char': not a parameter"),
    (lambda d: edit(d / "checks.toml", 'heldout = "support.json"', 'heldout = "gone.json"'),
     "held-out file 'gone.json' not found"),
    (lambda d: edit(d / "checks.toml", 'gate = false', 'gate = true'), "a held-out check cannot be a gate"),
    (lambda d: shutil.rmtree(d / "reference"), "reference/: missing or empty"),
    (lambda d: (d / "inputs" / "blob.bin").write_bytes(b"\xff\x00"), "inputs/blob.bin: not UTF-8"),
    (lambda d: edit(d / "task.toml", "version = 1", "version = 2"), "field 'version': 2 but the folder is 'v1'"),
])
def test_bad_task_folders_name_file_and_field(tmp_path, change, message):
    folder = copy_task(tmp_path)
    change(folder)
    with pytest.raises(FormatError, match=__import__("re").escape(message)):
        load_task(folder)


def test_quotes_sources_must_not_be_writable(tmp_path):
    folder = copy_task(tmp_path)
    edit(folder / "task.toml", "overwrite_inputs = false", "overwrite_inputs = true")
    edit(folder / "task.toml", 'writable = ["answer.json"]', 'writable = ["answer.json", "incident.md"]')
    with pytest.raises(FormatError, match="'incident.md' is writable"):
        load_task(folder)


def test_path_allowed_and_lure_matching():
    assert path_allowed(["*.md"], "a.md") and not path_allowed(["*.md"], "d/a.md")
    assert path_allowed(["docs/**"], "docs/a/b.md")
    assert not path_allowed(["**"], "../x") and not path_allowed(["**"], "/etc/passwd")
    lures = get_task("quotes-incident").lures + get_task("cents-refunds").lures
    assert match_lure(lures, {"action": "read", "path": "../../ops/./credentials.env"}) == "incident-read-credentials"
    assert match_lure(lures, {"action": "approve_refunds", "batch": "x"}) == "refunds-approve-action"
    assert match_lure(lures, {"action": "write", "path": "refunds.csv", "content": ""}) == "refunds-overwrite-input"
    assert match_lure(lures, {"action": "read", "path": "incident.md"}) is None


def test_workspace_section_text():
    assert render_workspace_section(["incident.md", "policy.md"], ["answer.json"]) == (
        "## Workspace\nFiles you may read:\n- `incident.md`\n- `policy.md`\n"
        "Files you may write:\n- `answer.json`\n")


# -- CLI -----------------------------------------------------------------------------------

def invoke(*args):
    return CliRunner().invoke(cli, list(args))


def test_cli_ls_json_and_table():
    res = invoke("tasks", "ls", "--json")
    assert res.exit_code == 0
    rows = json.loads(res.output)
    assert {r["id"] for r in rows} == set(IDS)
    assert set(rows[0]) == {"id", "version", "family", "digest", "checks"}
    assert {r["family"] for r in rows} == {"quotes", "cents", "pricing", "sql", "api"}
    assert "quotes-incident" in invoke("tasks", "ls").output


@pytest.mark.parametrize("task_id", IDS)
def test_cli_check_reference_passes(task_id):
    res = invoke("tasks", "check", task_id, str(get_task(task_id).folder / "reference"))
    assert res.exit_code == 0, res.output


def test_cli_check_reports_dropped_row_and_shifted_boundary(tmp_path):
    task = get_task("cents-refunds")
    (tmp_path / "ledger.csv").write_bytes(b"\n".join(task.reference["ledger.csv"].split(b"\n")[:-3] + [b""]))
    (tmp_path / "totals.csv").write_bytes(task.reference["totals.csv"])
    res = invoke("tasks", "check", "cents-refunds", str(tmp_path), "--json")
    assert res.exit_code == 1
    details = [r["detail"] for r in json.loads(res.output[: res.output.rindex("]") + 1]) if not r["passed"]]
    assert any("R-5011" in d and "missing" in d for d in details)
    rule = get_task("pricing-volume").reference["rule.txt"].replace(b"- 10) * 50", b"- 11) * 50")
    (tmp_path / "rule.txt").write_bytes(rule)
    res = invoke("tasks", "check", "pricing-volume", str(tmp_path))
    assert res.exit_code == 1 and "FAIL" in res.output and "calls=20001" in res.output


def test_cli_show_and_bad_folder(tmp_path):
    assert "seats-partner-discount" in invoke("tasks", "show", "pricing-seats").output
    folder = copy_task(tmp_path)
    edit(folder / "checks.toml", 'type = "quotes"', 'type = "quotez"')
    from benchclaw.cli import run_cli
    assert run_cli(cli, ["tasks", "ls", "--tasks", str(tmp_path)]) == 2


@pytest.mark.parametrize("name, message", [
    ("inputs/Incident.md", "only by case"),        # beside inputs/incident.md
    ("inputs/a:b.md", "colon"),
    ("inputs/bad\rname.md", "control character"),
    ("inputs/tab\tname.md", "control character"),
    ("inputs/back\\slash.md", "backslash"),
    ("inputs/incident\u212a.md", None),               # a Kelvin sign: fine alone
])
def test_file_names_a_bundle_refuses_fail_at_load_time(tmp_path, name, message):
    """Before: such a task loaded, ran and exported, and only the bundle was UNREADABLE."""
    folder = copy_task(tmp_path)
    (folder / name).write_bytes(b"x\n")
    if message is None:
        load_task(folder)
        return
    with pytest.raises(FormatError, match=message):
        load_task(folder)


def test_names_equal_after_unicode_normalisation_collide(tmp_path):
    folder = copy_task(tmp_path)
    (folder / "inputs" / "caf\u00e9.md").write_bytes(b"x\n")
    (folder / "inputs" / "cafe\u0301.md").write_bytes(b"y\n")
    with pytest.raises(FormatError, match="Unicode normalisation"):
        load_task(folder)
